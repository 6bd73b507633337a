// The float64 reference: an interpreter of any NormSpec.
//
// It evaluates the declaration as written, with no knowledge of which layer it is: inputs are bound
// to their declared axes (split views resolved from the fixed extents), expressions broadcast by axis
// name, reductions accumulate in double with compensated (Neumaier) summation, and var() is the
// two-pass population variance. It is the "truth" every backend is compared with.
#pragma once

#include "dsl/norm_spec.h"
#include "runtime/npy.h"

#include <map>
#include <string>
#include <vector>

namespace normgen {

using TensorMap = std::map<std::string, HostTensor>;

// Values that replace a declared `const` or fix an axis extent (`axis g = N`) for one evaluation.
using Overrides = std::map<std::string, double>;

struct AxisExtents {
    std::vector<int64_t> extent;  // per atomic axis id; -1 when unbound
};

// Binds every atomic axis from the inputs' shapes; throws UserError naming the tensor on a mismatch
// (missing input, wrong rank, inconsistent extent, split not divisible).
AxisExtents bind_axes(const NormSpec &spec, const TensorMap &inputs, const Overrides &overrides = {});

// The same from the shapes alone (for callers whose tensors are not HostTensors, e.g. the kernel
// runtime): `shapes` maps each input and parameter name to its shape; other names are ignored.
AxisExtents bind_axes(const NormSpec &spec, const std::map<std::string, std::vector<int64_t>> &shapes,
                      const Overrides &overrides = {});

// The physical shape of a declared tensor or output under `ext`.
std::vector<int64_t> physical_shape(const NormSpec &spec, const std::vector<AxisId> &dims, const AxisExtents &ext);

// Evaluates every output (optional ones included). Inputs must be named as declared; parameters too.
// A rank-0 tensor may be given as any one-element array (PyTorch stores scalars as shape [1]).
TensorMap evaluate_reference(const NormSpec &spec, const TensorMap &inputs, const Overrides &overrides = {});

// Checks that every name in `overrides` is a declared const or atomic axis; throws UserError.
void validate_overrides(const NormSpec &spec, const Overrides &overrides);

}  // namespace normgen
