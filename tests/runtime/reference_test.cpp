// The two float64 references must agree before either is trusted (DESIGN.md, "Verification"):
// the interpreter, run on the catalog's declarations, against the hand-written layers of
// runtime/reference/layers.h, on fresh random inputs (never zeros; a large mean that stresses
// cancellation; mixed signs and a wide dynamic range) over awkward shapes (d = 1, odd widths, one row).
// Then the sanity checks of the source document (§A [a]–[c], GroupNorm's G = 1 and G = C limits),
// and proof that the comparison can fail: a perturbed eps is caught and NaN never passes.
//
// The inputs are drawn from a seed printed with every failure; set NORMGEN_TEST_SEED to replay one.
#include "dsl/checker.h"
#include "golden_cases.h"
#include "runtime/errors.h"
#include "runtime/reference/interpreter.h"
#include "runtime/reference/layers.h"

#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace normgen;
using Vec = std::vector<double>;
using Shape = std::vector<int64_t>;

namespace {

NormSpec catalog(const std::string &name) {
    return load_norm_file(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/" + name + ".norm");
}

uint64_t test_seed() {
    static const uint64_t seed = [] {
        if (const char *s = std::getenv("NORMGEN_TEST_SEED")) return (uint64_t)std::strtoull(s, nullptr, 10);
        return ((uint64_t)std::random_device{}() << 32) ^ std::random_device{}();
    }();
    return seed;
}

// Distributions of the input x. None produces exact zeros.
enum class Dist { Normal, LargeMean, WideRange };
const char *dist_name(Dist d) {
    switch (d) {
    case Dist::Normal: return "N(0,1)";
    case Dist::LargeMean: return "1e4 + N(0,1)";
    case Dist::WideRange: return "+-N(0,1) * 10^U(-2,2)";
    }
    return "?";
}
const Dist kDists[] = {Dist::Normal, Dist::LargeMean, Dist::WideRange};

struct Rng {
    std::mt19937_64 gen;
    explicit Rng(uint64_t salt) : gen(test_seed() ^ (salt * 0x9e3779b97f4a7c15ull)) {}
    double normal() {
        for (;;) {
            double v = std::normal_distribution<double>(0.0, 1.0)(gen);
            if (v != 0) return v;
        }
    }
    double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen); }
    Vec x(int64_t n, Dist d) {
        Vec v((size_t)n);
        for (double &e : v) {
            switch (d) {
            case Dist::Normal: e = normal(); break;
            case Dist::LargeMean: e = 1e4 + normal(); break;
            case Dist::WideRange: e = normal() * std::pow(10.0, uniform(-2, 2)); break;
            }
        }
        return v;
    }
    Vec weight(int64_t n) {  // mixed signs, magnitude around 1
        Vec v((size_t)n);
        for (double &e : v) e = (uniform(0, 1) < 0.2 ? -1.0 : 1.0) * uniform(0.25, 2.0);
        return v;
    }
    Vec bias(int64_t n) {
        Vec v((size_t)n);
        for (double &e : v) e = normal();
        return v;
    }
    Vec positive(int64_t n, double lo, double hi) {
        Vec v((size_t)n);
        for (double &e : v) e = uniform(lo, hi);
        return v;
    }
};

// Absolute tolerance from the conditioning of the normalization: x - mean loses what the mean's
// rounding (a few ulps of max|x|) is worth, and 1 / std amplifies it. Two correct float64 references
// may round the mean of 1e4 + N(0,1) to neighbouring doubles (ulp(1e4) = 1.8e-12); that, times
// rstd and |w|, is the honest bound. A one-pass (sum / sum-of-squares) variance is ~1e4 times worse
// and is still caught. Never below 1e-12.
double max_abs(const Vec &v) {
    double m = 0;
    for (double e : v) m = std::max(m, std::fabs(e));
    return m;
}
// The largest 1 / sqrt(var + eps) over `rows` contiguous runs of `len` values (LayerNorm rows,
// NCHW GroupNorm groups, InstanceNorm planes), or over the channels of x[n, c, hw] (BatchNorm).
double max_rstd_rows(const Vec &x, int64_t rows, int64_t len, double eps) {
    double r = 0;
    for (int64_t i = 0; i < rows; ++i) {
        long double m = 0, v = 0;
        for (int64_t k = 0; k < len; ++k) m += x[i * len + k];
        m /= len;
        for (int64_t k = 0; k < len; ++k) v += (x[i * len + k] - m) * (x[i * len + k] - m);
        r = std::max(r, 1.0 / std::sqrt((double)(v / len) + eps));
    }
    return r;
}
double max_rstd_channels(const Vec &x, int64_t n, int64_t c, int64_t hw, double eps) {
    double r = 0;
    for (int64_t ch = 0; ch < c; ++ch) {
        long double m = 0, v = 0;
        for (int64_t a = 0; a < n; ++a)
            for (int64_t k = 0; k < hw; ++k) m += x[(a * c + ch) * hw + k];
        m /= n * hw;
        for (int64_t a = 0; a < n; ++a)
            for (int64_t k = 0; k < hw; ++k) v += (x[(a * c + ch) * hw + k] - m) * (x[(a * c + ch) * hw + k] - m);
        r = std::max(r, 1.0 / std::sqrt((double)(v / (n * hw)) + eps));
    }
    return r;
}
double cond_atol(const Vec &x, double rstd_max, const Vec &weight) {
    double wmax = weight.empty() ? 1.0 : max_abs(weight);
    return std::max(1e-12, 8 * DBL_EPSILON * max_abs(x) * rstd_max * wmax);
}
constexpr double kRtol = 1e-12;

