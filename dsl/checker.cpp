#include "dsl/checker.h"

#include "dsl/parser.h"
#include "dsl/printer.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

namespace normgen {
namespace {

AxisSet set_union(const AxisSet &a, const AxisSet &b) { return axis_union(a, b); }
AxisSet set_minus(const AxisSet &a, const AxisSet &b) { return axis_difference(a, b); }

std::string loc_text(SourceLoc l) { return std::to_string(l.line) + ":" + std::to_string(l.col); }

struct FunctionInfo {
    enum Kind { Reduction, Unary, Binary, MaxMin, Count, Round } kind;
    ReduceOp reduce = ReduceOp::Sum;
    UnaryOp unary = UnaryOp::Sqrt;
    BinaryOp binary = BinaryOp::Pow;
};

const std::map<std::string, FunctionInfo> &functions() {
    static const std::map<std::string, FunctionInfo> fns = {
        {"sum", {FunctionInfo::Reduction, ReduceOp::Sum}},
        {"mean", {FunctionInfo::Reduction, ReduceOp::Mean}},
        {"var", {FunctionInfo::Reduction, ReduceOp::Var}},
        {"max", {FunctionInfo::MaxMin, ReduceOp::Max, UnaryOp::Sqrt, BinaryOp::Max}},
        {"min", {FunctionInfo::MaxMin, ReduceOp::Min, UnaryOp::Sqrt, BinaryOp::Min}},
        {"count", {FunctionInfo::Count}},
        {"sqrt", {FunctionInfo::Unary, ReduceOp::Sum, UnaryOp::Sqrt}},
        {"rsqrt", {FunctionInfo::Unary, ReduceOp::Sum, UnaryOp::Rsqrt}},
        {"tanh", {FunctionInfo::Unary, ReduceOp::Sum, UnaryOp::Tanh}},
        {"exp", {FunctionInfo::Unary, ReduceOp::Sum, UnaryOp::Exp}},
        {"log", {FunctionInfo::Unary, ReduceOp::Sum, UnaryOp::Log}},
        {"abs", {FunctionInfo::Unary, ReduceOp::Sum, UnaryOp::Abs}},
        {"sigmoid", {FunctionInfo::Unary, ReduceOp::Sum, UnaryOp::Sigmoid}},
        {"step", {FunctionInfo::Unary, ReduceOp::Sum, UnaryOp::Step}},
        {"pow", {FunctionInfo::Binary, ReduceOp::Sum, UnaryOp::Sqrt, BinaryOp::Pow}},
        {"round", {FunctionInfo::Round}},
    };
    return fns;
}

std::string known_functions() {
    std::string s;
    for (const auto &[name, info] : functions()) s += (s.empty() ? "" : ", ") + name;
    return s;
}

class Checker {
public:
    Checker(const ast::NormDecl &decl, std::shared_ptr<const SourceFile> file)
        : decl_(decl), sink_(file) {
        spec_.name = decl.name.text;
        spec_.file = file ? file->path : std::string();
    }

    NormSpec run() {
        declare_axes_and_tensors();
        sink_.throw_if_any();
        declare_consts_and_axis_extents();
        check_split_extents();
        sink_.throw_if_any();
        check_values();
        check_outputs();
        check_precision();
        // An input looks unused when the value that used it failed to check: only say so on a clean run.
        if (!sink_.has_errors()) check_unused_inputs();
        sink_.throw_if_any();
        compute_stages();
        return std::move(spec_);
    }

private:
    const ast::NormDecl &decl_;
    DiagnosticSink sink_;
    NormSpec spec_;
    std::map<std::string, SourceLoc> axis_first_use_;
    std::map<std::string, SourceLoc> names_;  // every value-like name -> its declaration
    std::map<std::string, const ast::Stmt *> lets_;
    std::map<std::string, int> let_order_;
    std::map<std::string, int> value_index_;
    std::set<std::string> used_tensors_;
    std::vector<int> value_depth_;  // per value: the depth of its computation through the values it uses
    static constexpr int kMaxComputationDepth = 1000;

    int depth_of(const Node &n) const {
        if (n.kind == Node::Value) return 1 + value_depth_[n.index];
        int d = 0;
        for (const auto &a : n.args) d = std::max(d, depth_of(*a));
        return 1 + d;
    }

