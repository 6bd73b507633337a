// Ahead-of-time compilation of a declaration's Halide kernels: one static library + header per
// (dtype, target, variant), described by manifest entries (see runtime/registry.h for the format).
#pragma once

#include "codegen/common/manifest.h"
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

// The Halide runtime shared by all kernels (they are compiled with no_runtime), as an object file.
void compile_halide_runtime(const std::string &object_path);

// The ISA tag of a target ("avx512" or "avx2") and the CPU features a machine needs to run it, in
// __builtin_cpu_supports spelling.
std::string isa_tag(const Halide::Target &t);
std::vector<std::string> cpu_features(const Halide::Target &t);

}  // namespace normgen::hl

