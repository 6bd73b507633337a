// The MLIR backend's products: a JIT kernel for `verify`, AOT CPU objects and CUDA PTX/cubins with
// their manifest entries, and the stages `explain` prints.
#pragma once

#include "codegen/driver/verify_cmd.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <ostream>
#include <string>

namespace normgen::mlirgen {

// A kernel compiled through the CPU pipeline and JIT-run on the verifier's tensors (with its
// optional outputs), called through the same chunked C ABI as the AOT kernels.
std::unique_ptr<VerifyKernel> make_jit_kernel(const NormSpec &spec, DType dtype);

struct AotRequest {
    std::string source;       // the .norm path as recorded in the manifest
    std::vector<DType> dtypes;
    std::string out_dir;
    bool cpu = true;          // mlir-cpu objects for this host
    bool cuda = false;        // mlir-cuda PTX + cubin (needs ptxas)
    std::string cuda_root;    // the CUDA toolkit (libdevice, ptxas)
};

// Writes the kernels into out_dir and returns their manifest entries.
nlohmann::json compile_kernels(const NormSpec &spec, const AotRequest &req);

// Prints the stages of the pipelines for one kernel (`stage` empty: every CPU stage).
void explain(const NormSpec &spec, DType dtype, const std::string &stage, const std::string &cuda_root, std::ostream &os);

}  // namespace normgen::mlirgen
