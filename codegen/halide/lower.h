// NormSpec -> Halide: THE ALGORITHM, derived from the declaration alone (no per-layer code).
//
// The kernel ABI (shared with the runtime and recorded in the manifest): one halide_buffer_t per
// declared input and parameter (NormSpec::tensors order), then one per output (NormSpec::outputs
// order, or only the required outputs for a "core" kernel). Each buffer has one dimension per
// *atomic* axis of the tensor, in memory order with Halide's dimension 0 innermost; a split axis
// such as GroupNorm's c = (g, cg) is passed as its two parts, so kernels never divide indices.
// Storage types are the kernel's; arithmetic is in the declared accumulation type; outputs are
// rounded once on store.
#pragma once

#include "codegen/common/kernel_plan.h"
#include "codegen/common/schedule_record.h"
#include "dsl/norm_spec.h"

#include <Halide.h>

#include <map>
#include <string>
#include <vector>

namespace normgen::hl {


Halide::Type halide_type(DType t);

// One reduction as lowered: the Func holding its result, and the Funcs whose update definitions
// iterate an RDom (the schedule vectorizes and places these).
struct ReductionFuncs {
    const Node *node = nullptr;
    Halide::Func result;
    struct Update {
        Halide::Func func;
        Halide::RDom rdom;               // dims innermost first
        std::vector<AxisId> rdom_axes;   // the atomic axis of each RDom dimension
        bool associative = true;         // false for Welford's serial update (no rfactor)
    };
    std::vector<Update> updates;
    std::vector<Halide::Func> helpers;   // other Funcs of this reduction (e.g. Welford's lanes)
    std::vector<std::string> lane_funcs; // helpers whose first dimension is a vector lane
};

struct LoweredPipeline {
    std::vector<Halide::ImageParam> inputs;  // NormSpec::tensors order
    std::vector<Halide::Func> outputs;       // the kernel's outputs, in order
    std::vector<int> output_index;           // index into NormSpec::outputs of each kernel output
    std::vector<Halide::Var> vars;           // per axis id (unused for split axes)
    std::vector<Halide::Expr> extent;        // per atomic axis id
    std::vector<Halide::Func> values;        // per NormSpec::values
    std::vector<ReductionFuncs> reductions;  // in stage order
    // Per-channel tables of per-group values (group_vectors): each over (cg, the value's axes),
    // its value repeated along cg. Read where (g, cg) run as one vector loop, a table is a dense
    // load instead of a gather; schedule_cpu computes them at the root.
    std::vector<Halide::Func> tables;
    Halide::Type acc;

    std::vector<Halide::Argument> arguments() const;
    Halide::Pipeline pipeline() const { return Halide::Pipeline(outputs); }
};

// The plan's kernel: its storage types and its outputs (the variant's). The schedule record gives
// the algorithm's free parameters that only reorder sums (Welford's lanes and block length).
LoweredPipeline lower_to_halide(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &schedule);

// Vectorizable f32 e^x and tanh(x) in plain arithmetic (Halide calls libm per element for its own
// exp/tanh of f32): e^x within 3 ulps, tanh within 2.5 x 2^-23 relative, NaN and infinities as
// libm. Used for f32 accumulation.
Halide::Expr exp_f32(Halide::Expr x);
Halide::Expr tanh_f32(Halide::Expr x);

}  // namespace normgen::hl
