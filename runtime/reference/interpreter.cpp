#include "runtime/reference/interpreter.h"

#include "runtime/errors.h"
#include "runtime/storage.h"

#include <algorithm>
#include <array>
#include <memory>
#include <cmath>
#include <functional>
#include <limits>
#include <malloc.h>
#include <unordered_map>

namespace normgen {
namespace {

// A dense float64 array over a set of atomic axes, row-major in ascending axis-id order.
struct Field {
    AxisSet axes;
    std::vector<int64_t> ext;
    std::vector<double> data;
};

int64_t product(const std::vector<int64_t> &v) {
    int64_t p = 1;
    for (int64_t x : v) p *= x;
    return p;
}

std::vector<int64_t> extents_of(const AxisSet &axes, const AxisExtents &e) {
    std::vector<int64_t> r;
    for (AxisId a : axes) r.push_back(e.extent[a]);
    return r;
}

// Strides of `f` re-expressed along `axes` (0 where `f` lacks the axis): what broadcasting needs.
std::vector<int64_t> strides_along(const Field &f, const AxisSet &axes) {
    std::vector<int64_t> own(f.axes.size());
    int64_t s = 1;
    for (size_t i = f.axes.size(); i-- > 0;) { own[i] = s; s *= f.ext[i]; }
    std::vector<int64_t> r(axes.size(), 0);
    for (size_t i = 0; i < axes.size(); ++i) {
        auto it = std::find(f.axes.begin(), f.axes.end(), axes[i]);
        if (it != f.axes.end()) r[i] = own[it - f.axes.begin()];
    }
    return r;
}

// Visits every point of the box `ext`, keeping one running offset per stride vector. The
// innermost dimension runs as a plain loop; the odometer only turns between rows.
template <size_t N, typename F>
void for_each_point(const std::vector<int64_t> &ext, const std::array<std::vector<int64_t>, N> &strides, F &&f) {
    int64_t total = product(ext);
    if (total == 0) return;
    size_t rank = ext.size();
    std::array<int64_t, N> off{}, step{};
    int64_t inner = rank ? ext[rank - 1] : 1;
    for (size_t k = 0; k < N; ++k) step[k] = rank ? strides[k][rank - 1] : 0;
    std::vector<int64_t> idx(rank, 0);
    for (int64_t row = 0; row < total / inner; ++row) {
        std::array<int64_t, N> o = off;
        for (int64_t i = 0; i < inner; ++i) {
            f(o);
            for (size_t k = 0; k < N; ++k) o[k] += step[k];
        }
        for (size_t d = rank ? rank - 1 : 0; d-- > 0;) {
            ++idx[d];
            for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
            if (idx[d] < ext[d]) break;
            for (size_t k = 0; k < N; ++k) off[k] -= strides[k][d] * ext[d];
            idx[d] = 0;
        }
    }
}

// Neumaier's compensated sum: the reference must be more accurate than any kernel it judges.
// An infinity makes the sum infinite (or NaN for inf - inf), as IEEE addition does; the compensation
// term would turn it into NaN (inf - inf) and is dropped once the sum is not finite (found by the
// bad-input test: ScaleNorm's row with one inf became all NaN in the reference, 0 in the kernels).
struct CompensatedSum {
    double sum = 0, c = 0;
    void add(double x) {
        double t = sum + x;
        if (std::isfinite(t)) {
            if (std::fabs(sum) >= std::fabs(x)) c += (sum - t) + x;
            else c += (x - t) + sum;
        }
        sum = t;
    }
    double value() const { return std::isfinite(sum) ? sum + c : sum; }
};

double apply_unary(UnaryOp op, double x) {
    switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Rsqrt: return 1.0 / std::sqrt(x);
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Abs: return std::fabs(x);
    case UnaryOp::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case UnaryOp::Step: return x > 0 ? 1.0 : 0.0;
    case UnaryOp::Round: break;  // needs its storage type: Interpreter::round_point
    }
    return NAN;
}

double apply_binary(BinaryOp op, double a, double b) {
    switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    // NaN propagates through max/min (std::fmax would hide it, and a hidden NaN is a passed test).
    case BinaryOp::Max: return (std::isnan(a) || std::isnan(b)) ? NAN : std::max(a, b);
    case BinaryOp::Min: return (std::isnan(a) || std::isnan(b)) ? NAN : std::min(a, b);
    case BinaryOp::Pow: return std::pow(a, b);
    }
    return NAN;
}