// The comparator of the golden cases (golden_cases.h): relative and absolute tolerance, NaN and a
// size mismatch fail.
using golden::compare;
using golden::Diff;

bool within(const Diff &d) { return d.size_ok && d.worst <= 1; }

std::string describe(const Diff &d) {
    std::ostringstream os;
    os.precision(17);
    if (!d.size_ok) {
        os << "size mismatch: got " << d.got_size << " values, want " << d.want_size;
        return os.str();
    }
    os << d.failures << " of " << d.got_size << " out of tolerance; worst at [" << d.at << "]: got " << d.got
       << ", want " << d.want << " (error / tolerance = " << d.worst << ")";
    return os.str();
}

#define CHECK_CLOSE_TOL(got, want, rtol, atol)                                                                         \
    do {                                                                                                               \
        Diff diff_ = compare((got), (want), (rtol), (atol));                                                           \
        INFO(#got " vs " #want ": " << describe(diff_));                                                               \
        CHECK(within(diff_));                                                                                          \
    } while (0)

HostTensor tensor(Shape shape, Vec data) { return HostTensor{std::move(shape), std::move(data)}; }

// An output of the interpreter, with its shape checked.
Vec output(const TensorMap &outs, const std::string &name, const Shape &shape) {
    auto it = outs.find(name);
    INFO("output '" << name << "'");
    REQUIRE(it != outs.end());
    CHECK(it->second.shape == shape);
    REQUIRE(it->second.data.size() == (size_t)it->second.numel());
    return it->second.data;
}

std::string shape_str(const Shape &s) { return shape_text(s); }

// Independent statistics (long double, two passes) for the saved-statistics outputs.
struct RowStats {
    Vec mean, var;
};
RowStats row_stats(const Vec &x, int64_t rows, int64_t d) {
    RowStats s{Vec((size_t)rows), Vec((size_t)rows)};
    for (int64_t r = 0; r < rows; ++r) {
        long double m = 0, v = 0;
        for (int64_t i = 0; i < d; ++i) m += x[r * d + i];
        m /= d;
        for (int64_t i = 0; i < d; ++i) v += (x[r * d + i] - m) * (x[r * d + i] - m);
        s.mean[r] = (double)m;
        s.var[r] = (double)(v / d);
    }
    return s;
}

Vec nchw_to_nhwc(const Vec &x, int64_t n, int64_t c, int64_t h, int64_t w) {
    Vec y(x.size());
    for (int64_t a = 0; a < n; ++a)
        for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t i = 0; i < h; ++i)
                for (int64_t j = 0; j < w; ++j) y[((a * h + i) * w + j) * c + ch] = x[((a * c + ch) * h + i) * w + j];
    return y;
}

Vec nhwc_to_nchw(const Vec &x, int64_t n, int64_t c, int64_t h, int64_t w) {
    Vec y(x.size());
    for (int64_t a = 0; a < n; ++a)
        for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t i = 0; i < h; ++i)
                for (int64_t j = 0; j < w; ++j) y[((a * c + ch) * h + i) * w + j] = x[((a * h + i) * w + j) * c + ch];
    return y;
}

double max_abs_diff(const Vec &a, const Vec &b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

struct RowsD {
    int64_t rows, d;
};
// d = 1, odd widths (17, 129), one row, many rows, a width past the vector width and the L1 cache.
const RowsD kRowShapes[] = {{1, 1}, {4, 1}, {1, 17}, {3, 17}, {5, 129}, {7, 64}, {64, 3}, {2, 1000}, {1, 8193}};

struct NCHW {
    int64_t n, c, h, w;
};

}  // namespace

TEST_CASE("LayerNorm: interpreter == hand-written (affine, weight only, none)", "[runtime][reference]") {
    INFO("seed " << test_seed());
    Rng rng(1);
    const NormSpec ln = catalog("layer_norm"), lnw = catalog("layer_norm_weight_only"), ln0 = catalog("layer_norm_no_affine");
    const double eps = 1e-5;
    for (Dist dist : kDists)
        for (RowsD s : kRowShapes) {
            INFO(dist_name(dist) << ", rows " << s.rows << ", d " << s.d);
            Vec x = rng.x(s.rows * s.d, dist), w = rng.weight(s.d), b = rng.bias(s.d);
            double atol = cond_atol(x, max_rstd_rows(x, s.rows, s.d, eps), w);
            Shape xs{s.rows, s.d};

            TensorMap out = evaluate_reference(ln, {{"x", tensor(xs, x)}, {"weight", tensor({s.d}, w)}, {"bias", tensor({s.d}, b)}});
            CHECK_CLOSE_TOL(output(out, "y", xs), ref::layer_norm(x, s.rows, s.d, w, b, eps), kRtol, atol);
            // The optional saved statistics: per-row mean and 1 / sqrt(var + eps).
            RowStats st = row_stats(x, s.rows, s.d);
            Vec rstd(st.var.size());
            for (size_t r = 0; r < rstd.size(); ++r) rstd[r] = 1.0 / std::sqrt(st.var[r] + eps);
            CHECK_CLOSE_TOL(output(out, "mu", {s.rows}), st.mean, 1e-15, 0.0);
            CHECK_CLOSE_TOL(output(out, "rstd", {s.rows}), rstd, 1e-10, 0.0);

            out = evaluate_reference(lnw, {{"x", tensor(xs, x)}, {"weight", tensor({s.d}, w)}});
            CHECK_CLOSE_TOL(output(out, "y", xs), ref::layer_norm(x, s.rows, s.d, w, {}, eps), kRtol, atol);

            out = evaluate_reference(ln0, {{"x", tensor(xs, x)}});
            Vec y0 = output(out, "y", xs);
            CHECK_CLOSE_TOL(y0, ref::layer_norm(x, s.rows, s.d, {}, {}, eps), kRtol, atol);
            if (s.d == 1) {  // one element per row: x - mean(x) is exactly 0
                for (double v : y0) CHECK(v == 0.0);
            }
        }
}

