// The kernel manifest and kernel table the build writes (format: runtime/registry.h), shared by the
// Halide and MLIR generators so both backends' kernels are described, found and called alike.
#pragma once

#include "dsl/norm_spec.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace normgen {

// One entry of a kernel's manifest "args": name, role, dtype, declared dims and the buffer dims
// (atomic axes, innermost first), optional and updates flags.
nlohmann::json manifest_arg(const NormSpec &spec, const std::string &name, const char *role, DType dtype,
                            const std::vector<AxisId> &dims, bool optional, const std::string &updates);

// The "args" of a kernel with these storage types: inputs and params, then the outputs (the
// optional ones only when `full`).
struct KernelTypes;
nlohmann::json manifest_args(const NormSpec &spec, const KernelTypes &types, bool full);

// Writes {"normgen_manifest": 1, "kernels": entries} to `path` (via a temporary file and a rename).
void write_manifest(const nlohmann::json &entries, const std::string &path);

// Writes the C++ table that maps each host kernel's function name to its `_argv` entry point
// (runtime/kernel_table.h). Halide kernels export `<function>_argv` themselves; for an MLIR kernel
// ("backend": "mlir") the table defines one that adapts the buffers to the kernel's memref C
// interface (runtime/mlir_abi.h). CUDA kernels ("device": "cuda") have no host entry point.
void write_kernel_table(const nlohmann::json &entries, const std::string &path);

// Writes `text` to `path` via a temporary file and a rename: an interrupted build never leaves half a file.
void write_file_atomically(const std::string &path, const std::string &text);

}  // namespace normgen
