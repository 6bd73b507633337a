#include "codegen/common/kernel_plan.h"

#include "dsl/printer.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <set>
#include <sstream>

namespace normgen {

using nlohmann::json;

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
        a.binary != b.binary || a.reduce != b.reduce || a.over != b.over || a.at != b.at || a.round_type != b.round_type ||
        a.args.size() != b.args.size())
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

std::vector<const Node *> checked_variances(const NormSpec &spec) {
    std::vector<const Node *> found;
    if (spec.variance != VarianceAlgorithm::TwoPass) return found;
    std::function<void(const Node &)> walk = [&](const Node &n) {
        if (n.kind == Node::Reduce && n.reduce == ReduceOp::Var && n.over.size() == 1 && find_mean_like(spec, n) &&
            std::find(found.begin(), found.end(), &n) == found.end())
            found.push_back(&n);
        for (const auto &a : n.args) walk(*a);
    };
    for (const ValueDef &d : spec.values) walk(*d.expr);
    return found;
}

bool has_optional_outputs(const NormSpec &spec) {
    for (const OutputInfo &o : spec.outputs)
        if (o.optional) return true;
    return false;
}

std::vector<Variant> variants_of(const NormSpec &spec) {
    if (has_optional_outputs(spec)) return {Variant::Core, Variant::Full};
    return {Variant::Core};
}

const char *layout_name(LayoutClass l) {
    switch (l) {
    case LayoutClass::Map: return "map";
    case LayoutClass::Row: return "row";
    case LayoutClass::Root: return "root";
    }
    return "?";
}

const char *arg_role_name(PlanArg::Role r) {
    switch (r) {
    case PlanArg::Input: return "input";
    case PlanArg::Param: return "param";
    case PlanArg::Output: return "output";
    }
    return "?";
}

bool depends_on_reduction(const NormSpec &spec, const Node &n) {
    if (n.kind == Node::Reduce) return true;
    if (n.kind == Node::Value) return depends_on_reduction(spec, *spec.values[n.index].expr);
    for (const auto &a : n.args)
        if (depends_on_reduction(spec, *a)) return true;
    return false;
}

json axis_names_json(const NormSpec &spec, const std::vector<AxisId> &axes) {
    json j = json::array();
    for (AxisId a : axes) j.push_back(spec.axes[a].name);
    return j;
}

std::vector<const PlanArg *> KernelPlan::outputs() const {
    std::vector<const PlanArg *> r;
    for (const PlanArg &a : args)
        if (a.role == PlanArg::Output) r.push_back(&a);
    return r;
}

bool KernelPlan::is_column_sum(const NormSpec &spec, const Node *n) const { return is_value_of(spec, column_sums, n); }

int KernelPlan::find_arg(const std::string &name) const {
    for (size_t i = 0; i < args.size(); ++i)
        if (args[i].name == name) return (int)i;
    return -1;
}

