#include "runtime/reference/invariants.h"

#include "dsl/printer.h"
#include "runtime/errors.h"
#include "runtime/random_inputs.h"
#include "runtime/reference/interpreter.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>

namespace normgen {
namespace {

bool has(const AxisSet &s, AxisId a) { return std::find(s.begin(), s.end(), a) != s.end(); }

AxisSet sorted(AxisSet s) {
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
    return s;
}

bool disjoint(const AxisSet &a, const AxisSet &b) {
    for (AxisId x : a)
        if (has(b, x)) return false;
    return true;
}

std::vector<std::string> names_of(const NormSpec &spec, const AxisSet &axes) {
    std::vector<std::string> r;
    for (AxisId a : axes) r.push_back(spec.axes[a].name);
    return r;
}

std::string join(const std::vector<std::string> &v, const char *sep = ", ") {
    std::string s;
    for (const auto &x : v) s += (s.empty() ? "" : sep) + x;
    return s;
}

// One transformation: a scale or a shift of the transformed tensors, its factor varying along `along`.
struct Transform {
    std::string name;
    bool scale = true;
    AxisSet along;
    bool on_data = false;  // a weight layer's data transformations act on x of a = w x
};

// ---- the symbolic argument ----------------------------------------------------------------------
//
// Abstract values: how a value moves under the transformation. Scaled{p}: multiplied by s^p with s
// > 0 varying only along the transformation's axes; Shifted{c}: plus c * t. Zero: an eps set to 0.

struct Abs {
    enum Kind { Zero, Same, Scaled, Shifted, Unknown } kind = Same;
    double p = 0;
    static Abs same() { return {Same, 0}; }
    static Abs unknown() { return {Unknown, 0}; }
    static Abs scaled(double p) { return p == 0 ? same() : Abs{Scaled, p}; }
    static Abs shifted(double c) { return c == 0 ? same() : Abs{Shifted, c}; }
};

class Symbolic {
public:
    Symbolic(const NormSpec &spec, const Transform &t, const std::set<int> &transformed, const std::set<std::string> &zeroed)
        : spec_(spec), t_(t), transformed_(transformed), zeroed_(zeroed) {}

    Abs of(const Node &n) {
        auto it = memo_.find(&n);
        if (it != memo_.end()) return it->second;
        Abs r = eval(n);
        memo_[&n] = r;
        return r;
    }

    static std::string text(const Abs &a) {
        std::ostringstream os;
        switch (a.kind) {
        case Abs::Zero: return "0";
        case Abs::Same: return "unchanged";
        case Abs::Scaled: os << "scaled by s^" << format_number(a.p); return os.str();
        case Abs::Shifted:
            if (a.p == 1) return "shifted by t";
            os << "shifted by " << format_number(a.p) << "t";
            return os.str();
        case Abs::Unknown: return "changed";
        }
        return "?";
    }

private:
    const NormSpec &spec_;
    const Transform &t_;
    const std::set<int> &transformed_;
    const std::set<std::string> &zeroed_;
    std::map<const Node *, Abs> memo_;

    bool constant(const Node &n) const { return n.kind == Node::Literal || (n.kind == Node::Const && !zeroed_.count(n.name)); }

    Abs eval(const Node &n) {
        switch (n.kind) {
        case Node::Literal: return Abs::same();
        case Node::Const: return zeroed_.count(n.name) ? Abs{Abs::Zero, 0} : Abs::same();
        case Node::Count: return Abs::same();
        case Node::Tensor:
            if (!transformed_.count(n.index)) return Abs::same();
            if (!n.at.empty()) return Abs::unknown();  // an element of a transformed tensor
            return t_.scale ? Abs::scaled(1) : Abs::shifted(1);
        case Node::Value: return of(*spec_.values[n.index].expr);
        case Node::Unary: return unary(n, of(*n.args[0]));
        case Node::Binary: return binary(n, of(*n.args[0]), of(*n.args[1]));
        case Node::Reduce: return reduce(n, of(*n.args[0]));
        }
        return Abs::unknown();
    }

