// The MLIR pass pipelines, in one place: CPU (linalg -> loops -> LLVM, vectorized by LLVM's loop
// vectorizer for the host's features) and CUDA (gpu -> NVVM -> PTX for sm_90); plus the object
// file, the JIT used by `verify`, and the printing of each stage for `explain`.
#pragma once

#include "codegen/mlir/streaming.h"
#include "mlir/IR/BuiltinOps.h"
#include "runtime/manifest_schema.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace normgen::mlirgen {

// Stages `explain` prints: "linalg" (as built), "loops" (after linalg -> loops, before LLVM; the
// name `vector` is accepted for it), "llvm" (optimized LLVM IR for the host), "ptx" (CUDA).
// `locations`: print each op's location (file:line:col of the DSL node it came from).
struct StageSink {
    std::function<void(const std::string &stage, const std::string &text)> print;
    bool locations = false;
    explicit operator bool() const { return (bool)print; }
    void operator()(const std::string &stage, const std::string &text) const { print(stage, text); }
};

// linalg -> scf loops -> LLVM dialect, in place. Throws std::runtime_error with MLIR's diagnostics.
// Returns the outputs lower_cpu marked for streaming stores (the marks are taken off), for the
// LLVM step of the three functions below.
StreamingArgs lower_cpu_to_llvm_dialect(mlir::ModuleOp module, const StageSink &sink = {});

// LLVM-dialect module -> optimized LLVM IR text for the host (`explain --stage llvm`).
std::string host_llvm_ir(mlir::ModuleOp module, const StreamingArgs &streaming = {});

// LLVM-dialect module -> ELF object for the host CPU with all its features. Returns what the
// streaming step marked (nothing without `streaming`).
StreamingResult emit_host_object(mlir::ModuleOp module, const std::string &path, const StreamingArgs &streaming = {});

// The host's ISA (Avx512 when LLVM sees AVX-512 F/CD/BW/DQ/VL, else Avx2) and the CPU features
// (__builtin_cpu_supports names) an object built for it needs.
Isa host_isa();
std::vector<std::string> host_cpu_features();

// A JIT-compiled kernel (the LLVM-dialect module from lower_cpu_to_llvm_dialect): the address of
// `_mlir_ciface_<function>`.
class Jit {
public:
    Jit(mlir::ModuleOp module, const std::string &function, const StreamingArgs &streaming = {});
    ~Jit();
    void *ciface() const { return ciface_; }

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    void *ciface_ = nullptr;
};

// gpu.module -> NVVM -> PTX for sm_90 (PTX ISA 8.0), libdevice linked from `cuda_root` when the
// kernel calls it. Returns the PTX text.
std::string cuda_ptx(mlir::ModuleOp module, const std::string &cuda_root, const StageSink &sink = {});

// Prints an op (module) to a string; with `locations`, each op's location too.
std::string print_op(mlir::Operation *op, bool locations = false);

}  // namespace normgen::mlirgen