    // ---- axes and tensors -------------------------------------------------------------------------

    AxisId atomic_axis(const ast::Name &n) {
        AxisId id = spec_.find_axis(n.text);
        if (id >= 0) return id;
        spec_.axes.push_back({n.text, {}, std::nullopt});
        axis_first_use_[n.text] = n.loc;
        return (AxisId)spec_.axes.size() - 1;
    }

    // Resolves the axes of a declared shape, defining new axes and split views as they first appear.
    std::vector<AxisId> resolve_shape(const ast::Shape &shape, const std::string &owner) {
        std::vector<AxisId> dims;
        AxisSet seen;
        for (const ast::ShapeAxis &a : shape.axes) {
            AxisId id = spec_.find_axis(a.name.text);
            if (!a.parts.empty()) {
                std::vector<AxisId> parts;
                for (const ast::Name &p : a.parts) {
                    AxisId pid = spec_.find_axis(p.text);
                    if (pid >= 0 && spec_.axes[pid].is_split()) {
                        sink_.error(p.loc, "axis '" + p.text + "' is itself split; a split axis cannot be nested");
                        return dims;
                    }
                    if (p.text == a.name.text) {
                        sink_.error(p.loc, "axis '" + a.name.text + "' cannot be one of its own parts");
                        return dims;
                    }
                    parts.push_back(pid >= 0 ? pid : atomic_axis(p));
                }
                if (id < 0) {
                    spec_.axes.push_back({a.name.text, parts, std::nullopt});
                    axis_first_use_[a.name.text] = a.name.loc;
                    id = (AxisId)spec_.axes.size() - 1;
                } else if (!spec_.axes[id].is_split()) {
                    sink_.error(a.name.loc, "axis '" + a.name.text + "' is used unsplit at " + loc_text(axis_first_use_[a.name.text]) +
                                                " before being split here; declare the split where the axis first appears");
                    return dims;
                } else if (spec_.axes[id].parts != parts) {
                    sink_.error(a.name.loc, "axis '" + a.name.text + "' is split differently at " + loc_text(axis_first_use_[a.name.text]));
                    return dims;
                }
            } else if (id < 0) {
                id = atomic_axis(a.name);
            }
            AxisSet atoms = atoms_of(id);
            for (AxisId at : atoms) {
                if (std::find(seen.begin(), seen.end(), at) != seen.end()) {
                    sink_.error(a.name.loc, "axis '" + spec_.axes[at].name + "' appears twice in the shape of '" + owner + "'");
                    return dims;
                }
                seen.push_back(at);
            }
            dims.push_back(id);
        }
        return dims;
    }

    AxisSet atoms_of(AxisId id) const {
        AxisSet s = spec_.axes[id].is_split() ? spec_.axes[id].parts : AxisSet{id};
        std::sort(s.begin(), s.end());
        return s;
    }

    AxisSet atoms_of(const std::vector<AxisId> &dims) const {
        AxisSet s;
        for (AxisId d : dims) s = set_union(s, atoms_of(d));
        return s;
    }

    bool declare_name(const ast::Name &n) {
        auto it = names_.find(n.text);
        if (it != names_.end()) {
            sink_.error(n.loc, std::string("duplicate name '") + n.text + "': first declared at " + loc_text(it->second));
            return false;
        }
        names_[n.text] = n.loc;
        return true;
    }

    void add_tensor(const ast::Name &name, const ast::Shape &shape, TensorInfo::Role role) {
        if (!declare_name(name)) return;
        TensorInfo t;
        t.name = name.text;
        t.role = role;
        t.dims = resolve_shape(shape, name.text);
        t.axes = atoms_of(t.dims);
        t.loc = name.loc;
        spec_.tensors.push_back(std::move(t));
    }

    void declare_axes_and_tensors() {
        for (const ast::TensorDecl &t : decl_.inputs) add_tensor(t.name, t.shape, TensorInfo::Input);
        for (const ast::Stmt &s : decl_.body)
            if (s.kind == ast::Stmt::Param) add_tensor(s.name, s.shape, TensorInfo::Param);
        // Output shapes may only name axes that already exist, but resolving them here keeps split
        // definitions in source order (the printer writes them in the same order).
        for (const ast::OutputDecl &o : decl_.outputs) {
            if (!o.shape) continue;
            for (const ast::ShapeAxis &a : o.shape->axes) {
                if (spec_.find_axis(a.name.text) < 0 && a.parts.empty())
                    sink_.error(a.name.loc, "unknown axis '" + a.name.text + "' in the shape of output '" + o.name.text +
                                                "': outputs can only use the axes of the inputs");
            }
        }
    }

