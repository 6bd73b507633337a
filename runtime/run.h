// Calling a generated kernel on caller-owned tensors.
#pragma once

#include "runtime/registry.h"
#include "runtime/tensor.h"

#include <HalideRuntime.h>

#include <map>
#include <string>

namespace normgen {

// Runs `k` on `tensors`, keyed by declared name: every input and parameter, every required output,
// and any optional outputs the caller wants (a "full" kernel's optional outputs that are not given
// are written to scratch memory and dropped).
//
// Before anything is written, the call is refused with a UserError naming the tensor when: a kernel
// with streaming stores gets outputs it cannot take (Kernel::refuses: unaligned, or an extent not a
// multiple of its vector; Registry::select_for never picks it for such a call); a
// required tensor is missing; a name is unknown; an optional output is given to a "core" kernel
// (select a full kernel); a data pointer is null; a storage type differs from the kernel's; a rank
// or shape does not match the declaration (axes bound as in the reference, split axes divisible by
// their fixed part); strides are not contiguous row-major, except an input's or a parameter's for an
// MLIR kernel (strided memrefs: any outer strides in [0, 2^31), the innermost axis's 1, passed
// through); an output overlaps an input or another
// output in memory, except that an output declared `updates X` may be exactly input X's buffer
// (same pointer, same shape); or a tensor exceeds 2^31-1 elements and the call cannot be split
// (below; the message names the axis and why).
//
// Then it calls the kernel; a Halide runtime error becomes a std::runtime_error with Halide's message.
// A GPU kernel (device cuda or opencl) first needs its device: without one, DeviceUnavailable
// ("no CUDA device: ...", runtime/device.h), nothing written; it takes the same host tensors,
// copies them to the device and its outputs back, and frees what it allocated there.
// Past 2^31 elements: the kernels address at most 2^31-1 elements per tensor (32-bit extents and
// strides), so a call whose largest tensor has more is cut along that tensor's outermost axis into
// chunks of at most 2^31-1 elements per tensor, one kernel call each, in order. That axis must be
// one no reduction reduces (nor count() counts), every output must have it, and every tensor that
// has it must have it outermost (a chunk is then a contiguous slice); tensors without it are passed
// whole. A LayerNorm of 2^32 rows is four calls; one row of 2^31 elements, or a BatchNorm whose
// outermost axis n is reduced, is refused.
//
// `axes` sets the extent of an axis the declaration fixes (GroupNorm's `axis g = 32` at 16 groups):
// the kernels take any extent of it; the default is the declared one.
void run_kernel(const Registry::Kernel &k, const std::map<std::string, TensorView> &tensors, const Overrides &axes = {});

// run_kernel on float64 tensors (the verifier's and the tests' currency): the inputs (by name, already
// representable in their storage types) are encoded to the kernel's storage types, every output
// is poisoned (NaN) before the call, each tensor in 64-byte aligned memory; returns the outputs as
// float64. The call's shapes come from the inputs, exactly as a program's.
TensorMap run_kernel_f64(const Registry::Kernel &k, const TensorMap &inputs, const Overrides &axes = {});

// The halide_type_t of a storage type (f32, f16, bf16, f64).
halide_type_t halide_type_of(DType t);

// The checks alone (everything run_kernel refuses), without calling the kernel.
void check_kernel_call(const Registry::Kernel &k, const std::map<std::string, TensorView> &tensors, const Overrides &axes = {});

}  // namespace normgen