namespace {

bool contains(const std::vector<AxisId> &v, AxisId a) { return std::find(v.begin(), v.end(), a) != v.end(); }

std::string names_of(const NormSpec &spec, const std::vector<AxisId> &axes) {
    std::string s;
    for (AxisId a : axes) s += (s.empty() ? "" : ", ") + spec.axes[a].name;
    return s;
}

// The reductions an expression reaches (through named values and reduction operands).
void collect_reductions(const NormSpec &spec, const Node &n, std::set<const Node *> &seen) {
    if (n.kind == Node::Value) {
        collect_reductions(spec, *spec.values[n.index].expr, seen);
        return;
    }
    if (n.kind == Node::Reduce && !seen.insert(&n).second) return;
    for (const auto &a : n.args) collect_reductions(spec, *a, seen);
}

// Can the two innermost memory axes of the main output run as one contiguous loop? When every
// tensor has both or neither, adjacent and in the same order, and no statistic varies along them
// (so nothing is indexed by one without the other).
// `grouped`: statistics may vary along the outer of the two (GroupNorm NHWC's g of (g, cg)).
// Only the kernel's own outputs count: a core kernel writes no optional ones, so GroupNorm NHWC's
// saved mu, rstd per (n, g) do not keep its core kernel's (g, cg) from running as one loop.
bool inner_pair_fusable(const NormSpec &spec, const KernelPlan &p, const std::vector<NodePtr> &reductions, bool grouped = false) {
    const std::vector<AxisId> &order = p.main_order;
    if (order.size() < 3) return false;
    const AxisId a1 = order.back(), a2 = order[order.size() - 2];
    auto ok = [&](const std::vector<AxisId> &atoms) {
        auto i1 = std::find(atoms.begin(), atoms.end(), a1), i2 = std::find(atoms.begin(), atoms.end(), a2);
        if (i1 == atoms.end() && i2 == atoms.end()) return true;
        return i1 != atoms.end() && i2 != atoms.end() && i1 == i2 + 1;
    };
    for (const TensorInfo &t : spec.tensors)
        if (!ok(spec.memory_atoms(t.dims))) return false;
    for (const PlanArg *o : p.outputs())
        if (!ok(o->atoms)) return false;
    for (const NodePtr &r : reductions)
        if (contains(r->axes, a1) || (!grouped && contains(r->axes, a2))) return false;
    return true;
}

void classify(const NormSpec &spec, KernelPlan &p, const std::vector<NodePtr> &reductions, const AxisSet &reduced,
              const std::set<int> &column_outputs = {}) {
    const std::vector<AxisId> &order = p.main_order;
    if (reductions.empty()) {
        p.layout = LayoutClass::Map;
        p.layout_reason = "no reduction: one elementwise map";
        p.row_axes = order.empty() ? 0 : order.size() - 1;
        return;
    }
    size_t first_reduced = order.size();
    for (size_t i = 0; i < order.size(); ++i)
        if (contains(reduced, order[i])) {
            first_reduced = i;
            break;
        }
    const std::string main = spec.outputs[p.main_output].name;
    auto root = [&](const std::string &why) {
        p.layout = LayoutClass::Root;
        p.layout_reason = why;
        p.row_axes = 0;
    };
    for (size_t i = first_reduced; i < order.size(); ++i)
        if (!contains(reduced, order[i]))
            return root("the reduced axes are not a trailing block of " + main + "'s memory order (" + names_of(spec, order) +
                        "): '" + spec.axes[order[i]].name + "' lies inside them; statistics first, then the map");
    for (AxisId a : reduced)
        if (!contains(order, a)) return root("a reduction runs over '" + spec.axes[a].name + "', which " + main + " does not have");
    for (const NodePtr &r : reductions)
        for (AxisId a : r->axes)
            if (std::find(order.begin(), order.begin() + first_reduced, a) == order.begin() + first_reduced)
                return root("a statistic varies along '" + spec.axes[a].name + "', inside the reduced block of " + main);
    for (const PlanArg *o : p.outputs()) {
        if (o->output == p.main_output || o->dims == spec.outputs[p.main_output].dims || column_outputs.count(o->output)) continue;
        if (depends_on_reduction(spec, *spec.values[spec.outputs[o->output].value].expr))
            return root("output " + o->name + " needs the statistics but is not shaped like " + main);
    }
    if (first_reduced == 0) return root("the reductions cover every axis of " + main + ": no rows to run in parallel");
    p.layout = LayoutClass::Row;
    p.layout_reason = "the reductions cover the trailing block (" +
                      names_of(spec, std::vector<AxisId>(order.begin() + first_reduced, order.end())) + ") of " + main +
                      "'s memory order: statistics per row while the row is in cache";
    p.row_axes = first_reduced;
}

// The outputs that are a sum over exactly the main output's outermost axis (its rows), keeping only
// axes of the row block: d_weight = sum(rstd * (x - mu) * d_y, over: rows). With them set aside, the
// rest of the kernel may still be a row layout; then they are summed as per-block partials in the
// row sweep. The sum must read no reduction over the rows (nothing per block would be final).
std::set<int> column_sum_outputs(const NormSpec &spec, const KernelPlan &p) {
    std::set<int> out;
    if (p.main_order.size() < 2) return out;
    const AxisId row = p.main_order[0];
    for (const PlanArg *o : p.outputs()) {
        if (o->output == p.main_output) continue;
        const Node &e = *spec.values[spec.outputs[o->output].value].expr;
        // A total sum over a rows x d map (DyT's d_alpha) counts too: per block, partial sums
        // per row and lane.
        AxisSet all(p.main_order.begin(), p.main_order.end());
        std::sort(all.begin(), all.end());
        const bool total = p.main_order.size() == 2 && e.axes.empty() && e.over == all;
        if (e.kind != Node::Reduce || e.reduce != ReduceOp::Sum || (!total && (e.over != AxisSet{row} || e.axes.empty()))) continue;
        bool inner = true;
        for (AxisId a : e.axes) inner = inner && contains(p.main_order, a) && a != row;
        std::set<const Node *> inside;
        collect_reductions(spec, *e.args[0], inside);
        for (const Node *r : inside) inner = inner && !contains(r->over, row);
        if (inner) out.insert(o->output);
    }
    return out;
}

// CUDA's two-kernel form for a root plan the one-kernel rule refuses (lower.h CudaPlan): the
// column outputs are sums no other expression reads; the rows are the axes every other reduction
// keeps (a statistic may keep more: the lowering holds it per block); a column output must sum over
// at least one row axis (else it is one more statistic), and every other output must have every
// row axis. Sets cuda_row_axes, cuda_columns and cuda_block_axes; false when it does not apply.
bool cuda_rows_form(const NormSpec &spec, KernelPlan &p, const std::vector<NodePtr> &reductions) {
    std::set<int> columns;
    for (const PlanArg *o : p.outputs()) {
        const Node *e = spec.values[spec.outputs[o->output].value].expr.get();
        if (o->output == p.main_output || e->kind != Node::Reduce || e->reduce != ReduceOp::Sum) continue;
        bool read = false;
        for (const PlanArg *q : p.outputs())
            if (q != o) {
                std::set<const Node *> inside;
                collect_reductions(spec, *spec.values[spec.outputs[q->output].value].expr, inside);
                read = read || inside.count(e);
            }
        if (!read) columns.insert(o->output);
    }
    std::vector<AxisId> rows;
    for (;;) {
        std::set<AxisId> common(p.main_order.begin(), p.main_order.end());
        bool any = false;
        for (const NodePtr &n : reductions) {
            if (is_value_of(spec, columns, n.get())) continue;
            any = true;
            std::set<AxisId> kept(n->axes.begin(), n->axes.end()), both;
            std::set_intersection(common.begin(), common.end(), kept.begin(), kept.end(), std::inserter(both, both.end()));
            common = both;
        }
        if (!any || common.empty() || columns.empty()) return false;
        rows.clear();
        for (AxisId a : p.main_order)
            if (common.count(a)) rows.push_back(a);
        // A sum over none of the rows is a statistic of the row: out of the columns, and again.
        bool moved = false;
        for (auto it = columns.begin(); it != columns.end();) {
            const Node &e = *spec.values[spec.outputs[*it].value].expr;
            bool over_row = false;
            for (AxisId a : e.over) over_row = over_row || common.count(a);
            if (over_row) {
                ++it;
            } else {
                it = columns.erase(it);
                moved = true;
            }
        }
        if (!moved) break;
    }
    for (const PlanArg *o : p.outputs()) {
        if (columns.count(o->output)) continue;
        for (AxisId a : rows)
            if (!contains(o->atoms, a)) return false;
    }
    p.cuda_row_axes = p.cuda_block_axes = rows;
    p.cuda_columns.assign(columns.begin(), columns.end());
    return true;
}

}  // namespace

