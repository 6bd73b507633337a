// THE SCHEDULE for CPUs: a small parameterized space, kept apart from the algorithm (lower.h).
//
// The schedule is chosen from the *shape* of the plan, never from the layer's name:
//   - row schedule: every reduction covers a trailing block of the output's memory order (LayerNorm
//     and RMSNorm over d, GroupNorm-NCHW over (cg, h, w), InstanceNorm over (h, w), QK-norm over dh).
//     Rows are distributed over threads; each row's statistics are computed just before the row is
//     normalized, so the row is read from DRAM once and re-read from cache.
//   - root schedule: some reduction strides across the outer loop (BatchNorm over (n, h, w) on NCHW,
//     GroupNorm over (h, w, cg) on NHWC), or a small output needs the statistics too. Statistics are
//     computed first, in parallel over their own independent axes; then the map.
//   - map only (DyT, BatchNorm eval): parallel over the outer axis, vectorized along the inner one.
// Reductions along the contiguous axis are split by the vector width and rfactor'ed into vector
// lanes; tails use GuardWithIf (masked vector ops on AVX-512), so odd widths have no scalar cliff.
//
// Measured (this machine: 2 cores of an AVX-512 Xeon, 260 MiB L3, quiet; `normgen_bench`, medians
// of 3, f32, avx512 kernels, fraction of the non-temporal-store copy measured in the same run):
//   layer_norm  4096 x 4096  15.4 GB/s = 0.26 (copy: 59.6 streaming, 26.2 plain; the pair fits in L3)
//   layer_norm 32768 x 8192  15.2 GB/s = 0.37 (copy: 41.5 streaming, 23.7 plain)
//   rms_norm    4096 x 4096  19.8 GB/s = 0.34 (copy: 58.1 streaming, 23.2 plain)
//   rms_norm   32768 x 8192  17.4 GB/s = 0.45 (copy: 39.1 streaming, 22.8 plain)
// Short of the 80 % target. Measured causes (bench/README.md, the lab in bench/lab): the outputs
// use ordinary stores, which read each line before writing it (the map alone runs at 0.98 of the
// plain copy = 0.58 of the streaming one; Halide 21 has no streaming-store directive, marking the
// stores non-temporal in the LLVM IR lifts RMSNorm to 0.66-0.71); one vector accumulator per
// reduction (four give LayerNorm +7-12 %); and each row is read, then written, by one core in turn
// (hand-written kernels that fuse the next row's statistics into this row's map reach 0.82 / 0.75).
#pragma once

#include "codegen/halide/lower.h"

#include <string>

namespace normgen::hl {

struct CpuSchedule {
    int vector_width = 0;        // f32 lanes; 0 = the target's natural width (16 on AVX-512, 8 on AVX2)
    int min_task_elements = 16384;  // rows are grouped so each parallel task touches at least this many
    bool row_in_cache = true;    // row schedule allowed (false forces the root schedule)
};

// Applies the schedule and returns a one-line description for the manifest.
std::string schedule_cpu(LoweredPipeline &p, const NormSpec &spec, const Halide::Target &target, const CpuSchedule &s);

}  // namespace normgen::hl
