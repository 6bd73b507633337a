// PyTorch (Debian's libtorch 1.13, ATen CPU) baselines. The library's own ops where it has one
// (native_layer_norm, native_batch_norm, native_group_norm, instance_norm); for RMSNorm, DyT and
// the fused residual add the eager compositions model code writes. The input tensors wrap the
// case's buffers; ATen allocates its outputs, as it does in a model, from a caching allocator
// installed here (freed blocks are kept for the next allocation of the same size, as PyTorch's
// CUDA caching allocator does), so repeated calls do not page-fault fresh output memory in.
// publish() copies the results into the case's buffers for the check, outside the timing.
//
// The backward cases (layer <name>_grad): native_layer_norm_backward, native_batch_norm_backward
// (InstanceNorm: on the [1, n * c, h, w] view, as ATen's instance_norm does), native_group_norm_backward,
// from the saved mean and rstd (computed from x once, outside the timing, where the backward
// declaration recomputes them); RMSNorm, DyT and the fused residual RMSNorm by hand compositions of
// ATen ops (the formulas autograd would run through their eager forward compositions, in f32).
//
// ATen's CPU layer_norm / group_norm / batch_norm want parameters in the activations' dtype, so
// for bf16/f16 cases they are converted once (the case's parameters are representable in that
// type: bench/kernel_case.cpp), not per call.
#include "bench/baseline.h"
#include "runtime/aten_dtype.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/api/include/torch/version.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>

namespace normgen::bench {
namespace {

// Blocks by exact size; never returned to the system while the benchmark runs (cases are freed
// between shapes by ATen, their blocks reused by the next case of the same size or kept).
class CachingCpuAllocator final : public c10::Allocator {
public:
    c10::DataPtr allocate(size_t n) const override {
        void *p = nullptr;
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = free_.find(n);
            if (it != free_.end()) {
                p = it->second;
                free_.erase(it);
            }
        }
        if (!p) {
            p = std::aligned_alloc(64, std::max<size_t>(64, (n + 63) / 64 * 64));
            if (!p) throw std::bad_alloc();
            std::lock_guard<std::mutex> g(mu_);
            size_[p] = n;
        }
        return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &release; }

    // Frees every cached block (between cases, so the big ones do not pile up).
    void trim() {
        std::lock_guard<std::mutex> g(mu_);
        for (auto &[n, p] : free_) {
            size_.erase(p);
            std::free(p);
        }
        free_.clear();
    }
    static CachingCpuAllocator &get() {
        static CachingCpuAllocator a;
        return a;
    }

private:
    static void release(void *p) {
        CachingCpuAllocator &a = get();
        std::lock_guard<std::mutex> g(a.mu_);
        a.free_.emplace(a.size_.at(p), p);
    }
    mutable std::mutex mu_;
    mutable std::multimap<size_t, void *> free_;
    mutable std::map<void *, size_t> size_;
};

class Torch : public Baseline {
public:
    explicit Torch(const CaseTensors &t) : t_(t) {}
    std::vector<std::string> writes() const override {
        std::vector<std::string> w = direct_;
        for (const auto &[name, _] : outputs_) w.push_back(name);
        return w;
    }
    std::string note() const override { return note_; }

    // The activations as ATen sees them: [n, c, h, w] (the NHWC buffer of group_norm_nhwc as a
    // channels_last NCHW tensor) or [rows, d].
    struct Layout {
        bool image = false;
        std::vector<int64_t> shape, strides;
    };
    Layout layout(const std::string &forward_layer) const {
        Layout r;
        r.image = t_.extent.count("n") != 0;
        if (r.image) {
            const int64_t n = t_.at("n"), c = t_.at("c"), h = t_.at("h"), w = t_.at("w");
            r.shape = {n, c, h, w};
            if (forward_layer == "group_norm_nhwc")
                r.strides = {h * w * c, 1, w * c, c};
            else
                r.strides = {c * h * w, h * w, w, 1};
        } else {
            r.shape = {t_.at("rows"), t_.at("d")};
            r.strides = {r.shape[1], 1};
        }
        return r;
    }