bool KernelPlan::statistics_per_outer_index(const NormSpec &spec) const {
    if (layout != LayoutClass::Root || main_order.empty() || stages.empty()) return false;
    std::vector<int> others;  // the kernel's outputs besides the main one
    for (const PlanArg *a : outputs())
        if (a->output != main_output) others.push_back(a->output);
    size_t over_outer = 0;  // sums over the outermost axis, each the whole value of one of them
    for (const PlanStage &st : stages)
        for (const NodePtr &r : st.reductions)
            if (contains(r->over, main_order[0])) {
                if (r->reduce != ReduceOp::Sum || !is_value_of(spec, others, r.get())) return false;
                ++over_outer;
            }
    return over_outer == others.size();  // and no other output (saved statistics)
}

bool KernelPlan::statistics_per_second_index(const NormSpec &spec) const {
    if (!statistics_per_outer_index(spec) || main_order.size() < 3) return false;
    for (const PlanStage &st : stages)
        for (const NodePtr &r : st.reductions)
            if (!contains(r->over, main_order[0]) && (contains(r->over, main_order[1]) || !contains(r->axes, main_order[1]))) return false;
    return true;
}

std::vector<std::vector<const Node *>> KernelPlan::sibling_sums() const {
    std::vector<std::vector<const Node *>> groups;
    for (const PlanStage &st : stages) {
        std::vector<std::vector<const Node *>> here;
        for (const NodePtr &r : st.reductions) {
            if (r->reduce != ReduceOp::Sum) continue;
            auto g = std::find_if(here.begin(), here.end(), [&](const auto &h) { return h[0]->over == r->over && h[0]->axes == r->axes; });
            if (g == here.end()) here.push_back({r.get()});
            else g->push_back(r.get());
        }
        for (auto &h : here)
            if (h.size() >= 2) groups.push_back(std::move(h));
    }
    return groups;
}

