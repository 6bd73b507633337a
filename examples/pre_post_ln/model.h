// The model of the seeds' check [d] (tests/golden/backward/pre_post_ln): 48 residual blocks of
// width 64 on a batch of 16, Pre-LN `h = h + Linear(LN(h))` or Post-LN `h = LN(h + Linear(h))`, a
// linear head, loss = mean(out^2); one forward and one backward pass, and the Frobenius norm of
// each block's Linear weight gradient. Linear is plain loops in float64; the LayerNorm forward and
// backward are given (the float64 reference in tests/runtime/grad_test.cpp, the generated kernels
// in main.cpp), so the same model checks both.
#pragma once

#include <cmath>
#include <functional>
#include <vector>

namespace normgen::example {

using Mat = std::vector<double>;  // row-major [rows, n]

struct LayerNormOps {
    // y = LN(h) (weight 1, bias 0); `saved` receives whatever the backward needs (mu, rstd).
    std::function<Mat(const Mat &h, std::vector<Mat> &saved)> forward;
    // d_h from h, what the forward saved, and d_y.
    std::function<Mat(const Mat &h, const std::vector<Mat> &saved, const Mat &dy)> backward;
};

struct Weights {
    int rows = 16, n = 64, depth = 48;
    const double *lin_w = nullptr;   // [depth, n, n] (out x in)
    const double *lin_b = nullptr;   // [depth, n]
    const double *head_w = nullptr;  // [n, n]
    const double *head_b = nullptr;  // [n]
};

namespace detail {
// y[r][o] = sum_i x[r][i] w[o][i] + b[o]
inline Mat linear(const Mat &x, const double *w, const double *b, int rows, int n) {
    Mat y((size_t)rows * n);
    for (int r = 0; r < rows; ++r)
        for (int o = 0; o < n; ++o) {
            double s = b[o];
            for (int i = 0; i < n; ++i) s += x[(size_t)r * n + i] * w[(size_t)o * n + i];
            y[(size_t)r * n + o] = s;
        }
    return y;
}
// dx[r][i] = sum_o dy[r][o] w[o][i]
inline Mat linear_dx(const Mat &dy, const double *w, int rows, int n) {
    Mat dx((size_t)rows * n, 0.0);
    for (int r = 0; r < rows; ++r)
        for (int o = 0; o < n; ++o)
            for (int i = 0; i < n; ++i) dx[(size_t)r * n + i] += dy[(size_t)r * n + o] * w[(size_t)o * n + i];
    return dx;
}
// ||dW||_F with dW[o][i] = sum_r dy[r][o] x[r][i]
inline double linear_dw_norm(const Mat &dy, const Mat &x, int rows, int n) {
    double s = 0;
    for (int o = 0; o < n; ++o)
        for (int i = 0; i < n; ++i) {
            double g = 0;
            for (int r = 0; r < rows; ++r) g += dy[(size_t)r * n + o] * x[(size_t)r * n + i];
            s += g * g;
        }
    return std::sqrt(s);
}
}  // namespace detail

// The weight-gradient norm of every block, first block first.
inline std::vector<double> weight_grad_norms(bool pre_ln, const Mat &x, const Weights &w, const LayerNormOps &ln) {
    using namespace detail;
    const int rows = w.rows, n = w.n, depth = w.depth;
    std::vector<Mat> h{x};          // h[k]: block k's input
    std::vector<Mat> lin_in(depth);  // the Linear's input in block k
    std::vector<Mat> ln_in(depth);   // the LayerNorm's input in block k
    std::vector<std::vector<Mat>> saved(depth);
    for (int k = 0; k < depth; ++k) {
        const double *wk = w.lin_w + (size_t)k * n * n, *bk = w.lin_b + (size_t)k * n;
        const Mat &hk = h.back();
        Mat next((size_t)rows * n);
        if (pre_ln) {
            ln_in[k] = hk;
            lin_in[k] = ln.forward(hk, saved[k]);
            Mat z = linear(lin_in[k], wk, bk, rows, n);
            for (size_t i = 0; i < next.size(); ++i) next[i] = hk[i] + z[i];
        } else {
            lin_in[k] = hk;
            Mat z = linear(hk, wk, bk, rows, n);
            ln_in[k].resize(z.size());
            for (size_t i = 0; i < z.size(); ++i) ln_in[k][i] = hk[i] + z[i];
            next = ln.forward(ln_in[k], saved[k]);
        }
        h.push_back(next);
    }
    Mat out = linear(h.back(), w.head_w, w.head_b, rows, n);
    Mat dout(out.size());
    for (size_t i = 0; i < out.size(); ++i) dout[i] = 2 * out[i] / (double)out.size();
    Mat dh = linear_dx(dout, w.head_w, rows, n);
    std::vector<double> norms(depth);
    for (int k = depth - 1; k >= 0; --k) {
        const double *wk = w.lin_w + (size_t)k * n * n;
        if (pre_ln) {
            norms[k] = linear_dw_norm(dh, lin_in[k], rows, n);
            Mat dx = ln.backward(ln_in[k], saved[k], linear_dx(dh, wk, rows, n));
            for (size_t i = 0; i < dh.size(); ++i) dh[i] += dx[i];
        } else {
            Mat ds = ln.backward(ln_in[k], saved[k], dh);
            norms[k] = linear_dw_norm(ds, lin_in[k], rows, n);
            Mat dx = linear_dx(ds, wk, rows, n);
            for (size_t i = 0; i < dh.size(); ++i) dh[i] = ds[i] + dx[i];
        }
    }
    return norms;
}

}  // namespace normgen::example
