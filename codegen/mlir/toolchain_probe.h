// Toolchain probe for the MLIR backend: proves that a kernel can be built with the MLIR C++ API,
// lowered to LLVM with a C++ pass pipeline, and turned into machine code — both JIT-executed here
// and written out as an object file, the form the real kernels take.
//
// Deliberately free of MLIR headers: callers need not compile against MLIR.
#pragma once

#include <cstdint>
#include <string>

namespace normgen::mlir_probe {

// Builds `func.func @sum_sq(memref<?xf32>) -> f32` (a linalg.generic reduction of x*x), verifies it,
// lowers it to the LLVM dialect, JIT-compiles it for the host and runs it on data[0..n).
// Throws std::runtime_error carrying MLIR's diagnostics if any step fails.
float sum_of_squares(const float* data, std::int64_t n);

// Same kernel and pipeline, translated to LLVM IR and compiled by LLVM's TargetMachine for the host
// into an ELF object at `path`, exporting the C-ABI symbol returned by kernel_c_symbol().
// Throws std::runtime_error on failure.
void emit_sum_of_squares_object(const std::string& path);

// `_mlir_ciface_sum_sq`: float(StridedMemRefType<float, 1>*), the wrapper MLIR emits for C callers.
const char* kernel_c_symbol();

}  // namespace normgen::mlir_probe