class Interpreter {
public:
    Interpreter(const NormSpec &spec, const TensorMap &inputs, const Overrides &ov, const ReferenceOptions &opt)
        : spec_(spec), ov_(ov), opt_(opt), ext_(bind_axes(spec, inputs, ov)) {
        for (const TensorInfo &t : spec.tensors) tensors_.push_back(std::make_shared<Field>(to_field(t, inputs.at(t.name))));
        values_.resize(spec.values.size());
    }

    TensorMap run() {
        TensorMap out;
        for (const OutputInfo &o : spec_.outputs) {
            out[o.name] = from_field(*value(o.value), o.dims);
        }
        return out;
    }

    TensorMap run_magnitudes() {
        value_mags_.resize(spec_.values.size());
        TensorMap out;
        for (const OutputInfo &o : spec_.outputs) out[o.name] = from_field(*value_mag(o.value), o.dims);
        return out;
    }

private:
    const NormSpec &spec_;
    const Overrides &ov_;
    const ReferenceOptions &opt_;
    AxisExtents ext_;
    // Shared, immutable results: a tensor or value read in several places is never copied.
    using FieldPtr = std::shared_ptr<const Field>;
    std::vector<FieldPtr> tensors_;
    std::vector<FieldPtr> values_;
    std::vector<FieldPtr> value_mags_;  // evaluate_magnitudes

    FieldPtr value_mag(int index) {
        if (!value_mags_[index]) value_mags_[index] = mag(*spec_.values[index].expr);
        return value_mags_[index];
    }

    static FieldPtr zeros_like(const Field &f) { return std::make_shared<Field>(Field{f.axes, f.ext, std::vector<double>(f.data.size(), 0.0)}); }