TEST_CASE("LayerNorm: an eps override reaches the interpreter", "[runtime][reference]") {
    INFO("seed " << test_seed());
    Rng rng(2);
    const NormSpec ln = catalog("layer_norm");
    Vec x = rng.x(3 * 17, Dist::WideRange), w = rng.weight(17), b = rng.bias(17);
    for (double eps : {0.0, 1e-3, 0.25}) {
        INFO("eps " << eps);
        TensorMap out = evaluate_reference(ln, {{"x", tensor({3, 17}, x)}, {"weight", tensor({17}, w)}, {"bias", tensor({17}, b)}},
                                           {{"eps", eps}});
        CHECK_CLOSE_TOL(output(out, "y", {3, 17}), ref::layer_norm(x, 3, 17, w, b, eps), kRtol, 1e-12);
    }
}

TEST_CASE("RMSNorm: interpreter == hand-written (plain and Gemma's 1 + w)", "[runtime][reference]") {
    INFO("seed " << test_seed());
    Rng rng(3);
    const NormSpec rms = catalog("rms_norm"), gemma = catalog("rms_norm_gemma");
    const double eps = 1e-6;
    for (Dist dist : kDists)
        for (RowsD s : kRowShapes) {
            INFO(dist_name(dist) << ", rows " << s.rows << ", d " << s.d);
            Vec x = rng.x(s.rows * s.d, dist), w = rng.weight(s.d);
            Shape xs{s.rows, s.d};

            TensorMap out = evaluate_reference(rms, {{"x", tensor(xs, x)}, {"weight", tensor({s.d}, w)}});
            CHECK_CLOSE_TOL(output(out, "y", xs), ref::rms_norm(x, s.rows, s.d, w, eps), kRtol, 1e-12);
            Vec rstd((size_t)s.rows);
            for (int64_t r = 0; r < s.rows; ++r) {
                long double ss = 0;
                for (int64_t i = 0; i < s.d; ++i) ss += (long double)x[r * s.d + i] * x[r * s.d + i];
                rstd[r] = 1.0 / std::sqrt((double)(ss / s.d) + eps);
            }
            CHECK_CLOSE_TOL(output(out, "rstd", {s.rows}), rstd, kRtol, 0.0);

            out = evaluate_reference(gemma, {{"x", tensor(xs, x)}, {"weight", tensor({s.d}, w)}});
            CHECK_CLOSE_TOL(output(out, "y", xs), ref::rms_norm(x, s.rows, s.d, w, eps, /*one_plus=*/true), kRtol, 1e-12);
        }
}

TEST_CASE("BatchNorm train: interpreter == hand-written (y and both running statistics)", "[runtime][reference]") {
    INFO("seed " << test_seed());
    Rng rng(4);
    const NormSpec bn = catalog("batch_norm_train");
    const NCHW shapes[] = {{2, 3, 4, 5}, {8, 5, 7, 3}, {1, 4, 3, 3}, {16, 10, 1, 1}, {3, 17, 1, 1}, {4, 1, 2, 2}, {2, 129, 1, 2}};
    for (double momentum : {0.1, 0.3})
        for (Dist dist : kDists)
            for (NCHW s : shapes) {
                INFO(dist_name(dist) << ", momentum " << momentum << ", x " << shape_str({s.n, s.c, s.h, s.w}));
                Shape xs{s.n, s.c, s.h, s.w};
                int64_t hw = s.h * s.w;
                Vec x = rng.x(s.n * s.c * hw, dist), w = rng.weight(s.c), b = rng.bias(s.c);
                double atol = cond_atol(x, max_rstd_channels(x, s.n, s.c, hw, 1e-5), w);
                Vec rm = rng.bias(s.c), rv = rng.positive(s.c, 0.5, 2.0);
                Overrides ov;
                if (momentum != 0.1) ov["momentum"] = momentum;
                TensorMap out = evaluate_reference(bn,
                                                   {{"x", tensor(xs, x)},
                                                    {"weight", tensor({s.c}, w)},
                                                    {"bias", tensor({s.c}, b)},
                                                    {"running_mean", tensor({s.c}, rm)},
                                                    {"running_var", tensor({s.c}, rv)}},
                                                   ov);
                ref::BatchNormTrainResult want = ref::batch_norm_train(x, s.n, s.c, hw, w, b, rm, rv, momentum, 1e-5);
                CHECK_CLOSE_TOL(output(out, "y", xs), want.y, kRtol, atol);
                CHECK_CLOSE_TOL(output(out, "running_mean_out", {s.c}), want.running_mean, kRtol, 1e-12);
                CHECK_CLOSE_TOL(output(out, "running_var_out", {s.c}), want.running_var, kRtol, 1e-12);
                // Saved statistics: the batch mean and 1 / sqrt(population var + eps), per channel.
                Vec mu = output(out, "mu", {s.c}), rstd = output(out, "rstd", {s.c});
                for (int64_t ch = 0; ch < s.c; ++ch) {
                    long double m = 0, v = 0;
                    for (int64_t a = 0; a < s.n; ++a)
                        for (int64_t i = 0; i < hw; ++i) m += x[(a * s.c + ch) * hw + i];
                    m /= s.n * hw;
                    for (int64_t a = 0; a < s.n; ++a)
                        for (int64_t i = 0; i < hw; ++i) v += (x[(a * s.c + ch) * hw + i] - m) * (x[(a * s.c + ch) * hw + i] - m);
                    v /= s.n * hw;
                    CHECK(mu[ch] == Approx((double)m).epsilon(1e-14));
                    CHECK(rstd[ch] == Approx(1.0 / std::sqrt((double)v + 1e-5)).epsilon(1e-9));
                }
            }
}

