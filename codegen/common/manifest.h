// The kernel manifest and kernel table the build writes (format: runtime/registry.h), shared by the
// Halide and MLIR generators so both backends' kernels are described, found and called alike.
#pragma once

#include "codegen/common/kernel_plan.h"
#include "codegen/common/schedule_record.h"
#include "dsl/norm_spec.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace normgen {

// The "args" of a plan's kernel (format: runtime/registry.h): inputs and params, then its outputs.
nlohmann::json manifest_args(const NormSpec &spec, const KernelPlan &plan);

// What a backend knows about one compiled kernel beyond its plan.
struct KernelEntryInfo {
    Backend backend = Backend::Halide;
    Isa isa = Isa::Avx2;
    std::string source;                     // the .norm path as recorded
    std::string target;                     // the backend's target string
    std::vector<std::string> cpu_features;  // __builtin_cpu_supports names (CPU kernels)
    const ScheduleRecord *schedule = nullptr;
    std::string schedule_text;              // what the schedule did, in words
    std::string library, header;            // file names in the kernel's folder ("" when none)
    std::string grad_of;                    // a backward kernel (`--grad`): the forward layer's name
    std::string function_suffix;            // a tuned kernel: "__t<tag>" after the default name (tuning_db.h)
    nlohmann::json tuned;                   // the shape classes this kernel won (tuned_manifest_field), or null
};

// The C symbol of a kernel: kernel_function_name(...) + info.function_suffix.
std::string entry_function_name(const NormSpec &spec, const KernelPlan &plan, const KernelEntryInfo &info);

// The manifest entry of one kernel: function name, layer, canonical declaration, dtype, variant,
// backend, device, ISA, the schedule record (JSON) and its description, files and args; for a
// tuned kernel the classes it won ("tuned"), for streaming stores what a call must give ("requires"). Backends
// add their own fields (MLIR's "split", CUDA's launch geometry) to the object returned.
nlohmann::json manifest_entry(const NormSpec &spec, const KernelPlan &plan, const KernelEntryInfo &info);

// Writes {"normgen_manifest": 1, "kernels": entries} to `path` (via a temporary file and a rename).
void write_manifest(const nlohmann::json &entries, const std::string &path);

// Writes the C++ table that maps each host kernel's function name to its `_argv` entry point
// (runtime/kernel_table.h). Halide kernels export `<function>_argv` themselves; for an MLIR kernel
// ("backend": "mlir") the table defines one that adapts the buffers to the kernel's memref C
// interface (runtime/mlir_abi.h). MLIR CUDA kernels ("device": "cuda") have no host entry point;
// Halide's GPU kernels do (their host code launches the device code).
void write_kernel_table(const nlohmann::json &entries, const std::string &path);

// Merges manifests (`normgen compile`'s manifest.json) or fragments (a generator's JSON list of
// entries) into one manifest and its kernel table: file fields ("library", "header", "ptx", "cubin", "opencl_source")
// are rewritten relative to the merged manifest's folder; a function listed twice is refused
// (UserError naming both inputs). Writes both files atomically.
// `device` (cpu, cuda, opencl): only that device's kernels (the GPU pack's manifest and table);
// empty: all.
void merge_manifests(const std::vector<std::string> &inputs, const std::string &manifest_path, const std::string &table_path,
                     const std::string &device = "");

// Writes `text` to `path` via a temporary file and a rename: an interrupted build never leaves half a file.
void write_file_atomically(const std::string &path, const std::string &text);

}  // namespace normgen
