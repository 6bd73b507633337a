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
// Before anything is written, the call is refused with a UserError naming the tensor when: a
// required tensor is missing; a name is unknown; an optional output is given to a "core" kernel
// (select a full kernel); a data pointer is null; a storage type differs from the kernel's; a rank
// or shape does not match the declaration (axes bound as in the reference, split axes divisible by
// their fixed part); strides are not contiguous row-major; a tensor exceeds 2^31-1 elements; or an
// output overlaps an input or another output in memory, except that an output declared
// `updates X` may be exactly input X's buffer (same pointer, same shape).
//
// Then it calls the kernel; a Halide runtime error becomes a std::runtime_error with Halide's message.
void run_kernel(const Registry::Kernel &k, const std::map<std::string, TensorView> &tensors);

// The halide_type_t of a storage type (f32, f16, bf16, f64).
halide_type_t halide_type_of(DType t);

// The checks alone (everything run_kernel refuses), without calling the kernel.
void check_kernel_call(const Registry::Kernel &k, const std::map<std::string, TensorView> &tensors);

}  // namespace normgen