TEST_CASE("BatchNorm eval: interpreter == hand-written", "[runtime][reference]") {
    INFO("seed " << test_seed());
    Rng rng(5);
    const NormSpec bn = catalog("batch_norm_eval");
    const NCHW shapes[] = {{2, 3, 4, 5}, {8, 5, 7, 3}, {1, 1, 1, 1}, {16, 10, 1, 1}, {3, 17, 1, 1}, {1, 129, 2, 1}};
    for (Dist dist : kDists)
        for (NCHW s : shapes) {
            INFO(dist_name(dist) << ", x " << shape_str({s.n, s.c, s.h, s.w}));
            Shape xs{s.n, s.c, s.h, s.w};
            int64_t hw = s.h * s.w;
            Vec x = rng.x(s.n * s.c * hw, dist), w = rng.weight(s.c), b = rng.bias(s.c);
            Vec rm = rng.x(s.c, dist), rv = rng.positive(s.c, 0.1, 3.0);
            TensorMap out = evaluate_reference(bn, {{"x", tensor(xs, x)},
                                                    {"weight", tensor({s.c}, w)},
                                                    {"bias", tensor({s.c}, b)},
                                                    {"running_mean", tensor({s.c}, rm)},
                                                    {"running_var", tensor({s.c}, rv)}});
            CHECK_CLOSE_TOL(output(out, "y", xs), ref::batch_norm_eval(x, s.n, s.c, hw, w, b, rm, rv, 1e-5), kRtol, 1e-12);
        }
}

TEST_CASE("GroupNorm: interpreter == hand-written, NCHW and NHWC", "[runtime][reference]") {
    INFO("seed " << test_seed());
    Rng rng(6);
    const NormSpec nchw = catalog("group_norm_nchw"), nhwc = catalog("group_norm_nhwc");
    struct Case {
        NCHW s;
        int64_t groups;  // 0: the declaration's own `axis g = 32`
    };
    const Case cases[] = {{{2, 12, 5, 4}, 4}, {{3, 6, 1, 1}, 3}, {{2, 8, 7, 1}, 2}, {{1, 64, 2, 3}, 0},
                          {{1, 5, 17, 1}, 5}, {{2, 6, 3, 3}, 1}, {{1, 34, 1, 1}, 17}};
    for (Dist dist : kDists)
        for (const Case &k : cases) {
            const NCHW &s = k.s;
            int64_t groups = k.groups ? k.groups : 32;
            INFO(dist_name(dist) << ", x " << shape_str({s.n, s.c, s.h, s.w}) << ", groups " << groups);
            Overrides ov;
            if (k.groups) ov["g"] = (double)k.groups;
            Vec x = rng.x(s.n * s.c * s.h * s.w, dist), w = rng.weight(s.c), b = rng.bias(s.c);
            double atol = cond_atol(x, max_rstd_rows(x, s.n * groups, s.c / groups * s.h * s.w, 1e-5), w);
            Vec want = ref::group_norm(x, s.n, s.c, s.h * s.w, groups, w, b, 1e-5);

            Shape xs{s.n, s.c, s.h, s.w};
            TensorMap out = evaluate_reference(nchw, {{"x", tensor(xs, x)}, {"weight", tensor({s.c}, w)}, {"bias", tensor({s.c}, b)}}, ov);
            Vec y_nchw = output(out, "y", xs);
            CHECK_CLOSE_TOL(y_nchw, want, kRtol, atol);

            Shape xs_nhwc{s.n, s.h, s.w, s.c};
            out = evaluate_reference(nhwc, {{"x", tensor(xs_nhwc, nchw_to_nhwc(x, s.n, s.c, s.h, s.w))},
                                            {"weight", tensor({s.c}, w)},
                                            {"bias", tensor({s.c}, b)}},
                                     ov);
            Vec y_nhwc = nhwc_to_nchw(output(out, "y", xs_nhwc), s.n, s.c, s.h, s.w);
            CHECK_CLOSE_TOL(y_nhwc, want, kRtol, atol);
            CHECK_CLOSE_TOL(y_nhwc, y_nchw, kRtol, atol);
        }
}

TEST_CASE("InstanceNorm: interpreter == hand-written", "[runtime][reference]") {
    INFO("seed " << test_seed());
    Rng rng(7);
    const NormSpec in = catalog("instance_norm");
    const NCHW shapes[] = {{2, 3, 9, 7}, {1, 1, 1, 17}, {4, 5, 2, 2}, {1, 2, 129, 1}, {3, 2, 1, 1}};
    for (Dist dist : kDists)
        for (NCHW s : shapes) {
            INFO(dist_name(dist) << ", x " << shape_str({s.n, s.c, s.h, s.w}));
            Shape xs{s.n, s.c, s.h, s.w};
            Vec x = rng.x(s.n * s.c * s.h * s.w, dist);
            TensorMap out = evaluate_reference(in, {{"x", tensor(xs, x)}});
            CHECK_CLOSE_TOL(output(out, "y", xs), ref::instance_norm(x, s.n, s.c, s.h * s.w, 1e-5), kRtol,
                            cond_atol(x, max_rstd_rows(x, s.n * s.c, s.h * s.w, 1e-5), {}));
        }
}