    // ---- constants and fixed axis extents ------------------------------------------------------------

    void declare_consts_and_axis_extents() {
        std::set<std::string> fixed;
        for (const ast::Stmt &s : decl_.body) {
            if (s.kind == ast::Stmt::Const) {
                if (!declare_name(s.name)) continue;
                spec_.consts.push_back({s.name.text, s.value, s.value_spelling});
            } else if (s.kind == ast::Stmt::Axis) {
                AxisId id = spec_.find_axis(s.name.text);
                if (id < 0) {
                    sink_.error(s.name.loc, "unknown axis '" + s.name.text + "': no input or parameter has it");
                    continue;
                }
                if (spec_.axes[id].is_split()) {
                    sink_.error(s.name.loc, "axis '" + s.name.text + "' is a split view; fix the extent of one of its parts instead");
                    continue;
                }
                if (!fixed.insert(s.name.text).second) {
                    sink_.error(s.name.loc, "the extent of axis '" + s.name.text + "' is fixed twice");
                    continue;
                }
                if (!(s.value >= 1 && s.value <= 1e12) || s.value != std::floor(s.value)) {  // range first: the cast of 3e77 is undefined
                    sink_.error(s.value_loc, "the extent of axis '" + s.name.text + "' must be a positive integer, got " + s.value_spelling);
                    continue;
                }
                spec_.axes[id].fixed_extent = (int64_t)s.value;
            }
        }
    }

    void check_split_extents() {
        for (const Axis &a : spec_.axes) {
            if (!a.is_split()) continue;
            int unknown = 0;
            for (AxisId p : a.parts) unknown += !spec_.axes[p].fixed_extent.has_value();
            if (unknown > 1) {
                std::string parts;
                for (size_t i = 0; i < a.parts.size(); ++i) parts += (i ? ", " : "") + spec_.axes[a.parts[i]].name;
                sink_.error(axis_first_use_[a.name], "split axis '" + a.name + "' = (" + parts +
                                                         ") needs the extent of all but one part: add 'axis " +
                                                         spec_.axes[a.parts[0]].name + " = N'");
            }
        }
    }

    // ---- values (NAME = expr) -------------------------------------------------------------------------

    void check_values() {
        int order = 0;
        for (const ast::Stmt &s : decl_.body) {
            if (s.kind != ast::Stmt::Let) continue;
            if (!declare_name(s.name)) continue;
            lets_[s.name.text] = &s;
            let_order_[s.name.text] = order++;
        }
        for (const ast::Stmt &s : decl_.body) {
            // (find, not []: a let that failed to declare, e.g. one named like an input, must not
            // become a null entry that later walks dereference; found by fuzzing)
            auto it = lets_.find(s.name.text);
            if (s.kind != ast::Stmt::Let || it == lets_.end() || it->second != &s) continue;
            std::vector<std::string> path{s.name.text};
            if (find_forward_use(s, path)) continue;
            NodePtr e = lower(*s.expr, s.name.text);
            if (!e) continue;
            // Every consumer walks values recursively through the values they use: bound the depth
            // of the whole computation, not only of one expression (the parser bounds that).
            const int depth = depth_of(*e);
            if (depth > kMaxComputationDepth) {
                sink_.error(s.name.loc, "'" + s.name.text + "' is " + std::to_string(depth) + " levels deep through the values it uses (at most " +
                                            std::to_string(kMaxComputationDepth) + ")");
                continue;
            }
            value_depth_.push_back(depth);
            value_index_[s.name.text] = (int)spec_.values.size();
            spec_.values.push_back({s.name.text, e, s.name.loc});
        }
    }

