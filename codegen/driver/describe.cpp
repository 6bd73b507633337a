#include "codegen/driver/describe.h"

#include "dsl/printer.h"

#include <sstream>

namespace normgen {
namespace {

std::string storage_text(const NormSpec &spec, const std::string &tensor) {
    std::string s;
    for (DType t : spec.storage_of(tensor)) s += (s.empty() ? "" : " | ") + std::string(dtype_name(t));
    return s;
}

}  // namespace

std::string describe_norm(const NormSpec &spec) {
    std::ostringstream os;
    os << "norm " << spec.name << (spec.file.empty() ? "" : "  (" + spec.file + ")") << "\n";

    os << "axes:\n";
    for (const Axis &a : spec.axes) {
        os << "  " << a.name;
        if (a.is_split()) {
            os << " = (";
            for (size_t i = 0; i < a.parts.size(); ++i) os << (i ? ", " : "") << spec.axes[a.parts[i]].name;
            os << ")  split view";
        }
        if (a.fixed_extent) os << "  extent " << *a.fixed_extent;
        os << "\n";
    }

    os << "inputs:\n";
    for (const TensorInfo &t : spec.tensors)
        os << "  " << t.name << " " << spec.axes_text(t.dims) << "  " << (t.role == TensorInfo::Param ? "param" : "input")
           << "  storage " << storage_text(spec, t.name) << "\n";

    os << "outputs:\n";
    for (const OutputInfo &o : spec.outputs) {
        os << "  " << o.name << " " << spec.axes_text(o.dims) << (o.optional ? "  optional" : "");
        if (!o.updates.empty()) os << "  updates " << o.updates << " (may alias it in place)";
        os << "  storage " << storage_text(spec, o.name) << "\n";
    }

    os << "reduction stages: " << spec.stages.size() << (spec.stages.empty() ? " (a pure elementwise map)" : "") << "\n";
    auto per_stage = spec.reduction_axes_per_stage();
    for (const Stage &s : spec.stages) {
        os << "  stage " << s.index << " over " << spec.axes_text(per_stage[s.index - 1]) << ":\n";
        for (size_t i = 0; i < s.reductions.size(); ++i) {
            const Node &n = *s.reductions[i];
            os << "    " << (s.names[i].empty() ? "(inline)" : s.names[i]) << " = " << print_expr(spec, n) << "  -> "
               << spec.axes_text(n.axes) << "\n";
        }
    }

    os << "map:\n";
    for (const OutputInfo &o : spec.outputs) os << "  " << o.name << " = " << print_expr(spec, *spec.values[o.value].expr) << "\n";

    auto eps = spec.eps_uses();
    os << "eps placement:" << (eps.empty() ? " none" : "") << "\n";
    for (const EpsUse &e : eps)
        os << "  " << e.name << " = " << format_number(e.value) << ": " << eps_placement_name(e.placement) << ", in " << e.where << "\n";

    auto affine = spec.affine_terms();
    os << "affine terms:" << (affine.empty() ? " none" : "") << "\n";
    for (const AffineTerm &t : affine) os << "  " << t.param << ": " << t.role << ", in " << t.where << "\n";

    os << "precision:\n";
    os << "  accumulate " << dtype_name(spec.accumulate) << (spec.accumulate_written ? "" : " (default)") << "\n";
    if (spec.has_var_reduction())
        os << "  variance " << variance_name(spec.variance) << (spec.variance_written ? "" : " (default)") << "\n";
    for (const StorageGroup &g : spec.storage) {
        os << "  storage";
        for (size_t i = 0; i < g.tensors.size(); ++i) os << (i ? ", " : " ") << g.tensors[i];
        os << ": " << storage_text(spec, g.tensors.front()) << "\n";
    }
    os << "  other tensors: f32\n";

    // Where values are rounded besides the stores: each kernel rounds there, to nearest even.
    auto rounds = rounding_points(spec);
    os << "rounding points:" << (rounds.empty() ? " none (values are rounded only where outputs are stored)" : "") << "\n";
    for (const Node *r : rounds) {
        os << "  " << r->loc.line << ":" << r->loc.col << "  " << print_expr(spec, *r) << ": to ";
        if (r->name.empty()) os << dtype_name(r->round_type) << "\n";
        else os << r->name << "'s storage type (" << storage_text(spec, r->name) << ", as the kernel stores " << r->name << ")\n";
    }
    return os.str();
}

}  // namespace normgen