namespace {

// Does the expression itself (not through named values) call a transcendental?
bool calls_transcendental(const Node &n) {
    if (n.kind == Node::Value) return false;
    if (is_transcendental(n)) return true;
    for (const auto &a : n.args)
        if (calls_transcendental(*a)) return true;
    return false;
}

}  // namespace

bool read_by_reduction(const NormSpec &spec, int v) {
    std::function<bool(const Node &, bool)> walk = [&](const Node &n, bool in_reduction) {
        if (n.kind == Node::Value && n.index == v && in_reduction) return true;
        for (const auto &a : n.args)
            if (walk(*a, in_reduction || n.kind == Node::Reduce)) return true;
        return false;
    };
    for (const ValueDef &d : spec.values)
        if (walk(*d.expr, false)) return true;
    return false;
}

std::vector<int> KernelPlan::block_values(const NormSpec &spec) const {
    std::vector<int> r;
    if (layout != LayoutClass::Row || column_sums.empty() || main_output < 0) return r;
    const AxisSet &main_axes = spec.outputs[(size_t)main_output].axes;
    for (size_t i = 0; i < spec.values.size(); ++i) {
        const Node &e = *spec.values[i].expr;
        if (e.kind != Node::Reduce && e.axes == main_axes && calls_transcendental(e) && read_by_reduction(spec, (int)i)) r.push_back((int)i);
    }
    return r;
}

