// oneDNN (Debian's 2.6) baselines: layer_normalization (scale + shift, and the scale-only form) and
// batch_normalization (training and inference), forward, on the case's own buffers (no copies); and
// their backward (prop_kind::backward: diff_src with diff_scale / diff_shift; backward_data without
// scale and shift) for the backward cases (layer <name>_grad), from the saved mean and variance.
// 2.6 has no RMSNorm, GroupNorm or DyT primitive; InstanceNorm is a layer_normalization over h x w
// with neither scale nor shift (each (n, c) plane is one "row").
#include "bench/baseline.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <oneapi/dnnl/dnnl_version.h>

#include <cmath>
#include <unordered_map>
#include <vector>

namespace normgen::bench {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

memory::data_type dnnl_type(DType t) {
    switch (t) {
    case DType::F32: return memory::data_type::f32;
    case DType::BF16: return memory::data_type::bf16;
    case DType::F16: return memory::data_type::f16;
    default: return memory::data_type::undef;
    }
}

dnnl::engine &engine() {
    static dnnl::engine e(dnnl::engine::kind::cpu, 0);
    return e;
}

class OneDnn : public Baseline {
public:
    OneDnn(const CaseTensors &t) : t_(t), stream_(engine()) {}
    std::vector<std::string> writes() const override { return writes_; }
    void run() override {
        prim_.execute(stream_, args_);
        stream_.wait();
        if (t_.layer == "batch_norm_train") update_running_stats();  // not batch_norm_train_grad
    }
    std::string note() const override { return note_; }

    // Builds the primitive; returns "" or why it cannot.
    std::string build() {
        const std::string &l = t_.layer;
        if (l.size() > 5 && l.compare(l.size() - 5, 5, "_grad") == 0) return build_backward(l.substr(0, l.size() - 5));
        const memory::data_type dt = dnnl_type(t_.dtype);
        auto wrap = [&](const memory::desc &md, void *p) { return memory(md, engine(), p); };
        if (l == "layer_norm" || l == "layer_norm_weight_only" || l == "instance_norm") {
            int64_t rows, d;
            auto flags = dnnl::normalization_flags::none;
            if (l == "instance_norm") {
                rows = t_.at("n") * t_.at("c");
                d = t_.at("h") * t_.at("w");
                note_ = "layer_normalization over h x w (no scale, no shift): 2.6 has no instance-norm primitive";
            } else {
                rows = t_.at("rows");
                d = t_.at("d");
                flags = l == "layer_norm" ? dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift
                                          : dnnl::normalization_flags::use_scale;
            }
            memory::desc md({rows, d}, dt, tag::ab), pmd({d}, memory::data_type::f32, tag::a);
            dnnl::layer_normalization_forward::desc desc(dnnl::prop_kind::forward_inference, md, 1e-5f, flags);
            dnnl::layer_normalization_forward::primitive_desc pd(desc, engine());
            prim_ = dnnl::layer_normalization_forward(pd);
            args_[DNNL_ARG_SRC] = wrap(md, t_.ptr("x"));
            args_[DNNL_ARG_DST] = wrap(md, t_.ptr("y"));
            if (t_.has("weight")) args_[DNNL_ARG_SCALE] = wrap(pmd, t_.ptr("weight"));
            if (t_.has("bias")) args_[DNNL_ARG_SHIFT] = wrap(pmd, t_.ptr("bias"));
            impl_ = pd.impl_info_str();
            writes_ = {"y"};
            return "";
        }
        if (l == "batch_norm_train" || l == "batch_norm_eval") {
            const int64_t n = t_.at("n"), c = t_.at("c"), h = t_.at("h"), w = t_.at("w");
            memory::desc md({n, c, h, w}, dt, tag::nchw), pmd({c}, memory::data_type::f32, tag::a);
            const bool train = l == "batch_norm_train";
            auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
            if (!train) flags = flags | dnnl::normalization_flags::use_global_stats;
            dnnl::batch_normalization_forward::desc desc(train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference, md,
                                                         1e-5f, flags);
            dnnl::batch_normalization_forward::primitive_desc pd(desc, engine());
            prim_ = dnnl::batch_normalization_forward(pd);
            args_[DNNL_ARG_SRC] = wrap(md, t_.ptr("x"));
            args_[DNNL_ARG_DST] = wrap(md, t_.ptr("y"));
            args_[DNNL_ARG_SCALE] = wrap(pmd, t_.ptr("weight"));
            args_[DNNL_ARG_SHIFT] = wrap(pmd, t_.ptr("bias"));
            if (train) {
                mean_.assign(c, 0.0f);
                var_.assign(c, 0.0f);
                args_[DNNL_ARG_MEAN] = wrap(pmd, mean_.data());
                args_[DNNL_ARG_VARIANCE] = wrap(pmd, var_.data());
                if (pd.workspace_desc().get_size()) {
                    workspace_.resize(pd.workspace_desc().get_size());
                    args_[DNNL_ARG_WORKSPACE] = wrap(pd.workspace_desc(), workspace_.data());
                }
                count_ = (double)n * h * w;
                writes_ = {"y", "running_mean_out", "running_var_out"};
                note_ = "running statistics updated from oneDNN's batch mean and variance (2 x C floats) after each call";
            } else {
                args_[DNNL_ARG_MEAN] = wrap(pmd, t_.ptr("running_mean"));
                args_[DNNL_ARG_VARIANCE] = wrap(pmd, t_.ptr("running_var"));
                writes_ = {"y"};
            }
            impl_ = pd.impl_info_str();
            return "";
        }
        if (l == "rms_norm" || l == "fused_add_rms_norm") return "oneDNN 2.6 has no RMSNorm primitive";
        if (l.rfind("group_norm", 0) == 0) return "oneDNN 2.6 has no GroupNorm primitive";
        if (l == "dyt") return "oneDNN 2.6 has no DyT primitive (tanh is an unfused eltwise)";
        return "no oneDNN primitive for '" + l + "'";
    }
    const std::string &impl() const { return impl_; }

private:
    // The saved statistics as oneDNN takes them: the mean and the variance (var = 1 / rstd^2 - eps
    // from a saved rstd; from x itself when the backward declaration recomputes them).
    void saved_statistics(int64_t rows, int64_t d) {
        if (t_.has("mu") && t_.has("rstd")) {
            const float *mu = t_.f32("mu"), *rstd = t_.f32("rstd");
            mean_.assign(mu, mu + rows);
            var_.resize(rows);
            for (int64_t i = 0; i < rows; ++i) var_[i] = (float)(1.0 / ((double)rstd[i] * rstd[i]) - 1e-5);
            note_ = "variance from the saved rstd (1 / rstd^2 - eps), once";
        } else {
            Moments m = row_moments(t_.ptr("x"), t_.dtype, rows, d);
            mean_.assign(m.mean.begin(), m.mean.end());
            var_.assign(m.var.begin(), m.var.end());
            note_ = "mean and variance computed from x once, outside the timing (the forward's saved statistics)";
        }
    }

