#include "bench/baseline.h"

#include "bench/thread_pool.h"
#include "runtime/half.h"

#include <algorithm>
#include <stdexcept>

namespace normgen::bench {

int64_t CaseTensors::at(const std::string &axis) const {
    auto it = extent.find(axis);
    if (it == extent.end()) throw std::logic_error("layer '" + layer + "' has no axis '" + axis + "'");
    return it->second;
}

uint8_t *CaseTensors::ptr(const std::string &tensor) const {
    auto it = data.find(tensor);
    if (it == data.end()) throw std::logic_error("layer '" + layer + "' has no tensor '" + tensor + "'");
    return it->second;
}

namespace {

double load(const uint8_t *x, DType t, int64_t i) {
    switch (t) {
    case DType::F32: return reinterpret_cast<const float *>(x)[i];
    case DType::BF16: return bf16_to_float(reinterpret_cast<const uint16_t *>(x)[i]);
    case DType::F16: return half_to_float(reinterpret_cast<const uint16_t *>(x)[i]);
    case DType::F64: return reinterpret_cast<const double *>(x)[i];
    }
    return 0;
}

}  // namespace

Moments row_moments(const uint8_t *x, DType t, int64_t rows, int64_t d) {
    Moments m;
    m.mean.assign(rows, 0);
    m.var.assign(rows, 0);
    const int tasks = (int)std::max<int64_t>(1, std::min<int64_t>(rows, 64));
    parallel_for(tasks, [&](int task) {
        for (int64_t r = rows * task / tasks; r < rows * (task + 1) / tasks; ++r) {
            double s = 0, q = 0;
            for (int64_t i = 0; i < d; ++i) s += load(x, t, r * d + i);
            const double mu = s / d;
            for (int64_t i = 0; i < d; ++i) {
                const double e = load(x, t, r * d + i) - mu;
                q += e * e;
            }
            m.mean[r] = mu;
            m.var[r] = q / d;
        }
    });
    return m;
}

Moments channels_last_group_moments(const uint8_t *x, DType t, int64_t n, int64_t hw, int64_t c, int64_t groups) {
    Moments m;
    m.mean.assign(n * groups, 0);
    m.var.assign(n * groups, 0);
    const int64_t cg = c / groups, count = cg * hw;
    parallel_for((int)std::min<int64_t>(n * groups, 1 << 20), [&](int task) {
        const int64_t b = task / groups, g = task % groups;
        double s = 0, q = 0;
        for (int64_t p = 0; p < hw; ++p)
            for (int64_t k = 0; k < cg; ++k) s += load(x, t, (b * hw + p) * c + g * cg + k);
        const double mu = s / count;
        for (int64_t p = 0; p < hw; ++p)
            for (int64_t k = 0; k < cg; ++k) {
                const double e = load(x, t, (b * hw + p) * c + g * cg + k) - mu;
                q += e * e;
            }
        m.mean[task] = mu;
        m.var[task] = q / count;
    });
    return m;
}

const std::vector<std::string> &baseline_names() {
    static const std::vector<std::string> names{"scalar", "onednn", "torch"};
    return names;
}

std::unique_ptr<Baseline> make_baseline(const std::string &impl, const CaseTensors &t, std::string *why_not) {
    if (impl == "scalar") return make_scalar_baseline(t, why_not);
    if (impl == "onednn") return make_onednn_baseline(t, why_not);
    if (impl == "torch") return make_torch_baseline(t, why_not);
    *why_not = "unknown implementation '" + impl + "'";
    return nullptr;
}

}  // namespace normgen::bench