    static Abs unary(const Node &n, Abs a) {
        if (a.kind == Abs::Same || a.kind == Abs::Unknown) return a;
        if (a.kind == Abs::Zero) return n.unary == UnaryOp::Neg || n.unary == UnaryOp::Sqrt || n.unary == UnaryOp::Abs ? a : Abs::unknown();
        switch (n.unary) {
        case UnaryOp::Neg: return a.kind == Abs::Scaled ? a : Abs::shifted(-a.p);
        case UnaryOp::Sqrt: return a.kind == Abs::Scaled ? Abs::scaled(a.p / 2) : Abs::unknown();
        case UnaryOp::Rsqrt: return a.kind == Abs::Scaled ? Abs::scaled(-a.p / 2) : Abs::unknown();
        case UnaryOp::Abs: return a.kind == Abs::Scaled ? a : Abs::unknown();  // s > 0
        case UnaryOp::Step: return a.kind == Abs::Scaled ? Abs::same() : Abs::unknown();  // step(s a) = step(a), s > 0
        default: return Abs::unknown();  // tanh, exp, log, sigmoid, a rounding point
        }
    }

    Abs binary(const Node &n, Abs a, Abs b) {
        if (a.kind == Abs::Unknown || b.kind == Abs::Unknown) return Abs::unknown();
        const bool az = a.kind == Abs::Zero, bz = b.kind == Abs::Zero;
        switch (n.binary) {
        case BinaryOp::Add:
        case BinaryOp::Sub: {
            const double sign = n.binary == BinaryOp::Sub ? -1 : 1;
            if (az) return n.binary == BinaryOp::Sub && b.kind == Abs::Shifted ? Abs::shifted(-b.p) : b;
            if (bz) return a;
            if (a.kind == Abs::Same && b.kind == Abs::Same) return Abs::same();
            if (a.kind == Abs::Scaled && b.kind == Abs::Scaled && a.p == b.p) return a;
            if (a.kind == Abs::Shifted && b.kind == Abs::Shifted) return Abs::shifted(a.p + sign * b.p);
            if (a.kind == Abs::Shifted && b.kind == Abs::Same) return a;
            if (a.kind == Abs::Same && b.kind == Abs::Shifted) return Abs::shifted(sign * b.p);
            return Abs::unknown();
        }
        case BinaryOp::Mul:
        case BinaryOp::Div: {
            const bool div = n.binary == BinaryOp::Div;
            if (az || (bz && !div)) return Abs{Abs::Zero, 0};
            if (bz) return Abs::unknown();
            if (a.kind == Abs::Shifted || b.kind == Abs::Shifted) {
                // A shift survives a product only with a constant: (x + t) * 2 = 2x + 2t.
                const Node &other = a.kind == Abs::Shifted ? *n.args[1] : *n.args[0];
                Abs sh = a.kind == Abs::Shifted ? a : b;
                if ((a.kind == Abs::Shifted && b.kind == Abs::Shifted) || !constant(other)) return Abs::unknown();
                if (div && b.kind == Abs::Shifted) return Abs::unknown();
                double v = other.kind == Node::Literal ? other.value : spec_.find_const(other.name)->value;
                return Abs::shifted(div ? sh.p / v : sh.p * v);
            }
            double pa = a.kind == Abs::Scaled ? a.p : 0, pb = b.kind == Abs::Scaled ? b.p : 0;
            return Abs::scaled(div ? pa - pb : pa + pb);
        }
        case BinaryOp::Max:
        case BinaryOp::Min:
            // max(s v, 0) = s max(v, 0) for s > 0; max(s a, s b) = s max(a, b).
            if (a.kind == Abs::Same && b.kind == Abs::Same) return Abs::same();
            if (a.kind == Abs::Scaled && bz) return a;
            if (b.kind == Abs::Scaled && az) return b;
            if (a.kind == Abs::Scaled && b.kind == Abs::Scaled && a.p == b.p) return a;
            if (a.kind == Abs::Shifted && b.kind == Abs::Shifted && a.p == b.p) return a;
            return Abs::unknown();
        case BinaryOp::Pow:
            if (a.kind == Abs::Same && b.kind == Abs::Same) return Abs::same();
            if (a.kind == Abs::Scaled && b.kind == Abs::Same && constant(*n.args[1])) {
                const Node &e = *n.args[1];
                return Abs::scaled(a.p * (e.kind == Node::Literal ? e.value : spec_.find_const(e.name)->value));
            }
            return Abs::unknown();
        }
        return Abs::unknown();
    }

