// The MLIR backend's products: a JIT kernel for `verify`, AOT CPU objects and CUDA PTX/cubins with
// their manifest entries, and the stages `explain` prints.
#pragma once

#include "codegen/common/manifest.h"
#include "codegen/mlir/lower.h"
#include "codegen/tool/compiled_kernel.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <ostream>
#include <string>

namespace normgen::mlirgen {

// A kernel compiled through the CPU pipeline and JIT-run on the verifier's tensors (the full
// variant, with its optional outputs, unless `variant` says core), called through the same chunked
// C ABI as the AOT kernels. `schedule_overrides`: 'knob=value,...' or a JSON file for the mlir-cpu
// record ("" = defaults).
std::unique_ptr<CompiledKernel> make_jit_kernel(const NormSpec &spec, DType dtype, const std::string &schedule_overrides = "",
                                                std::optional<Variant> variant = std::nullopt);

struct AotRequest {
    std::string source;       // the .norm path as recorded in the manifest
    std::vector<DType> dtypes;
    std::string out_dir;
    std::string archive;      // the static library of the CPU objects, a file name in out_dir ("" = <layer>.mlir.a)
    bool cpu = true;          // mlir-cpu objects for this host
    bool cuda = false;        // mlir-cuda PTX + cubin (needs ptxas)
    std::string cuda_root;    // the CUDA toolkit (libdevice, ptxas)
    std::string schedule_overrides;       // for every mlir-cpu record ("" = defaults)
    std::string cuda_schedule_overrides;  // for every mlir-cuda record
    std::string grad_of;                  // the kernels are the backward of this layer (manifest "grad_of")
    std::string tuning_dir;               // also one mlir-cpu kernel per schedule this tuning database chose
    std::vector<std::string> variants;    // only these variants ("core", "full"; empty: every variant)
};

// The mlir-cuda kernel of a declaration run on this CPU by EmulatedGpu (emulate.h): the same
// gpu-dialect module the CUDA pipeline compiles, the same manifest entry, launched by the same
// CUDA launcher as on a GPU (`normgen verify --backend mlir --target cuda-emulated`).
// `schedule_overrides`: for the mlir-cuda record.
std::unique_ptr<CompiledKernel> make_emulated_cuda_kernel(const NormSpec &spec, DType dtype, const std::string &schedule_overrides,
                                                          Variant variant);

// The manifest entry of an mlir-cuda kernel (cubin and PTX file names, launch geometry, the
// two-kernel form's scratch buffers), as the build writes it.
nlohmann::json cuda_manifest_entry(const NormSpec &spec, const KernelPlan &plan, const CudaPlan &cplan, const ScheduleRecord &record,
                                   const std::string &function, const std::string &source, const std::string &grad_of);

// One mlir-cpu kernel of a plan under a schedule record: out_dir/<function>.o, and its manifest
// entry (info completed with the record and what it did; "split" added).
nlohmann::json compile_cpu_kernel(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &record, const std::string &function,
                                  const std::string &out_dir, KernelEntryInfo info);

// Writes the kernels into out_dir (the CPU objects also into one archive, which their entries name
// as "library") and returns their manifest entries.
nlohmann::json compile_kernels(const NormSpec &spec, const AotRequest &req);

// Prints the stages of the pipelines for one kernel (`stage` empty: every CPU stage).
// `locations`: each op's location (the DSL node's file:line:col) beside it.
void explain(const NormSpec &spec, DType dtype, const std::string &stage, const std::string &cuda_root, bool locations, std::ostream &os,
             const std::string &schedule = "");

}  // namespace normgen::mlirgen
