// Ahead-of-time compilation of a declaration's Halide kernels: one object + header per (dtype,
// target, variant), all objects in one static library, described by manifest entries (see
// runtime/registry.h for the format). One archive per declaration means the build knows every file
// it links from the .norm file's name alone, before anything is generated.
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
    std::string archive;                 // the static library's file name in out_dir ("" = <layer>.a)
    std::string schedule_overrides;      // applied to every kernel's default record ("" = defaults)
    std::string grad_of;                 // the kernels are the backward of this layer (manifest "grad_of")
    std::string tuning_dir;              // also one kernel per schedule this tuning database chose ("" = none)
    std::string streaming_tool;          // normgen-mlir, for schedules with streaming stores ("" = beside this program)
    std::string ptxas;                   // assembles the CUDA kernels' PTX for sm_90 ("" = not assembled)
    std::string gpu_schedule_overrides;  // applied to every GPU kernel's halide-gpu record
};

// One compiled kernel: its object file and what the schedule did, in words.
struct CompiledObject {
    std::string object, header;
    std::string text;
};

// Compiles one kernel of a plan under a schedule record for a target (no_runtime) into
// out_dir/<function>.o and .h. A record with streaming stores goes through LLVM bitcode and
// `streaming_tool streaming` (codegen/mlir/streaming.h).
CompiledObject compile_halide_kernel(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &record, const Halide::Target &target,
                                     const std::string &function, const std::string &out_dir, const std::string &streaming_tool);

// Compiles a scheduled pipeline into c.object and c.header. A kernel with streaming stores (to
// `streaming_outputs`) or with bf16 tensors on an AVX512-BF16 target goes through LLVM bitcode
// and `streaming_tool streaming` (codegen/mlir/streaming.h; "" = normgen-mlir beside this
// program); what that step did is added to c.text.
void emit_object(Halide::Pipeline pipeline, const std::vector<Halide::Argument> &args, const KernelPlan &plan, const Halide::Target &target,
                 const std::string &function, const std::vector<std::string> &streaming_outputs, const std::string &streaming_tool,
                 CompiledObject &c);

// Compiles one kernel of a plan for a GPU target (cuda, opencl): the halide-gpu record, every stage
// on the device; out_dir/<function>.o and .h (host code that launches the device code, which it
// embeds) and the device code beside them, <function>.ptx (CUDA) or .cl (OpenCL C). Returns the
// manifest entry: device, "ptx" and, with `ptxas`, the sm_90 cubin's ptxas -v report ("ptxas"),
// "bits_storage" listing the 16-bit float types its buffers hold as uint16 (half_storage_for).
nlohmann::json compile_halide_gpu_kernel(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &record, const Halide::Target &target,
                                         KernelEntryInfo info, const std::string &out_dir, const std::string &ptxas, std::string &object);

// Compiles every kernel of `spec` into out_dir and the archive, and returns the manifest entries
// (one per kernel, "library" naming the archive). With a tuning database, each (storage type,
// target, variant) also gets one kernel per distinct schedule the database chose for it on a CPU
// of the target's ISA (named <default name>__t<tag>, its entry's "tuned" listing the classes it
// won); a chosen schedule equal to the default marks the default kernel instead. Targets that
// resolve to the same ISA tag (a host without AVX-512 is "avx2") are compiled once. Variants: "core"
// (required outputs) always; "full" (optional outputs too) when the layer has optional outputs. A
// GPU target ("cuda", "opencl": parse_target) gets compile_halide_gpu_kernel's kernels, defaults only.
nlohmann::json compile_halide_kernels(const NormSpec &spec, const AotRequest &req);

// The Halide runtime shared by all kernels (they are compiled with no_runtime), as an object file.
// `target`: a Halide target string, default x86-64-linux (x86-64-linux-tsan for a ThreadSanitizer build).
void compile_halide_runtime(const std::string &object_path, const std::string &target = "");

// The CPU features a machine needs to run code for a target, in __builtin_cpu_supports spelling.
std::vector<std::string> cpu_features(const Halide::Target &t);

}  // namespace normgen::hl

