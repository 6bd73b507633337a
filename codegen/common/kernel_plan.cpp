#include "codegen/common/kernel_plan.h"

#include <algorithm>
#include <functional>

namespace normgen {

KernelTypes kernel_types(const NormSpec &spec, DType want) {
    KernelTypes k;
    k.tag = dtype_name(want);
    for (const TensorInfo &t : spec.tensors) k.storage[t.name] = DType::F32;
    for (const OutputInfo &o : spec.outputs) k.storage[o.name] = DType::F32;
    for (const StorageGroup &g : spec.storage) {
        DType d = std::find(g.allowed.begin(), g.allowed.end(), want) != g.allowed.end() ? want : g.allowed.front();
        for (const std::string &n : g.tensors) k.storage[n] = d;
    }
    return k;
}

bool same_tree(const Node &a, const Node &b) {
    if (a.kind != b.kind || a.value != b.value || a.name != b.name || a.index != b.index || a.unary != b.unary ||
        a.binary != b.binary || a.reduce != b.reduce || a.over != b.over || a.args.size() != b.args.size())
        return false;
    for (size_t i = 0; i < a.args.size(); ++i)
        if (!same_tree(*a.args[i], *b.args[i])) return false;
    return true;
}

const Node *find_mean_like(const NormSpec &spec, const Node &var) {
    std::function<const Node *(const Node &)> walk = [&](const Node &n) -> const Node * {
        if (n.kind == Node::Reduce && n.reduce == ReduceOp::Mean && n.over == var.over && same_tree(*n.args[0], *var.args[0])) return &n;
        for (const auto &a : n.args)
            if (const Node *m = walk(*a)) return m;
        return nullptr;
    };
    for (const ValueDef &d : spec.values)
        if (const Node *m = walk(*d.expr)) return m;
    return nullptr;
}

bool has_optional_outputs(const NormSpec &spec) {
    for (const OutputInfo &o : spec.outputs)
        if (o.optional) return true;
    return false;
}

}  // namespace normgen