    // A value may only use values defined above it. When it names a later one, say whether that is a
    // cycle (the later one leads back here) or only an ordering mistake.
    bool find_forward_use(const ast::Stmt &s, std::vector<std::string> &path) {
        bool bad = false;
        std::function<void(const ast::Expr &)> walk = [&](const ast::Expr &e) {
            if (bad) return;
            if (e.kind == ast::Expr::Ref) {
                auto it = let_order_.find(e.name);
                if (it != let_order_.end() && it->second >= let_order_[s.name.text]) {
                    std::vector<std::string> cycle;
                    if (reaches(e.name, s.name.text, cycle)) {
                        std::string p = s.name.text;
                        for (const auto &c : cycle) p += " -> " + c;
                        sink_.error(e.loc, "cycle: '" + s.name.text + "' depends on itself (" + p + ")");
                    } else {
                        sink_.error(e.loc, "'" + e.name + "' is used before its definition at " +
                                               loc_text(lets_[e.name]->name.loc) + "; define it above this line");
                    }
                    bad = true;
                }
            }
            for (const auto &a : e.args) walk(*a);
        };
        walk(*s.expr);
        return bad;
    }

    // Does value `from` (transitively) use value `target`? Fills the path from `from` to `target`.
    bool reaches(const std::string &from, const std::string &target, std::vector<std::string> &path) {
        std::set<std::string> visited;
        std::function<bool(const std::string &)> dfs = [&](const std::string &v) -> bool {
            path.push_back(v);
            if (v == target) return true;
            if (visited.insert(v).second) {
                std::vector<std::string> refs;
                std::function<void(const ast::Expr &)> collect = [&](const ast::Expr &e) {
                    if (e.kind == ast::Expr::Ref && lets_.count(e.name)) refs.push_back(e.name);
                    for (const auto &a : e.args) collect(*a);
                };
                collect(*lets_[v]->expr);
                for (const auto &r : refs)
                    if (dfs(r)) return true;
            }
            path.pop_back();
            return false;
        };
        return dfs(from);
    }

    std::string expr_text(const NodePtr &n) const { return print_expr(spec_, *n); }

    std::vector<AxisId> resolve_over(const ast::Expr &e, bool &ok) {
        std::vector<AxisId> written;
        AxisSet atoms;
        for (const ast::Name &n : e.over) {
            AxisId id = spec_.find_axis(n.text);
            if (id < 0) {
                sink_.error(n.loc, "unknown axis '" + n.text + "'");
                ok = false;
                continue;
            }
            AxisSet a = atoms_of(id);
            for (AxisId x : a)
                if (std::find(atoms.begin(), atoms.end(), x) != atoms.end()) {
                    sink_.error(n.loc, "axis '" + spec_.axes[x].name + "' is listed twice in 'over:'");
                    ok = false;
                }
            atoms = set_union(atoms, a);
            written.push_back(id);
        }
        return written;
    }

    // An elementwise function of one argument: its axes and stage are the argument's.
    static NodePtr unary(std::shared_ptr<Node> n, UnaryOp op, NodePtr a) {
        n->kind = Node::Unary;
        n->unary = op;
        n->axes = a->axes;
        n->stage = a->stage;
        n->args = {std::move(a)};
        return n;
    }

    NodePtr lower(const ast::Expr &e, const std::string &owner) {
        auto n = std::make_shared<Node>();
        n->loc = e.loc;
        switch (e.kind) {
        case ast::Expr::Number:
            n->kind = Node::Literal;
            n->value = e.number;
            return n;
        case ast::Expr::Ref: {
            if (const ConstInfo *c = spec_.find_const(e.name)) {
                n->kind = Node::Const;
                n->name = c->name;
                n->value = c->value;
                return n;
            }
            for (size_t i = 0; i < spec_.tensors.size(); ++i)
                if (spec_.tensors[i].name == e.name) {
                    n->kind = Node::Tensor;
                    n->name = e.name;
                    n->index = (int)i;
                    n->axes = spec_.tensors[i].axes;
                    used_tensors_.insert(e.name);
                    return n;
                }
            auto v = value_index_.find(e.name);
            if (v != value_index_.end()) {
                n->kind = Node::Value;
                n->name = e.name;
                n->index = v->second;
                n->axes = spec_.values[v->second].expr->axes;
                n->stage = spec_.values[v->second].expr->stage;
                return n;
            }
            if (lets_.count(e.name)) return nullptr;  // its own definition failed; already reported
            if (spec_.find_axis(e.name) >= 0)
                sink_.error(e.loc, "'" + e.name + "' is an axis, not a value; use count(over: " + e.name + ") for its extent");
            else if (functions().count(e.name))
                sink_.error(e.loc, "'" + e.name + "' is a function; call it as " + e.name + "(...)");
            else
                sink_.error(e.loc, "unknown name '" + e.name + "'");
            return nullptr;
        }
        case ast::Expr::Index: return lower_index(e, n);
        case ast::Expr::Neg: {
            NodePtr a = lower(*e.args[0], owner);
            return a ? unary(n, UnaryOp::Neg, a) : nullptr;
        }
        case ast::Expr::Binary: {
            NodePtr a = lower(*e.args[0], owner), b = lower(*e.args[1], owner);
            if (!a || !b) return nullptr;
            n->kind = Node::Binary;
            n->binary = e.op == '+' ? BinaryOp::Add : e.op == '-' ? BinaryOp::Sub : e.op == '*' ? BinaryOp::Mul : BinaryOp::Div;
            n->axes = set_union(a->axes, b->axes);
            n->stage = std::max(a->stage, b->stage);
            n->args = {a, b};
            return n;
        }
        case ast::Expr::Call:
            return lower_call(e, owner, n);
        }
        return nullptr;
    }

