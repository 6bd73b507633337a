// THE SCHEDULE for CPUs: a small parameterized space, kept apart from the algorithm (lower.h).
//
// The layout class comes from the plan (codegen/common/kernel_plan.h), never from the layer's name;
// every number below comes from the schedule record (ScheduleKind::HalideCpu), whose defaults
// choose_schedule gives:
//   - row layout: every reduction covers a trailing block of the output's memory order (LayerNorm
//     and RMSNorm over d, GroupNorm-NCHW over (cg, h, w), InstanceNorm over (h, w), QK-norm over dh).
//     Rows are distributed over threads (tasks of >= min_task_elements); each row's statistics are
//     computed just before the row is normalized, so the row is read from DRAM once and re-read
//     from cache. (row_in_cache = false forces the root schedule.)
//   - root layout: some reduction strides across the outer loop (BatchNorm over (n, h, w) on NCHW,
//     GroupNorm over (h, w, cg) on NHWC), or a small output needs the statistics too. Statistics are
//     computed first, in parallel over their own independent axes; then the map. With
//     sample_statistics, when the statistics all keep the outermost axis (GroupNorm NHWC's, per
//     sample and group), they are computed per sample inside the map's parallel loop instead: the
//     sample's slab is read from DRAM once, its later sweeps hit the cache; a backward's sums over
//     that axis (d_weight, d_bias) become per-sample partials in the same loop. With
//     group_statistics, statistics that also keep the next axis (GroupNorm NCHW backward's per
//     group) are computed per index of it, inside the map's loop over it: a group's later sweeps
//     hit L1 / L2 instead of re-reading the sample's slab. A sum over one loop that fits one block
//     of sum_block vectors (GroupNorm NCHW's 8 x 8 planes) is one level of lane partials, without
//     the level of blocks; with sibling_sums (lower.cpp) a stage's sums over the same axes are one
//     Tuple-valued sum, one sweep.
//     With sums over the rows (a backward's parameter gradients) a task is a block of rows: its
//     statistics, its map (with sums over rows and d, fused per row) and its partial sums over the
//     rows are sweeps over the block, the later ones from cache; with block_values a value that
//     calls a transcendental and that a sum reads (DyT's backward's tanh) is computed once per
//     block into f32 scratch that those sweeps read, instead of evaluated in each of them; with
//     column_rows = k the partial sums add k rows' terms to a vector in registers (the rows
//     unrolled inside the vector loop) before storing it, so the partial rows (d floats each, past
//     L1 at d = 8192) are loaded and stored once per k rows (blocks of rows a multiple of k).
//   - map layout (DyT, BatchNorm eval): parallel over the outer axis, vectorized along the inner one
//     (the two innermost fused when the plan allows it and fuse_inner_pair is on).
// Reductions along the contiguous axis are split by vector_width, blocked by sum_block vectors and
// rfactor'ed into row_accumulators vectors of lanes; tails use GuardWithIf (masked vector ops on
// AVX-512), so odd widths have no scalar cliff.
//
// Measured with these defaults (2 cores of an AVX-512 Xeon, 260 MiB L3; `normgen_bench`, full grid,
// medians of 3, f32, bench/results/report.md):
//   layer_norm  4096 x 4096  18.8 GB/s      rms_norm  4096 x 4096  21.6 GB/s
//   layer_norm 32768 x 8192  19.0 GB/s      rms_norm 32768 x 8192  16.8-20.6 GB/s
// (non-temporal copy of the same bytes: 57 and 38 GB/s). Short of the 80 % target; measured causes
// (bench/README.md, the lab in bench/lab): ordinary stores read each line before writing it (the
// map alone runs at 0.98 of the plain copy = 0.58 of the streaming one; marking the stores
// non-temporal in the LLVM IR lifts RMSNorm to 0.66-0.71), and each row is read, then written, by
// one core in turn (hand-written kernels that fuse the next row's statistics into this row's map
// reach 0.82 / 0.75).
#pragma once

#include "codegen/common/schedule_record.h"
#include "codegen/halide/lower.h"

#include <string>

namespace normgen::hl {

// The Halide CPU schedule record (ScheduleKind::HalideCpu, codegen/common/schedule_record.h), read
// once into named fields.
struct CpuSchedule {
    int vector_width = 16;          // f32 lanes
    int row_accumulators = 4;       // vectors of partial sums per reduction over one contiguous axis
    int sum_block = 64;             // vectors a lane adds before its partial sum moves on
    int welford_lanes = 16;         // (read by the lowering: lower.h)
    int welford_block = 64;
    int min_task_elements = 16384;  // rows are grouped so each parallel task touches at least this many
    bool row_in_cache = true;       // row schedule allowed (false forces the root schedule)
    int column_block_elements = 262144;  // elements of a block of rows with sums over the rows (per-block partials)
    bool fuse_inner_pair = true;    // fuse the two innermost axes of a map when the plan allows it
    bool fuse_reduced_axes = false; // sum a reduction's innermost reduced axes adjacent in memory as one loop
    bool multi_axis_accumulators = false;  // row_accumulators also for a row's reductions over several axes
    bool group_vectors = false;     // channels-last per-group statistics and map vectorized across groups
    bool streaming_stores = false;  // (the lowering declares the outputs aligned; the map then keeps its rows apart)
    bool sample_statistics = false; // root layout: statistics per index of the outermost axis, inside the map's loop
    bool group_statistics = false;  // with it: those keeping the second axis per index of that axis
    bool block_values = false;      // row layout with column sums: transcendental values once per block of rows
    int column_rows = 1;            // row layout with column sums: rows added to a partial sum per load / store of it
    static CpuSchedule from(const ScheduleRecord &r);
};

// Applies the schedule to the lowered pipeline of `plan` and returns a one-line description.
std::string schedule_cpu(LoweredPipeline &p, const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &record);

}  // namespace normgen::hl
