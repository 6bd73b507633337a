#include "dsl/grad.h"

#include "dsl/checker.h"
#include "dsl/diagnostics.h"
#include "dsl/printer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>

namespace normgen {

namespace {

// ---- A hash-consed expression graph ------------------------------------------------------------
// Children are created before parents, so ids are a topological order (reverse it for adjoints).

struct G {
    enum Kind { Lit, Const, Leaf, Unary, Binary, Reduce, Count };
    Kind kind = Lit;
    double value = 0;
    std::string name;  // Const; Leaf (a tensor of the backward); Unary Round: the tensor it rounds like
    std::vector<std::pair<AxisId, int64_t>> at;  // Leaf: an indexed element
    UnaryOp unary = UnaryOp::Neg;
    BinaryOp binary = BinaryOp::Add;
    ReduceOp reduce = ReduceOp::Sum;
    DType round_type = DType::F32;
    std::vector<int> args;
    AxisSet over, axes;
    bool dep = false;  // depends on a differentiable leaf (a forward input or parameter)
};

AxisSet set_union(const AxisSet &a, const AxisSet &b) { return axis_union(a, b); }
AxisSet set_minus(const AxisSet &a, const AxisSet &b) { return axis_difference(a, b); }
AxisSet set_and(const AxisSet &a, const AxisSet &b) { return axis_intersection(a, b); }

class Graph {
public:
    const G &at(int id) const { return nodes_[(size_t)id]; }
    int size() const { return (int)nodes_.size(); }
    bool is_lit(int id, double v) const { return at(id).kind == G::Lit && at(id).value == v; }
    bool is_lit(int id) const { return at(id).kind == G::Lit; }
    // A forward named value stays one factor / term (x3 * x3, not x * x * x * x * x * x).
    void mark_opaque(int id) {
        if (at(id).kind == G::Binary) opaque_.insert(id);
    }

    int lit(double v) {
        G g;
        g.kind = G::Lit;
        g.value = v == 0 ? 0.0 : v;  // no -0
        return intern(g);
    }
    int constant(const std::string &name, double v) {
        G g;
        g.kind = G::Const;
        g.name = name;
        g.value = v;
        return intern(g);
    }
    int leaf(const std::string &name, const AxisSet &axes, const std::vector<std::pair<AxisId, int64_t>> &at, bool differentiable) {
        G g;
        g.kind = G::Leaf;
        g.name = name;
        g.axes = axes;
        g.at = at;
        g.dep = differentiable;
        return intern(g);
    }
    int count(const AxisSet &over) {
        if (over.empty()) return lit(1);
        G g;
        g.kind = G::Count;
        g.over = over;
        return intern(g);
    }
    int unary(UnaryOp op, int a, DType round_type = DType::F32, const std::string &like = "") {
        if (op == UnaryOp::Neg) return neg(a);
        G g;
        g.kind = G::Unary;
        g.unary = op;
        g.args = {a};
        g.round_type = round_type;
        g.name = like;
        return intern(g);
    }
    int neg(int a) {
        const G &x = at(a);
        if (x.kind == G::Lit) return lit(-x.value);
        if (x.kind == G::Unary && x.unary == UnaryOp::Neg) return x.args[0];
        G g;
        g.kind = G::Unary;
        g.unary = UnaryOp::Neg;
        g.args = {a};
        return intern(g);
    }
    // Sums and products are kept canonical: a sum is a list of terms c * t with like terms merged
    // (x + x = 2 * x), a product a literal coefficient times its factors in id order (2 * x * 0.5 = x),
    // so equal expressions built in different orders are one node.
    int add(int a, int b) { return combine(a, 1, b); }
    int sub(int a, int b) { return combine(a, -1, b); }
    int mul(int a, int b) {
        auto [ca, fa] = product(a);
        auto [cb, fb] = product(b);
        double c = ca * cb;
        if (!std::isfinite(c)) return raw_binary(BinaryOp::Mul, a, b);  // folding would overflow (found by the fuzzer)
        if (c == 0) return lit(0);
        std::vector<int> f = fa;
        f.insert(f.end(), fb.begin(), fb.end());
        sort_factors(f);
        return scaled(c, chain(f));
    }
    int div(int a, int b) {
        if (is_lit(b, 1)) return a;
        if (is_lit(a, 0)) return lit(0);
        if (is_lit(a) && is_lit(b) && std::isfinite(at(a).value / at(b).value)) return lit(at(a).value / at(b).value);
        if (is_neg(b)) return neg(div(a, at(b).args[0]));
        // The numerator's coefficient moves out, so it meets the other coefficients of a product.
        auto [c, f] = product(a);
        if (f.empty() || !std::isfinite(c)) return raw_binary(BinaryOp::Div, a, b);
        sort_factors(f);
        // A divisor with fewer axes than the numerator divides only the factors that lack the
        // numerator's widest axes: t1 * (rstd * g / n) instead of rstd * g * t1 / n, so a kernel
        // divides once per row, not once per element.
        const size_t wide = at(f.back()).axes.size();
        std::vector<int> narrow, rest;
        for (int x : f) (at(x).axes.size() < wide && set_minus(at(b).axes, at(x).axes).empty() ? narrow : rest).push_back(x);
        if (!narrow.empty() && !rest.empty() && at(b).axes.size() < wide) {
            std::vector<int> g = rest;
            g.push_back(raw_binary(BinaryOp::Div, chain(narrow), b));
            sort_factors(g);
            return scaled(c, chain(g));
        }
        return scaled(c, raw_binary(BinaryOp::Div, chain(f), b));
    }
    int binary(BinaryOp op, int a, int b) {
        switch (op) {
        case BinaryOp::Add: return add(a, b);
        case BinaryOp::Sub: return sub(a, b);
        case BinaryOp::Mul: return mul(a, b);
        case BinaryOp::Div: return div(a, b);
        default: return raw_binary(op, a, b);
        }
    }
    int raw_binary(BinaryOp op, int a, int b) {
        G g;
        g.kind = G::Binary;
        g.binary = op;
        g.args = {a, b};
        return intern(g);
    }