    // `weight[0]`: the indices fix the leading declared axes of an input or parameter, each of which
    // must be atomic with a fixed extent (`axis k = 3`); the element has the remaining axes.
    NodePtr lower_index(const ast::Expr &e, std::shared_ptr<Node> n) {
        const TensorInfo *t = spec_.find_tensor(e.name);
        if (!t) {
            if (lets_.count(e.name) || spec_.find_const(e.name))
                sink_.error(e.loc, "'" + e.name + "' is not a tensor; only an input or a parameter can be indexed");
            else
                sink_.error(e.loc, "unknown tensor '" + e.name + "'");
            return nullptr;
        }
        if (e.indices.size() > t->dims.size()) {
            sink_.error(e.index_locs[t->dims.size()], "'" + e.name + "' has " + std::to_string(t->dims.size()) + " axes " +
                                                          spec_.axes_text(t->dims) + ", but " + std::to_string(e.indices.size()) +
                                                          " indices are given");
            return nullptr;
        }
        AxisSet fixed;
        for (size_t k = 0; k < e.indices.size(); ++k) {
            AxisId a = t->dims[k];
            const Axis &ax = spec_.axes[a];
            if (ax.is_split() || !ax.fixed_extent) {
                sink_.error(e.index_locs[k], "axis '" + ax.name + "' of '" + e.name + "' has no fixed extent" +
                                                 (ax.is_split() ? " (it is a split view)" : "; add 'axis " + ax.name + " = N' to index it"));
                return nullptr;
            }
            double v = e.indices[k];
            if (v != std::floor(v) || v < 0 || v >= (double)*ax.fixed_extent) {
                sink_.error(e.index_locs[k], "index " + e.index_spellings[k] + " is out of range for axis '" + ax.name + "' of '" +
                                                 e.name + "' (extent " + std::to_string(*ax.fixed_extent) + ": 0 to " +
                                                 std::to_string(*ax.fixed_extent - 1) + ")");
                return nullptr;
            }
            n->at.push_back({a, (int64_t)v});
            fixed.push_back(a);
        }
        std::sort(fixed.begin(), fixed.end());
        n->kind = Node::Tensor;
        n->name = e.name;
        n->index = (int)(t - spec_.tensors.data());
        n->axes = set_minus(t->axes, fixed);
        used_tensors_.insert(e.name);
        return n;
    }

    // `round(e, to: T)`: T is a storage type, or a tensor (input, parameter or output) whose
    // storage type the kernel rounds to.
    NodePtr lower_round(const ast::Expr &e, const std::string &owner, std::shared_ptr<Node> n) {
        if (!e.has_to) {
            sink_.error(e.loc, "'round' needs 'to:' naming a storage type or a tensor, as in round(x * rstd, to: x) or round(v, to: bf16)");
            return nullptr;
        }
        if (e.args.size() != 1) {
            sink_.error(e.loc, "'round' takes 1 argument and 'to:', got " + std::to_string(e.args.size()) + " arguments");
            return nullptr;
        }
        NodePtr a = lower(*e.args[0], owner);
        if (!a) return nullptr;
        bool is_output = false;
        for (const ast::OutputDecl &o : decl_.outputs) is_output = is_output || o.name.text == e.to.text;
        if (spec_.find_tensor(e.to.text) || is_output) {
            n->name = e.to.text;
        } else if (auto t = parse_dtype(e.to.text); t && *t != DType::F64) {
            n->round_type = *t;
        } else {
            sink_.error(e.to.loc, "'" + e.to.text + "' is neither a storage type (f32, bf16, f16) nor an input, parameter or output");
            return nullptr;
        }
        return unary(n, UnaryOp::Round, a);
    }

