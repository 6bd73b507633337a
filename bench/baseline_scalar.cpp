// The "hand-written" baseline: the textbook two-pass loops a user would write before reaching for a
// library: float64 sums, one element at a time, no intrinsics (the compiler may still vectorize),
// parallel over independent rows/groups on the benchmark's thread pool.
#include "bench/baseline.h"
#include "bench/thread_pool.h"
#include "runtime/half.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace normgen::bench {
namespace {

struct F32 {
    using T = float;
    static float ld(const T *p, int64_t i) { return p[i]; }
    static void st(T *p, int64_t i, float v) { p[i] = v; }
};
struct BF16 {
    using T = uint16_t;
    static float ld(const T *p, int64_t i) { return bf16_to_float(p[i]); }
    static void st(T *p, int64_t i, float v) { p[i] = float_to_bf16(v); }
};
struct F16 {
    using T = uint16_t;
    static float ld(const T *p, int64_t i) { return half_to_float(p[i]); }
    static void st(T *p, int64_t i, float v) { p[i] = float_to_half(v); }
};

// Splits [0, n) into at most 4 x threads chunks on the pool.
void par_range(int64_t n, int threads, const std::function<void(int64_t, int64_t)> &body) {
    const int tasks = (int)std::max<int64_t>(1, std::min<int64_t>(n, 4 * (int64_t)threads));
    parallel_for(tasks, [&](int t) { body(n * t / tasks, n * (t + 1) / tasks); });
}

template <typename S>
class Rows : public Baseline {
public:
    explicit Rows(const CaseTensors &t) : t_(t), rows_(t.at("rows")), d_(t.at("d")) {}
    std::vector<std::string> writes() const override {
        if (t_.layer == "fused_add_rms_norm") return {"h", "y"};
        return {"y"};
    }
    void run() override {
        using T = typename S::T;
        // Which layer, decided once, not per row.
        const std::string &l = t_.layer;
        enum { LayerNorm, RmsNorm, FusedAddRms, DyT } kind = l == "rms_norm"              ? RmsNorm
                                                            : l == "fused_add_rms_norm" ? FusedAddRms
                                                            : l == "dyt"                ? DyT
                                                                                        : LayerNorm;
        const T *x = reinterpret_cast<const T *>(t_.ptr("x"));
        T *y = reinterpret_cast<T *>(t_.ptr("y"));
        const float *w = t_.has("weight") ? t_.f32("weight") : nullptr;
        const float *b = t_.has("bias") ? t_.f32("bias") : nullptr;
        const T *residual = kind == FusedAddRms ? reinterpret_cast<const T *>(t_.ptr("residual")) : nullptr;
        T *hsum = kind == FusedAddRms ? reinterpret_cast<T *>(t_.ptr("h")) : nullptr;
        const float alpha = kind == DyT ? *t_.f32("alpha") : 0.0f;
        const int64_t d = d_;
        par_range(rows_, t_.threads, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
                const T *xr = x + r * d;
                T *yr = y + r * d;
                if (kind == LayerNorm) {
                    double s = 0;
                    for (int64_t i = 0; i < d; ++i) s += S::ld(xr, i);
                    const double mu = s / d;
                    double q = 0;
                    for (int64_t i = 0; i < d; ++i) q += (S::ld(xr, i) - mu) * (S::ld(xr, i) - mu);
                    const float rstd = (float)(1.0 / std::sqrt(q / d + 1e-5));
                    const float m = (float)mu;
                    for (int64_t i = 0; i < d; ++i) S::st(yr, i, (S::ld(xr, i) - m) * rstd * w[i] + (b ? b[i] : 0.0f));
                } else if (kind == RmsNorm) {
                    double q = 0;
                    for (int64_t i = 0; i < d; ++i) q += (double)S::ld(xr, i) * S::ld(xr, i);
                    const float rstd = (float)(1.0 / std::sqrt(q / d + 1e-6));
                    for (int64_t i = 0; i < d; ++i) S::st(yr, i, S::ld(xr, i) * rstd * w[i]);
                } else if (kind == FusedAddRms) {
                    const T *res = residual + r * d;
                    T *h = hsum + r * d;
                    double q = 0;
                    for (int64_t i = 0; i < d; ++i) {
                        S::st(h, i, S::ld(xr, i) + S::ld(res, i));
                        const float hv = S::ld(h, i);
                        q += (double)hv * hv;
                    }
                    const float rstd = (float)(1.0 / std::sqrt(q / d + 1e-6));
                    for (int64_t i = 0; i < d; ++i) S::st(yr, i, S::ld(h, i) * rstd * w[i]);
                } else {  // dyt
                    for (int64_t i = 0; i < d; ++i) S::st(yr, i, w[i] * std::tanh(alpha * S::ld(xr, i)) + b[i]);
                }
            }
        });
    }