TEST_CASE("DyT: interpreter == hand-written, alpha as shape [1] and as a scalar", "[runtime][reference]") {
    INFO("seed " << test_seed());
    Rng rng(8);
    const NormSpec dyt = catalog("dyt");
    for (Dist dist : kDists)
        for (RowsD s : kRowShapes) {
            INFO(dist_name(dist) << ", rows " << s.rows << ", d " << s.d);
            Vec x = rng.x(s.rows * s.d, dist), w = rng.weight(s.d), b = rng.bias(s.d);
            double alpha = rng.uniform(0.05, 2.0) * (rng.uniform(0, 1) < 0.3 ? -1 : 1);
            if (dist == Dist::LargeMean) alpha *= 1e-4;  // keep tanh out of saturation
            Shape xs{s.rows, s.d};
            Vec want = ref::dyt(x, s.rows, s.d, alpha, w, b);
            for (const Shape &as : {Shape{1}, Shape{}}) {
                INFO("alpha shape " << shape_str(as));
                TensorMap out = evaluate_reference(
                    dyt, {{"x", tensor(xs, x)}, {"alpha", tensor(as, {alpha})}, {"weight", tensor({s.d}, w)}, {"bias", tensor({s.d}, b)}});
                CHECK_CLOSE_TOL(output(out, "y", xs), want, kRtol, 1e-12);
            }
        }
}

TEST_CASE("composite declarations == compositions of the hand-written layers", "[runtime][reference]") {
    // fused add + RMSNorm, DeepNorm, QK-Norm, LayerNorm over two axes, sandwich norm: each is a
    // hand-written layer applied to a prologue or a reshaped view.
    INFO("seed " << test_seed());
    Rng rng(16);
    for (Dist dist : {Dist::Normal, Dist::WideRange})
        for (RowsD s : {RowsD{1, 1}, RowsD{3, 17}, RowsD{5, 129}, RowsD{2, 1000}}) {
            INFO(dist_name(dist) << ", rows " << s.rows << ", d " << s.d);
            Shape xs{s.rows, s.d};
            Vec x = rng.x(s.rows * s.d, dist), f = rng.x(s.rows * s.d, dist), w = rng.weight(s.d), w2 = rng.weight(s.d),
                b = rng.bias(s.d);

            Vec h(x.size());
            for (size_t i = 0; i < h.size(); ++i) h[i] = x[i] + f[i];
            TensorMap out = evaluate_reference(catalog("fused_add_rms_norm"),
                                               {{"x", tensor(xs, x)}, {"residual", tensor(xs, f)}, {"weight", tensor({s.d}, w)}});
            CHECK(output(out, "h", xs) == h);
            CHECK_CLOSE_TOL(output(out, "y", xs), ref::rms_norm(h, s.rows, s.d, w, 1e-6), kRtol, 1e-12);

            const double alpha = 2.213363839400643;
            for (size_t i = 0; i < h.size(); ++i) h[i] = alpha * x[i] + f[i];
            out = evaluate_reference(catalog("deepnorm"),
                                     {{"x", tensor(xs, x)}, {"f", tensor(xs, f)}, {"weight", tensor({s.d}, w)}, {"bias", tensor({s.d}, b)}});
            CHECK_CLOSE_TOL(output(out, "y", xs), ref::layer_norm(h, s.rows, s.d, w, b, 1e-5), kRtol,
                            cond_atol(h, max_rstd_rows(h, s.rows, s.d, 1e-5), w));

            // Sandwich: h = x + RMSNorm(f) * post_weight; y = RMSNorm(h) * pre_weight.
            Vec nf = ref::rms_norm(f, s.rows, s.d, w, 1e-6);
            for (size_t i = 0; i < h.size(); ++i) h[i] = x[i] + nf[i];
            out = evaluate_reference(catalog("sandwich_norm"), {{"x", tensor(xs, x)},
                                                                {"f", tensor(xs, f)},
                                                                {"post_weight", tensor({s.d}, w)},
                                                                {"pre_weight", tensor({s.d}, w2)}});
            CHECK_CLOSE_TOL(output(out, "h", xs), h, kRtol, 1e-12);
            CHECK_CLOSE_TOL(output(out, "y", xs), ref::rms_norm(h, s.rows, s.d, w2, 1e-6), kRtol, 1e-12);
        }
    for (Dist dist : kDists) {
        INFO(dist_name(dist));
        // QK-Norm over dh of [b, t, heads, dh] is RMSNorm on rows b * t * heads.
        const int64_t B = 2, T = 3, H = 5, DH = 17;
        Vec q = rng.x(B * T * H * DH, dist), w = rng.weight(DH);
        TensorMap out = evaluate_reference(catalog("qk_norm"), {{"q", tensor({B, T, H, DH}, q)}, {"weight", tensor({DH}, w)}});
        CHECK_CLOSE_TOL(output(out, "y", {B, T, H, DH}), ref::rms_norm(q, B * T * H, DH, w, 1e-6), kRtol, 1e-12);
        // LayerNorm over (s, d) of [n, s, d] is LayerNorm on rows n of s * d.
        const int64_t N = 3, S = 6, D = 11;
        Vec x = rng.x(N * S * D, dist), w2 = rng.weight(S * D), b2 = rng.bias(S * D);
        out = evaluate_reference(catalog("layer_norm_last_two_axes"),
                                 {{"x", tensor({N, S, D}, x)}, {"weight", tensor({S, D}, w2)}, {"bias", tensor({S, D}, b2)}});
        CHECK_CLOSE_TOL(output(out, "y", {N, S, D}), ref::layer_norm(x, N, S * D, w2, b2, 1e-5), kRtol,
                        cond_atol(x, max_rstd_rows(x, N, S * D, 1e-5), w2));
    }
}