    // A reduction over `over` (atomic axes). Axes the operand lacks: a sum multiplies by their
    // count, a mean, max or min ignores them. Factors that do not vary along the axes move out of a
    // sum or mean, and so does a negation.
    int reduce(ReduceOp op, int a, const AxisSet &over_in) {
        const AxisSet over = set_and(over_in, at(a).axes);
        const AxisSet missing = set_minus(over_in, at(a).axes);
        int scale = op == ReduceOp::Sum ? count(missing) : lit(1);
        if (op == ReduceOp::Var && over.empty()) return lit(0);
        if (over.empty()) return mul(scale, a);
        if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
            if (is_neg(a)) return neg(mul(scale, reduce(op, at(a).args[0], over)));
            std::vector<int> outside, inside;
            factors(a, over, outside, inside);
            if (!outside.empty()) {
                int in = lit(1), out = scale;
                for (int f : inside) in = mul(in, f);
                for (int f : outside) out = mul(out, f);
                // The divisors of a quotient stay divisors: sum(a / b) with b constant = sum(a) / b.
                return mul(out, reduce(op, in, over));
            }
            // Factors that vary along only some of the axes (GroupNorm's weight along cg, not h, w):
            // the others are summed first over the axes none of those vary along,
            // sum(w * d_y, over: cg, h, w) = sum(w * sum(d_y, over: h, w), over: cg). The inner sum
            // is per (sample, channel), the one the other gradients of the layer sum too.
            if (op == ReduceOp::Sum && inside.size() > 1) {
                AxisSet light;
                for (int f : inside)
                    if (set_and(at(f).axes, over) != over) light = set_union(light, set_and(at(f).axes, over));
                const AxisSet first = set_minus(over, light);
                // Not when the first sum is over the outermost (sample) axis (DyT's d_alpha): that
                // would be a sum over the rows, which the kernels take as partial sums per block
                // of rows; the total sum stays one.
                if (!light.empty() && !first.empty() && first.front() != at(a).axes.front()) {
                    int heavy = lit(1), rest = lit(1);
                    for (int f : inside) {
                        if (set_and(at(f).axes, first).empty()) rest = mul(rest, f);
                        else heavy = mul(heavy, f);
                    }
                    return mul(scale, reduce(op, mul(rest, reduce(op, heavy, first)), light));
                }
            }
            if (at(a).kind == G::Binary && at(a).binary == BinaryOp::Div && set_and(at(at(a).args[1]).axes, over).empty())
                return mul(scale, div(reduce(op, at(a).args[0], over), at(a).args[1]));
        }
        G g;
        g.kind = G::Reduce;
        g.reduce = op;
        g.args = {a};
        g.over = over;
        return mul(scale, intern(g));
    }

private:
    std::vector<G> nodes_;
    std::map<std::string, int> index_;

    bool is_neg(int id) const { return at(id).kind == G::Unary && at(id).unary == UnaryOp::Neg; }
    std::set<int> opaque_;  // the forward's named values: products and sums do not look inside them