    // The running error bound's scale M of a node (evaluate_magnitudes): first-order propagation of
    // absolute errors u * M through each operation, plus |result| for the operation's own rounding.
    FieldPtr mag(const Node &n) {
        using std::fabs;
        switch (n.kind) {
        case Node::Literal: return scalar(fabs(n.value));
        case Node::Const: return scalar(fabs(const_value(n)));
        case Node::Tensor: return zeros_like(*eval(n));  // inputs are exact as stored
        case Node::Value: return value_mag(n.index);
        case Node::Count: return scalar(0);
        case Node::Unary: {
            FieldPtr a = eval(*n.args[0]), ma = mag(*n.args[0]), v = eval(n);
            auto out = std::make_shared<Field>(*v);
            for (size_t i = 0; i < out->data.size(); ++i) {
                const double x = a->data[i], m = ma->data[i], y = v->data[i];
                double r = 0;
                switch (n.unary) {
                case UnaryOp::Neg: case UnaryOp::Abs: case UnaryOp::Round: r = m; break;
                case UnaryOp::Step: r = 0; break;
                case UnaryOp::Sqrt: r = (m == 0 ? 0 : m / (2 * fabs(y))) + fabs(y); break;
                case UnaryOp::Rsqrt: r = 0.5 * m * fabs(y * y * y) + fabs(y); break;
                case UnaryOp::Tanh: r = m * (1 - y * y) + fabs(y); break;
                case UnaryOp::Exp: r = m * fabs(y) + fabs(y); break;
                case UnaryOp::Log: r = (m == 0 ? 0 : m / fabs(x)) + fabs(y); break;
                case UnaryOp::Sigmoid: r = m * y * (1 - y) + fabs(y); break;
                }
                out->data[i] = r;
            }
            return out;
        }
        case Node::Binary: {
            FieldPtr pa = eval(*n.args[0]), pb = eval(*n.args[1]), ma = mag(*n.args[0]), mb = mag(*n.args[1]);
            const Field &a = *pa, &b = *pb;
            return broadcast(n, a, b, [&](int64_t i, int64_t j) {
                const double x = a.data[i], y = b.data[j], mx = ma->data[i], my = mb->data[j];
                const double v = fabs(apply_binary(n.binary, x, y));
                double m = 0;
                switch (n.binary) {
                case BinaryOp::Add: case BinaryOp::Sub: m = mx + my + v; break;
                case BinaryOp::Mul: m = mx * fabs(y) + fabs(x) * my + v; break;
                case BinaryOp::Div: m = mx / fabs(y) + fabs(x) * my / (y * y) + v; break;
                case BinaryOp::Max: case BinaryOp::Min: m = std::max(mx, my); break;
                case BinaryOp::Pow: m = v * ((mx == 0 ? 0 : fabs(y) * mx / fabs(x)) + (my == 0 ? 0 : fabs(std::log(fabs(x))) * my)) + v; break;
                }
                return m;
            });
        }
        case Node::Reduce: {
            FieldPtr in = eval(*n.args[0]), min = mag(*n.args[0]), v = eval(n);
            Field r;
            r.axes = n.axes;
            r.ext = extents_of(r.axes, ext_);
            const size_t m = (size_t)product(r.ext);
            double count = 1;
            for (AxisId a : n.over) count *= (double)ext_.extent[a];
            std::array<std::vector<int64_t>, 2> st{strides_along(*in, in->axes), strides_along(r, in->axes)};
            std::vector<double> s(m, 0.0), mu(m, 0.0), mmu(m, 0.0);
            const bool sums = n.reduce == ReduceOp::Sum || n.reduce == ReduceOp::Mean || n.reduce == ReduceOp::Var;
            if (sums) {
                for_each_point<2>(in->ext, st, [&](const std::array<int64_t, 2> &o) {
                    s[o[1]] += min->data[o[0]] + fabs(in->data[o[0]]);
                    mu[o[1]] += in->data[o[0]];
                });
                for (size_t i = 0; i < m; ++i) mu[i] /= count, mmu[i] = s[i] / count;
            }
            if (n.reduce == ReduceOp::Var) {
                std::fill(s.begin(), s.end(), 0.0);
                for_each_point<2>(in->ext, st, [&](const std::array<int64_t, 2> &o) {
                    const double d = fabs(in->data[o[0]] - mu[o[1]]);
                    s[o[1]] += 2 * d * (min->data[o[0]] + mmu[o[1]]) + d * d;
                });
            }
            if (n.reduce == ReduceOp::Max || n.reduce == ReduceOp::Min)
                for_each_point<2>(in->ext, st, [&](const std::array<int64_t, 2> &o) { s[o[1]] = std::max(s[o[1]], min->data[o[0]]); });
            r.data.resize(m);
            for (size_t i = 0; i < m; ++i) {
                const double scale = n.reduce == ReduceOp::Mean || n.reduce == ReduceOp::Var ? 1 / count : 1;
                r.data[i] = s[i] * scale + (sums ? std::fabs(v->data[i]) : 0);
            }
            return std::make_shared<Field>(std::move(r));
        }
        }
        throw std::logic_error("reference: unknown node kind");
    }

    Field to_field(const TensorInfo &t, const HostTensor &h) const {
        Field f;
        f.axes = t.axes;
        f.ext = extents_of(f.axes, ext_);
        f.data.resize((size_t)product(f.ext));
        // Memory strides of h, re-expressed along the canonical axes.
        std::vector<AxisId> atoms = spec_.memory_atoms(t.dims);
        std::vector<int64_t> src(f.axes.size());
        int64_t s = 1;
        for (size_t i = atoms.size(); i-- > 0;) {
            size_t k = std::find(f.axes.begin(), f.axes.end(), atoms[i]) - f.axes.begin();
            src[k] = s;
            s *= ext_.extent[atoms[i]];
        }
        if (t.axes.empty()) {  // scalar: any one-element array
            f.data[0] = h.data.at(0);
            return f;
        }
        std::vector<int64_t> dst = strides_along(f, f.axes);
        for_each_point<2>(f.ext, {dst, src}, [&](const std::array<int64_t, 2> &o) { f.data[o[0]] = h.data[o[1]]; });
        return f;
    }

    HostTensor from_field(const Field &f, const std::vector<AxisId> &dims) const {
        HostTensor h;
        h.shape = physical_shape(spec_, dims, ext_);
        h.data.resize((size_t)product(f.ext));
        std::vector<AxisId> atoms = spec_.memory_atoms(dims);
        std::vector<int64_t> dst(f.axes.size());
        int64_t s = 1;
        for (size_t i = atoms.size(); i-- > 0;) {
            size_t k = std::find(f.axes.begin(), f.axes.end(), atoms[i]) - f.axes.begin();
            dst[k] = s;
            s *= ext_.extent[atoms[i]];
        }
        std::vector<int64_t> src = strides_along(f, f.axes);
        for_each_point<2>(f.ext, {dst, src}, [&](const std::array<int64_t, 2> &o) { h.data[o[0]] = f.data[o[1]]; });
        return h;
    }

