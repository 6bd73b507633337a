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
        bool bounded = false;            // at most 64 elements (a mean's shift): one thread sums it on a GPU
    };
    std::vector<Update> updates;
    std::vector<Halide::Func> helpers;   // other Funcs of this reduction (e.g. Welford's lanes)
    std::vector<std::string> lane_funcs; // helpers whose first dimension is a vector lane
    // A two-pass variance by blocks (block_variance, lower.cpp's block_moments): the update of pass
    // 2 (a block's squared deviations from its mean), the Funcs the schedule computes per block
    // just before it (pass 1's sum, the block's mean and its per-channel table), the block axis.
    int block_second = -1;
    std::vector<Halide::Func> block_funcs;
    AxisId block_axis = -1;
    // A mean whose sweep also sums the shifted squares of a checked variance (checked_variance,
    // lower.cpp's checked_mean).
    bool checked_variance = false;
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

// How f16 and bf16 tensors are stored in the kernel's buffers: as Halide's float16 and bfloat16, or
// as bits: uint16 buffers holding the same bits, converted to and from f32 with integer operations
// in the kernel. The values are the same.
struct HalfStorage {
    bool f16_bits = false, bf16_bits = false;
    bool bits(DType t) const { return (t == DType::F16 && f16_bits) || (t == DType::BF16 && bf16_bits); }
};

// What a target needs: both as bits on OpenCL without the CLHalf feature (PoCL's CPU device has no
// half type, and Halide refuses a kernel using one, bf16 included); bf16 as bits on CUDA (Halide 21's
// native bf16 for PTX trips an LLVM assertion, "Invalid cast!"); else native.
HalfStorage half_storage_for(const Halide::Target &t);

// The plan's kernel: its storage types and its outputs (the variant's). The schedule record (a
// halide-cpu or halide-gpu one) gives the algorithm's free parameters that only reorder sums
// (Welford's lanes and block length); halide-cpu's also what the lowering declares for its CPU
// schedule (streaming stores' alignment, a fixed innermost extent, per-channel tables).
LoweredPipeline lower_to_halide(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &schedule,
                                HalfStorage half = HalfStorage{});

// "; f16 and bf16 stored as bits" (or either alone, or "" when neither), for a schedule's description.
std::string half_storage_text(HalfStorage half);

// The buffer type of a storage type in a kernel lowered with `half` (UInt(16) for a type as bits).
Halide::Type buffer_type(DType t, HalfStorage half);

// f16 bits (uint16) -> f32, exactly (subnormals, infinities, NaN); f32 -> f16 bits, rounded to
// nearest even (overflow to infinity, NaN stays NaN). The same for bf16. Integer arithmetic only.
Halide::Expr f16_bits_to_f32(Halide::Expr bits);
Halide::Expr f32_to_f16_bits(Halide::Expr f);
Halide::Expr bf16_bits_to_f32(Halide::Expr bits);
Halide::Expr f32_to_bf16_bits(Halide::Expr f);

// Vectorizable f32 e^x and tanh(x) in plain arithmetic (Halide calls libm per element for its own
// exp/tanh of f32): e^x within 3 ulps, tanh within 2.5 x 2^-23 relative, NaN and infinities as
// libm. Used for f32 accumulation.
Halide::Expr exp_f32(Halide::Expr x);
Halide::Expr tanh_f32(Halide::Expr x);

}  // namespace normgen::hl
