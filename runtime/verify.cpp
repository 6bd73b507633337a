#include "runtime/verify.h"

#include "dsl/printer.h"
#include "runtime/random_inputs.h"
#include "runtime/storage.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <sstream>
#include <functional>
#include <random>

namespace normgen {
namespace {

constexpr double kK = 64;
const double kPerturb = std::ldexp(1.0, -24);

// "1e4" for a power of ten, else the shortest exact text.
std::string offset_text(double v) {
    double e = std::log10(v);
    if (v > 0 && e == std::floor(e)) return "1e" + std::to_string((int)e);
    return format_number(v);
}

AxisSet reduced_axes(const NormSpec &spec) {
    AxisSet r;
    for (const AxisSet &s : spec.reduction_axes_per_stage()) r.insert(r.end(), s.begin(), s.end());
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
    return r;
}

}  // namespace

int ulp_allowance(const NormSpec &spec) {
    bool transcendental = false;
    std::function<void(const Node &)> walk = [&](const Node &n) {
        if (is_transcendental(n)) transcendental = true;
        for (const auto &a : n.args) walk(*a);
    };
    for (const ValueDef &v : spec.values) walk(*v.expr);
    return transcendental ? 2 : 1;
}

std::vector<VerifyShape> verify_shapes(const NormSpec &spec) {
    const TensorInfo &x = spec.tensors.front();
    std::vector<AxisId> order = spec.memory_atoms(x.dims);
    AxisSet red = reduced_axes(spec);
    auto is_red = [&](AxisId a) { return std::binary_search(red.begin(), red.end(), a); };
    auto fixed = [&](AxisId a) { return spec.axes[a].fixed_extent.has_value(); };
    // The axis whose width sweeps: the innermost reduced axis, else the innermost axis.
    AxisId inner = order.back();
    for (auto it = order.rbegin(); it != order.rend(); ++it)
        if (is_red(*it) && !fixed(*it)) { inner = *it; break; }
    std::vector<AxisId> other_red, indep;
    for (AxisId a : order) {
        if (a == inner || fixed(a)) continue;
        (is_red(a) ? other_red : indep).push_back(a);
    }
    int64_t fixed_product = 1;
    for (AxisId a : order) if (fixed(a)) fixed_product *= *spec.axes[a].fixed_extent;

    std::vector<VerifyShape> shapes;
    auto add = [&](int64_t w, int64_t other, int64_t rows, double offset, bool quick = false) {
        VerifyShape s;
        s.offset = offset;
        s.quick = quick;
        s.sizes[spec.axes[inner].name] = w;
        for (AxisId a : other_red) s.sizes[spec.axes[a].name] = other;
        for (size_t i = 0; i < indep.size(); ++i) s.sizes[spec.axes[indep[i]].name] = i == 0 ? rows : (i == 1 ? 2 : 1);
        for (AxisId a : order) {
            s.label += (s.label.empty() ? "" : " ") + spec.axes[a].name + "=" +
                       std::to_string(fixed(a) ? *spec.axes[a].fixed_extent : s.sizes[spec.axes[a].name]);
        }
        if (offset != 0) s.label += " (x+" + offset_text(offset) + ")";
        shapes.push_back(s);
    };
    const int64_t budget = 1 << 18;  // elements per case: keeps the float64 reference quick
    const int64_t other = other_red.empty() ? 1 : 3;
    int k = 0;
    for (int64_t w : {1, 3, 17, 100, 1000, 4096, 4097, 65536, 262144}) {
        // The other reduced axes at 3, unless a row would pass 2^23 elements (GroupNorm's 32 fixed
        // groups x 3 x 3 at w = 262144 is 75 million: minutes of float64 reference a case); then
        // at 1, the width itself still far past the caches.
        int64_t o = other;
        auto per_row_at = [&](int64_t ov) { return w * (other_red.empty() ? 1 : (int64_t)std::pow(ov, other_red.size())) * fixed_product; };
        if (per_row_at(o) > (int64_t(1) << 23)) o = 1;
        int64_t per_row = per_row_at(o);
        int64_t rows = std::clamp<int64_t>(budget / std::max<int64_t>(per_row, 1) / 2, 1, 37);
        add(w, o, rows, (k++ % 2) ? 1e4 : 0, w == 1 || w == 262144);
        if (w == 17 || w == 4097) add(w, o, rows, 1e4, true);  // odd widths with a large mean as well
    }
    add(1000, other, 1, 0);                                    // one row
    add(1000, other, 1, 1e4, true);
    add(3, other, std::max<int64_t>(1, 20000 / fixed_product), 0, true);  // many short rows
    add(7, 1, 5, 0);                                           // small reduced extents (1x7 spatial)
    add(64, other_red.empty() ? 1 : 64, 2, 1e4);               // large spatial extents (64x64)
    add(130, 2, 9, 0, true);                                   // widths past a vector multiple
    add(33, 5, 3, 1e4);
    add(2, 1, 3, 0);                                           // the smallest real reduction
    add(16, other, 37, 1e4);                                   // exactly one AVX-512 vector
    add(8193, 1, 2, 0, true);                                  // a block boundary plus one
    // A split axis whose part is fixed (GroupNorm's g = 32) with other parts: 49 channels in 7
    // groups of 7 (neither a power of two nor the declared count), a large mean.
    for (const Axis &ax : spec.axes) {
        if (!ax.is_split()) continue;
        bool has_fixed = false;
        for (AxisId part : ax.parts) has_fixed = has_fixed || fixed(part);
        if (!has_fixed) continue;
        add(5, other, 3, 1e4, true);
        VerifyShape &s = shapes.back();
        s.label.clear();
        for (AxisId part : ax.parts) s.sizes[spec.axes[part].name] = 7;
        for (AxisId a : order)
            s.label += (s.label.empty() ? "" : " ") + spec.axes[a].name + "=" + std::to_string(s.sizes.count(spec.axes[a].name) ? s.sizes[spec.axes[a].name] : *spec.axes[a].fixed_extent);
        s.label += " (x+1e4)";
    }
    return shapes;
}

std::vector<VerifyShape> quick_shapes(const std::vector<VerifyShape> &all) {
    std::vector<VerifyShape> some;
    for (const VerifyShape &s : all)
        if (s.quick) some.push_back(s);
    return some;
}

OutputCheck compare_output(const std::string &name, const HostTensor &got, const HostTensor &ref, DType storage, const OutputBound &ob) {
    constexpr size_t kShown = 5;
    OutputCheck c;
    c.name = name;
    if (got.shape != ref.shape || got.data.size() != ref.data.size()) {
        c.problem = "shape " + shape_text(got.shape) + ", expected " + shape_text(ref.shape);
        c.max_err = INFINITY;
        return c;
    }
    auto fail = [&](size_t i, double k, double want, double bound) {
        ++c.failed;
        if (c.mismatches.size() < kShown) c.mismatches.push_back({(int64_t)i, k, want, bound});
    };
    for (size_t i = 0; i < ref.data.size(); ++i) {
        double r = ref.data[i], k = got.data[i];
        double ratio, err, bound;
        if (std::isnan(k) || std::isnan(r)) {
            if (std::isnan(k) && std::isnan(r)) continue;
            if (c.problem.empty()) {
                c.problem = std::isnan(k) ? "NaN (computed, or never written: outputs are poisoned with NaN)" : "reference is NaN, kernel is not";
                c.worst_index = (int64_t)i;
            }
            c.max_err = INFINITY;
            fail(i, k, r, 0);
            continue;
        }
        // A reduced-precision output is compared with the reference rounded to its type, overflow
        // included: a float64 70000 stored as f16 is the correctly rounded +inf.
        const bool narrow = storage != DType::F32 && storage != DType::F64;
        if (narrow || (storage == DType::F32 && std::fabs(r) > FLT_MAX)) r = round_to(r, storage);
        if (std::isinf(r) || std::isinf(k)) {
            if (r == k) continue;
            if (c.problem.empty()) {
                c.problem = "infinity mismatch";
                c.worst_index = (int64_t)i;
            }
            c.max_err = INFINITY;
            fail(i, k, r, 0);
            continue;
        }
        err = std::fabs(k - r);  // r: for bf16/f16 the reference as rounded above
        bound = narrow ? ob.ulps * ulp_of(r, storage) + ob.abs : ob.rel * std::fabs(r) + ob.abs;
        ratio = bound > 0 ? err / bound : (err > 0 ? INFINITY : 0);
        if (ratio > 1.0) fail(i, k, r, bound);
        if (c.problem.empty() && (ratio > c.max_err || c.worst_index < 0)) {
            c.max_err = ratio;
            c.worst_abs = err;
            c.bound_abs = bound;
            c.worst_index = (int64_t)i;
        }
    }
    c.pass = c.failed == 0 && c.max_err <= 1.0;
    return c;
}

OutputCheck compare_output(const std::string &name, const HostTensor &got, const HostTensor &ref, double sensitivity,
                           DType storage, DType accumulate, int ulps, double rounding_flip) {
    const double eps_acc = accumulate == DType::F64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
    return compare_output(name, got, ref, storage, OutputBound{1e-5, kK * eps_acc * sensitivity + rounding_flip, ulps});
}

OutputBound spot_check_bound(const NormSpec &spec) { return OutputBound{1e-5, 1e-5, 2 * ulp_allowance(spec)}; }

OutputBound spot_check_bound(const NormSpec &spec, const HostTensor &magnitude) {
    OutputBound b = spot_check_bound(spec);
    double m = 0;
    for (double v : magnitude.data)
        if (std::isfinite(v)) m = std::max(m, v);
    const double eps_acc = spec.accumulate == DType::F64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
    b.abs += kK * eps_acc * m;
    return b;
}

OutputBound spot_check_bound(const NormSpec &spec, const TensorMap &magnitudes, const std::string &name) {
    auto it = magnitudes.find(name);
    return it == magnitudes.end() ? spot_check_bound(spec) : spot_check_bound(spec, it->second);
}

std::string mismatch_text(const OutputCheck &c) {
    if (c.pass) return "";
    std::ostringstream os;
    os.precision(9);
    os << c.name << ": ";
    if (c.failed == 0) return os.str() + c.problem;
    os << c.failed << " element" << (c.failed == 1 ? "" : "s") << " fail";
    if (!c.problem.empty()) os << " (" << c.problem << ")";
    for (size_t i = 0; i < c.mismatches.size(); ++i) {
        const Mismatch &m = c.mismatches[i];
        os << (i ? ", " : "; ") << "[" << m.index << "] got " << m.got << " want " << m.want;
        if (m.bound > 0) os << " (bound " << m.bound << ")";
    }
    if ((int64_t)c.mismatches.size() < c.failed) os << ", ...";
    return os.str();
}

namespace {

// Whether some output the reference computes finite overflows its storage type.
bool overflows(const NormSpec &spec, const TensorMap &ref, const StorageMap &storage) {
    for (const OutputInfo &o : spec.outputs) {
        auto st = storage.find(o.name);
        if (st == storage.end()) continue;  // an optional output the kernel does not compute
        const DType t = st->second;
        for (double v : ref.at(o.name).data)
            if (std::isfinite(v) && std::isinf(round_to(v, t))) return true;
    }
    return false;
}

}  // namespace

InputMaker backward_input_maker(const NormSpec &forward, const NormSpec &backward, const StorageMap &storage) {
    return [&forward, &backward, storage](const AxisExtents &ext, double offset, uint64_t seed) {
        // The forward's extents, by axis name.
        std::map<std::string, int64_t> sizes;
        for (size_t a = 0; a < backward.axes.size(); ++a)
            if (!backward.axes[a].is_split() && ext.extent[a] > 0) sizes[backward.axes[a].name] = ext.extent[a];
        AxisExtents fext = choose_extents(forward, sizes, 1);
        TensorMap fin = random_inputs(forward, fext, {offset, seed});
        StorageMap fstorage;
        for (auto &[name, t] : fin) {
            auto st = storage.find(name);
            const DType d = st != storage.end() ? st->second : DType::F32;
            fstorage[name] = d;
            for (double &v : t.data) v = round_to(v, d);
        }
        Overrides fov;  // a fixed extent the case overrides (49 channels in 7 groups)
        for (size_t a = 0; a < forward.axes.size(); ++a)
            if (forward.axes[a].fixed_extent && fext.extent[a] != *forward.axes[a].fixed_extent) fov[forward.axes[a].name] = (double)fext.extent[a];
        TensorMap fout = evaluate_reference(forward, fin, fov, {fstorage, Rounding::AsDeclared});
        std::mt19937_64 rng(seed ^ 0x5851f42d4c957f2dull);
        std::normal_distribution<double> normal(0, 1);
        TensorMap in;
        for (const TensorInfo &t : backward.tensors) {
            if (fin.count(t.name)) {
                in[t.name] = fin.at(t.name);
            } else if (t.name.rfind("d_", 0) == 0 && forward.find_output(t.name.substr(2))) {
                HostTensor u = fout.at(t.name.substr(2));
                for (double &v : u.data) v = normal(rng);
                in[t.name] = u;
            } else if (fout.count(t.name)) {
                in[t.name] = fout.at(t.name);
            } else {
                throw std::logic_error("backward_input_maker: '" + t.name + "' is neither a forward tensor, an output nor an upstream gradient");
            }
        }
        return in;
    };
}

std::vector<CaseResult> verify_case(const NormSpec &spec, const StorageMap &storage, const std::vector<KernelFn> &kernels,
                                    const VerifyShape &requested, uint64_t seed, const InputMaker &make_inputs,
                                    bool running_error) {
    AxisExtents ext = choose_extents(spec, requested.sizes, 1);
    // A size given for an axis with a fixed extent (49 channels in 7 groups where g = 32 is
    // declared) overrides it, for the reference and the kernels alike.
    Overrides ov;
    for (const Axis &a : spec.axes)
        if (a.fixed_extent && requested.sizes.count(a.name) && requested.sizes.at(a.name) != *a.fixed_extent)
            ov[a.name] = (double)requested.sizes.at(a.name);
    VerifyShape shape = requested;
    TensorMap in, ref;
    const bool rounds = !rounding_points(spec).empty();
    // The large mean stresses cancellation; where it would push a declared output past its storage
    // type's range (y = x * x in f16), it is cut by tens until the outputs fit, and the row says so.
    for (;;) {
        in = make_inputs ? make_inputs(ext, shape.offset, seed) : random_inputs(spec, ext, {shape.offset, seed});
        for (auto &[name, t] : in) {
            DType d = storage.at(name);
            for (double &v : t.data) v = round_to(v, d);
        }
        ref = evaluate_reference(spec, in, ov, {storage, Rounding::AsDeclared});
        if (shape.offset == 0 || !overflows(spec, ref, storage)) break;
        shape.offset = shape.offset >= 100 ? shape.offset / 10 : 0;
        const std::string was = " (x+" + offset_text(requested.offset) + ")";
        auto at = requested.label.find(was);
        shape.label = (at == std::string::npos ? requested.label : requested.label.substr(0, at)) + " (" +
                      (shape.offset > 0 ? "x+" + offset_text(shape.offset) : std::string("no offset")) + ": outputs overflow at x+" +
                      offset_text(requested.offset) + ")";
    }
    // The sensitivity is that of the smooth function: a rounding point would turn a 2^-24 nudge into
    // a whole unit of its type where it crosses a boundary. The units themselves are added apart.
    const TensorMap smooth = rounds ? evaluate_reference(spec, in, ov, {storage, Rounding::Ignored}) : TensorMap{};
    const TensorMap &base = rounds ? smooth : ref;

    // Sensitivity of each output to a relative perturbation of every input by 2^-24.
    std::map<std::string, double> sens;
    std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
    // Directions: random signs (what rounding in the middle of a computation looks like: it
    // exposes cancellation, e.g. x - mean for x = 1e4 + N(0,1)); every element moved up by
    // 2^-24 |x| (the worst case of a sum, whose condition number is sum |x_i| / |sum x_i|: it shows
    // in a saved mean of zero-mean data); signs alternating along memory; and a second random draw.
    // S is the worst over the tensor, so it must see the most sensitive group: a 2-element group
    // whose elements nearly cancel (y = d / sqrt(d^2 + eps)) is only seen when its two elements
    // move apart, which one random draw misses half the time (seeds 14729043582683104526 and
    // 20251129 failed on such rows); alternating signs always separate neighbours.
    for (int trial = 0; trial < 4; ++trial) {
        TensorMap p = in;
        for (auto &[name, t] : p)
            for (size_t i = 0; i < t.data.size(); ++i) {
                double &v = t.data[i];
                double sign = trial == 1 ? (v < 0 ? -1.0 : 1.0) : trial == 2 ? (i % 2 ? -1.0 : 1.0) : ((rng() & 1) ? 1.0 : -1.0);
                v += kPerturb * sign * v;
            }
        TensorMap rp = evaluate_reference(spec, p, ov, {storage, rounds ? Rounding::Ignored : Rounding::AsDeclared});
        for (const auto &[name, t] : base) {
            double m = 0;
            for (size_t i = 0; i < t.data.size(); ++i) {
                double d = std::fabs(rp[name].data[i] - t.data[i]);
                if (std::isfinite(d)) m = std::max(m, d);
            }
            sens[name] = std::max(sens[name], m / kPerturb);
        }
    }

    if (running_error) {
        TensorMap mags = evaluate_magnitudes(spec, in, ov, {storage, rounds ? Rounding::Ignored : Rounding::AsDeclared});
        for (const auto &[name, t] : mags) {
            double m = 0;
            for (double v : t.data)
                if (std::isfinite(v)) m = std::max(m, v);
            sens[name] = std::max(sens[name], m);
        }
    }

    // Rounding points: a kernel's value just before one differs from the float64 value by its own
    // rounding error, so where that value sits near a boundary of the point's type it rounds to the
    // neighbour. The output may move by what one unit there moves it (every point one unit up, then
    // down): added to the bound as an absolute term.
    std::map<std::string, double> flip;
    if (rounds)
        for (Rounding r : {Rounding::UlpUp, Rounding::UlpDown}) {
            TensorMap moved = evaluate_reference(spec, in, ov, {storage, r});
            for (const auto &[name, t] : ref) {
                double m = 0;
                for (size_t i = 0; i < t.data.size(); ++i) {
                    double d = std::fabs(moved[name].data[i] - t.data[i]);
                    if (std::isfinite(d)) m = std::max(m, d);
                }
                flip[name] = std::max(flip[name], m);
            }
        }

    const int ulps = ulp_allowance(spec);
    std::vector<CaseResult> results;
    for (const KernelFn &kernel : kernels) {
        CaseResult res;
        res.shape = shape.label;
        res.seed = seed;
        TensorMap got;
        try {
            got = kernel(in, ov);
        } catch (const std::exception &e) {
            OutputCheck c;
            c.name = "(kernel)";
            c.problem = std::string("kernel failed: ") + e.what();
            c.max_err = INFINITY;
            res.outputs.push_back(c);
            results.push_back(res);
            continue;
        }
        res.pass = true;
        for (const OutputInfo &o : spec.outputs) {
            auto it = got.find(o.name);
            if (it == got.end()) {
                if (o.optional) continue;  // a core kernel computes only the required outputs
                OutputCheck c;
                c.name = o.name;
                c.problem = "missing";
                c.max_err = INFINITY;
                res.outputs.push_back(c);
                res.pass = false;
                continue;
            }
            OutputCheck c = compare_output(o.name, it->second, ref.at(o.name), sens[o.name], storage.at(o.name), spec.accumulate, ulps,
                                           flip[o.name]);
            res.pass = res.pass && c.pass;
            res.outputs.push_back(c);
        }
        results.push_back(res);
    }
    return results;
}

}  // namespace normgen
