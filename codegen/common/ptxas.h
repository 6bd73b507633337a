// Assembling PTX for the GPU the kernels are built for (sm_90) with the CUDA toolkit's ptxas, at
// build time, for both backends' CUDA kernels: the PTX must assemble, and the manifest records what
// ptxas -v said of each kernel (registers, spills, shared memory).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace normgen {

// Runs `ptxas -arch=sm_90 -v PTX -o CUBIN` (the cubin written via a temporary file and a rename)
// and returns its report, {"registers", "spill_stores", "spill_loads", "stack_frame",
// "shared_bytes"}, the largest over the module's kernels. Throws std::runtime_error with ptxas's
// output when it rejects the PTX or cannot run.
nlohmann::json assemble_ptx(const std::string &ptxas, const std::string &ptx_path, const std::string &cubin_path);

// The report of a ptxas -v log (the largest of each figure over the kernels it lists).
nlohmann::json ptxas_stats(const std::string &log);

}  // namespace normgen
