// Hand-written float64 references, straight from the formulas of the source documents, with no
// shared code with the interpreter: the two must agree before either is trusted.
// All arrays are row-major; statistics use the population variance (divide by m), as PyTorch does.
#pragma once

#include <cstdint>
#include <vector>

namespace normgen::ref {

using Vec = std::vector<double>;

// LayerNorm over the last `d` elements of each of `rows` rows. Empty weight/bias = no affine term.
Vec layer_norm(const Vec &x, int64_t rows, int64_t d, const Vec &weight, const Vec &bias, double eps);

// RMSNorm: x / sqrt(mean(x^2) + eps) * weight; `one_plus` uses Gemma's (1 + weight).
Vec rms_norm(const Vec &x, int64_t rows, int64_t d, const Vec &weight, double eps, bool one_plus = false);

struct BatchNormTrainResult {
    Vec y, running_mean, running_var;
};
// BatchNorm training on x[n, c, hw]: batch statistics per channel over (n, hw); the running mean and
// the running variance (unbiased: m / (m - 1)) move by `momentum`.
BatchNormTrainResult batch_norm_train(const Vec &x, int64_t n, int64_t c, int64_t hw, const Vec &weight, const Vec &bias,
                                      const Vec &running_mean, const Vec &running_var, double momentum, double eps);

// BatchNorm inference: the running statistics, no reduction.
Vec batch_norm_eval(const Vec &x, int64_t n, int64_t c, int64_t hw, const Vec &weight, const Vec &bias,
                    const Vec &running_mean, const Vec &running_var, double eps);

// GroupNorm on NCHW x[n, c, hw]: statistics per (sample, group) over (c / groups, hw); per-channel affine.
Vec group_norm(const Vec &x, int64_t n, int64_t c, int64_t hw, int64_t groups, const Vec &weight, const Vec &bias, double eps);

// InstanceNorm on x[n, c, hw]: statistics per (sample, channel) over hw, no affine.
Vec instance_norm(const Vec &x, int64_t n, int64_t c, int64_t hw, double eps);

// DyT: weight * tanh(alpha * x) + bias over rows of d.
Vec dyt(const Vec &x, int64_t rows, int64_t d, double alpha, const Vec &weight, const Vec &bias);

}  // namespace normgen::ref
