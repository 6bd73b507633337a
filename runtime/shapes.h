// Tensor shapes against a declaration: binding every atomic axis of a NormSpec from the shapes of a
// call's inputs (refusing a bad call with a message naming the tensor), and the physical shape of
// a declared tensor. Part of the shipping runtime: the registry's argument checks (runtime/run.h)
// use it, and so do the reference interpreter and the verifier.
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
// Storage type of each input/param/output a kernel uses.
using StorageMap = std::map<std::string, DType>;

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

// Checks that every name in `overrides` is a declared const or atomic axis; throws UserError.
void validate_overrides(const NormSpec &spec, const Overrides &overrides);

}  // namespace normgen
