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