KernelPlan make_plan(const NormSpec &spec, DType want, Variant variant) {
    KernelPlan p;
    p.layer = spec.name;
    p.dtype = want;
    p.variant = variant;
    p.types = kernel_types(spec, want);
    const bool full = variant == Variant::Full;

    for (const TensorInfo &t : spec.tensors) {
        PlanArg a;
        a.name = t.name;
        a.role = t.role == TensorInfo::Param ? PlanArg::Param : PlanArg::Input;
        a.dtype = p.types.storage.at(t.name);
        a.dims = t.dims;
        a.atoms = spec.memory_atoms(t.dims);
        p.args.push_back(a);
    }
    std::set<const Node *> reached;
    for (size_t i = 0; i < spec.outputs.size(); ++i) {
        const OutputInfo &o = spec.outputs[i];
        if (o.optional && !full) continue;
        PlanArg a;
        a.name = o.name;
        a.role = PlanArg::Output;
        a.dtype = p.types.storage.at(o.name);
        a.dims = o.dims;
        a.atoms = spec.memory_atoms(o.dims);
        a.optional = o.optional;
        a.updates = o.updates;
        a.output = (int)i;
        p.args.push_back(a);
        collect_reductions(spec, *spec.values[o.value].expr, reached);
        // The main output: the one with the most axes (y); the first of them on a tie.
        if (p.main_output < 0 || a.atoms.size() > spec.memory_atoms(spec.outputs[p.main_output].dims).size()) p.main_output = (int)i;
    }

    std::vector<NodePtr> reductions;
    for (const Stage &s : spec.stages) {
        PlanStage ps;
        ps.index = s.index;
        for (const NodePtr &n : s.reductions) {
            if (!reached.count(n.get())) continue;
            ps.reductions.push_back(n);
            reductions.push_back(n);
            ps.reduced.insert(ps.reduced.end(), n->over.begin(), n->over.end());
            ps.independent.insert(ps.independent.end(), n->axes.begin(), n->axes.end());
            ps.blocked.push_back(n->over.back());
        }
        if (ps.reductions.empty()) continue;
        for (AxisSet *v : {&ps.reduced, &ps.independent, &ps.blocked}) {
            std::sort(v->begin(), v->end());
            v->erase(std::unique(v->begin(), v->end()), v->end());
        }
        p.reduced.insert(p.reduced.end(), ps.reduced.begin(), ps.reduced.end());
        p.stages.push_back(std::move(ps));
    }
    std::sort(p.reduced.begin(), p.reduced.end());
    p.reduced.erase(std::unique(p.reduced.begin(), p.reduced.end()), p.reduced.end());

    p.main_order = spec.memory_atoms(spec.outputs[p.main_output].dims);
    for (const PlanArg *o : p.outputs())
        if (o->output != p.main_output && o->dims == spec.outputs[p.main_output].dims) p.same_shape.push_back(o->output);
    classify(spec, p, reductions, p.reduced);
    // Parameter gradients summed over the rows: set them aside and see whether the rest is a row
    // layout over that one row axis.
    if (p.layout == LayoutClass::Root) {
        const std::set<int> columns = column_sum_outputs(spec, p);
        if (!columns.empty()) {
            std::vector<NodePtr> rest;
            AxisSet rest_reduced;
            for (const NodePtr &n : reductions) {
                if (is_value_of(spec, columns, n.get())) continue;
                rest.push_back(n);
                rest_reduced.insert(rest_reduced.end(), n->over.begin(), n->over.end());
            }
            std::sort(rest_reduced.begin(), rest_reduced.end());
            rest_reduced.erase(std::unique(rest_reduced.begin(), rest_reduced.end()), rest_reduced.end());
            KernelPlan trial = p;
            if (!rest.empty()) {
                classify(spec, trial, rest, rest_reduced, columns);
            } else if (p.main_order.size() >= 2) {
                // Nothing but the column sums: a map over rows (DyT's backward).
                bool shaped = true;
                for (const PlanArg *o : p.outputs())
                    shaped = shaped && (o->output == p.main_output || o->dims == spec.outputs[p.main_output].dims || columns.count(o->output));
                trial.layout = shaped ? LayoutClass::Row : LayoutClass::Root;
                trial.row_axes = 1;
                trial.layout_reason = "no statistic but the sums over '" + spec.axes[p.main_order[0]].name + "': a map over the rows";
            }
            if (trial.layout == LayoutClass::Row && trial.row_axes == 1) {
                std::string names;
                for (int o : columns) names += (names.empty() ? "" : ", ") + spec.outputs[o].name;
                p.layout = LayoutClass::Row;
                p.row_axes = 1;
                p.column_sums.assign(columns.begin(), columns.end());
                p.layout_reason = trial.layout_reason + "; " + names + " sum over '" + spec.axes[p.main_order[0]].name +
                                  "': per-block partial sums in the same sweep, then a final reduce over the blocks";
            }
        }
    }
    p.inner_pair_fusable = inner_pair_fusable(spec, p, reductions);
    p.inner_pair_grouped = !p.inner_pair_fusable && inner_pair_fusable(spec, p, reductions, true);

    for (size_t a = 0; a < spec.axes.size(); ++a) {
        if (spec.axes[a].is_split() || contains(p.reduced, (AxisId)a)) continue;
        bool everywhere = true;
        for (const PlanArg *o : p.outputs()) everywhere = everywhere && contains(o->atoms, (AxisId)a);
        if (everywhere) p.split_axes.push_back((AxisId)a);
    }

    // CUDA: a block per index of the axes no reduction reduces; without reductions, a block per
    // row of the first output's innermost axis. Every statistic must be per block. With column
    // sums, the two-kernel form: a block per block of rows (each row's statistics per block as
    // usual, the column sums as per-block partial sums), then a final reduce over the blocks.
    if (!p.column_sums.empty()) {
        p.cuda_row_axes = p.cuda_block_axes = {p.main_order[0]};
        p.cuda_columns = p.column_sums;
    } else if (reductions.empty()) {
        std::vector<AxisId> atoms = spec.memory_atoms(spec.outputs.at(0).dims);
        if (!atoms.empty()) atoms.pop_back();
        std::sort(atoms.begin(), atoms.end());
        p.cuda_block_axes = atoms;
    } else {
        // Axes some expression runs over: an axis a parameter is only ever indexed along (PolyNorm's
        // weight[0], weight[1], ...) is no loop, so no block axis.
        AxisSet iterated;
        std::function<void(const Node &)> walk = [&](const Node &n) {
            for (AxisId a : n.axes) if (!contains(iterated, a)) iterated.push_back(a);
            for (const auto &c : n.args) walk(*c);
        };
        for (const ValueDef &v : spec.values) walk(*v.expr);
        for (size_t a = 0; a < spec.axes.size(); ++a)
            if (!spec.axes[a].is_split() && !contains(p.reduced, (AxisId)a) && contains(iterated, (AxisId)a))
                p.cuda_block_axes.push_back((AxisId)a);
        for (const NodePtr &n : reductions)
            for (AxisId a : n->axes)
                if (p.cuda_refusal.empty() && !contains(p.cuda_block_axes, a))
                    p.cuda_refusal = spec.file + ":" + std::to_string(n->loc.line) + ":" + std::to_string(n->loc.col) +
                                     ": mlir-cuda: this reduction keeps axis '" + spec.axes[a].name +
                                     "', which another stage reduces; the CUDA lowering needs every statistic to be per block "
                                     "(over axes no stage reduces)";
        if (!p.cuda_refusal.empty() && cuda_rows_form(spec, p, reductions)) p.cuda_refusal.clear();
    }

    PlanKernel k{"main", {}}, fin{"final", {}};
    for (const PlanArg *o : p.outputs())
        (std::count(p.cuda_columns.begin(), p.cuda_columns.end(), o->output) ? fin : k).outputs.push_back(o->name);
    p.kernels.push_back(k);
    if (!fin.outputs.empty()) p.kernels.push_back(fin);  // on CUDA a second kernel; on the CPU one pipeline
    return p;
}