    // A statistic keeps the transformation when its factor is constant along the reduced axes.
    Abs reduce(const Node &n, Abs a) {
        if (a.kind == Abs::Same || a.kind == Abs::Zero || a.kind == Abs::Unknown) return a;
        if (!disjoint(t_.along, n.over)) return Abs::unknown();
        switch (n.reduce) {
        case ReduceOp::Mean: return a;
        case ReduceOp::Sum: return a.kind == Abs::Scaled ? a : Abs::unknown();  // a shift sums to count * t
        case ReduceOp::Var: return a.kind == Abs::Scaled ? Abs::scaled(2 * a.p) : Abs::same();
        case ReduceOp::Max:
        case ReduceOp::Min: return a.kind == Abs::Scaled || a.p > 0 ? a : Abs::unknown();
        }
        return Abs::unknown();
    }
};

// ---- roles ----------------------------------------------------------------------------------------

const TensorInfo &normalized_tensor(const NormSpec &spec) {
    const std::set<int> red = spec.reduced_tensors();
    const TensorInfo *best = nullptr;
    auto better = [&](const TensorInfo &t) {
        if (!best) return true;
        bool ti = t.role == TensorInfo::Input, bi = best->role == TensorInfo::Input;
        if (ti != bi) return ti;
        return t.axes.size() > best->axes.size();
    };
    for (size_t i = 0; i < spec.tensors.size(); ++i) {
        const TensorInfo &t = spec.tensors[i];
        if ((red.empty() ? t.role == TensorInfo::Input : red.count((int)i) > 0) && better(t)) best = &t;
    }
    if (!best)
        for (const TensorInfo &t : spec.tensors)
            if (better(t)) best = &t;
    if (!best) throw UserError(spec.name + ": no tensor to transform");
    return *best;
}

AxisSet axes_named(const NormSpec &spec, const std::vector<std::string> &names, const char *what) {
    AxisSet r;
    for (const std::string &n : names) {
        AxisId id = spec.find_axis(n);
        if (id < 0) throw UserError(std::string("--") + what + ": '" + spec.name + "' has no axis '" + n + "'");
        AxisSet atoms = spec.axes[id].is_split() ? spec.axes[id].parts : AxisSet{id};
        r.insert(r.end(), atoms.begin(), atoms.end());
    }
    return sorted(r);
}

// Element coordinates of a tensor stored in `dims` memory order: coordinate of every atomic axis.
template <typename F>
void for_each_element(const NormSpec &spec, const std::vector<AxisId> &dims, const AxisExtents &ext, F &&f) {
    std::vector<AxisId> atoms = spec.memory_atoms(dims);
    std::vector<int64_t> coord(spec.axes.size(), 0);
    int64_t total = 1;
    for (AxisId a : atoms) total *= ext.extent[a];
    for (int64_t i = 0; i < total; ++i) {
        int64_t rem = i;
        for (size_t k = atoms.size(); k-- > 0;) {
            coord[atoms[k]] = rem % ext.extent[atoms[k]];
            rem /= ext.extent[atoms[k]];
        }
        f((size_t)i, coord);
    }
}

// A random factor per index along `along`: scales in [0.5, 2], shifts N(0, 1) * 2.
struct Table {
    AxisSet along;
    std::map<std::vector<int64_t>, double> values;
    bool scale = true;
    std::mt19937_64 *rng = nullptr;
    double at(const std::vector<int64_t> &coord) {
        std::vector<int64_t> key;
        for (AxisId a : along) key.push_back(coord[a]);
        auto it = values.find(key);
        if (it != values.end()) return it->second;
        double v = scale ? std::exp2(std::uniform_real_distribution<double>(-1, 1)(*rng)) : 2 * std::normal_distribution<double>()(*rng);
        values[key] = v;
        return v;
    }
};

double relative_change(const TensorMap &a, const TensorMap &b, const std::vector<std::string> &judged) {
    double worst = 0;
    for (const std::string &o : judged) {
        const HostTensor &x = a.at(o), &y = b.at(o);
        double mag = 0, diff = 0;
        for (size_t i = 0; i < x.data.size(); ++i) {
            if (std::isnan(x.data[i]) != std::isnan(y.data[i])) return INFINITY;
            if (std::isnan(x.data[i])) continue;
            mag = std::max(mag, std::fabs(x.data[i]));
            diff = std::max(diff, std::fabs(x.data[i] - y.data[i]));
        }
        worst = std::max(worst, diff / std::max(mag, 1e-300));
    }
    return worst;
}

}  // namespace

const std::vector<std::string> &invariance_transforms() {
    static const std::vector<std::string> t = {"weight-matrix re-scaling", "weight-matrix re-centering", "weight-vector re-scaling",
                                               "dataset re-scaling", "dataset re-centering", "single-case re-scaling"};
    return t;
}

InvarianceReport invariance_table(const NormSpec &spec, const InvarianceOptions &opt) {
    InvarianceReport r;
    r.layer = spec.name;
    const TensorInfo &x = normalized_tensor(spec);
    r.normalized = x.name;
    r.weight_layer = x.role == TensorInfo::Param;
    const std::vector<AxisId> order = spec.memory_atoms(x.dims);

    // Roles of the normalized tensor's axes.
    AxisSet samples, units;
    if (!opt.sample_axes.empty()) samples = axes_named(spec, opt.sample_axes, "samples");
    else if (!r.weight_layer && !order.empty()) samples = {order.front()};
    if (!opt.unit_axes.empty()) {
        units = axes_named(spec, opt.unit_axes, "units");
    } else if (r.weight_layer) {
        if (!order.empty()) units = {order.front()};  // a weight's rows are its output units
    } else {
        for (const TensorInfo &t : spec.tensors)
            if (t.role == TensorInfo::Param)
                for (AxisId a : t.axes)
                    if (has(x.axes, a) && !has(samples, a)) units.push_back(a);
        units = sorted(units);
        // Without per-unit parameters: the axes the statistics keep (InstanceNorm's c), else all.
        if (units.empty()) {
            std::function<void(const Node &)> kept = [&](const Node &n) {
                if (n.kind == Node::Reduce)
                    for (AxisId a : n.axes)
                        if (has(x.axes, a) && !has(samples, a)) units.push_back(a);
                for (const auto &c : n.args) kept(*c);
            };
            for (const ValueDef &v : spec.values) kept(*v.expr);
            units = sorted(units);
        }
        if (units.empty())
            for (AxisId a : x.axes)
                if (!has(samples, a)) units.push_back(a);
    }
    AxisSet positions;
    for (AxisId a : x.axes)
        if (!has(samples, a) && !has(units, a)) positions.push_back(a);
    r.sample_axes = names_of(spec, samples);
    r.unit_axes = names_of(spec, units);
    r.position_axes = names_of(spec, positions);

    // The tensors transformed: every input shaped like the normalized one (a residual stream
    // beside it moves with it), or the weight itself.
    std::set<int> transformed;
    if (!opt.transformed.empty()) {
        for (const std::string &n : opt.transformed) {
            const TensorInfo *t = spec.find_tensor(n);
            if (!t) throw UserError("--transform: '" + spec.name + "' has no input or parameter '" + n + "'");
            transformed.insert((int)(t - spec.tensors.data()));
        }
    } else {
        for (size_t i = 0; i < spec.tensors.size(); ++i) {
            const TensorInfo &t = spec.tensors[i];
            if (&t == &x || (!r.weight_layer && t.role == TensorInfo::Input && t.axes == x.axes)) transformed.insert((int)i);
        }
    }
    for (int i : transformed) r.transformed.push_back(spec.tensors[i].name);

    // The judged outputs: those shaped like the normalized tensor that depend on a statistic (the
    // normalized ones: fused add-norm's y, not h); without statistics, those of that shape.
    std::vector<std::string> same_shape;
    for (const OutputInfo &o : spec.outputs) {
        if (o.axes != x.axes) continue;
        same_shape.push_back(o.name);
        if (spec.values[o.value].expr->stage > 0) r.judged.push_back(o.name);
    }
    if (r.judged.empty()) r.judged = same_shape;
    if (r.judged.empty())
        for (const OutputInfo &o : spec.outputs) r.judged.push_back(o.name);

    // eps-like constants to 0: the table holds exactly only without them.
    Overrides ov;
    std::set<std::string> zeroed;
    for (const EpsUse &e : spec.eps_uses())
        if (spec.find_const(e.name) && zeroed.insert(e.name).second) {
            ov[e.name] = 0;
            r.zeroed.push_back(e.name);
        }

    // The six, on this layer's axes.
    AxisSet sp = sorted([&] { AxisSet v = samples; v.insert(v.end(), positions.begin(), positions.end()); return v; }());
    AxisSet rest;  // a weight's input axes
    for (AxisId a : x.axes)
        if (!has(units, a)) rest.push_back(a);
    std::vector<Transform> ts;
    const auto &names = invariance_transforms();
    if (!r.weight_layer) {
        ts = {{names[0], true, {}, false}, {names[1], false, sp, false}, {names[2], true, units, false},
              {names[3], true, {}, false}, {names[4], false, units, false}, {names[5], true, samples, false}};
    } else {
        ts = {{names[0], true, {}, false}, {names[1], false, rest, false}, {names[2], true, units, false},
              {names[3], true, {}, true}, {names[4], false, rest, true}, {names[5], true, {}, true}};
    }

    AxisExtents ext = choose_extents(spec, {}, 6);
    TensorMap in = random_inputs(spec, ext, {0, opt.seed});
    TensorMap base = evaluate_reference(spec, in, ov);

    // A weight layer is judged through a = w x: x [case, rest...] drawn once per report.
    const int64_t cases = 5;
    std::mt19937_64 rng(opt.seed * 0x9e3779b97f4a7c15ull + 1);
    std::vector<double> data;
    int64_t rest_size = 1;
    for (AxisId a : rest) rest_size *= ext.extent[a];
    if (r.weight_layer)
        for (int64_t i = 0; i < cases * rest_size; ++i) data.push_back(std::normal_distribution<double>()(rng));
    auto apply_w = [&](const TensorMap &outs, const std::vector<double> &xd) {
        TensorMap a;
        for (const std::string &o : r.judged) {
            const OutputInfo &oi = *spec.find_output(o);
            HostTensor h;
            int64_t nunits = 1;
            for (AxisId u : units) nunits *= ext.extent[u];
            h.shape = {cases, nunits};
            h.data.assign((size_t)(cases * nunits), 0.0);
            for_each_element(spec, oi.dims, ext, [&](size_t i, const std::vector<int64_t> &c) {
                int64_t u = 0, k = 0;
                for (AxisId a2 : units) u = u * ext.extent[a2] + c[a2];
                for (AxisId a2 : rest) k = k * ext.extent[a2] + c[a2];
                for (int64_t s = 0; s < cases; ++s) h.data[(size_t)(s * nunits + u)] += outs.at(o).data[i] * xd[(size_t)(s * rest_size + k)];
            });
            a[o] = h;
        }
        return a;
    };
    const TensorMap base_a = r.weight_layer ? apply_w(base, data) : TensorMap{};

    for (const Transform &t : ts) {
        InvarianceRow row;
        row.transform = t.name;
        const std::string along = t.along.empty() ? "one scalar" : "varying along " + join(names_of(spec, t.along));
        const std::string what = t.on_data ? "the data x of a = " + join(r.judged) + " x" : join(r.transformed);
        row.action = std::string(t.scale ? "scale " : "shift ") + what + (t.scale ? " by s > 0, " : " by t, ") + along;
        if (t.on_data) {
            if (t.name == names[4]) row.action = "shift the data x of a = " + join(r.judged) + " x by t per input index (" + join(names_of(spec, rest)) + ")";
            if (t.name == names[5]) row.action = "scale one case of the data x of a = " + join(r.judged) + " x by s > 0";
        }
        for (int d = 0; d < opt.draws; ++d) {
            std::mt19937_64 g(opt.seed ^ ((uint64_t)(d + 1) * 0x632be59bd9b4e019ull) ^ std::hash<std::string>()(t.name));
            Table tab{t.along, {}, t.scale, &g};
            double change;
            if (t.on_data) {
                // x [case, rest]: the whole of it, a shift per input index, or one scale per case.
                std::vector<double> xd = data;
                std::vector<double> per_case(cases), per_index((size_t)rest_size);
                for (auto &v : per_case) v = std::exp2(std::uniform_real_distribution<double>(-1, 1)(g));
                for (auto &v : per_index) v = 2 * std::normal_distribution<double>()(g);
                double whole = per_case[0];
                for (int64_t s = 0; s < cases; ++s)
                    for (int64_t k = 0; k < rest_size; ++k) {
                        double &v = xd[(size_t)(s * rest_size + k)];
                        if (t.name == names[3]) v *= whole;
                        else if (t.name == names[4]) v += per_index[(size_t)k];
                        else v *= per_case[(size_t)s];
                    }
                change = relative_change(base_a, apply_w(base, xd), r.judged);
            } else {
                TensorMap moved = in;
                for (int i : transformed) {
                    const TensorInfo &ti = spec.tensors[i];
                    HostTensor &h = moved.at(ti.name);
                    for_each_element(spec, ti.dims, ext, [&](size_t e, const std::vector<int64_t> &c) {
                        double f = tab.at(c);
                        h.data[e] = t.scale ? h.data[e] * f : h.data[e] + f;
                    });
                }
                TensorMap out = evaluate_reference(spec, moved, ov);
                change = r.weight_layer ? relative_change(base_a, apply_w(out, data), r.judged) : relative_change(base, out, r.judged);
            }
            row.max_change = std::max(row.max_change, change);
        }
        row.invariant = row.max_change <= opt.tolerance;

        if (!t.on_data) {
            Symbolic sym(spec, t, transformed, zeroed);
            bool proven = true;
            for (const std::string &o : r.judged) proven = proven && sym.of(*spec.values[spec.find_output(o)->value].expr).kind == Abs::Same;
            if (proven) {
                // The named values the judged outputs depend on, in the order they are defined.
                std::set<int> used;
                std::function<void(const Node &)> reach = [&](const Node &n) {
                    if (n.kind == Node::Value && used.insert(n.index).second) reach(*spec.values[n.index].expr);
                    for (const auto &a : n.args) reach(*a);
                };
                for (const std::string &o : r.judged) {
                    int vi = spec.find_output(o)->value;
                    used.insert(vi);
                    reach(*spec.values[vi].expr);
                }
                std::vector<std::string> steps;
                for (int vi : used) steps.push_back(spec.values[vi].name + " " + Symbolic::text(sym.of(*spec.values[vi].expr)));
                row.argument = join(steps, "; ") + (r.zeroed.empty() ? "" : " (" + join(r.zeroed) + " = 0)");
                // A proof the metamorphic test contradicts is a bug in one of them.
                if (!row.invariant)
                    throw InternalError(spec.name + ": " + t.name + ": the symbolic argument says invariant, the reference moved by " +
                                        format_number(row.max_change));
            }
        }
        r.rows.push_back(row);
    }
    return r;
}

std::string invariance_text(const InvarianceReport &r) {
    std::ostringstream os;
    os << "invariants of " << r.layer << "\n";
    if (r.weight_layer)
        os << "  the normalized tensor " << r.normalized << " is a parameter: read as the weight W of a = W x; units (rows of W) ["
           << join(r.unit_axes) << "]\n";
    else
        os << "  the normalized tensor " << r.normalized << " read as a = W x: samples [" << join(r.sample_axes) << "], units ["
           << join(r.unit_axes) << "], positions [" << join(r.position_axes) << "]\n";
    os << "  transformed: " << join(r.transformed) << "; judged: " << join(r.judged)
       << (r.weight_layer ? " (through a = " + join(r.judged) + " x)" : "") << "; eps set to 0: " << (r.zeroed.empty() ? "none" : join(r.zeroed))
       << "\n";
    size_t w = 0;
    for (const InvarianceRow &row : r.rows) w = std::max(w, row.transform.size());
    for (const InvarianceRow &row : r.rows) {
        std::ostringstream change;
        change.precision(2);
        change << row.max_change;
        os << "  " << row.transform << std::string(w - row.transform.size() + 2, ' ') << (row.invariant ? "invariant" : "no       ")
           << "  (" << row.action << "; largest relative change " << change.str() << ")\n";
        if (!row.argument.empty()) os << "  " << std::string(w + 2, ' ') << "because: " << row.argument << "\n";
    }
    return os.str();
}

}  // namespace normgen
