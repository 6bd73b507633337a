// A storage type as an ATen scalar type, for the code that links libtorch (the benchmark's ATen
// baseline, the PyTorch operators in python/). Header-only: runtime/ itself does not use ATen.
#pragma once

#include "dsl/norm_spec.h"

#include <c10/core/ScalarType.h>

namespace normgen {

inline at::ScalarType aten_type(DType t) {
    switch (t) {
    case DType::F32: return at::kFloat;
    case DType::BF16: return at::kBFloat16;
    case DType::F16: return at::kHalf;
    case DType::F64: return at::kDouble;
    }
    return at::kDouble;
}

}  // namespace normgen