json plan_json(const NormSpec &spec, const KernelPlan &p) {
    json j;
    j["layer"] = p.layer;
    j["dtype"] = dtype_name(p.dtype);
    j["variant"] = variant_name(p.variant);
    json args = json::array();
    for (const PlanArg &a : p.args)
        args.push_back({{"name", a.name}, {"role", arg_role_name(a.role)}, {"dtype", dtype_name(a.dtype)}, {"dims", axis_names_json(spec, a.dims)},
                        {"memory_order", axis_names_json(spec, a.atoms)}, {"optional", a.optional}, {"updates", a.updates}});
    j["args"] = args;
    json stages = json::array();
    for (const PlanStage &s : p.stages) {
        json r = json::array();
        for (const NodePtr &n : s.reductions) r.push_back(print_expr(spec, *n));
        stages.push_back({{"stage", s.index}, {"reduces", axis_names_json(spec, s.reduced)}, {"keeps", axis_names_json(spec, s.independent)},
                          {"blocked", axis_names_json(spec, s.blocked)}, {"reductions", r}});
    }
    j["stages"] = stages;
    j["main_output"] = spec.outputs[p.main_output].name;
    j["loop_order"] = axis_names_json(spec, p.main_order);
    j["layout"] = layout_name(p.layout);
    j["layout_reason"] = p.layout_reason;
    j["row_axes"] = axis_names_json(spec, std::vector<AxisId>(p.main_order.begin(), p.main_order.begin() + p.row_axes));
    json columns = json::array();
    for (int o : p.column_sums) columns.push_back(spec.outputs[o].name);
    j["column_sums"] = columns;
    j["inner_pair_fusable"] = p.inner_pair_fusable;
    j["inner_pair_grouped"] = p.inner_pair_grouped;
    j["split_axes"] = axis_names_json(spec, p.split_axes);
    if (p.cuda_refusal.empty()) {
        j["cuda"] = {{"block_axes", axis_names_json(spec, p.cuda_block_axes)}};
        if (!p.cuda_columns.empty()) {
            json cols = json::array();
            for (int o : p.cuda_columns) cols.push_back(spec.outputs[o].name);
            j["cuda"]["row_axes"] = axis_names_json(spec, p.cuda_row_axes);
            j["cuda"]["columns"] = cols;
        }
    }
    else j["cuda"] = {{"refused", p.cuda_refusal}};
    json kernels = json::array();
    for (const PlanKernel &k : p.kernels) kernels.push_back({{"role", k.role}, {"outputs", k.outputs}});
    j["kernels"] = kernels;
    return j;
}

