// Quantiles of timing samples: the one definition behind every median, p20 and p80 normgen
// reports (normgen_bench's rows and limits, normgen-measure's results, the tuner's paired ratios,
// the CUDA timings). Interpolated between order statistics, so the median of an even count is the
// mean of the middle two (an upper median read 0-1 sample high on a handful of repetitions).
#pragma once

#include <algorithm>
#include <vector>

namespace normgen {

// The q-quantile (0 <= q <= 1) of the samples, linearly interpolated between the order statistics
// at q (n - 1); 0 for no samples.
inline double quantile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const double pos = q * (double)(v.size() - 1);
    const size_t i = (size_t)pos;
    return i + 1 < v.size() ? v[i] + (pos - (double)i) * (v[i + 1] - v[i]) : v[i];
}

inline double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

}  // namespace normgen
