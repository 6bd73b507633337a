// `normgen verify`: run a backend's kernels on the verifier's shape sweep and print the table.
// Backend-neutral: each backend (Halide in `normgen`, MLIR in `normgen-mlir`) supplies a factory
// that compiles one kernel for a declaration, a storage type and a target (compiled_kernel.h).
#pragma once

#include "codegen/tool/compiled_kernel.h"
#include "codegen/tool/options.h"
#include "runtime/verify.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace normgen {

int cmd_verify(const VerifyArgs &v, const KernelFactory &make);

}  // namespace normgen