std::string plan_text(const NormSpec &spec, const KernelPlan &p) {
    std::ostringstream os;
    os << "plan " << p.layer << " (" << dtype_name(p.dtype) << ", " << variant_name(p.variant) << ")\n";
    os << "  args:\n";
    for (const PlanArg &a : p.args) {
        os << "    " << a.name << (a.optional ? "?" : "") << "  " << arg_role_name(a.role) << " " << dtype_name(a.dtype) << " ["
           << names_of(spec, a.atoms) << "]";
        if (!a.updates.empty()) os << "  updates " << a.updates;
        os << "\n";
    }
    if (p.stages.empty()) os << "  stages: none\n";
    for (const PlanStage &s : p.stages) {
        os << "  stage " << s.index << ": reduces [" << names_of(spec, s.reduced) << "], keeps [" << names_of(spec, s.independent)
           << "], blocked along [" << names_of(spec, s.blocked) << "]:";
        for (size_t i = 0; i < s.reductions.size(); ++i) os << (i ? "," : "") << " " << print_expr(spec, *s.reductions[i]);
        os << "\n";
    }
    os << "  main output: " << spec.outputs[p.main_output].name << " [" << names_of(spec, p.main_order) << "]\n";
    os << "  layout: " << layout_name(p.layout) << " (" << p.layout_reason << ")\n";
    if (p.row_axes) os << "  rows: [" << names_of(spec, std::vector<AxisId>(p.main_order.begin(), p.main_order.begin() + p.row_axes)) << "]\n";
    if (!p.column_sums.empty()) {
        os << "  column sums (per-block partials, then a final reduce):";
        for (size_t i = 0; i < p.column_sums.size(); ++i) os << (i ? ", " : " ") << spec.outputs[p.column_sums[i]].name;
        os << "\n";
    }
    os << "  inner pair fusable: " << (p.inner_pair_fusable ? "yes" : p.inner_pair_grouped ? "grouped (statistics vary along its outer axis)" : "no")
       << "\n";
    os << "  split axes: [" << names_of(spec, p.split_axes) << "]\n";
    if (p.cuda_refusal.empty() && !p.cuda_columns.empty()) {
        os << "  cuda: a block per block of rows [" << names_of(spec, p.cuda_row_axes) << "], partial sums of";
        for (size_t i = 0; i < p.cuda_columns.size(); ++i) os << (i ? ", " : " ") << spec.outputs[p.cuda_columns[i]].name;
        os << ", then a final reduce\n";
    }
    else if (p.cuda_refusal.empty()) os << "  cuda: a block per [" << names_of(spec, p.cuda_block_axes) << "]\n";
    else os << "  cuda: refused: " << p.cuda_refusal << "\n";
    os << "  kernels:";
    for (const PlanKernel &k : p.kernels) {
        os << " " << k.role << " -> ";
        for (size_t i = 0; i < k.outputs.size(); ++i) os << (i ? ", " : "") << k.outputs[i];
    }
    os << "\n";
    return os.str();
}

}  // namespace normgen
