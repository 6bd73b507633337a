// The table that maps each generated kernel's function name (the manifest's "function") to its
// Halide `_argv` entry point. The build generates its definition (kernel_table.cpp, from the same
// fragments as manifest.json) into the normgen_kernels library; a program linking that library
// passes kKernelTable to Registry::load (runtime/registry.h).
//
// The `_argv` convention (Halide AOT): args[i] is the i-th argument of the pipeline in manifest
// order; for a buffer argument it is the `halide_buffer_t *` itself (for a scalar it would be a
// pointer to the value; normgen kernels take buffers only). The return value is 0 on success, else a
// Halide error code, after the runtime's error handler has received the message.
#pragma once

#include <cstddef>

namespace normgen {

struct KernelEntry {
    const char *function;
    int (*argv)(void **);
};

extern const KernelEntry kKernelTable[];
extern const size_t kKernelTableSize;

}  // namespace normgen

// The same table under a C name, for a program that loads a kernel library with dlopen
// (normgen-measure, the tuner's timing process): returns the table and sets *count.
extern "C" const normgen::KernelEntry *normgen_kernel_table(size_t *count);