    FieldPtr value(int index) {
        if (!values_[index]) values_[index] = eval(*spec_.values[index].expr);
        return values_[index];
    }

    FieldPtr scalar(double v) const { return std::make_shared<Field>(Field{{}, {}, {v}}); }

    // A binary node's field: f(offset in a, offset in b) at every point of its axes (broadcasting).
    template <typename F>
    FieldPtr broadcast(const Node &n, const Field &a, const Field &b, F &&f) const {
        auto out = std::make_shared<Field>();
        Field &r = *out;
        r.axes = n.axes;
        r.ext = extents_of(r.axes, ext_);
        r.data.resize((size_t)product(r.ext));
        std::array<std::vector<int64_t>, 3> st{strides_along(r, r.axes), strides_along(a, r.axes), strides_along(b, r.axes)};
        for_each_point<3>(r.ext, st, [&](const std::array<int64_t, 3> &o) { r.data[o[0]] = f(o[1], o[2]); });
        return out;
    }

    double const_value(const Node &n) const {
        auto it = ov_.find(n.name);
        if (it != ov_.end()) return it->second;
        const ConstInfo *c = spec_.find_const(n.name);
        return c ? c->value : n.value;
    }

    FieldPtr eval(const Node &n) {
        switch (n.kind) {
        case Node::Literal: return scalar(n.value);
        case Node::Const: return scalar(const_value(n));
        case Node::Tensor: return n.at.empty() ? tensors_[n.index] : element(n, *tensors_[n.index]);
        case Node::Value: return value(n.index);
        case Node::Count: {
            double c = 1;
            for (AxisId a : n.over) c *= (double)ext_.extent[a];
            return scalar(c);
        }
        case Node::Unary: {
            if (n.unary == UnaryOp::Round) return round_point(n, eval(*n.args[0]));
            auto f = std::make_shared<Field>(*eval(*n.args[0]));
            for (double &v : f->data) v = apply_unary(n.unary, v);
            return f;
        }
        case Node::Binary: {
            FieldPtr pa = eval(*n.args[0]), pb = eval(*n.args[1]);
            const Field &a = *pa, &b = *pb;
            return broadcast(n, a, b, [&](int64_t i, int64_t j) { return apply_binary(n.binary, a.data[i], b.data[j]); });
        }
        case Node::Reduce: return std::make_shared<Field>(reduce(n, *eval(*n.args[0])));
        }
        throw std::logic_error("reference: unknown node kind");
    }

    // A rounding point: the value rounded to nearest even in its storage type (or as the options say).
    FieldPtr round_point(const Node &n, FieldPtr in) const {
        if (opt_.rounding == Rounding::Ignored) return in;
        const DType t = rounding_type(spec_, n, opt_.storage);
        auto f = std::make_shared<Field>(*in);
        for (double &v : f->data) {
            if (!std::isfinite(v)) continue;
            double r = round_to(v, t);
            if (opt_.rounding == Rounding::UlpUp) r += ulp_of(r, t);
            if (opt_.rounding == Rounding::UlpDown) r -= ulp_of(r, t);
            v = r;
        }
        return f;
    }

    // An indexed tensor, `weight[0]`: the slice at the fixed indices (the node's axes remain).
    FieldPtr element(const Node &n, const Field &t) const {
        auto out = std::make_shared<Field>();
        Field &r = *out;
        r.axes = n.axes;
        r.ext = extents_of(r.axes, ext_);
        r.data.resize((size_t)product(r.ext));
        std::vector<int64_t> own(t.axes.size());
        int64_t s = 1;
        for (size_t i = t.axes.size(); i-- > 0;) { own[i] = s; s *= t.ext[i]; }
        int64_t base = 0;
        for (const auto &[axis, index] : n.at) {
            size_t k = std::find(t.axes.begin(), t.axes.end(), axis) - t.axes.begin();
            if (index >= t.ext[k]) throw std::logic_error("reference: index out of the bound extent");
            base += own[k] * index;
        }
        std::array<std::vector<int64_t>, 2> st{strides_along(r, r.axes), strides_along(t, r.axes)};
        if (r.axes.empty()) {
            r.data[0] = t.data[(size_t)base];
            return out;
        }
        for_each_point<2>(r.ext, st, [&](const std::array<int64_t, 2> &o) { r.data[o[0]] = t.data[(size_t)(base + o[1])]; });
        return out;
    }