    NodePtr lower_call(const ast::Expr &e, const std::string &owner, std::shared_ptr<Node> n) {
        auto it = functions().find(e.name);
        if (it == functions().end()) {
            sink_.error(e.loc, "unknown function '" + e.name + "' (known: " + known_functions() + ")");
            return nullptr;
        }
        const FunctionInfo &f = it->second;
        if (e.has_to && f.kind != FunctionInfo::Round) {
            sink_.error(e.to_loc, "'to:' belongs to round(e, to: T); '" + e.name + "' takes no 'to:'");
            return nullptr;
        }
        if (f.kind == FunctionInfo::Round) {
            if (e.has_over) {
                sink_.error(e.over_loc, "'round' is elementwise and does not reduce; remove 'over:'");
                return nullptr;
            }
            return lower_round(e, owner, n);
        }
        auto arity = [&](size_t want) {
            if (e.args.size() == want) return true;
            sink_.error(e.loc, "'" + e.name + "' takes " + std::to_string(want) + " argument" + (want == 1 ? "" : "s") +
                                   ", got " + std::to_string(e.args.size()));
            return false;
        };
        bool reduces = f.kind == FunctionInfo::Reduction || f.kind == FunctionInfo::Count ||
                       (f.kind == FunctionInfo::MaxMin && e.has_over);
        if (!reduces && e.has_over) {
            sink_.error(e.over_loc, "'" + e.name + "' is elementwise and does not reduce; remove 'over:'");
            return nullptr;
        }
        if (reduces && !e.has_over) {
            sink_.error(e.loc, "'" + e.name + "' needs 'over:' naming the axes to reduce, as in " + e.name +
                                   (f.kind == FunctionInfo::Count ? "(over: d)" : "(x, over: d)"));
            return nullptr;
        }
        std::vector<NodePtr> args;
        for (const auto &a : e.args) {
            NodePtr l = lower(*a, owner);
            if (!l) return nullptr;
            args.push_back(l);
        }
        if (reduces) {
            if (!arity(f.kind == FunctionInfo::Count ? 0 : 1)) return nullptr;
            bool ok = true;
            n->over_written = resolve_over(e, ok);
            if (!ok) return nullptr;
            n->over = atoms_of(n->over_written);
            if (f.kind == FunctionInfo::Count) {
                n->kind = Node::Count;
                return n;
            }
            const NodePtr &arg = args[0];
            for (AxisId a : n->over)
                if (!std::binary_search(arg->axes.begin(), arg->axes.end(), a)) {
                    sink_.error(e.over_loc, "cannot reduce '" + expr_text(arg) + "' over axis '" + spec_.axes[a].name +
                                                "': it only has axes " + spec_.axes_text(arg->axes));
                    return nullptr;
                }
            n->kind = Node::Reduce;
            n->reduce = f.reduce;
            n->axes = set_minus(arg->axes, n->over);
            n->stage = arg->stage + 1;
            n->args = {arg};
            return n;
        }
        if (f.kind == FunctionInfo::Unary) {
            if (!arity(1)) return nullptr;
            return unary(n, f.unary, args[0]);
        }
        if (!arity(2)) return nullptr;
        n->kind = Node::Binary;
        n->binary = f.binary;
        n->axes = set_union(args[0]->axes, args[1]->axes);
        n->stage = std::max(args[0]->stage, args[1]->stage);
        n->args = args;
        return n;
    }

    // ---- outputs ----------------------------------------------------------------------------------------