    std::string build_backward(const std::string &l) {
        const memory::data_type dt = dnnl_type(t_.dtype);
        auto wrap = [&](const memory::desc &md, void *p) { return memory(md, engine(), p); };
        using dnnl::normalization_flags;
        const bool scale = t_.has("weight"), shift = t_.has("d_bias");
        auto flags = normalization_flags::none;
        if (scale) flags = flags | normalization_flags::use_scale;
        if (shift) flags = flags | normalization_flags::use_shift;
        const dnnl::prop_kind kind = scale || shift ? dnnl::prop_kind::backward : dnnl::prop_kind::backward_data;
        memory::desc md, pmd, smd;
        if (l == "layer_norm" || l == "layer_norm_weight_only" || l == "layer_norm_no_affine" || l == "instance_norm") {
            int64_t rows, d;
            if (l == "instance_norm") {
                rows = t_.at("n") * t_.at("c");
                d = t_.at("h") * t_.at("w");
            } else {
                rows = t_.at("rows");
                d = t_.at("d");
            }
            md = memory::desc({rows, d}, dt, tag::ab);
            pmd = memory::desc({d}, memory::data_type::f32, tag::a);
            smd = memory::desc({rows}, memory::data_type::f32, tag::a);
            saved_statistics(rows, d);
            dnnl::layer_normalization_forward::desc fdesc(dnnl::prop_kind::forward_training, md, 1e-5f, flags);
            dnnl::layer_normalization_forward::primitive_desc fpd(fdesc, engine());
            dnnl::layer_normalization_backward::desc bdesc(kind, md, md, 1e-5f, flags);
            dnnl::layer_normalization_backward::primitive_desc pd(bdesc, engine(), fpd);
            prim_ = dnnl::layer_normalization_backward(pd);
            impl_ = pd.impl_info_str();
        } else if (l == "batch_norm_train") {
            const int64_t n = t_.at("n"), c = t_.at("c"), h = t_.at("h"), w = t_.at("w");
            md = memory::desc({n, c, h, w}, dt, tag::nchw);
            pmd = smd = memory::desc({c}, memory::data_type::f32, tag::a);
            saved_statistics(c, 0);
            dnnl::batch_normalization_forward::desc fdesc(dnnl::prop_kind::forward_training, md, 1e-5f, flags);
            dnnl::batch_normalization_forward::primitive_desc fpd(fdesc, engine());
            dnnl::batch_normalization_backward::desc bdesc(kind, md, md, 1e-5f, flags);
            dnnl::batch_normalization_backward::primitive_desc pd(bdesc, engine(), fpd);
            prim_ = dnnl::batch_normalization_backward(pd);
            impl_ = pd.impl_info_str();
            if (pd.workspace_desc().get_size()) return "oneDNN's batch_normalization backward wants a workspace here";
        } else if (l == "rms_norm" || l == "fused_add_rms_norm") {
            return "oneDNN 2.6 has no RMSNorm primitive";
        } else if (l.rfind("group_norm", 0) == 0) {
            return "oneDNN 2.6 has no GroupNorm primitive";
        } else if (l == "dyt") {
            return "oneDNN 2.6 has no DyT primitive (tanh is an unfused eltwise)";
        } else {
            return "no oneDNN backward primitive for '" + l + "'";
        }
        args_[DNNL_ARG_SRC] = wrap(md, t_.ptr("x"));
        args_[DNNL_ARG_DIFF_DST] = wrap(md, t_.ptr("d_y"));
        args_[DNNL_ARG_DIFF_SRC] = wrap(md, t_.ptr("d_x"));
        args_[DNNL_ARG_MEAN] = wrap(smd, mean_.data());
        args_[DNNL_ARG_VARIANCE] = wrap(smd, var_.data());
        writes_ = {"d_x"};
        if (scale) {
            args_[DNNL_ARG_SCALE] = wrap(pmd, t_.ptr("weight"));
            args_[DNNL_ARG_DIFF_SCALE] = wrap(pmd, t_.ptr("d_weight"));
            writes_.push_back("d_weight");
        }
        if (shift) {
            // The shift does not enter the gradients, but the primitive wants it with use_shift.
            shift_.assign(pmd.get_size() / sizeof(float), 0.0f);
            args_[DNNL_ARG_SHIFT] = wrap(pmd, shift_.data());
            args_[DNNL_ARG_DIFF_SHIFT] = wrap(pmd, t_.ptr("d_bias"));
            writes_.push_back("d_bias");
        }
        return "";
    }

