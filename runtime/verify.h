// The verifier: a kernel is correct when, on fresh random inputs over a sweep of awkward shapes,
// every output element was written (outputs are poisoned before the run), nothing is NaN unless
// the float64 reference is, and the error against the reference is inside the storage type's bound.
//
// Bounds (err = |kernel - reference|, the reference evaluated on the inputs as stored):
//   f32 output:       err <= 1e-5 * |ref| + K * eps_acc * S
//   bf16/f16 output:  |kernel - round(ref)| <= u ulps of the storage type at ref (u = 1; 2 when the
//                     layer uses tanh) + K * eps_acc * S
// S is the output's measured sensitivity to a relative perturbation of the inputs (the reference
// re-evaluated on inputs scaled by 1 + 2^-24 * (+-1): with random signs (twice), all scaled up in
// magnitude (a sum's worst case), and with signs alternating along memory (neighbours apart)): it
// is what accumulating in eps_acc precision can cost on ill-conditioned inputs (x = 1e4 + N(0,1): a two-pass variance passes, a
// one-pass variance does not). K = 64.
// Rounding points (`round(e, to: T)`): S is measured with them passed through, and the bound adds
// F, the largest move of the output when every rounding point lands one unit of T up (or down):
// where a kernel's value before the point sits at a boundary it may round to the neighbour.
#pragma once

#include "dsl/norm_spec.h"
#include "runtime/reference/interpreter.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace normgen {

// Runs a kernel: float64 inputs (already representable in their storage types) -> float64 outputs.
using KernelFn = std::function<TensorMap(const TensorMap &inputs, const Overrides &axis_overrides)>;

struct VerifyShape {
    std::string label;                     // e.g. "rows=3 d=4097"
    std::map<std::string, int64_t> sizes;  // extent of each atomic axis by name (a fixed one: overridden)
    double offset = 0;                     // added to the activations (1e4 stresses cancellation)
    bool quick = false;                    // in the quick sweep (quick_shapes)
};

// At least 20 shapes derived from the declaration's structure: the innermost reduced axis takes
// 1, 3, 17, 100, 1000, 4096, 4097, 65536, 262144; one row; many rows; small and large spatial
// extents where there are several reduced axes; a split axis with a fixed part (GroupNorm's g =
// 32) at 7 groups of 7. Alternate cases use a 1e4 offset.
std::vector<VerifyShape> verify_shapes(const NormSpec &spec);

// The quick sweep (`verify --quick`): the innermost width at 1, 17 and 4097 (large mean) and 262144,
// one row, 20 000 short rows (rows that do not fill a GPU block), 130 and 8193 (past a vector and
// a block), and the split axis at 7 x 7.
std::vector<VerifyShape> quick_shapes(const std::vector<VerifyShape> &all);

// One element outside its bound (or NaN where the reference is not, or an infinity mismatch).
struct Mismatch {
    int64_t index = -1;  // flat index into the output, memory order
    double got = 0, want = 0, bound = 0;  // want: the reference (rounded to the storage type for bf16/f16)
};

struct OutputCheck {
    std::string name;
    double max_err = 0;     // largest err / bound over the tensor (<= 1 passes)
    double worst_abs = 0;   // the absolute error at that element
    double bound_abs = 0;   // the bound at that element
    int64_t worst_index = -1;
    std::string problem;    // "", "NaN", "unwritten (poison)", "shape"
    std::vector<Mismatch> mismatches;  // the first few elements that fail, in index order
    int64_t failed = 0;                // how many elements fail
    bool pass = false;
};

// "y: 3 of 4096 elements fail; [17] got 1.25 want 1.5 (bound 1e-05), ..." or "" when it passed.
std::string mismatch_text(const OutputCheck &c);

struct CaseResult {
    std::string shape;
    uint64_t seed = 0;
    std::vector<OutputCheck> outputs;
    bool pass = false;
};

struct VerifyOptions {
    uint64_t seed = 0;  // 0 = fresh from the system's random device (printed for replay)
    Overrides axis_overrides;
};


// Checks every kernel in `kernels` (same storage types, e.g. one per target) on one shape: the
// inputs, the reference and its sensitivity are computed once and shared. One result per kernel.
// The inputs of one case (float64, before rounding to the storage types): by default
// random_inputs(spec, ext, {offset, seed}).
using InputMaker = std::function<TensorMap(const AxisExtents &ext, double offset, uint64_t seed)>;
// `running_error`: S also covers the running error bound's scale M of each output (the worst over
// the tensor, evaluate_magnitudes), for declarations whose formulas cancel inside: a backward's
// terms subtract to exactly 0 where its inputs say nothing (d_v of WeightNorm with one column).
std::vector<CaseResult> verify_case(const NormSpec &spec, const StorageMap &storage, const std::vector<KernelFn> &kernels,
                                    const VerifyShape &shape, uint64_t seed, const InputMaker &make_inputs = {},
                                    bool running_error = false);

// The inputs of `backward`, the backward declaration of `forward` (dsl/grad.h), drawn consistently:
// the forward's inputs and parameters as the forward's own verifier draws them (the large mean
// included), the saved statistics (mu, rstd) the float64 forward computes from those inputs rounded
// to `storage`, and every upstream gradient d_<out> N(0, 1).
InputMaker backward_input_maker(const NormSpec &forward, const NormSpec &backward, const StorageMap &storage);

// The bound of one output: f32 outputs within rel * |ref| + abs, bf16/f16 outputs within
// ulps * ulp(round(ref)) + abs of the correctly rounded reference.
struct OutputBound {
    double rel = 1e-5;
    double abs = 0;
    int ulps = 1;
};

// The one output comparator (verify, the benchmark's checks, the tests, the user example).
OutputCheck compare_output(const std::string &name, const HostTensor &got, const HostTensor &ref, DType storage, const OutputBound &bound);

// The verifier's bound: abs = K * eps_acc * S + F, with S this output's sensitivity (see above),
// `ulps` the allowance in storage ulps and F (`rounding_flip`) how far the output moves when every
// rounding point of the declaration lands one unit of its type away (0 without rounding points).
OutputCheck compare_output(const std::string &name, const HostTensor &got, const HostTensor &ref, double sensitivity,
                           DType storage, DType accumulate, int ulps, double rounding_flip = 0);

// The bound of a spot check that has no sensitivity at hand (a few shapes, inputs without a large
// offset): f32 1e-5 relative with a 1e-5 floor, bf16/f16 2 * ulp_allowance ulps + 1e-5.
OutputBound spot_check_bound(const NormSpec &spec);
// The same widened by the running error bound of these inputs: K * eps_acc * the worst M of the
// output (evaluate_magnitudes(spec, inputs)). For declarations whose terms cancel inside (the
// backward kernels: d_x of a one-element LayerNorm row is exactly 0, a kernel's terms leave 3e-5).
OutputBound spot_check_bound(const NormSpec &spec, const HostTensor &magnitude);
// The bound of output `name` in a spot check: widened by its running error bound where
// `magnitudes` (evaluate_magnitudes of the case: a backward kernel's) has one, else the plain one.
OutputBound spot_check_bound(const NormSpec &spec, const TensorMap &magnitudes, const std::string &name);

// 2 when the declaration uses a transcendental function (tanh, exp, log, sigmoid, pow), else 1.
int ulp_allowance(const NormSpec &spec);

}  // namespace normgen