    // Default output layout: axes in declaration order, split views regrouped where all their parts
    // are present and adjacent (GroupNorm's y comes back as [n, c, h, w], not [n, g, cg, h, w]).
    std::vector<AxisId> infer_dims(const AxisSet &axes) const {
        std::vector<AxisId> dims;
        for (size_t i = 0; i < axes.size();) {
            bool grouped = false;
            for (AxisId s = 0; s < (AxisId)spec_.axes.size() && !grouped; ++s) {
                const Axis &a = spec_.axes[s];
                if (!a.is_split() || i + a.parts.size() > axes.size()) continue;
                if (std::equal(a.parts.begin(), a.parts.end(), axes.begin() + i)) {
                    dims.push_back(s);
                    i += a.parts.size();
                    grouped = true;
                }
            }
            if (!grouped) dims.push_back(axes[i++]);
        }
        return dims;
    }

    void check_outputs() {
        // Kernels compute their required outputs and the optional ones on request: a layer whose
        // every output is optional would have an empty core kernel (found by fuzzing: a crash).
        bool required = false;
        for (const ast::OutputDecl &o : decl_.outputs) required = required || !o.optional;
        if (!decl_.outputs.empty() && !required)
            sink_.error(decl_.outputs[0].name.loc, "every output is optional ('?'); at least one output must be required");
        std::set<std::string> seen;
        for (const ast::OutputDecl &o : decl_.outputs) {
            if (!seen.insert(o.name.text).second) {
                sink_.error(o.name.loc, "duplicate output '" + o.name.text + "'");
                continue;
            }
            OutputInfo out;
            out.name = o.name.text;
            out.optional = o.optional;
            out.loc = o.name.loc;
            if (spec_.find_tensor(o.name.text)) {
                sink_.error(o.name.loc, "output '" + o.name.text + "' is an input; an output must be defined by an expression (" +
                                            o.name.text + "_out = ...)");
                continue;
            }
            auto v = value_index_.find(o.name.text);
            if (v == value_index_.end()) {
                if (!lets_.count(o.name.text))
                    sink_.error(o.name.loc, "missing output: '" + o.name.text + "' is declared as an output but never defined; add '" +
                                                o.name.text + " = ...' to the body");
                continue;
            }
            out.value = v->second;
            out.axes = spec_.values[out.value].expr->axes;
            if (o.shape) {
                out.shape_written = true;
                out.dims = resolve_shape(*o.shape, o.name.text);
                AxisSet declared = atoms_of(out.dims);
                if (declared != out.axes) {
                    sink_.error(o.shape->loc, "shape mismatch: output '" + o.name.text + "' is declared " +
                                                  spec_.axes_text(out.dims) + " but its value has axes " + spec_.axes_text(out.axes));
                    continue;
                }
            } else {
                out.dims = infer_dims(out.axes);
            }
            if (o.updates) {
                out.updates = o.updates->text;
                const TensorInfo *t = spec_.find_tensor(out.updates);
                if (!t || t->role != TensorInfo::Input) {
                    sink_.error(o.updates->loc, "'" + out.updates + "' is not an input of the norm; 'updates' names the input that output '" +
                                                    out.name + "' overwrites in place");
                    continue;
                }
                // In place means the same layout: an inferred shape takes the input's; a written one must match it.
                if (!o.shape && atoms_of(t->dims) == out.axes) out.dims = t->dims;
                if (atoms_of(t->dims) != out.axes || t->dims != out.dims) {
                    sink_.error(o.updates->loc, "shape mismatch: output '" + out.name + "' has shape " + spec_.axes_text(out.dims) +
                                                    " but updates '" + t->name + "' of shape " + spec_.axes_text(t->dims));
                    continue;
                }
            }
            spec_.outputs.push_back(std::move(out));
        }
    }

    // ---- precision ----------------------------------------------------------------------------------------