    Field reduce(const Node &n, const Field &in) {
        Field r;
        r.axes = n.axes;
        r.ext = extents_of(r.axes, ext_);
        size_t m = (size_t)product(r.ext);
        double count = 1;
        for (AxisId a : n.over) count *= (double)ext_.extent[a];
        std::array<std::vector<int64_t>, 2> st{strides_along(in, in.axes), strides_along(r, in.axes)};
        auto sum_of = [&](auto &&term) {
            std::vector<CompensatedSum> acc(m);
            for_each_point<2>(in.ext, st, [&](const std::array<int64_t, 2> &o) { acc[o[1]].add(term(in.data[o[0]], o[1])); });
            std::vector<double> s(m);
            for (size_t i = 0; i < m; ++i) s[i] = acc[i].value();
            return s;
        };
        switch (n.reduce) {
        case ReduceOp::Sum:
            r.data = sum_of([](double x, int64_t) { return x; });
            break;
        case ReduceOp::Mean:
            r.data = sum_of([](double x, int64_t) { return x; });
            for (double &v : r.data) v /= count;
            break;
        case ReduceOp::Var: {
            // Two-pass population variance: mean first, then the mean squared deviation.
            std::vector<double> mu = sum_of([](double x, int64_t) { return x; });
            for (double &v : mu) v /= count;
            r.data = sum_of([&](double x, int64_t i) { double d = x - mu[i]; return d * d; });
            for (double &v : r.data) v /= count;
            break;
        }
        case ReduceOp::Max:
        case ReduceOp::Min: {
            bool is_max = n.reduce == ReduceOp::Max;
            r.data.assign(m, is_max ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity());
            for_each_point<2>(in.ext, st, [&](const std::array<int64_t, 2> &o) {
                r.data[o[1]] = apply_binary(is_max ? BinaryOp::Max : BinaryOp::Min, r.data[o[1]], in.data[o[0]]);
            });
            break;
        }
        }
        return r;
    }
};

}  // namespace

TensorMap evaluate_reference(const NormSpec &spec, const TensorMap &inputs, const Overrides &overrides, const ReferenceOptions &options) {
    // The interpreter allocates and frees many large temporaries; keep them on the heap instead of
    // fresh mmap'ed pages each time (page faults were half of its run time on the verifier sweep).
    static const bool heap_tuned = [] {
        mallopt(M_MMAP_THRESHOLD, 32 << 20);  // the largest glibc accepts
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
        return true;
    }();
    (void)heap_tuned;
    return Interpreter(spec, inputs, overrides, options).run();
}

TensorMap evaluate_magnitudes(const NormSpec &spec, const TensorMap &inputs, const Overrides &overrides, const ReferenceOptions &options) {
    return Interpreter(spec, inputs, overrides, options).run_magnitudes();
}

bool slices_add_up(const NormSpec &spec, AxisId axis) {
    auto has = [axis](const AxisSet &s) { return std::find(s.begin(), s.end(), axis) != s.end(); };
    // The values an output lacking the axis is: each must be a sum over the axis.
    std::vector<bool> final_sum(spec.values.size(), false);
    for (const OutputInfo &o : spec.outputs) {
        if (has(o.axes)) continue;
        const Node &e = *spec.values.at((size_t)o.value).expr;
        if (e.kind != Node::Reduce || e.reduce != ReduceOp::Sum || !has(e.over)) return false;
        final_sum[(size_t)o.value] = true;
    }
    // No other node reads across the axis, and nothing reads a final sum.
    bool ok = true;
    std::function<void(const Node &, bool)> visit = [&](const Node &n, bool top_of_final) {
        if ((n.kind == Node::Reduce || n.kind == Node::Count) && has(n.over) && !top_of_final) ok = false;
        if (n.kind == Node::Value && final_sum.at((size_t)n.index)) ok = false;
        for (const auto &[a, i] : n.at) ok = ok && a != axis;
        for (const NodePtr &a : n.args) visit(*a, false);
    };
    for (size_t v = 0; v < spec.values.size(); ++v) visit(*spec.values[v].expr, final_sum[v]);
    return ok;
}

}  // namespace normgen