private:
    CaseTensors t_;
    int64_t rows_, d_;
};

// [n, c, h, w] (or [n, h, w, c] for group_norm_nhwc) layers.
template <typename S>
class Image : public Baseline {
public:
    explicit Image(const CaseTensors &t) : t_(t), n_(t.at("n")), c_(t.at("c")), hw_(t.at("h") * t.at("w")) {}
    std::vector<std::string> writes() const override {
        if (t_.layer == "batch_norm_train") return {"y", "running_mean_out", "running_var_out"};
        return {"y"};
    }
    void run() override {
        using T = typename S::T;
        const std::string &l = t_.layer;
        const T *x = reinterpret_cast<const T *>(t_.ptr("x"));
        T *y = reinterpret_cast<T *>(t_.ptr("y"));
        const float *w = t_.has("weight") ? t_.f32("weight") : nullptr;
        const float *b = t_.has("bias") ? t_.f32("bias") : nullptr;
        const int64_t n = n_, c = c_, hw = hw_;
        if (l == "batch_norm_train") {
            const float *rm = t_.f32("running_mean"), *rv = t_.f32("running_var");
            float *rmo = t_.f32("running_mean_out"), *rvo = t_.f32("running_var_out");
            par_range(c, t_.threads, [&](int64_t c0, int64_t c1) {
                for (int64_t ch = c0; ch < c1; ++ch) {
                    double s = 0;
                    for (int64_t i = 0; i < n; ++i)
                        for (int64_t j = 0; j < hw; ++j) s += S::ld(x, (i * c + ch) * hw + j);
                    const double m = (double)n * hw, mu = s / m;
                    double q = 0;
                    for (int64_t i = 0; i < n; ++i)
                        for (int64_t j = 0; j < hw; ++j) {
                            const double v = S::ld(x, (i * c + ch) * hw + j) - mu;
                            q += v * v;
                        }
                    const double var = q / m;
                    const float rstd = (float)(1.0 / std::sqrt(var + 1e-5)), fm = (float)mu;
                    for (int64_t i = 0; i < n; ++i)
                        for (int64_t j = 0; j < hw; ++j) {
                            const int64_t k = (i * c + ch) * hw + j;
                            S::st(y, k, (S::ld(x, k) - fm) * rstd * w[ch] + b[ch]);
                        }
                    rmo[ch] = (float)(0.9 * rm[ch] + 0.1 * mu);
                    rvo[ch] = (float)(0.9 * rv[ch] + 0.1 * var * m / (m - 1));
                }
            });
        } else if (l == "batch_norm_eval") {
            const float *rm = t_.f32("running_mean"), *rv = t_.f32("running_var");
            par_range(n * c, t_.threads, [&](int64_t p0, int64_t p1) {
                for (int64_t p = p0; p < p1; ++p) {
                    const int64_t ch = p % c;
                    const float rstd = 1.0f / std::sqrt(rv[ch] + 1e-5f);
                    for (int64_t j = 0; j < hw; ++j) S::st(y, p * hw + j, (S::ld(x, p * hw + j) - rm[ch]) * rstd * w[ch] + b[ch]);
                }
            });
        } else if (l == "instance_norm" || l == "group_norm_nchw") {
            // Each (sample, group) is one contiguous block of cg x h x w elements.
            const int64_t groups = l == "instance_norm" ? c : 32, cg = c / groups, block = cg * hw;
            par_range(n * groups, t_.threads, [&](int64_t p0, int64_t p1) {
                for (int64_t p = p0; p < p1; ++p) {
                    const int64_t base = p * block;
                    double s = 0;
                    for (int64_t j = 0; j < block; ++j) s += S::ld(x, base + j);
                    const double mu = s / block;
                    double q = 0;
                    for (int64_t j = 0; j < block; ++j) q += (S::ld(x, base + j) - mu) * (S::ld(x, base + j) - mu);
                    const float rstd = (float)(1.0 / std::sqrt(q / block + 1e-5)), fm = (float)mu;
                    for (int64_t j = 0; j < block; ++j) {
                        const int64_t ch = (p % groups) * cg + j / hw;
                        const float v = (S::ld(x, base + j) - fm) * rstd;
                        S::st(y, base + j, w ? v * w[ch] + b[ch] : v);
                    }
                }
            });
        } else {  // group_norm_nhwc: a group is cg channels of every pixel of one sample
            const int64_t groups = 32, cg = c / groups;
            par_range(n * groups, t_.threads, [&](int64_t p0, int64_t p1) {
                for (int64_t p = p0; p < p1; ++p) {
                    const int64_t i = p / groups, c0 = (p % groups) * cg, base = i * hw * c;
                    double s = 0;
                    for (int64_t j = 0; j < hw; ++j)
                        for (int64_t k = 0; k < cg; ++k) s += S::ld(x, base + j * c + c0 + k);
                    const double m = (double)hw * cg, mu = s / m;
                    double q = 0;
                    for (int64_t j = 0; j < hw; ++j)
                        for (int64_t k = 0; k < cg; ++k) {
                            const double v = S::ld(x, base + j * c + c0 + k) - mu;
                            q += v * v;
                        }
                    const float rstd = (float)(1.0 / std::sqrt(q / m + 1e-5)), fm = (float)mu;
                    for (int64_t j = 0; j < hw; ++j)
                        for (int64_t k = 0; k < cg; ++k) {
                            const int64_t e = base + j * c + c0 + k;
                            S::st(y, e, (S::ld(x, e) - fm) * rstd * w[c0 + k] + b[c0 + k]);
                        }
                }
            });
        }
    }

private:
    CaseTensors t_;
    int64_t n_, c_, hw_;
};

template <template <typename> class L>
std::unique_ptr<Baseline> make_typed(const CaseTensors &t) {
    switch (t.dtype) {
    case DType::F32: return std::make_unique<L<F32>>(t);
    case DType::BF16: return std::make_unique<L<BF16>>(t);
    case DType::F16: return std::make_unique<L<F16>>(t);
    default: return nullptr;
    }
}

}  // namespace

std::unique_ptr<Baseline> make_scalar_baseline(const CaseTensors &t, std::string *why_not) {
    static const char *rows[] = {"layer_norm", "layer_norm_weight_only", "rms_norm", "fused_add_rms_norm", "dyt"};
    static const char *images[] = {"batch_norm_train", "batch_norm_eval", "instance_norm", "group_norm_nchw", "group_norm_nhwc"};
    for (const char *l : rows)
        if (t.layer == l) return make_typed<Rows>(t);
    for (const char *l : images)
        if (t.layer == l) return make_typed<Image>(t);
    *why_not = t.layer.find("_grad") != std::string::npos ? "the scalar baseline implements the standard layers' forward only"
                                                          : "the scalar baseline implements the standard layers only";
    return nullptr;
}

}  // namespace normgen::bench