    std::string build() {
        const std::string &l = t_.layer;
        if (l.size() > 5 && l.compare(l.size() - 5, 5, "_grad") == 0) return build_backward(l.substr(0, l.size() - 5));
        const at::ScalarType st = aten_type(t_.dtype);
        const Layout lay = layout(l);
        const bool image = lay.image;
        const std::vector<int64_t> &shape = lay.shape, &strides = lay.strides;
        auto act = [&](const std::string &name) { return at::from_blob(t_.ptr(name), shape, strides, at::TensorOptions().dtype(st)); };
        auto param = [&](const std::string &name) -> c10::optional<at::Tensor> {
            if (!t_.has(name)) return c10::nullopt;
            int64_t n = 1;
            if (name != "alpha") n = image ? t_.at("c") : t_.at("d");
            std::vector<int64_t> s;
            if (name != "alpha") s = {n};
            at::Tensor p = at::from_blob(t_.ptr(name), s, at::TensorOptions().dtype(at::kFloat));
            return st == at::kFloat ? p : p.to(st);
        };
        x_ = act("x");
        outputs_["y"] = act("y");
        weight_ = param("weight");
        bias_ = param("bias");
        if (st != at::kFloat && (weight_ || bias_)) note_ = "parameters converted to " + std::string(dtype_name(t_.dtype)) + " once";

        if (l == "layer_norm" || l == "layer_norm_weight_only") {
            const int64_t d = t_.at("d");
            op_ = [this, d] { results_["y"] = std::get<0>(at::native_layer_norm(x_, {d}, weight_, bias_, 1e-5)); };
        } else if (l == "rms_norm") {
            // LLaMA's RMSNorm (x * rsqrt(mean(x^2) + eps) * w), in f32 for low-precision inputs
            // as HF's LlamaRMSNorm does, rounded once at the end.
            const at::Tensor w = *param("weight");
            op_ = [this, w, st] {
                at::Tensor xf = st == at::kFloat ? x_ : x_.to(at::kFloat);
                at::Tensor r = xf * at::rsqrt(xf.pow(2).mean({-1}, true) + 1e-6) * w.to(at::kFloat);
                results_["y"] = st == at::kFloat ? r : r.to(st);
            };
            note_ = "eager composition x * rsqrt(mean(x^2) + eps) * w";
        } else if (l == "fused_add_rms_norm") {
            residual_ = act("residual");
            outputs_["h"] = act("h");
            const at::Tensor w = *weight_;
            op_ = [this, w] {
                at::Tensor h = x_ + residual_;
                results_["h"] = h;
                results_["y"] = h * at::rsqrt(h.pow(2).mean({-1}, true) + 1e-6) * w;
            };
            note_ = "eager composition h = x + r; h * rsqrt(mean(h^2) + eps) * w";
        } else if (l == "dyt") {
            const at::Tensor a = *param("alpha"), w = *weight_, b = *bias_;
            op_ = [this, a, w, b] { results_["y"] = w * at::tanh(a * x_) + b; };
            note_ = "eager composition w * tanh(a * x) + b";
        } else if (l == "batch_norm_train") {
            const int64_t c = t_.at("c");
            auto vec = [&](const std::string &name) { return at::from_blob(t_.ptr(name), {c}, at::TensorOptions().dtype(at::kFloat)); };
            rm_ = vec("running_mean");
            rv_ = vec("running_var");
            rmo_ = vec("running_mean_out");
            rvo_ = vec("running_var_out");
            op_ = [this] {
                // Start from the running statistics (ATen updates them in place).
                rmo_.copy_(rm_);
                rvo_.copy_(rv_);
                results_["y"] = std::get<0>(at::native_batch_norm(x_, weight_, bias_, rmo_, rvo_, true, 0.1, 1e-5));
            };
            direct_ = {"running_mean_out", "running_var_out"};
        } else if (l == "batch_norm_eval") {
            const int64_t c = t_.at("c");
            auto vec = [&](const std::string &name) { return at::from_blob(t_.ptr(name), {c}, at::TensorOptions().dtype(at::kFloat)); };
            rm_ = vec("running_mean");
            rv_ = vec("running_var");
            op_ = [this] { results_["y"] = std::get<0>(at::native_batch_norm(x_, weight_, bias_, rm_, rv_, false, 0.1, 1e-5)); };
        } else if (l == "group_norm_nchw" || l == "group_norm_nhwc") {
            const int64_t n = t_.at("n"), c = t_.at("c"), hw = t_.at("h") * t_.at("w");
            op_ = [this, n, c, hw] { results_["y"] = std::get<0>(at::native_group_norm(x_, weight_, bias_, n, c, hw, 32, 1e-5)); };
            if (l == "group_norm_nhwc") note_ = "channels_last input";
        } else if (l == "instance_norm") {
            op_ = [this] { results_["y"] = at::instance_norm(x_, {}, {}, {}, {}, true, 0.1, 1e-5, false); };
        } else {
            return "no ATen op for '" + l + "'";
        }
        return "";
    }

