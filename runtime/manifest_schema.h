// The typed vocabulary of the kernel manifest, shared by the writers (codegen/common/manifest.h)
// and the reader (runtime/registry.h): one spelling each for a kernel's backend, device, variant
// and instruction set, and the one rule that names a kernel's C symbol.
#pragma once

#include "dsl/norm_spec.h"

#include <optional>
#include <string>

namespace normgen {

enum class Backend { Halide, Mlir };
enum class Device { Cpu, Cuda, OpenCl };
// Core: the required outputs only; Full: the optional outputs (saved statistics) too. A layer
// without optional outputs has only a core kernel, which then writes everything.
enum class Variant { Core, Full };
// The instruction set a kernel was compiled for. x86: Avx2 (AVX2 + FMA + F16C), Avx512 (AVX-512
// F/CD/BW/DQ/VL on top); CUDA: Sm90 (cubins for sm_90, or PTX that ptxas assembles for it);
// OpenCL: OpenCl (OpenCL C, compiled by the device's driver).
enum class Isa { Avx2, Avx512, Sm90, OpenCl };

const char *backend_name(Backend b);  // "halide", "mlir"
const char *device_name(Device d);    // "cpu", "cuda", "opencl"
const char *variant_name(Variant v);  // "core", "full"
const char *isa_name(Isa i);          // "avx2", "avx512", "sm_90", "opencl"
std::optional<Backend> parse_backend(const std::string &s);
std::optional<Device> parse_device(const std::string &s);
std::optional<Variant> parse_variant(const std::string &s);
std::optional<Isa> parse_isa(const std::string &s);
Device device_of(Isa i);

// The C symbol of a kernel: <layer>__<dtype>__<tag>__<variant>, where the tag is the ISA for
// Halide kernels ("avx512", "sm90", "opencl") and "mlir_" + the ISA for MLIR ones ("mlir_avx2", "mlir_sm90").
// Every writer (the build, `normgen compile`, the JIT) names kernels through this.
std::string kernel_function_name(const std::string &layer, DType dtype, Backend backend, Isa isa, Variant variant);

}  // namespace normgen
