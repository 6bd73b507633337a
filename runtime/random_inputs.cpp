#include "runtime/random_inputs.h"

#include <cmath>
#include <set>

namespace normgen {

AxisExtents choose_extents(const NormSpec &spec, const std::map<std::string, int64_t> &sizes, int64_t fallback) {
    AxisExtents e;
    e.extent.assign(spec.axes.size(), -1);
    for (size_t a = 0; a < spec.axes.size(); ++a) {
        if (spec.axes[a].is_split()) continue;
        auto it = sizes.find(spec.axes[a].name);
        if (it != sizes.end()) e.extent[a] = it->second;
        else if (spec.axes[a].fixed_extent) e.extent[a] = *spec.axes[a].fixed_extent;
        else e.extent[a] = fallback;
    }
    return e;
}

TensorMap random_inputs(const NormSpec &spec, const AxisExtents &ext, const RandomInputOptions &opts) {
    std::mt19937_64 rng(opts.seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::uniform_real_distribution<double> uniform(0.5, 1.5);
    TensorMap m;
    // The offset stresses the statistics' cancellation: it goes to the inputs a reduction reads (the
    // normalized activations), not to others (adaLN's scale and shift, running statistics), whose
    // offset would only push the outputs out of range; without reductions, to every input.
    const std::set<int> reduced = spec.reduced_tensors();
    for (size_t ti = 0; ti < spec.tensors.size(); ++ti) {
        const TensorInfo &t = spec.tensors[ti];
        const double offset = reduced.empty() || reduced.count((int)ti) ? opts.offset : 0.0;
        HostTensor h;
        h.shape = physical_shape(spec, t.dims, ext);
        h.data.resize((size_t)h.numel());
        bool positive = t.name.find("var") != std::string::npos;
        for (double &v : h.data) {
            if (t.role == TensorInfo::Param) {
                v = uniform(rng) * (rng() & 1 ? 1 : -1);
            } else if (positive) {
                v = uniform(rng);
            } else {
                double z = normal(rng);
                if (z == 0) z = 0.5;  // never an exact zero
                v = offset + z;
            }
            // Inputs are drawn in float32 so every storage type sees the same exact values.
            v = (double)(float)v;
        }
        m[t.name] = std::move(h);
    }
    return m;
}

}  // namespace normgen
