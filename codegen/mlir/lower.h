// NormSpec -> MLIR, built through the C++ API (no textual IR, no per-layer code).
//
// CPU (`lower_cpu`): one `func.func @<function>` over strided memrefs, one argument per kernel
// argument in manifest order (inputs and params, then outputs), each memref over the tensor's
// atomic axes in memory order, outermost first (GroupNorm's c = (g, cg) is two dims), innermost
// stride 1, the other strides and the offset dynamic (the runtime passes chunks as sub-views).
// Every reduction becomes linalg.generic ops writing a small accumulator buffer (memref.alloc) over
// the reduction's result axes, in the declared accumulation type; each output is one
// linalg.generic map that reads the tensors and those buffers and stores in its storage type
// (arith.extf on load, arith.truncf on store). The function carries `llvm.emit_c_interface`.
//
// CUDA (`lower_cuda`): a gpu.module with one kernel, `gpu.func @<function>`: one block per index of
// the "block axes" (the atomic axes no reduction reduces: rows, c for BatchNorm, (n, g) for
// GroupNorm; for a layer without reductions all but the innermost), 256 threads striding over the
// rest; each reduction is a per-thread partial followed by `gpu.all_reduce` (warp shuffles and
// shared memory after convert-gpu-to-nvvm), Welford's triples are merged through workgroup memory.
// Arguments: one flat `memref<?xT>` per kernel argument (dense), then one `index` per atomic axis
// (ascending axis id) giving its extent.
#pragma once

#include "codegen/common/kernel_plan.h"
#include "codegen/common/schedule_record.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>
#include <vector>

namespace normgen::mlirgen {

// A context with every dialect the lowering and the pipelines use, and the LLVM IR translations.
std::unique_ptr<mlir::MLIRContext> make_context();

// The plan's kernel for the CPU; the record (ScheduleKind::MlirCpu) gives the block of the blocked
// sums and whether trailing axes may be fused. With streaming_stores, the outputs to stream carry
// the argument attribute kStreamingArgAttr (lower_cpu_to_llvm_dialect takes it off).
inline constexpr const char *kStreamingArgAttr = "normgen.streaming";
mlir::OwningOpRef<mlir::ModuleOp> lower_cpu(mlir::MLIRContext &ctx, const NormSpec &spec, const KernelPlan &plan,
                                            const ScheduleRecord &schedule, const std::string &function);

// The CUDA launch geometry of a plan under a record (ScheduleKind::MlirCuda).
struct CudaPlan {
    std::vector<AxisId> block_axes;  // ascending; the grid is their product (one dimension, x)
    std::vector<AxisId> extent_axes; // the atomic axes whose extents follow the memrefs, ascending
    int block_threads = 256;
    // The two-kernel form (KernelPlan::cuda_row_axes): the main kernel runs one block per block of
    // rows (a row: one index of row_axes; at most column_blocks blocks), each row's statistics by
    // the block as usual, and adds each column output's terms into its per-block partial sums, a
    // scratch buffer [blocks, kept axes] in the accumulation type; the final kernel
    // (<function>_final) adds the blocks. A statistic that keeps axes beyond the rows (GroupNorm's
    // sum over h, w per channel) is computed for the block's current row at every index of those
    // axes into a scratch buffer [blocks, its extra axes] and read from there. Both kernels take the
    // same arguments: the memrefs, the scratch memrefs (column outputs in column_outputs order,
    // then the statistics), the extents, then the block count.
    std::vector<int> column_outputs;  // indices into NormSpec::outputs
    std::vector<AxisId> row_axes;     // memory order
    struct Statistic {
        const Node *node;
        std::vector<AxisId> axes;     // its kept axes beyond the rows, memory order
        std::string name;             // the named value it is, or "r<k>"
    };
    std::vector<Statistic> statistics;
    int column_blocks = 264;
};
// Throws UserError (file:line:col, from the plan) when the CUDA lowering cannot take the plan.
CudaPlan cuda_plan(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &schedule);

mlir::OwningOpRef<mlir::ModuleOp> lower_cuda(mlir::MLIRContext &ctx, const NormSpec &spec, const KernelPlan &plan,
                                             const CudaPlan &cuda, const std::string &function);

}  // namespace normgen::mlirgen
