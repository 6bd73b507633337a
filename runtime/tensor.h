// A view of caller-owned memory passed to a generated kernel (runtime/run.h). The runtime never
// owns, copies or frees `data`.
#pragma once

#include "dsl/norm_spec.h"

#include <cstdint>
#include <vector>

namespace normgen {

struct TensorView {
    void *data = nullptr;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;    // the declared shape (a split axis such as c = (g, cg) is one extent)
    std::vector<int64_t> strides;  // in elements, one per shape entry; empty = contiguous row-major

    int64_t numel() const {
        int64_t n = 1;
        for (int64_t s : shape) n *= s;
        return n;
    }
};

}  // namespace normgen
