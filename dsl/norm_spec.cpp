#include "dsl/norm_spec.h"

#include "dsl/printer.h"

#include <algorithm>
#include <set>
#include <functional>
#include <iterator>

namespace normgen {

AxisSet axis_union(const AxisSet &a, const AxisSet &b) {
    AxisSet r;
    std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(r));
    return r;
}
AxisSet axis_difference(const AxisSet &a, const AxisSet &b) {
    AxisSet r;
    std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(r));
    return r;
}
AxisSet axis_intersection(const AxisSet &a, const AxisSet &b) {
    AxisSet r;
    std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(r));
    return r;
}

const char *dtype_name(DType t) {
    switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F64: return "f64";
    }
    return "?";
}

std::optional<DType> parse_dtype(const std::string &s) {
    if (s == "f32") return DType::F32;
    if (s == "f16") return DType::F16;
    if (s == "bf16") return DType::BF16;
    if (s == "f64") return DType::F64;
    return std::nullopt;
}

const char *variance_name(VarianceAlgorithm v) {
    switch (v) {
    case VarianceAlgorithm::TwoPass: return "two_pass";
    case VarianceAlgorithm::Welford: return "welford";
    case VarianceAlgorithm::OnePass: return "one_pass";
    }
    return "?";
}

std::optional<VarianceAlgorithm> parse_variance(const std::string &s) {
    if (s == "two_pass") return VarianceAlgorithm::TwoPass;
    if (s == "welford") return VarianceAlgorithm::Welford;
    if (s == "one_pass") return VarianceAlgorithm::OnePass;
    return std::nullopt;
}

const char *reduce_name(ReduceOp op) {
    switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::Var: return "var";
    }
    return "?";
}

bool is_transcendental(const Node &n) {
    if (n.kind == Node::Unary)
        return n.unary == UnaryOp::Tanh || n.unary == UnaryOp::Exp || n.unary == UnaryOp::Log || n.unary == UnaryOp::Sigmoid;
    return n.kind == Node::Binary && n.binary == BinaryOp::Pow;
}

const char *unary_name(UnaryOp op) {
    switch (op) {
    case UnaryOp::Neg: return "-";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Rsqrt: return "rsqrt";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Abs: return "abs";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Round: return "round";
    case UnaryOp::Step: return "step";
    }
    return "?";
}

const char *binary_name(BinaryOp op) {
    switch (op) {
    case BinaryOp::Add: return "+";
    case BinaryOp::Sub: return "-";
    case BinaryOp::Mul: return "*";
    case BinaryOp::Div: return "/";
    case BinaryOp::Max: return "max";
    case BinaryOp::Min: return "min";
    case BinaryOp::Pow: return "pow";
    }
    return "?";
}

const char *eps_placement_name(EpsPlacement p) {
    switch (p) {
    case EpsPlacement::None: return "none";
    case EpsPlacement::InsideRoot: return "inside the root";
    case EpsPlacement::OutsideRoot: return "outside the root";
    case EpsPlacement::Clamp: return "clamp (max)";
    case EpsPlacement::Other: return "other";
    }
    return "?";
}

AxisId NormSpec::find_axis(const std::string &n) const {
    for (size_t i = 0; i < axes.size(); ++i)
        if (axes[i].name == n) return (AxisId)i;
    return -1;
}

const TensorInfo *NormSpec::find_tensor(const std::string &n) const {
    for (const auto &t : tensors)
        if (t.name == n) return &t;
    return nullptr;
}

const OutputInfo *NormSpec::find_output(const std::string &n) const {
    for (const auto &o : outputs)
        if (o.name == n) return &o;
    return nullptr;
}

const ValueDef *NormSpec::find_value(const std::string &n) const {
    for (const auto &v : values)
        if (v.name == n) return &v;
    return nullptr;
}

const ConstInfo *NormSpec::find_const(const std::string &n) const {
    for (const auto &c : consts)
        if (c.name == n) return &c;
    return nullptr;
}