    void check_precision() {
        const ast::Stmt *acc = nullptr, *var = nullptr;
        std::map<std::string, SourceLoc> storage_seen;
        for (const ast::Stmt &s : decl_.body) {
            if (s.kind == ast::Stmt::Accumulate) {
                if (acc) { sink_.error(s.loc, "accumulation type declared twice (first at " + loc_text(acc->loc) + ")"); continue; }
                acc = &s;
                auto t = parse_dtype(s.word.text);
                if (!t) sink_.error(s.word.loc, "unknown type '" + s.word.text + "' (expected f32 or f64)");
                else if (*t != DType::F32 && *t != DType::F64)
                    sink_.error(s.word.loc, "accumulation type must be f32 or f64, got '" + s.word.text + "'");
                else { spec_.accumulate = *t; spec_.accumulate_written = true; }
            } else if (s.kind == ast::Stmt::Variance) {
                if (var) { sink_.error(s.loc, "variance algorithm declared twice (first at " + loc_text(var->loc) + ")"); continue; }
                var = &s;
                auto v = parse_variance(s.word.text);
                if (!v) sink_.error(s.word.loc, "unknown variance algorithm '" + s.word.text + "' (expected two_pass, welford or one_pass)");
                else { spec_.variance = *v; spec_.variance_written = true; }
            } else if (s.kind == ast::Stmt::Storage) {
                StorageGroup g;
                for (const ast::Name &d : s.dtypes) {
                    auto t = parse_dtype(d.text);
                    if (!t || *t == DType::F64) {
                        sink_.error(d.loc, "bad storage type '" + d.text + "' (expected f32, bf16 or f16)");
                        continue;
                    }
                    if (std::find(g.allowed.begin(), g.allowed.end(), *t) != g.allowed.end()) {
                        sink_.error(d.loc, "storage type '" + d.text + "' listed twice");
                        continue;
                    }
                    g.allowed.push_back(*t);
                }
                int gi = (int)spec_.storage.size();
                for (const ast::Name &n : s.tensors) {
                    auto prev = storage_seen.find(n.text);
                    if (prev != storage_seen.end()) {
                        sink_.error(n.loc, "storage of '" + n.text + "' is already declared at " + loc_text(prev->second));
                        continue;
                    }
                    storage_seen[n.text] = n.loc;
                    bool found = false;
                    for (auto &t : spec_.tensors)
                        if (t.name == n.text) { t.storage = gi; found = true; }
                    for (auto &o : spec_.outputs)
                        if (o.name == n.text) { o.storage = gi; found = true; }
                    if (!found) {
                        sink_.error(n.loc, "storage names '" + n.text + "', which is not an input, parameter or output");
                        continue;
                    }
                    g.tensors.push_back(n.text);
                }
                spec_.storage.push_back(std::move(g));
            }
        }
        if (var && spec_.variance_written && !spec_.has_var_reduction())
            sink_.error(var->loc, "a variance algorithm is declared but the norm has no var(...) reduction");
    }

    void check_unused_inputs() {
        for (const TensorInfo &t : spec_.tensors)
            if (!used_tensors_.count(t.name))
                sink_.error(t.loc, std::string(t.role == TensorInfo::Param ? "parameter" : "input") + " '" + t.name +
                                       "' is not used by any value");
    }

    // ---- stages -------------------------------------------------------------------------------------

    void compute_stages() {
        std::map<const Node *, std::string> named;
        for (const ValueDef &v : spec_.values)
            if (v.expr->kind == Node::Reduce) named[v.expr.get()] = v.name;
        std::set<const Node *> seen;
        std::function<void(const NodePtr &)> walk = [&](const NodePtr &n) {
            for (const auto &a : n->args) walk(a);
            if (n->kind != Node::Reduce || !seen.insert(n.get()).second) return;
            while ((int)spec_.stages.size() < n->stage) {
                spec_.stages.emplace_back();
                spec_.stages.back().index = (int)spec_.stages.size();
            }
            Stage &s = spec_.stages[n->stage - 1];
            s.reductions.push_back(n);
            auto it = named.find(n.get());
            s.names.push_back(it == named.end() ? std::string() : it->second);
        };
        for (const ValueDef &v : spec_.values) walk(v.expr);
    }
};

}  // namespace

NormSpec check_norm(const ast::NormDecl &decl, std::shared_ptr<const SourceFile> file) {
    return Checker(decl, std::move(file)).run();
}

NormSpec load_norm_text(const std::string &path, const std::string &text) {
    auto file = std::make_shared<SourceFile>(SourceFile{path, text});
    ast::NormDecl decl = parse_norm(*file);
    return check_norm(decl, file);
}

NormSpec load_norm_file(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        Diagnostic d;
        d.file = path;
        d.message = "cannot open file";
        throw DiagnosticError({d});
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    return load_norm_text(path, ss.str());
}

}  // namespace normgen
