// The mlir-cuda kernels executed on this CPU: the gpu-dialect module lower_cuda builds (the same
// one the CUDA pipeline takes to NVVM and PTX) run with one work-item per GPU thread and barriers
// honoured, so its logic - block and thread indexing, the strided sweeps, workgroup memory, the
// all-reduces, the barriers between them, the two-kernel form's partial sums - is checked against
// the float64 reference on a machine without a GPU.
//
// How: each gpu.func becomes a host function of its own arguments plus (block index, thread index)
// and its workgroup buffers; gpu.barrier and gpu.all_reduce become calls into this emulator; the
// module is lowered to LLVM like the CPU kernels and JIT-compiled. A launch runs the grid's blocks
// one after the other, each block's threads as fibers (ucontext) on one OS thread: a fiber runs until
// it reaches a barrier, and the barrier opens when every thread of the block is there. An
// all-reduce is a barrier with a slot per thread, combined in thread order (so every thread gets
// the same value), then a second barrier. A thread that returns while others wait at a barrier is
// an error (on a GPU, undefined behaviour).
//
// What it does not check: the NVVM lowering (all-reduces as warp shuffles, libdevice's
// transcendentals) and anything about speed. scripts/gpu.sh runs the real kernels on a GPU.
#pragma once

#include "runtime/cuda_launcher.h"

#include "mlir/IR/BuiltinOps.h"

#include <memory>
#include <string>

namespace normgen::mlirgen {

// A GpuDevice (runtime/cuda_launcher.h) whose kernels are the gpu.funcs of a module, emulated.
class EmulatedGpu : public GpuDevice {
public:
    // `module`: lower_cuda's module (gpu.container_module, one gpu.module); rewritten in place.
    explicit EmulatedGpu(mlir::ModuleOp module);
    ~EmulatedGpu() override;
    // The entry by name (the image path is ignored: the module is the image).
    Function load(const std::string &image_path, const std::string &entry) override;
    uint64_t alloc(size_t bytes) override;
    void free(uint64_t ptr) override;
    void upload(uint64_t dst, const void *src, size_t bytes) override;
    void download(void *dst, uint64_t src, size_t bytes) override;
    void fill(uint64_t dst, uint8_t byte, size_t bytes) override;
    void launch(const Function &f, unsigned grid, unsigned block, std::vector<void *> &params) override;
    void synchronize() override {}

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// gpu.funcs -> host funcs (the rewrite EmulatedGpu does), for `explain`-style inspection and tests.
void emulate_gpu_funcs(mlir::ModuleOp module);

}  // namespace normgen::mlirgen
