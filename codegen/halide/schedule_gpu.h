// THE SCHEDULE for GPUs (CUDA, OpenCL): kept apart from the algorithm (lower.h), like the CPU's
// (schedule.h). Every number comes from the halide-gpu schedule record (schedule_record.h), whose
// defaults choose_schedule gives from the plan; the shape of the schedule from the plan's layout class:
//
//   - row layout, row_in_block (LayerNorm, RMSNorm, QK-Norm, GroupNorm NCHW, InstanceNorm): one
//     block per rows_per_block rows. The block's threads sum the row in a strided sweep (thread t
//     takes vectors t, t + T, ...: neighbouring threads read neighbouring vectors, so loads are
//     coalesced), each a private partial sum in registers (rfactor); the partials meet in shared
//     memory and are added by a tree (block_reduction 1: groups of 16, then the groups) or by one
//     thread (0); then the same threads normalize the row, re-reading it from the cache. A
//     statistic that needs another (the variance's mean) follows it inside the block, after a barrier.
//   - everything else (root layout: BatchNorm, GroupNorm NHWC; a backward's sums over the rows; a
//     kernel that writes saved statistics; row_in_block off): every reduction in launches of its
//     own, then the outputs as maps. A reduction along the contiguous axis is summed by a block's
//     threads as above, one block per statistic and run of its outermost reduced axis (the
//     partial-sum form: at most column_blocks blocks in all, then a launch that adds the runs); a
//     reduction that keeps the contiguous axis (a weight gradient, summed over the rows) gives each
//     thread one element of it, summed serially over a run of rows (coalesced across the threads),
//     one block per run, then a launch that adds the runs.
//   - the maps (outputs, and a map layout's only stage): all axes as one, cut into vectors of
//     vector_width elements, block_threads threads a block.
// Other stages with a reduction domain (the shift of a mean, Welford's lanes and merges) run one
// GPU thread per element of their pure axes, serially over the domain.
//
// Every stage of the pipeline runs on the device: schedule_gpu leaves nothing on the host, and
// gpu_stages_on_device (a lowering pass) refuses a pipeline where anything computed would.
//
// Nothing here has been timed on a GPU yet (scripts/gpu-pack.sh carries the kernels to one); on
// OpenCL through PoCL the schedules' logic (indexing, shared memory, barriers, tails) is verified
// against the float64 reference in CI, not their speed.
#pragma once

#include "codegen/common/schedule_record.h"
#include "codegen/halide/lower.h"

#include <string>

namespace normgen::hl {

// Applies the GPU schedule to the lowered pipeline of `plan` and returns a one-line description.
std::string schedule_gpu(LoweredPipeline &p, const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &record);

// Adds to `pipeline` a lowering pass that checks every stage computes on the device: a store into a
// Func's buffer outside any GPU block loop is an internal error naming the Func (a CPU schedule
// compiled for OpenCL would run on the host without a word). Call it before compiling for a GPU.
void require_device_stages(Halide::Pipeline &pipeline);

// Test hooks (NORMGEN_GPU_FAULT): deliberately broken GPU kernels, which the verifier must
// reject. "barriers": every barrier between a block's threads removed (a missing barrier); "tail":
// the last iteration of every serial loop inside a GPU thread dropped (a wrong tail: a thread's
// last vector of a row, its last run of a sum). Added to the pipeline by
// require_device_stages when the variable names them; "" or unset: none.
std::string gpu_fault_from_env();

}  // namespace normgen::hl