    // The backward of forward layer `l`: d_x and the parameter gradients into results_.
    std::string build_backward(const std::string &l) {
        const at::ScalarType st = aten_type(t_.dtype);
        const Layout lay = layout(l);
        const bool image = lay.image;
        const std::vector<int64_t> &shape = lay.shape, &strides = lay.strides;
        const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat);
        auto act = [&](const std::string &name) { return at::from_blob(t_.ptr(name), shape, strides, at::TensorOptions().dtype(st)); };
        auto vec = [&](const std::string &name, std::vector<int64_t> s) { return at::from_blob(t_.ptr(name), s, f32); };
        const int64_t np = image ? t_.at("c") : t_.at("d");
        x_ = act("x");
        dy_ = act("d_y");
        outputs_["d_x"] = act("d_x");
        for (const char *p : {"d_weight", "d_bias"})
            if (t_.has(p)) outputs_[p] = vec(p, {np});
        if (t_.has("d_alpha")) outputs_["d_alpha"] = vec("d_alpha", {});
        if (t_.has("weight")) {
            at::Tensor w = vec("weight", {np});
            weight_ = st == at::kFloat ? w : w.to(st);
        }
        // The saved statistics, [count] f32 (or the activations' type, where ATen wants that).
        auto saved = [&](int64_t rows, int64_t d) {
            if (t_.has("mu") && t_.has("rstd")) {
                mean_ = vec("mu", {rows}).clone();
                rstd_ = vec("rstd", {rows}).clone();
            } else {
                Moments m = l == "group_norm_nhwc" ? channels_last_group_moments(t_.ptr("x"), t_.dtype, shape[0], shape[2] * shape[3], shape[1], 32)
                                                   : row_moments(t_.ptr("x"), t_.dtype, rows, d);
                mean_ = at::empty({rows}, f32);
                rstd_ = at::empty({rows}, f32);
                for (int64_t i = 0; i < rows; ++i) {
                    mean_.data_ptr<float>()[i] = (float)m.mean[i];
                    rstd_.data_ptr<float>()[i] = (float)(1.0 / std::sqrt(m.var[i] + 1e-5));
                }
                note_ = "mean and rstd computed from x once, outside the timing (the forward's saved statistics)";
            }
        };
        const bool has_w = t_.has("d_weight"), has_b = t_.has("d_bias");
        auto take3 = [this](const std::tuple<at::Tensor, at::Tensor, at::Tensor> &r) {
            results_["d_x"] = std::get<0>(r);
            if (outputs_.count("d_weight")) results_["d_weight"] = std::get<1>(r);
            if (outputs_.count("d_bias")) results_["d_bias"] = std::get<2>(r);
        };
        if (l == "layer_norm" || l == "layer_norm_weight_only" || l == "layer_norm_no_affine") {
            const int64_t rows = shape[0], d = shape[1];
            saved(rows, d);
            mean_ = mean_.view({rows, 1}).to(st);
            rstd_ = rstd_.view({rows, 1}).to(st);
            if (st != at::kFloat) note_ += std::string(note_.empty() ? "" : "; ") + "mean and rstd in " + dtype_name(t_.dtype) + " (ATen 1.13 keeps them in the input's type)";
            // ATen 1.13 shapes d_bias like the bias: a zero one stands in (it does not enter the gradients).
            if (has_b) bias_ = at::zeros({d}, at::TensorOptions().dtype(st));
            op_ = [this, d, has_w, has_b, take3] {
                take3(at::native_layer_norm_backward(dy_, x_, {d}, mean_, rstd_, weight_, bias_, {true, has_w, has_b}));
            };
        } else if (l == "batch_norm_train" || l == "instance_norm") {
            const bool inst = l == "instance_norm";
            const int64_t ch = inst ? shape[0] * shape[1] : shape[1];
            saved(ch, shape[2] * shape[3]);
            if (inst) {
                x_ = x_.view({1, ch, shape[2], shape[3]});
                dy_ = dy_.view({1, ch, shape[2], shape[3]});
                note_ = "native_batch_norm_backward on the [1, n * c, h, w] view (ATen's instance_norm)";
            }
            op_ = [this, has_w, has_b, take3, inst, shape] {
                auto r = at::native_batch_norm_backward(dy_, x_, weight_, {}, {}, mean_, rstd_, true, 1e-5, {true, has_w, has_b});
                if (inst) std::get<0>(r) = std::get<0>(r).view(shape);
                take3(r);
            };
        } else if (l == "group_norm_nchw" || l == "group_norm_nhwc") {
            const int64_t n = shape[0], c = shape[1], hw = shape[2] * shape[3];
            saved(n * 32, c / 32 * hw);
            mean_ = mean_.view({n, 32}).to(st);
            rstd_ = rstd_.view({n, 32}).to(st);
            // ATen 1.13's group_norm backward reads a channels_last tensor as if it were contiguous
            // (wrong d_x): the NHWC case converts both tensors, inside the timing, as eager code must.
            const bool nhwc = l == "group_norm_nhwc";
            if (nhwc) note_ += std::string(note_.empty() ? "" : "; ") + "channels_last x and d_y made contiguous in every call (1.13's backward needs it)";
            op_ = [this, n, c, hw, has_w, has_b, take3, nhwc] {
                if (!nhwc) return take3(at::native_group_norm_backward(dy_, x_, mean_, rstd_, weight_, n, c, hw, 32, {true, has_w, has_b}));
                take3(at::native_group_norm_backward(dy_.contiguous(), x_.contiguous(), mean_, rstd_, weight_, n, c, hw, 32, {true, has_w, has_b}));
            };
        } else if (l == "rms_norm") {
            const at::Tensor w = vec("weight", {np}), rstd = vec("rstd", {shape[0], 1});
            op_ = [this, w, rstd, st] {
                at::Tensor xf = x_.to(at::kFloat), g = dy_.to(at::kFloat);
                at::Tensor xhat = xf * rstd, gw = g * w;
                at::Tensor dx = rstd * (gw - xhat * (gw * xhat).mean({-1}, true));
                results_["d_x"] = st == at::kFloat ? dx : dx.to(st);
                results_["d_weight"] = (g * xhat).sum({0});
            };
            note_ = "hand composition rstd * (g w - xhat mean(g w xhat)), d_w = sum(g xhat), in f32";
        } else if (l == "fused_add_rms_norm") {
            residual_ = act("residual");
            d_h_ = act("d_h");
            outputs_["d_residual"] = act("d_residual");
            const at::Tensor w = vec("weight", {np});
            op_ = [this, w, st] {
                at::Tensor h = x_.to(at::kFloat) + residual_.to(at::kFloat), g = dy_.to(at::kFloat);
                at::Tensor rstd = at::rsqrt(h.pow(2).mean({-1}, true) + 1e-6);
                at::Tensor hhat = h * rstd, gw = g * w;
                at::Tensor dh = d_h_.to(at::kFloat) + rstd * (gw - hhat * (gw * hhat).mean({-1}, true));
                results_["d_x"] = st == at::kFloat ? dh : dh.to(st);
                results_["d_residual"] = results_["d_x"];
                results_["d_weight"] = (g * hhat).sum({0});
            };
            note_ = "hand composition: h = x + r and rstd recomputed, d_h added to the RMSNorm backward, in f32";
        } else if (l == "dyt") {
            const at::Tensor a = vec("alpha", {}), w = vec("weight", {np});
            op_ = [this, a, w, st] {
                at::Tensor xf = x_.to(at::kFloat), g = dy_.to(at::kFloat);
                at::Tensor t = at::tanh(a * xf), gw = g * w, s = gw * (1 - t * t);
                at::Tensor dx = a * s;
                results_["d_x"] = st == at::kFloat ? dx : dx.to(st);
                results_["d_alpha"] = (s * xf).sum();
                results_["d_weight"] = (g * t).sum({0});
                results_["d_bias"] = g.sum({0});
            };
            note_ = "hand composition of tanh's derivative, in f32";
        } else {
            return "no ATen backward for '" + l + "'";
        }
        return "";
    }