    // c * x as a node: x, -x, c * x or -(c * x) (a literal when x is 1).
    int scaled(double c, int x) {
        if (c == 0) return lit(0);
        if (x < 0 || is_lit(x, 1)) return lit(c);
        if (c == 1) return x;
        int m = c == -1 ? x : raw_binary(BinaryOp::Mul, lit(std::fabs(c)), x);
        if (c < 0) {
            G g;
            g.kind = G::Unary;
            g.unary = UnaryOp::Neg;
            g.args = {m};
            return intern(g);
        }
        return m;
    }
    // The canonical order of a product's factors: fewer axes first (per-row factors multiply
    // before per-element ones, so a kernel computes their product once per row), then by id.
    void sort_factors(std::vector<int> &f) const {
        std::sort(f.begin(), f.end(), [&](int a, int b) {
            const size_t na = at(a).axes.size(), nb = at(b).axes.size();
            return na != nb ? na < nb : a < b;
        });
    }
    // The product of factors (no literals), left to right; -1 for none.
    int chain(const std::vector<int> &f) {
        int r = -1;
        for (int x : f) r = r < 0 ? x : raw_binary(BinaryOp::Mul, r, x);
        return r;
    }
    // A node as coefficient times factors (Mul chains flattened, negations and literals taken out).
    std::pair<double, std::vector<int>> product(int id) const {
        const G &g = at(id);
        if (opaque_.count(id)) return {1, {id}};
        if (g.kind == G::Lit) return {g.value, {}};
        if (is_neg(id)) {
            auto [c, f] = product(g.args[0]);
            return {-c, f};
        }
        if (g.kind == G::Binary && g.binary == BinaryOp::Mul) {
            auto [c0, f0] = product(g.args[0]);
            auto [c1, f1] = product(g.args[1]);
            f0.insert(f0.end(), f1.begin(), f1.end());
            return {c0 * c1, f0};
        }
        return {1, {id}};
    }
    // A node as a list of terms (coefficient, term without coefficient or -1 for a constant).
    void terms(int id, double sign, std::vector<std::pair<double, int>> &out) {
        const G g = at(id);
        if (!opaque_.count(id) && g.kind == G::Binary && (g.binary == BinaryOp::Add || g.binary == BinaryOp::Sub)) {
            terms(g.args[0], sign, out);
            terms(g.args[1], g.binary == BinaryOp::Sub ? -sign : sign, out);
            return;
        }
        auto [c, f] = product(id);
        sort_factors(f);
        out.push_back({sign * c, chain(f)});  // the same factors give the same chain node
    }
    int combine(int a, double sign_b, int b) {
        std::vector<std::pair<double, int>> t;
        terms(a, 1, t);
        terms(b, sign_b, t);
        // Merge like terms.
        std::vector<std::pair<double, int>> merged;
        for (const std::pair<double, int> &term : t) {
            const int x = term.second;
            auto it = std::find_if(merged.begin(), merged.end(), [x](const auto &m) { return m.second == x; });
            if (it != merged.end()) it->first += term.first;
            else merged.push_back(term);
        }
        // Folding that would overflow keeps the expression as it is (a literal cannot be inf).
        for (const auto &m : merged)
            if (!std::isfinite(m.first)) return raw_binary(sign_b > 0 ? BinaryOp::Add : BinaryOp::Sub, a, b);
        merged.erase(std::remove_if(merged.begin(), merged.end(), [](const auto &m) { return m.first == 0; }), merged.end());
        if (merged.empty()) return lit(0);
        // Terms in id order (canonical), the first positive one moved to the front: a - b, not -b + a.
        std::sort(merged.begin(), merged.end(), [](const auto &x, const auto &y) { return x.second < y.second; });
        auto pos = std::find_if(merged.begin(), merged.end(), [](const auto &m) { return m.first > 0; });
        if (pos != merged.end()) std::rotate(merged.begin(), pos, pos + 1);
        int r = scaled(merged[0].first, merged[0].second);
        for (size_t i = 1; i < merged.size(); ++i) {
            const auto &[c, x] = merged[i];
            int term = scaled(std::fabs(c), x);
            r = raw_binary(c > 0 ? BinaryOp::Add : BinaryOp::Sub, r, term);
        }
        return r;
    }

    // The factors of a product, split by whether they vary along `over`.
    void factors(int id, const AxisSet &over, std::vector<int> &outside, std::vector<int> &inside) const {
        const G &g = at(id);
        if (g.kind == G::Binary && g.binary == BinaryOp::Mul) {
            factors(g.args[0], over, outside, inside);
            factors(g.args[1], over, outside, inside);
            return;
        }
        (set_and(g.axes, over).empty() ? outside : inside).push_back(id);
    }