// ---- The source document's sanity checks (§A) --------------------------------------------------

TEST_CASE("sanity a: LayerNorm is invariant to adding a constant to x, RMSNorm is not", "[runtime][reference][sanity]") {
    INFO("seed " << test_seed());
    Rng rng(9);
    const NormSpec ln = catalog("layer_norm"), rms = catalog("rms_norm");
    const int64_t rows = 5, d = 129;
    Vec x = rng.x(rows * d, Dist::Normal), w = rng.weight(d), b = rng.bias(d);
    Vec shifted = x;
    for (double &v : shifted) v += 7.25;
    auto run_ln = [&](const Vec &in) {
        return output(evaluate_reference(ln, {{"x", tensor({rows, d}, in)}, {"weight", tensor({d}, w)}, {"bias", tensor({d}, b)}}), "y", {rows, d});
    };
    auto run_rms = [&](const Vec &in) {
        return output(evaluate_reference(rms, {{"x", tensor({rows, d}, in)}, {"weight", tensor({d}, w)}}), "y", {rows, d});
    };
    // Adding 7.25 rounds x to ulp(8) = 1.8e-15, nothing more.
    CHECK_CLOSE_TOL(run_ln(shifted), run_ln(x), 1e-12, 1e-12);
    CHECK_CLOSE_TOL(ref::layer_norm(shifted, rows, d, w, b, 1e-5), ref::layer_norm(x, rows, d, w, b, 1e-5), 1e-12, 1e-12);
    CHECK(max_abs_diff(run_rms(shifted), run_rms(x)) > 0.1);
    CHECK(max_abs_diff(ref::rms_norm(shifted, rows, d, w, 1e-6), ref::rms_norm(x, rows, d, w, 1e-6)) > 0.1);
}

TEST_CASE("sanity b and c: BatchNorm train != eval on the same input, one step moves the running statistics",
          "[runtime][reference][sanity]") {
    INFO("seed " << test_seed());
    Rng rng(10);
    const NormSpec train = catalog("batch_norm_train"), eval = catalog("batch_norm_eval");
    const int64_t n = 8, c = 5, h = 3, w = 2;
    Shape xs{n, c, h, w};
    Vec x = rng.x(n * c * h * w, Dist::Normal);
    for (double &v : x) v = 3.0 + 2.0 * v;  // batch mean ~3, var ~4: far from the initial 0 / 1
    Vec weight = rng.weight(c), bias = rng.bias(c), zeros(c, 0.0), ones(c, 1.0);
    TensorMap in{{"x", tensor(xs, x)},
                 {"weight", tensor({c}, weight)},
                 {"bias", tensor({c}, bias)},
                 {"running_mean", tensor({c}, zeros)},
                 {"running_var", tensor({c}, ones)}};
    TensorMap tr = evaluate_reference(train, in), ev = evaluate_reference(eval, in);
    Vec y_train = output(tr, "y", xs), y_eval = output(ev, "y", xs);
    CHECK(max_abs_diff(y_train, y_eval) > 1.0);
    ref::BatchNormTrainResult rt = ref::batch_norm_train(x, n, c, h * w, weight, bias, zeros, ones, 0.1, 1e-5);
    CHECK(max_abs_diff(rt.y, ref::batch_norm_eval(x, n, c, h * w, weight, bias, zeros, ones, 1e-5)) > 1.0);

    Vec rm = output(tr, "running_mean_out", {c}), rv = output(tr, "running_var_out", {c});
    for (int64_t ch = 0; ch < c; ++ch) {
        INFO("channel " << ch);
        CHECK(std::fabs(rm[ch]) > 0.1);            // 0.1 * a batch mean near 3
        CHECK(std::fabs(rv[ch] - 1.0) > 0.05);     // 0.9 + 0.1 * an unbiased variance near 4
        CHECK(std::fabs(rt.running_mean[ch]) > 0.1);
    }
    // Eval mode with the moved statistics still differs from train mode: one step is not convergence.
    TensorMap in2 = in;
    in2["running_mean"] = tensor({c}, rm);
    in2["running_var"] = tensor({c}, rv);
    CHECK(max_abs_diff(output(evaluate_reference(eval, in2), "y", xs), y_train) > 0.1);
}

