// `normgen verify`: run a backend's kernels on the verifier's shape sweep and print the table.
// Backend-neutral: each backend (Halide in `normgen`, MLIR in `normgen-mlir`) supplies a factory
// that compiles one kernel for a declaration, a storage type and a target.
#pragma once

#include "codegen/driver/options.h"
#include "runtime/verify.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace normgen {

// One compiled kernel the verifier can run: float64 inputs (already representable in their storage
// types) -> float64 outputs, every output poisoned before the run.
class VerifyKernel {
public:
    virtual ~VerifyKernel() = default;
    virtual TensorMap run(const TensorMap &inputs, const Overrides &axis_overrides) const = 0;
    virtual StorageMap storage() const = 0;
};

// Compiles the kernel (with its optional outputs) or throws with the reason.
using KernelFactory = std::function<std::unique_ptr<VerifyKernel>(const NormSpec &spec, DType dtype, const std::string &target)>;

int cmd_verify(const VerifyArgs &v, const KernelFactory &make);

}  // namespace normgen
