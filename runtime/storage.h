// Storage types in memory: float64 host values <-> f32 / bf16 / f16 bytes, rounded to nearest even.
#pragma once

#include "dsl/norm_spec.h"
#include "runtime/npy.h"

#include <cstdint>
#include <vector>

namespace normgen {

size_t dtype_size(DType t);

// Rounds each value to `t` (f64 -> f32 first for bf16/f16, as a kernel storing f32 math would not:
// bf16/f16 are rounded directly from the double, so the result is the correctly rounded value).
std::vector<uint8_t> encode(const std::vector<double> &values, DType t);
std::vector<double> decode(const uint8_t *bytes, size_t count, DType t);

// The value `v` correctly rounded to `t`, as a double.
double round_to(double v, DType t);

// The spacing of `t` at |v| (one unit in the last place), for error bounds.
double ulp_of(double v, DType t);

}  // namespace normgen
