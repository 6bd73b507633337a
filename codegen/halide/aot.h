// Ahead-of-time compilation of a declaration's Halide kernels: one static library + header per
// (dtype, target, variant), described by manifest entries (see runtime/registry.h for the format).
#pragma once

#include "codegen/halide/schedule.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace normgen::hl {

struct AotRequest {
    std::string source;                  // the .norm path as recorded in the manifest
    std::vector<DType> dtypes;
    std::vector<std::string> targets;    // "host", "x86-64-avx2", or Halide target strings
    std::string out_dir;
    CpuSchedule schedule;
};

// Compiles every kernel of `spec` and returns the manifest entries (one per kernel). Targets that
// resolve to the same ISA tag (a host without AVX-512 is "avx2") are compiled once. Variants: "core"
// (required outputs) always; "full" (optional outputs too) when the layer has optional outputs.
nlohmann::json compile_halide_kernels(const NormSpec &spec, const AotRequest &req);

// One entry of a kernel's manifest "args" (runtime/registry.h): name, role, dtype, declared dims and
// the halide_buffer_t dims (atomic axes, innermost first), optional and updates flags.
nlohmann::json manifest_arg(const NormSpec &spec, const std::string &name, const char *role, DType dtype,
                            const std::vector<AxisId> &dims, bool optional, const std::string &updates);

// The Halide runtime shared by all kernels (they are compiled with no_runtime), as an object file.
void compile_halide_runtime(const std::string &object_path);

// The ISA tag of a target ("avx512" or "avx2") and the CPU features a machine needs to run it, in
// __builtin_cpu_supports spelling.
std::string isa_tag(const Halide::Target &t);
std::vector<std::string> cpu_features(const Halide::Target &t);

}  // namespace normgen::hl

namespace normgen::hl {

// Writes {"normgen_manifest": 1, "kernels": entries} to `path`.
void write_manifest(const nlohmann::json &entries, const std::string &path);

// Writes the C++ table that maps each kernel's function name to its `_argv` entry point
// (runtime/kernel_table.h), so a program linking the kernels can find them by manifest name.
void write_kernel_table(const nlohmann::json &entries, const std::string &path);

}  // namespace normgen::hl