TEST_CASE("GroupNorm with one group is LayerNorm over (c, h, w)", "[runtime][reference][sanity]") {
    INFO("seed " << test_seed());
    Rng rng(11);
    const NormSpec gn = catalog("group_norm_nchw"), gn_nhwc = catalog("group_norm_nhwc"), ln2 = catalog("layer_norm_last_two_axes");
    const NCHW shapes[] = {{2, 6, 3, 5}, {1, 7, 1, 1}, {3, 4, 17, 1}};
    for (NCHW s : shapes) {
        INFO("x " << shape_str({s.n, s.c, s.h, s.w}));
        int64_t hw = s.h * s.w;
        Vec x = rng.x(s.n * s.c * hw, Dist::WideRange), w = rng.weight(s.c), b = rng.bias(s.c);
        // LayerNorm over the last two axes of [n, c, hw], with the per-channel affine spread over hw.
        Vec w2, b2;
        for (int64_t ch = 0; ch < s.c; ++ch)
            for (int64_t i = 0; i < hw; ++i) {
                w2.push_back(w[ch]);
                b2.push_back(b[ch]);
            }
        Shape xs{s.n, s.c, s.h, s.w};
        Vec y_gn = output(evaluate_reference(gn, {{"x", tensor(xs, x)}, {"weight", tensor({s.c}, w)}, {"bias", tensor({s.c}, b)}},
                                             {{"g", 1}}),
                          "y", xs);
        Vec y_ln = output(evaluate_reference(ln2, {{"x", tensor({s.n, s.c, hw}, x)},
                                                   {"weight", tensor({s.c, hw}, w2)},
                                                   {"bias", tensor({s.c, hw}, b2)}}),
                          "y", {s.n, s.c, hw});
        CHECK_CLOSE_TOL(y_gn, y_ln, kRtol, 1e-12);
        CHECK_CLOSE_TOL(y_gn, ref::layer_norm(x, s.n, s.c * hw, w2, b2, 1e-5), kRtol, 1e-12);
        Vec y_nhwc = output(evaluate_reference(gn_nhwc, {{"x", tensor({s.n, s.h, s.w, s.c}, nchw_to_nhwc(x, s.n, s.c, s.h, s.w))},
                                                         {"weight", tensor({s.c}, w)},
                                                         {"bias", tensor({s.c}, b)}},
                                               {{"g", 1}}),
                            "y", {s.n, s.h, s.w, s.c});
        CHECK_CLOSE_TOL(nhwc_to_nchw(y_nhwc, s.n, s.c, s.h, s.w), y_ln, kRtol, 1e-12);
    }
}

TEST_CASE("GroupNorm with one channel per group is InstanceNorm", "[runtime][reference][sanity]") {
    INFO("seed " << test_seed());
    Rng rng(12);
    const NormSpec gn = catalog("group_norm_nchw"), gn_nhwc = catalog("group_norm_nhwc"), in = catalog("instance_norm");
    const NCHW shapes[] = {{2, 3, 9, 7}, {1, 32, 2, 2}, {3, 5, 1, 17}};
    for (NCHW s : shapes) {
        INFO("x " << shape_str({s.n, s.c, s.h, s.w}));
        Shape xs{s.n, s.c, s.h, s.w};
        Vec x = rng.x(s.n * s.c * s.h * s.w, Dist::WideRange), ones(s.c, 1.0), zeros(s.c, 0.0);
        Overrides ov{{"g", (double)s.c}};
        Vec y_gn = output(evaluate_reference(gn, {{"x", tensor(xs, x)}, {"weight", tensor({s.c}, ones)}, {"bias", tensor({s.c}, zeros)}}, ov),
                          "y", xs);
        Vec y_in = output(evaluate_reference(in, {{"x", tensor(xs, x)}}), "y", xs);
        CHECK_CLOSE_TOL(y_gn, y_in, kRtol, 1e-12);
        CHECK_CLOSE_TOL(y_gn, ref::instance_norm(x, s.n, s.c, s.h * s.w, 1e-5), kRtol, 1e-12);
        CHECK_CLOSE_TOL(ref::group_norm(x, s.n, s.c, s.h * s.w, s.c, ones, zeros, 1e-5), y_in, kRtol, 1e-12);
        Vec y_nhwc = output(evaluate_reference(gn_nhwc, {{"x", tensor({s.n, s.h, s.w, s.c}, nchw_to_nhwc(x, s.n, s.c, s.h, s.w))},
                                                         {"weight", tensor({s.c}, ones)},
                                                         {"bias", tensor({s.c}, zeros)}},
                                               ov),
                            "y", {s.n, s.h, s.w, s.c});
        CHECK_CLOSE_TOL(nhwc_to_nchw(y_nhwc, s.n, s.c, s.h, s.w), y_in, kRtol, 1e-12);
    }
}

// ---- The comparison can fail ----------------------------------------------------------------------

TEST_CASE("the comparison catches a perturbed eps, a one-element change, NaN and a size mismatch",
          "[runtime][reference][negative]") {
    INFO("seed " << test_seed());
    Rng rng(13);
    const NormSpec ln = catalog("layer_norm");
    const int64_t rows = 4, d = 33;
    Vec x = rng.x(rows * d, Dist::Normal), w = rng.weight(d), b = rng.bias(d);
    for (double &v : x) v *= 0.01;  // var ~1e-4, so eps = 1e-5 matters
    TensorMap in{{"x", tensor({rows, d}, x)}, {"weight", tensor({d}, w)}, {"bias", tensor({d}, b)}};
    Vec y = output(evaluate_reference(ln, in), "y", {rows, d});
    Vec want = ref::layer_norm(x, rows, d, w, b, 1e-5);
    REQUIRE(within(compare(y, want, kRtol, 1e-12)));

    // eps off by 10% (as a wrong constant would be), and by 1e-9 relative: both are caught.
    CHECK_FALSE(within(compare(y, ref::layer_norm(x, rows, d, w, b, 1.1e-5), kRtol, 1e-12)));
    CHECK_FALSE(within(compare(y, ref::layer_norm(x, rows, d, w, b, 1e-5 * (1 + 1e-9)), kRtol, 1e-12)));
    Vec y_eps = output(evaluate_reference(ln, in, {{"eps", 1.1e-5}}), "y", {rows, d});
    CHECK_FALSE(within(compare(y_eps, want, kRtol, 1e-12)));

    // eps outside the root instead of inside: a different layer, caught.
    const NormSpec outside = catalog("layer_norm_eps_outside_root");
    CHECK_FALSE(within(compare(output(evaluate_reference(outside, in), "y", {rows, d}), want, kRtol, 1e-12)));

    // One element moved by 1e-9 relative.
    Vec bumped = y;
    bumped[rows * d / 2] *= 1 + 1e-9;
    Diff one = compare(bumped, want, kRtol, 1e-12);
    CHECK_FALSE(within(one));
    CHECK(one.failures == 1);
    CHECK(one.at == (size_t)(rows * d / 2));

    // NaN on either side, or both, never passes; nor does a missing element.
    Vec with_nan = y;
    with_nan[3] = NAN;
    CHECK_FALSE(within(compare(with_nan, want, kRtol, 1e-12)));
    CHECK_FALSE(within(compare(want, with_nan, kRtol, 1e-12)));
    CHECK_FALSE(within(compare(with_nan, with_nan, kRtol, 1e-12)));
    Vec inf = y;
    inf[0] = INFINITY;
    CHECK_FALSE(within(compare(inf, want, kRtol, 1e-12)));
    CHECK_FALSE(within(compare(Vec(y.begin(), y.end() - 1), want, kRtol, 1e-12)));
}