std::vector<AxisSet> NormSpec::reduction_axes_per_stage() const {
    std::vector<AxisSet> r;
    for (const Stage &s : stages) {
        AxisSet u;
        for (const NodePtr &n : s.reductions)
            for (AxisId a : n->over)
                if (std::find(u.begin(), u.end(), a) == u.end()) u.push_back(a);
        std::sort(u.begin(), u.end());
        r.push_back(u);
    }
    return r;
}

bool NormSpec::has_var_reduction() const {
    for (const Stage &s : stages)
        for (const NodePtr &n : s.reductions)
            if (n->reduce == ReduceOp::Var) return true;
    // Stages are computed last by the checker; fall back to a walk while they are not yet known.
    bool found = false;
    std::function<void(const Node &)> walk = [&](const Node &n) {
        if (n.kind == Node::Reduce && n.reduce == ReduceOp::Var) found = true;
        for (const auto &a : n.args) walk(*a);
    };
    for (const ValueDef &v : values) walk(*v.expr);
    return found;
}

std::string NormSpec::axes_text(const std::vector<AxisId> &ids) const {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + axes[ids[i]].name;
    return s + "]";
}

std::vector<AxisId> NormSpec::memory_atoms(const std::vector<AxisId> &dims) const {
    std::vector<AxisId> atoms;
    for (AxisId d : dims) {
        if (axes[d].is_split()) atoms.insert(atoms.end(), axes[d].parts.begin(), axes[d].parts.end());
        else atoms.push_back(d);
    }
    return atoms;
}

std::vector<DType> NormSpec::storage_of(const std::string &tensor) const {
    for (const StorageGroup &g : storage)
        if (std::find(g.tensors.begin(), g.tensors.end(), tensor) != g.tensors.end()) return g.allowed;
    return {DType::F32};
}

namespace {

bool is_const(const NodePtr &n) { return n->kind == Node::Const || n->kind == Node::Literal; }

// Looks through references to named values: in `sigma = sqrt(v)`, `sigma + eps` is a root plus eps.
const Node &resolve(const NormSpec &spec, const Node &n) {
    return n.kind == Node::Value ? resolve(spec, *spec.values[n.index].expr) : n;
}

bool is_root(const NormSpec &spec, const Node &node) {
    const Node &n = resolve(spec, node);
    return n.kind == Node::Unary && (n.unary == UnaryOp::Sqrt || n.unary == UnaryOp::Rsqrt);
}

// Calls f(node) for every node of every value's expression.
void visit(const NormSpec &spec, const std::function<void(const Node &)> &f) {
    std::function<void(const Node &)> walk = [&](const Node &n) {
        f(n);
        for (const auto &a : n.args) walk(*a);
    };
    for (const ValueDef &v : spec.values) walk(*v.expr);
}

}  // namespace

// Where the named constants that guard a division sit:
//   rsqrt(v + eps), sqrt(v + eps)   -> inside the root
//   sqrt(v) + eps                   -> outside the root
//   max(v, eps)                     -> clamp
std::vector<EpsUse> NormSpec::eps_uses() const {
    std::vector<EpsUse> uses;
    auto add = [&](const Node &c, EpsPlacement p, const Node &where) {
        uses.push_back({c.kind == Node::Const ? c.name : format_number(c.value), c.value, p, print_expr(*this, where)});
    };
    visit(*this, [&](const Node &n) {
        if (is_root(*this, n) && n.kind == Node::Unary) {
            const Node &a = resolve(*this, *n.args[0]);
            if (a.kind == Node::Binary && a.binary == BinaryOp::Add)
                for (const auto &x : a.args)
                    if (is_const(x)) add(*x, EpsPlacement::InsideRoot, n);
        }
        if (n.kind == Node::Binary && n.binary == BinaryOp::Add && (is_root(*this, *n.args[0]) || is_root(*this, *n.args[1])))
            for (const auto &x : n.args)
                if (is_const(x)) add(*x, EpsPlacement::OutsideRoot, n);
        if (n.kind == Node::Binary && n.binary == BinaryOp::Max)
            for (const auto &x : n.args)
                if (is_const(x)) add(*x, EpsPlacement::Clamp, n);
    });
    return uses;
}