    int intern(G g) {
        std::ostringstream key;
        char buf[40];
        std::snprintf(buf, sizeof buf, "%a", g.value);
        key << (int)g.kind << '|' << buf << '|' << g.name << '|' << (int)g.unary << '|' << (int)g.binary << '|' << (int)g.reduce << '|'
            << (int)g.round_type << '|';
        for (const auto &[ax, i] : g.at) key << ax << ':' << i << ',';
        key << '|';
        for (int a : g.args) key << a << ',';
        key << '|';
        for (AxisId a : g.over) key << a << ',';
        if (g.kind == G::Leaf) {
            key << '|';
            for (AxisId a : g.axes) key << a << ',';
            key << (g.dep ? "d" : "n");
        }
        auto it = index_.find(key.str());
        if (it != index_.end()) return it->second;
        // Axes and dependence from the children.
        switch (g.kind) {
        case G::Unary: g.axes = at(g.args[0]).axes; break;
        case G::Binary: g.axes = set_union(at(g.args[0]).axes, at(g.args[1]).axes); break;
        case G::Reduce: g.axes = set_minus(at(g.args[0]).axes, g.over); break;
        default: break;
        }
        for (int a : g.args) g.dep |= at(a).dep;
        nodes_.push_back(std::move(g));
        int id = (int)nodes_.size() - 1;
        index_[key.str()] = id;
        return id;
    }
};

// ---- Differentiation ---------------------------------------------------------------------------

std::string read_file_or_empty(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return "";
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string base_name(const std::string &path) {
    size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

class Differentiator {
public:
    Differentiator(const NormSpec &f, const GradOptions &o) : f_(f), opts_(o) {}

    GradResult run() {
        check_differentiable();
        build_forward();
        propagate();
        return emit();
    }

private:
    const NormSpec &f_;
    GradOptions opts_;
    Graph g_;
    std::map<const Node *, int> memo_;
    std::map<int, std::string> value_name_;  // node -> the forward value it computes (first name)
    std::map<int, std::string> saved_;       // node -> the saved statistic (an input of the backward)
    std::vector<const OutputInfo *> diff_outputs_;
    std::map<int, std::vector<int>> contrib_;  // node -> adjoint contributions
    std::map<int, int> adjoint_;

    void check_differentiable() {
        auto file = std::make_shared<SourceFile>(SourceFile{f_.file, read_file_or_empty(f_.file)});
        DiagnosticSink sink(file);
        for (const OutputInfo &o : f_.outputs)
            if (!o.optional && o.updates.empty()) diff_outputs_.push_back(&o);
        if (diff_outputs_.empty()) {
            SourceLoc loc = f_.outputs.empty() ? SourceLoc{} : f_.outputs.front().loc;
            sink.error(loc, "layer '" + f_.name +
                                "' has no differentiable output: every output is optional (a saved statistic) or `updates` an input, "
                                "and neither carries a gradient");
        }
        std::set<std::string> names;
        for (const TensorInfo &t : f_.tensors) names.insert(t.name);
        for (const ValueDef &v : f_.values) names.insert(v.name);
        for (const ConstInfo &c : f_.consts) names.insert(c.name);
        for (const TensorInfo &t : f_.tensors)
            if (names.count("d_" + t.name))
                sink.error(t.loc, "the gradient of '" + t.name + "' would be named 'd_" + t.name +
                                      "', which the declaration already uses; rename one of them");
        for (const OutputInfo *o : diff_outputs_)
            if (names.count("d_" + o->name))
                sink.error(o->loc, "the upstream gradient of output '" + o->name + "' would be named 'd_" + o->name +
                                       "', which the declaration already uses; rename one of them");
        sink.throw_if_any();
    }

    int convert(const Node &n) {
        auto it = memo_.find(&n);
        if (it != memo_.end()) return it->second;
        int id = -1;
        switch (n.kind) {
        case Node::Literal: id = g_.lit(n.value); break;
        case Node::Const: id = g_.constant(n.name, n.value); break;
        case Node::Tensor: id = g_.leaf(n.name, n.axes, n.at, true); break;
        case Node::Value: {
            id = convert(*f_.values[(size_t)n.index].expr);
            value_name_.emplace(id, f_.values[(size_t)n.index].name);
            g_.mark_opaque(id);
            break;
        }
        case Node::Unary: id = g_.unary(n.unary, convert(*n.args[0]), n.round_type, n.name); break;
        case Node::Binary: id = g_.binary(n.binary, convert(*n.args[0]), convert(*n.args[1])); break;
        case Node::Reduce: id = g_.reduce(n.reduce, convert(*n.args[0]), n.over); break;
        case Node::Count: id = g_.count(n.over); break;
        }
        memo_[&n] = id;
        return id;
    }

    void build_forward() {
        for (const ValueDef &v : f_.values) {
            int id = convert(*v.expr);
            value_name_.emplace(id, v.name);
            g_.mark_opaque(id);
        }
        if (!opts_.recompute)
            for (const OutputInfo &o : f_.outputs)
                if (o.optional) {
                    int id = convert(*f_.values[(size_t)o.value].expr);
                    if (g_.at(id).kind != G::Leaf && g_.at(id).kind != G::Lit) saved_.emplace(id, o.name);
                }
        for (const OutputInfo *o : diff_outputs_) {
            int id = convert(*f_.values[(size_t)o->value].expr);
            contrib_[id].push_back(g_.leaf("d_" + o->name, o->axes, {}, false));
        }
    }

    // A contribution with the axes `e` has, summed over those the child lacks.
    int to_axes(int e, const AxisSet &axes) {
        AxisSet extra = set_minus(g_.at(e).axes, axes);
        return extra.empty() ? e : g_.reduce(ReduceOp::Sum, e, extra);
    }

    void push(int child, int contribution) {
        if (!g_.at(child).dep) return;
        contribution = to_axes(contribution, g_.at(child).axes);
        if (g_.is_lit(contribution, 0)) return;
        contrib_[child].push_back(contribution);
    }

    void propagate() {
        for (int id = g_.size() - 1; id >= 0; --id) {
            auto it = contrib_.find(id);
            if (it == contrib_.end()) continue;
            int adj = g_.lit(0);
            for (int c : it->second) adj = g_.add(adj, c);
            adjoint_[id] = adj;
            const G n = g_.at(id);  // a copy: the graph grows below
            if (n.kind == G::Leaf || !n.dep) continue;
            const int a = n.args.empty() ? -1 : n.args[0];
            const int b = n.args.size() > 1 ? n.args[1] : -1;
            auto L = [&](double v) { return g_.lit(v); };
            switch (n.kind) {
            case G::Unary:
                switch (n.unary) {
                case UnaryOp::Neg: push(a, g_.neg(adj)); break;
                // 0.5 / sqrt(u), with sqrt(u) clamped below by a constant smaller than the square root of
                // any positive u of the accumulation type: unchanged wherever u > 0, and 0 (not NaN)
                // where u = 0 and nothing flows in (ScaleNorm's all-zero row, as PyTorch's norm).
                case UnaryOp::Sqrt:
                    push(a, g_.mul(L(0.5), g_.div(adj, g_.raw_binary(BinaryOp::Max, id, L(f_.accumulate == DType::F64 ? 1e-200 : 1e-30)))));
                    break;
                case UnaryOp::Rsqrt: push(a, g_.neg(g_.mul(L(0.5), g_.mul(adj, g_.mul(id, g_.mul(id, id)))))); break;
                case UnaryOp::Tanh: push(a, g_.mul(adj, g_.sub(L(1), g_.mul(id, id)))); break;
                case UnaryOp::Exp: push(a, g_.mul(adj, id)); break;
                case UnaryOp::Log: push(a, g_.div(adj, a)); break;
                case UnaryOp::Abs:
                    push(a, g_.mul(adj, g_.sub(g_.unary(UnaryOp::Step, a), g_.unary(UnaryOp::Step, g_.neg(a)))));
                    break;
                case UnaryOp::Sigmoid: push(a, g_.mul(adj, g_.mul(id, g_.sub(L(1), id)))); break;
                case UnaryOp::Round: push(a, adj); break;  // straight through, as a cast
                case UnaryOp::Step: break;                  // zero almost everywhere
                }
                break;
            case G::Binary:
                switch (n.binary) {
                case BinaryOp::Add: push(a, adj); push(b, adj); break;
                case BinaryOp::Sub: push(a, adj); push(b, g_.neg(adj)); break;
                case BinaryOp::Mul: push(a, g_.mul(adj, b)); push(b, g_.mul(adj, a)); break;
                case BinaryOp::Div: push(a, g_.div(adj, b)); push(b, g_.neg(g_.div(g_.mul(adj, id), b))); break;
                case BinaryOp::Max:
                case BinaryOp::Min: {
                    int s = n.binary == BinaryOp::Max ? g_.unary(UnaryOp::Step, g_.sub(a, b)) : g_.unary(UnaryOp::Step, g_.sub(b, a));
                    push(a, g_.mul(adj, s));
                    push(b, g_.mul(adj, g_.sub(L(1), s)));
                    break;
                }
                case BinaryOp::Pow: {
                    if (g_.is_lit(b)) {
                        double e = g_.at(b).value;
                        int p = e - 1 == 1 ? a : g_.raw_binary(BinaryOp::Pow, a, L(e - 1));
                        push(a, g_.mul(L(e), g_.mul(adj, p)));
                    } else {
                        push(a, g_.mul(adj, g_.mul(b, g_.raw_binary(BinaryOp::Pow, a, g_.sub(b, L(1))))));
                    }
                    push(b, g_.mul(adj, g_.mul(id, g_.unary(UnaryOp::Log, a))));
                    break;
                }
                }
                break;
            case G::Reduce:
                switch (n.reduce) {
                case ReduceOp::Sum: push(a, adj); break;
                case ReduceOp::Mean: push(a, g_.div(adj, g_.count(n.over))); break;
                case ReduceOp::Var: {
                    int centred = g_.sub(a, g_.reduce(ReduceOp::Mean, a, n.over));
                    push(a, g_.div(g_.mul(L(2), g_.mul(adj, centred)), g_.count(n.over)));
                    break;
                }
                case ReduceOp::Max: push(a, g_.mul(adj, g_.sub(L(1), g_.unary(UnaryOp::Step, g_.sub(id, a))))); break;
                case ReduceOp::Min: push(a, g_.mul(adj, g_.sub(L(1), g_.unary(UnaryOp::Step, g_.sub(a, id))))); break;
                }
                break;
            default: break;
            }
        }
    }

    // ---- Emission ---------------------------------------------------------------------------------

    struct Output {
        std::string name;
        int expr;
        std::vector<AxisId> dims;  // declared shape (the tensor's, or [] for an element)
    };

    std::string shape_text(const std::vector<AxisId> &dims, std::set<AxisId> &split_written) const {
        std::string s = "[";
        for (size_t i = 0; i < dims.size(); ++i) {
            const Axis &a = f_.axes[(size_t)dims[i]];
            s += (i ? ", " : "") + a.name;
            if (a.is_split() && split_written.insert(dims[i]).second) {
                s += ": (";
                for (size_t k = 0; k < a.parts.size(); ++k) s += (k ? ", " : "") + f_.axes[(size_t)a.parts[k]].name;
                s += ")";
            }
        }
        return s + "]";
    }

    // An output that is one sum, sum(e, over: A), where the outputs also reach sum(e, over: S) with
    // S a proper subset of A (GroupNorm's d_bias = sum(d_y, over: n, h, w) beside d_x's
    // sum(d_y, over: h, w)): summed from that partial sum instead, one sweep of e fewer.
    void share_partial_sums(std::vector<Output> &outs) {
        std::set<int> seen;
        std::vector<int> sums;
        std::function<void(int)> walk = [&](int id) {
            if (!seen.insert(id).second) return;
            const G &n = g_.at(id);
            if (n.kind == G::Reduce && n.reduce == ReduceOp::Sum) sums.push_back(id);
            for (int a : n.args) walk(a);
        };
        for (const Output &o : outs) walk(o.expr);
        for (Output &o : outs) {
            const G n = g_.at(o.expr);
            if (n.kind != G::Reduce || n.reduce != ReduceOp::Sum) continue;
            int best = -1;
            for (int id : sums) {
                const G &p = g_.at(id);
                if (p.args[0] != n.args[0] || p.over.size() >= n.over.size() || !set_minus(p.over, n.over).empty()) continue;
                if (best < 0 || p.over.size() > g_.at(best).over.size()) best = id;
            }
            if (best >= 0) o.expr = g_.reduce(ReduceOp::Sum, best, set_minus(n.over, g_.at(best).over));
        }
    }

    GradResult emit() {
        GradResult r;
        // The gradient outputs, in the forward's tensor order.
        std::vector<Output> outs;
        std::map<std::string, std::vector<std::pair<std::vector<std::pair<AxisId, int64_t>>, int>>> by_tensor;
        for (const auto &[id, adj] : adjoint_) {
            const G &n = g_.at(id);
            if (n.kind == G::Leaf && n.dep) by_tensor[n.name].push_back({n.at, adj});
        }
        for (const TensorInfo &t : f_.tensors) {
            auto it = by_tensor.find(t.name);
            if (it == by_tensor.end()) {
                r.no_gradient.push_back(t.name);
                continue;
            }
            std::sort(it->second.begin(), it->second.end());
            for (const auto &[at, adj] : it->second) {
                Output o;
                o.name = "d_" + t.name;
                if (at.empty()) {
                    o.dims = t.dims;
                } else {
                    for (const auto &[ax, i] : at) o.name += "_" + std::to_string(i);
                    // The element's remaining axes (those after the indexed ones).
                    o.dims.assign(t.dims.begin() + (long)at.size(), t.dims.end());
                }
                AxisSet want = f_.memory_atoms(o.dims);
                std::sort(want.begin(), want.end());
                int e = to_axes(adj, want);
                // Broadcast a gradient that does not vary along some of the tensor's axes.
                AxisSet lacking = set_minus(want, g_.at(e).axes);
                if (!lacking.empty()) {
                    // `+ 0 * t` gives the expression the tensor's axes (the simplifier would fold it).
                    int leaf = g_.leaf(t.name, want, at, true);
                    e = g_.raw_binary(BinaryOp::Add, e, g_.raw_binary(BinaryOp::Mul, g_.lit(0), leaf));
                }
                o.expr = e;
                outs.push_back(o);
            }
        }

        share_partial_sums(outs);

        if (outs.empty()) {
            auto file = std::make_shared<SourceFile>(SourceFile{f_.file, read_file_or_empty(f_.file)});
            DiagnosticSink sink(file);
            sink.error(diff_outputs_.front()->loc, "layer '" + f_.name + "': no differentiable output depends on an input or parameter " +
                                                       "(or every dependence has a zero derivative, as step() has), so there is no gradient to emit");
            sink.throw_if_any();
        }

        // Which nodes the outputs reach, and how often each is referenced.
        std::map<int, int> refs;
        std::set<int> reached;
        std::function<void(int)> walk = [&](int id) {
            if (!reached.insert(id).second) return;
            if (saved_.count(id)) return;
            for (int a : g_.at(id).args) {
                ++refs[a];
                walk(a);
            }
        };
        std::set<int> roots;
        for (const Output &o : outs) {
            ++refs[o.expr];
            roots.insert(o.expr);
            walk(o.expr);
        }

        // Names: saved statistics, then let-bound nodes (shared, reductions, forward named values).
        std::set<std::string> taken;
        for (const TensorInfo &t : f_.tensors) taken.insert(t.name);
        for (const ConstInfo &c : f_.consts) taken.insert(c.name);
        for (const OutputInfo &o : f_.outputs) taken.insert("d_" + o.name);
        for (const auto &[id, s] : saved_) taken.insert(s);
        for (const Output &o : outs) taken.insert(o.name);
        std::map<int, std::string> name;
        for (const auto &[id, s] : saved_)
            if (reached.count(id)) name[id] = s;
        int temp = 0;
        auto fresh = [&](std::string base) {
            if (base.empty()) {
                while (taken.count("t" + std::to_string(++temp))) {}
                base = "t" + std::to_string(temp);
            }
            std::string s = base;
            for (int k = 2; taken.count(s); ++k) s = base + "_" + std::to_string(k);
            taken.insert(s);
            return s;
        };
        std::map<int, std::string> adjoint_of;  // adjoint node -> forward value whose adjoint it is
        for (const auto &[id, adj] : adjoint_)
            if (value_name_.count(id) && !adjoint_of.count(adj)) adjoint_of[adj] = value_name_.at(id);
        std::vector<int> lets;
        for (int id : reached) {
            const G &n = g_.at(id);
            if (name.count(id)) continue;
            if (n.kind == G::Lit || n.kind == G::Const || n.kind == G::Leaf || n.kind == G::Count) continue;
            if (n.kind == G::Unary && n.unary == UnaryOp::Neg && g_.at(n.args[0]).kind == G::Leaf) continue;
            bool named_value = value_name_.count(id) > 0;
            if (roots.count(id) && refs[id] == 1) continue;  // an output's own definition
            if (refs[id] >= 2 || n.kind == G::Reduce || (named_value && refs[id] >= 1)) lets.push_back(id);
        }
        std::sort(lets.begin(), lets.end());
        for (int id : lets) {
            std::string base;
            if (value_name_.count(id)) base = value_name_.at(id);
            else if (adjoint_of.count(id)) base = "g_" + adjoint_of.at(id);
            name[id] = fresh(base);
            if (value_name_.count(id)) r.recomputed.push_back(value_name_.at(id));
        }
        for (const auto &[id, s] : saved_)
            if (reached.count(id)) r.saved.push_back(s);

        // Printing.
        std::set<AxisId> used_axes;
        bool uses_var = false;
        std::set<std::string> used_leaves, used_consts;
        std::function<std::string(int, bool)> print;
        auto prec = [&](int id) {
            if (name.count(id)) return 4;
            const G &n = g_.at(id);
            if (n.kind == G::Binary) {
                if (n.binary == BinaryOp::Add || n.binary == BinaryOp::Sub) return 1;
                if (n.binary == BinaryOp::Mul || n.binary == BinaryOp::Div) return 2;
                return 4;
            }
            if ((n.kind == G::Unary && n.unary == UnaryOp::Neg) || (n.kind == G::Lit && n.value < 0)) return 3;
            return 4;
        };
        auto operand = [&](int id, int min_prec) {
            std::string s = print(id, false);
            return prec(id) < min_prec ? "(" + s + ")" : s;
        };
        auto over_text = [&](const AxisSet &over) {
            std::string s = "over: ";
            for (size_t i = 0; i < over.size(); ++i) {
                s += (i ? ", " : "") + f_.axes[(size_t)over[i]].name;
                used_axes.insert(over[i]);
            }
            return s;
        };
        print = [&](int id, bool defining) -> std::string {
            if (!defining && name.count(id)) return name.at(id);
            const G &n = g_.at(id);
            switch (n.kind) {
            case G::Lit: return format_number(n.value);
            case G::Const: used_consts.insert(n.name); return n.name;
            case G::Leaf: {
                used_leaves.insert(n.name);
                std::string s = n.name;
                if (!n.at.empty()) {
                    s += "[";
                    for (size_t i = 0; i < n.at.size(); ++i) s += (i ? ", " : "") + std::to_string(n.at[i].second);
                    s += "]";
                }
                return s;
            }
            case G::Count: return "count(" + over_text(n.over) + ")";
            case G::Unary:
                if (n.unary == UnaryOp::Neg) return "-" + operand(n.args[0], 3);
                if (n.unary == UnaryOp::Round) {
                    std::string to = n.name.empty() ? dtype_name(n.round_type) : round_like(n.name);
                    return "round(" + print(n.args[0], false) + ", to: " + to + ")";
                }
                return std::string(unary_name(n.unary)) + "(" + print(n.args[0], false) + ")";
            case G::Binary:
                switch (n.binary) {
                case BinaryOp::Add: return operand(n.args[0], 1) + " + " + operand(n.args[1], 1);
                case BinaryOp::Sub: return operand(n.args[0], 1) + " - " + operand(n.args[1], 2);
                case BinaryOp::Mul: return operand(n.args[0], 2) + " * " + operand(n.args[1], 2);
                case BinaryOp::Div: return operand(n.args[0], 2) + " / " + operand(n.args[1], 3);
                default:
                    return std::string(binary_name(n.binary)) + "(" + print(n.args[0], false) + ", " + print(n.args[1], false) + ")";
                }
            case G::Reduce:
                uses_var |= n.reduce == ReduceOp::Var;
                return std::string(reduce_name(n.reduce)) + "(" + print(n.args[0], false) + ", " + over_text(n.over) + ")";
            }
            return "?";
        };

        std::ostringstream body;
        for (int id : lets) body << "  " << name.at(id) << " = " << print(id, true) << "\n";
        for (const Output &o : outs) body << "  " << o.name << " = " << print(o.expr, false) << "\n";
        for (const auto &[id, s] : saved_)
            if (reached.count(id)) used_leaves.insert(s);

        // The signature: forward inputs read, saved statistics read, upstream gradients; then the
        // parameters read, the fixed axes, the constants.
        std::set<AxisId> split_written;
        std::vector<std::string> sig;
        std::vector<std::string> grad_inputs;
        auto note_dims = [&](const std::vector<AxisId> &dims) {
            for (AxisId a : f_.memory_atoms(dims)) used_axes.insert(a);
        };
        for (const TensorInfo &t : f_.tensors)
            if (t.role == TensorInfo::Input && used_leaves.count(t.name)) {
                sig.push_back(t.name + ": " + shape_text(t.dims, split_written));
                note_dims(t.dims);
            }
        for (const OutputInfo &o : f_.outputs)
            if (o.optional && used_leaves.count(o.name)) {
                sig.push_back(o.name + ": " + shape_text(o.dims, split_written));
                note_dims(o.dims);
            }
        for (const OutputInfo *o : diff_outputs_)
            if (used_leaves.count("d_" + o->name)) {
                sig.push_back("d_" + o->name + ": " + shape_text(o->dims, split_written));
                note_dims(o->dims);
                r.upstream.push_back("d_" + o->name);
            }
        std::ostringstream params;
        for (const TensorInfo &t : f_.tensors)
            if (t.role == TensorInfo::Param && used_leaves.count(t.name)) {
                params << "  param " << t.name << ": " << shape_text(t.dims, split_written) << "\n";
                note_dims(t.dims);
            }
        std::vector<std::string> out_decls;
        for (const Output &o : outs) {
            out_decls.push_back(o.name + ": " + shape_text(o.dims, split_written));
            note_dims(o.dims);
            r.gradients.push_back(o.name);
        }
        std::ostringstream head;
        for (AxisId a : used_axes)
            if (f_.axes[(size_t)a].fixed_extent) head << "  axis " << f_.axes[(size_t)a].name << " = " << *f_.axes[(size_t)a].fixed_extent << "\n";
        for (const ConstInfo &c : f_.consts)
            if (used_consts.count(c.name)) head << "  const " << c.name << " = " << (c.spelling.empty() ? format_number(c.value) : c.spelling) << "\n";

        // Storage: each forward group, its members mapped to the backward's tensors.
        std::set<std::string> present(used_leaves.begin(), used_leaves.end());
        for (const Output &o : outs) present.insert(o.name);
        std::ostringstream storage;
        for (const StorageGroup &grp : f_.storage) {
            std::vector<std::string> members;
            auto add = [&](const std::string &n) {
                if (present.count(n) && std::find(members.begin(), members.end(), n) == members.end()) members.push_back(n);
            };
            for (const std::string &t : grp.tensors) add(t);
            for (const std::string &t : grp.tensors) add("d_" + t);
            if (members.empty()) continue;
            storage << "  storage ";
            for (size_t i = 0; i < members.size(); ++i) storage << (i ? ", " : "") << members[i];
            storage << ": ";
            for (size_t i = 0; i < grp.allowed.size(); ++i) storage << (i ? " | " : "") << dtype_name(grp.allowed[i]);
            storage << "\n";
        }

        std::ostringstream text;
        text << "norm " << f_.name << "_grad(";
        for (size_t i = 0; i < sig.size(); ++i) text << (i ? ", " : "") << sig[i];
        text << ") -> ";
        for (size_t i = 0; i < out_decls.size(); ++i) text << (i ? ", " : "") << out_decls[i];
        text << " {\n" << params.str() << head.str() << body.str();
        text << "  accumulate " << dtype_name(f_.accumulate) << "\n";
        if (uses_var) text << "  variance " << variance_name(f_.variance) << "\n";
        text << storage.str() << "}\n";

        const std::string draft = text.str();
        NormSpec checked;
        try {
            checked = load_norm_text(f_.name + "_grad.norm", draft);
        } catch (const DiagnosticError &e) {
            throw std::logic_error("normgen grad produced a declaration that does not check (a bug):\n" + draft + "\n" + e.what());
        }
        std::string canonical = print_norm(checked);
        r.text = header(r) + canonical;
        r.spec = load_norm_text(f_.name + "_grad.norm", r.text);
        return r;
    }

    // A rounding point's `to: T` names a tensor; in the backward the output's type is its upstream
    // gradient's (same storage group), an input's its own.
    std::string round_like(const std::string &t) const {
        if (f_.find_output(t)) return "d_" + t;
        return t;
    }

    std::string header(const GradResult &r) const {
        auto list = [](const std::vector<std::string> &v) {
            std::string s;
            for (const std::string &x : v) s += (s.empty() ? "" : ", ") + x;
            return s.empty() ? std::string("none") : s;
        };
        std::string sum;
        for (const OutputInfo *o : diff_outputs_) sum += (sum.empty() ? "" : " + ") + std::string("sum(") + o->name + " * d_" + o->name + ")";
        std::ostringstream h;
        h << "# The backward of " << f_.name << " (" << (f_.file.empty() ? std::string("built in C++") : base_name(f_.file))
          << ", canonical text hash " << std::hex << canonical_hash(f_) << std::dec << "), generated by `normgen grad`.\n";
        h << "# Outputs: " << list(r.gradients) << ", the gradients of " << sum << ".\n";
        h << "# Saved (forward optional outputs, read here): " << list(r.saved) << ". Recomputed: " << list(r.recomputed) << ".\n";
        if (!r.no_gradient.empty()) h << "# No gradient (no differentiable output depends on them): " << list(r.no_gradient) << ".\n";
        return h.str();
    }
};

}  // namespace

GradResult differentiate(const NormSpec &forward, const GradOptions &options) {
    return Differentiator(forward, options).run();
}

}  // namespace normgen