TEST_CASE("a NaN in the input reaches every output of every catalog declaration", "[runtime][reference][negative]") {
    INFO("seed " << test_seed());
    Rng rng(14);
    const char *names[] = {"batch_norm_eval", "batch_norm_train", "deepnorm", "dyt", "fused_add_rms_norm", "group_norm_nchw",
                           "group_norm_nhwc", "instance_norm", "layer_norm", "layer_norm_eps_outside_root",
                           "layer_norm_last_two_axes", "layer_norm_no_affine", "layer_norm_weight_only", "qk_norm", "rms_norm",
                           "rms_norm_gemma", "sandwich_norm", "scale_norm"};
    for (const char *name : names) {
        INFO("declaration " << name);
        const NormSpec spec = catalog(name);
        // Every free axis gets extent 3; fixed ones (GroupNorm's g = 32) keep theirs.
        auto extent = [&](AxisId a) -> int64_t {
            const Axis &ax = spec.axes[a];
            if (ax.is_split()) {
                int64_t n = 1;
                for (AxisId p : ax.parts) n *= spec.axes[p].fixed_extent ? *spec.axes[p].fixed_extent : 3;
                return n;
            }
            return ax.fixed_extent ? *ax.fixed_extent : 3;
        };
        TensorMap in;
        std::string first_input;
        for (const TensorInfo &t : spec.tensors) {
            Shape shape;
            for (AxisId a : t.dims) shape.push_back(extent(a));
            if (shape.empty()) shape = {1};
            HostTensor h{shape, {}};
            h.data = rng.positive(h.numel(), 0.5, 1.5);  // positive: running_var must be
            in[t.name] = h;
            if (t.role == TensorInfo::Input && first_input.empty()) first_input = t.name;
        }
        REQUIRE(!first_input.empty());
        TensorMap clean = evaluate_reference(spec, in);
        REQUIRE(clean.size() == spec.outputs.size());
        for (const auto &[out_name, t] : clean) {
            INFO("output " << out_name << " (clean input)");
            for (double v : t.data) REQUIRE(std::isfinite(v));
        }
        in[first_input].data[0] = NAN;
        TensorMap poisoned = evaluate_reference(spec, in);
        for (const auto &[out_name, t] : poisoned) {
            INFO("output " << out_name << " with x[0] = NaN in '" << first_input << "'");
            bool any_nan = false;
            for (double v : t.data) any_nan |= std::isnan(v);
            CHECK(any_nan);
        }
    }
}

TEST_CASE("a NaN poisons its own row, and only that row, in LayerNorm, RMSNorm and ScaleNorm", "[runtime][reference][negative]") {
    INFO("seed " << test_seed());
    Rng rng(15);
    const int64_t rows = 3, d = 17;
    Vec x = rng.x(rows * d, Dist::Normal), w = rng.weight(d), b = rng.bias(d);
    x[d + 5] = NAN;  // row 1
    Vec y_ln = output(evaluate_reference(catalog("layer_norm"), {{"x", tensor({rows, d}, x)}, {"weight", tensor({d}, w)}, {"bias", tensor({d}, b)}}),
                      "y", {rows, d});
    Vec y_rms = output(evaluate_reference(catalog("rms_norm"), {{"x", tensor({rows, d}, x)}, {"weight", tensor({d}, w)}}), "y", {rows, d});
    // ScaleNorm's clamp max(norm, eps) must not swallow a NaN norm (std::fmax would).
    Vec y_scale = output(evaluate_reference(catalog("scale_norm"), {{"x", tensor({rows, d}, x)}, {"g", tensor({1}, {1.5})}}), "y", {rows, d});
    Vec r_ln = ref::layer_norm(x, rows, d, w, b, 1e-5), r_rms = ref::rms_norm(x, rows, d, w, 1e-6);
    for (int64_t i = 0; i < rows * d; ++i) {
        bool in_row1 = i / d == 1;
        INFO("element " << i);
        CHECK(std::isnan(y_ln[i]) == in_row1);
        CHECK(std::isnan(y_rms[i]) == in_row1);
        CHECK(std::isnan(y_scale[i]) == in_row1);
        CHECK(std::isnan(r_ln[i]) == in_row1);
        CHECK(std::isnan(r_rms[i]) == in_row1);
    }
}
