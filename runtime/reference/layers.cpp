#include "runtime/reference/layers.h"

#include <cmath>

namespace normgen::ref {
namespace {

// Mean and population variance of `count` runs of `run` contiguous values, the runs `run_stride`
// apart (the access pattern of every layer below). Two passes, accumulated in long double.
struct Moments {
    double mean, var;
};

Moments moments(const double *x, int64_t count, int64_t run, int64_t run_stride) {
    long double s = 0;
    for (int64_t k = 0; k < count; ++k)
        for (int64_t i = 0; i < run; ++i) s += x[k * run_stride + i];
    long double m = (long double)count * run;
    long double mean = s / m, ss = 0;
    for (int64_t k = 0; k < count; ++k)
        for (int64_t i = 0; i < run; ++i) {
            long double dv = x[k * run_stride + i] - mean;
            ss += dv * dv;
        }
    return {(double)mean, (double)(ss / m)};
}

}  // namespace

Vec layer_norm(const Vec &x, int64_t rows, int64_t d, const Vec &weight, const Vec &bias, double eps) {
    Vec y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
        Moments mo = moments(&x[r * d], 1, d, d);
        double inv = 1.0 / std::sqrt(mo.var + eps);
        for (int64_t i = 0; i < d; ++i) {
            double v = (x[r * d + i] - mo.mean) * inv;
            if (!weight.empty()) v *= weight[i];
            if (!bias.empty()) v += bias[i];
            y[r * d + i] = v;
        }
    }
    return y;
}

Vec rms_norm(const Vec &x, int64_t rows, int64_t d, const Vec &weight, double eps, bool one_plus) {
    Vec y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
        long double ss = 0;
        for (int64_t i = 0; i < d; ++i) ss += (long double)x[r * d + i] * x[r * d + i];
        double inv = 1.0 / std::sqrt((double)(ss / d) + eps);
        for (int64_t i = 0; i < d; ++i) {
            double w = weight.empty() ? 1.0 : (one_plus ? 1.0 + weight[i] : weight[i]);
            y[r * d + i] = x[r * d + i] * inv * w;
        }
    }
    return y;
}

BatchNormTrainResult batch_norm_train(const Vec &x, int64_t n, int64_t c, int64_t hw, const Vec &weight, const Vec &bias,
                                      const Vec &running_mean, const Vec &running_var, double momentum, double eps) {
    BatchNormTrainResult r{Vec(x.size()), Vec(c), Vec(c)};
    double m = (double)(n * hw);
    for (int64_t ch = 0; ch < c; ++ch) {
        Moments mo = moments(&x[ch * hw], n, hw, c * hw);
        double inv = 1.0 / std::sqrt(mo.var + eps);
        for (int64_t s = 0; s < n; ++s)
            for (int64_t i = 0; i < hw; ++i) {
                int64_t k = (s * c + ch) * hw + i;
                r.y[k] = (x[k] - mo.mean) * inv * weight[ch] + bias[ch];
            }
        r.running_mean[ch] = (1 - momentum) * running_mean[ch] + momentum * mo.mean;
        r.running_var[ch] = (1 - momentum) * running_var[ch] + momentum * mo.var * m / (m - 1);
    }
    return r;
}

Vec batch_norm_eval(const Vec &x, int64_t n, int64_t c, int64_t hw, const Vec &weight, const Vec &bias,
                    const Vec &running_mean, const Vec &running_var, double eps) {
    Vec y(x.size());
    for (int64_t s = 0; s < n; ++s)
        for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t i = 0; i < hw; ++i) {
                int64_t k = (s * c + ch) * hw + i;
                y[k] = (x[k] - running_mean[ch]) / std::sqrt(running_var[ch] + eps) * weight[ch] + bias[ch];
            }
    return y;
}

Vec group_norm(const Vec &x, int64_t n, int64_t c, int64_t hw, int64_t groups, const Vec &weight, const Vec &bias, double eps) {
    Vec y(x.size());
    int64_t cg = c / groups;
    for (int64_t s = 0; s < n; ++s)
        for (int64_t g = 0; g < groups; ++g) {
            int64_t base = (s * c + g * cg) * hw;  // a group is contiguous in NCHW
            Moments mo = moments(&x[base], 1, cg * hw, cg * hw);
            double inv = 1.0 / std::sqrt(mo.var + eps);
            for (int64_t k = 0; k < cg; ++k)
                for (int64_t i = 0; i < hw; ++i) {
                    int64_t ch = g * cg + k, idx = base + k * hw + i;
                    double v = (x[idx] - mo.mean) * inv;
                    if (!weight.empty()) v *= weight[ch];
                    if (!bias.empty()) v += bias[ch];
                    y[idx] = v;
                }
        }
    return y;
}

Vec instance_norm(const Vec &x, int64_t n, int64_t c, int64_t hw, double eps) {
    Vec y(x.size());
    for (int64_t p = 0; p < n * c; ++p) {
        Moments mo = moments(&x[p * hw], 1, hw, hw);
        double inv = 1.0 / std::sqrt(mo.var + eps);
        for (int64_t i = 0; i < hw; ++i) y[p * hw + i] = (x[p * hw + i] - mo.mean) * inv;
    }
    return y;
}

Vec dyt(const Vec &x, int64_t rows, int64_t d, double alpha, const Vec &weight, const Vec &bias) {
    Vec y(x.size());
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < d; ++i) y[r * d + i] = weight[i] * std::tanh(alpha * x[r * d + i]) + bias[i];
    return y;
}

}  // namespace normgen::ref