    void update_running_stats() {
        const float *rm = t_.f32("running_mean"), *rv = t_.f32("running_var");
        float *rmo = t_.f32("running_mean_out"), *rvo = t_.f32("running_var_out");
        const double unbias = count_ / (count_ - 1);
        for (size_t ch = 0; ch < mean_.size(); ++ch) {
            rmo[ch] = (float)(0.9 * rm[ch] + 0.1 * mean_[ch]);
            rvo[ch] = (float)(0.9 * rv[ch] + 0.1 * var_[ch] * unbias);
        }
    }

    CaseTensors t_;
    dnnl::stream stream_;
    dnnl::primitive prim_;
    std::unordered_map<int, memory> args_;
    std::vector<float> mean_, var_, shift_;
    std::vector<uint8_t> workspace_;
    std::vector<std::string> writes_;
    std::string note_, impl_;
    double count_ = 0;
};

}  // namespace

std::unique_ptr<Baseline> make_onednn_baseline(const CaseTensors &t, std::string *why_not) {
    auto b = std::make_unique<OneDnn>(t);
    try {
        *why_not = b->build();
    } catch (const dnnl::error &e) {
        *why_not = std::string("oneDNN ") + onednn_version() + " has no " + dtype_name(t.dtype) + " implementation here (" + e.what() + ")";
    }
    if (!why_not->empty()) return nullptr;
    return b;
}

std::string onednn_version() {
    const dnnl_version_t *v = dnnl_version();
    return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
           (v->cpu_runtime == DNNL_RUNTIME_OMP ? " (OpenMP)" : v->cpu_runtime == DNNL_RUNTIME_TBB ? " (TBB)" : "");
}

}  // namespace normgen::bench
