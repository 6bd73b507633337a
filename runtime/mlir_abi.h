// Calling an MLIR-generated CPU kernel. The kernels are plain object code exporting
// `_mlir_ciface_<function>`, which takes one pointer per argument (manifest order) to a strided
// memref descriptor { T *allocated, T *aligned, int64 offset, int64 sizes[R], int64 strides[R] }
// with dims outermost first (memory order over the atomic axes, as in the manifest's "dims").
//
// Threads: the kernel itself is serial; the runtime drives the parallelism. It picks one axis that
// no reduction of the layer reduces and that every output has (rows for LayerNorm, c for
// BatchNorm, n or g for GroupNorm), or the rows of a backward whose parameter gradients sum over
// them (kMlirColumnPartial), cuts it into chunks, and calls the kernel once per chunk on
// sub-views (offset and size of that dimension adjusted), through a parallel-for. A chunk holds
// about kMlirChunkBytes of the tensors along that axis, so that the kernel's passes over it (a
// LayerNorm reads its rows three times) hit the core's L2 cache instead of memory (Halide's thread
// pool in the kernel library, so Halide and MLIR kernels run on the same threads). Why this and not
// a parallel loop inside the kernel: the chunks are independent by construction (the axis is not
// reduced), the kernel stays one function that MLIR's CPU pipeline vectorizes without an OpenMP or
// async runtime, and the thread count is the caller's, like Halide's.
#pragma once

#include <cstdint>
#include <vector>

namespace normgen {

// The default bytes of a chunk (the mlir-cpu schedule record's chunk_bytes).
constexpr int64_t kMlirChunkBytes = 512 << 10;

struct MlirKernelInfo {
    int nargs = 0;
    int ncandidates = 0;
    // ncandidates x nargs: the memref dim (outermost first) of each argument along a candidate split
    // axis, or -1 when the argument lacks it, or kMlirColumnPartial. Candidates in order of
    // preference (outermost first).
    const int *split = nullptr;
    void *ciface = nullptr;  // _mlir_ciface_<function>: void(void *d0, void *d1, ...), nargs pointers
    int64_t chunk_bytes = kMlirChunkBytes;  // the schedule record's chunk_bytes (mlir-cpu)
};

// An output that lacks the split axis and sums over it (a backward's d_weight = sum(..., over:
// rows), the rows split): the kernel writes the sum over its chunk's rows, so each task's chunks
// write into a buffer of the task's, added into the task's partial sums; after the tasks the
// partials are added in task order (the same result on any thread count's schedule of the tasks)
// into the output. Only for dense f32 / f64 outputs; a call with another one takes the next
// candidate.
constexpr int kMlirColumnPartial = -2;

// The most arguments an MLIR kernel may take (the C call is spelled out per count).
constexpr int kMlirMaxArgs = 16;

// halide_do_par_for's signature.
using ParFor = int (*)(void *user_context, int (*task)(void *, int, uint8_t *), int min, int size, uint8_t *closure);

// Runs `task` for every index serially (for callers without a thread pool).
int serial_par_for(void *user_context, int (*task)(void *, int, uint8_t *), int min, int size, uint8_t *closure);

struct MlirTensor {
    void *data = nullptr;
    std::vector<int64_t> sizes;  // outermost first; the tensor is dense
    int elem_bytes = 4;
};

// Calls the kernel on `args` (manifest order), split into chunks as above. Returns 0.
int mlir_run(const MlirKernelInfo &info, const std::vector<MlirTensor> &args, ParFor par_for);

// The `_argv` entry point of an MLIR kernel in the kernel table: `args` are halide_buffer_t
// pointers, as for a Halide kernel (runtime/kernel_table.h).
int mlir_argv(const MlirKernelInfo &info, void **args, ParFor par_for);

}  // namespace normgen
