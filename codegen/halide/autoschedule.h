// Halide's own autoschedulers as baselines for normgen's schedules: the same lowered algorithm
// (lower.h), with estimates of one shape on every input and output, scheduled by Adams2019,
// Li2018 or Mullapudi2016 (plugins shipped in the Halide 21 wheel, loaded from beside libHalide),
// compiled ahead of time like any kernel. `normgen tune` measures them beside its candidates; the
// benchmark runs them as rows of their own (bench/README.md).
#pragma once

#include "codegen/halide/aot.h"

#include <string>
#include <vector>

namespace normgen::hl {

// The autoschedulers normgen knows, as Halide names them.
const std::vector<std::string> &autoscheduler_names();  // Adams2019, Li2018, Mullapudi2016

// Compiles the plan's kernel scheduled by `autoscheduler` for `extents` (per atomic axis id; the
// estimates) on `threads` threads and a last-level cache of `llc_bytes`, into out_dir/<function>.o
// and .h. Throws UserError for an unknown name, std::runtime_error when the plugin cannot load.
CompiledObject compile_autoscheduled_kernel(const NormSpec &spec, const KernelPlan &plan, const std::string &autoscheduler,
                                            const std::vector<int64_t> &extents, int threads, int64_t llc_bytes, const Halide::Target &target,
                                            const std::string &function, const std::string &out_dir);

}  // namespace normgen::hl