    ~Torch() override {
        results_.clear();
        outputs_.clear();
        CachingCpuAllocator::get().trim();
    }
    void run() override { op_(); }
    void publish() override {
        for (auto &[name, r] : results_) outputs_.at(name).copy_(r);
    }

private:
    CaseTensors t_;
    at::Tensor x_, residual_, rm_, rv_, rmo_, rvo_, dy_, d_h_, mean_, rstd_;
    c10::optional<at::Tensor> weight_, bias_;
    std::map<std::string, at::Tensor> outputs_, results_;
    std::vector<std::string> direct_;
    std::function<void()> op_;
    std::string note_;
};

}  // namespace

std::unique_ptr<Baseline> make_torch_baseline(const CaseTensors &t, std::string *why_not) {
    auto b = std::make_unique<Torch>(t);
    try {
        *why_not = b->build();
    } catch (const std::exception &e) {
        *why_not = std::string("ATen refused the case: ") + e.what();
    }
    if (!why_not->empty()) return nullptr;
    return b;
}

std::string torch_version() { return TORCH_VERSION; }

void configure_vendor_threads(int n) {
    c10::SetCPUAllocator(&CachingCpuAllocator::get(), /*priority=*/100);
    omp_set_num_threads(n);  // oneDNN's OpenMP runtime (the same libgomp as ATen's)
    at::set_num_threads(n);
}

}  // namespace normgen::bench