// How each parameter enters the map: y = ... * weight (scale), + bias (shift), * (1 + weight)
// (offset scale, Gemma), tanh(alpha * x) (input scale, inside a nonlinearity).
std::set<int> NormSpec::reduced_tensors() const {
    std::set<int> r;
    std::function<void(const Node &, bool)> walk = [&](const Node &n, bool under) {
        if (n.kind == Node::Tensor && under) r.insert(n.index);
        if (n.kind == Node::Value) walk(*values[n.index].expr, under);
        for (const auto &a : n.args) walk(*a, under || n.kind == Node::Reduce);
    };
    for (const ValueDef &v : values) walk(*v.expr, false);
    return r;
}

std::vector<AffineTerm> NormSpec::affine_terms() const {
    std::vector<AffineTerm> terms;
    // A parameter some statistic reads is normalized (WeightNorm's v), not an affine term.
    const std::set<int> normalized = reduced_tensors();
    for (const ValueDef &v : values) {
        std::function<void(const Node &, std::vector<const Node *> &)> walk = [&](const Node &n, std::vector<const Node *> &anc) {
            if (n.kind == Node::Tensor && tensors[n.index].role == TensorInfo::Param && !normalized.count(n.index)) {
                const Node *p = anc.empty() ? nullptr : anc.back();
                const Node *gp = anc.size() < 2 ? nullptr : anc[anc.size() - 2];
                bool in_nonlinearity = std::any_of(anc.begin(), anc.end(), [](const Node *a) {
                    return a->kind == Node::Unary && a->unary != UnaryOp::Neg && a->unary != UnaryOp::Round;
                });
                AffineTerm t{print_expr(*this, n), "other", p ? print_expr(*this, *p) : print_expr(*this, n)};
                if (in_nonlinearity) {
                    t.role = "input scale (inside a nonlinearity)";
                } else if (p && p->kind == Node::Binary && p->binary == BinaryOp::Add && gp && gp->kind == Node::Binary &&
                           gp->binary == BinaryOp::Mul && (is_const(p->args[0]) || is_const(p->args[1]))) {
                    t.role = "offset scale (1 + " + t.param + ")";
                    t.where = print_expr(*this, *p);
                } else if (p && p->kind == Node::Binary && (p->binary == BinaryOp::Mul || p->binary == BinaryOp::Div)) {
                    t.role = "scale";
                } else if (p && p->kind == Node::Binary && (p->binary == BinaryOp::Add || p->binary == BinaryOp::Sub)) {
                    t.role = "shift";
                }
                terms.push_back(t);
            }
            anc.push_back(&n);
            for (const auto &a : n.args) walk(*a, anc);
            anc.pop_back();
        };
        std::vector<const Node *> anc;
        walk(*v.expr, anc);
    }
    return terms;
}

DType rounding_type(const NormSpec &spec, const Node &round, const std::map<std::string, DType> &storage) {
    if (round.name.empty()) return round.round_type;
    auto it = storage.find(round.name);
    if (it != storage.end()) return it->second;
    return spec.storage_of(round.name).front();
}

std::vector<const Node *> rounding_points(const NormSpec &spec) {
    std::vector<const Node *> r;
    visit(spec, [&](const Node &n) {
        if (n.kind == Node::Unary && n.unary == UnaryOp::Round) r.push_back(&n);
    });
    std::stable_sort(r.begin(), r.end(), [](const Node *a, const Node *b) {
        return a->loc.line != b->loc.line ? a->loc.line < b->loc.line : a->loc.col < b->loc.col;
    });
    return r;
}

}  // namespace normgen
