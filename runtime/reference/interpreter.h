// The float64 reference: an interpreter of any NormSpec.
//
// It evaluates the declaration as written, with no knowledge of which layer it is: inputs are bound
// to their declared axes (split views resolved from the fixed extents), expressions broadcast by axis
// name, reductions accumulate in double with compensated (Neumaier) summation, and var() is the
// two-pass population variance; a rounding point rounds the float64 value, correctly, to its storage
// type. It is the "truth" every backend is compared with.
#pragma once

#include "dsl/norm_spec.h"
#include "runtime/shapes.h"

#include <map>
#include <string>
#include <vector>

namespace normgen {

// What the reference does at a rounding point (`round(e, to: T)`).
enum class Rounding {
    AsDeclared,  // round the float64 value to T, to nearest even: the declared result
    Ignored,     // pass the value through (the smooth function the verifier's sensitivity needs)
    UlpUp,       // round, then move one unit of T up / down: what a kernel whose value before the
    UlpDown,     // rounding point sits on the other side of a rounding boundary can produce
};

struct ReferenceOptions {
    // The storage types of the kernel the reference stands for: `round(e, to: x)` rounds to x's
    // type there. A tensor not listed takes its declared default (the first of its storage types).
    StorageMap storage;
    Rounding rounding = Rounding::AsDeclared;
};

// Evaluates every output (optional ones included). Inputs must be named as declared; parameters too.
// A rank-0 tensor may be given as any one-element array (PyTorch stores scalars as shape [1]).
TensorMap evaluate_reference(const NormSpec &spec, const TensorMap &inputs, const Overrides &overrides = {},
                             const ReferenceOptions &options = {});

// The running error bound's scale M of every output (Higham, "Accuracy and Stability of Numerical
// Algorithms", 3.1): evaluating the declaration in a precision with unit roundoff u errs by about
// u * M to first order, per element. M propagates each operand's M through the operation's
// derivative and adds |result| for the operation's own rounding (a sum adds every |term|). Unlike the
// verifier's input sensitivity it sees cancellation inside the computation: d_v of WeightNorm with
// one input column is exactly 0 as a function, yet a kernel's two O(1) terms leave ~1e-7.
TensorMap evaluate_magnitudes(const NormSpec &spec, const TensorMap &inputs, const Overrides &overrides = {},
                              const ReferenceOptions &options = {});

// Whether the declaration can be evaluated one slice of the atomic axis `axis` at a time: every
// output that spans the axis depends on its own slice only (no reduction or count reads across the
// axis), and every output that lacks it is a sum over it, the last operation of its value (read by
// nothing else). Then each output of the whole is its slices' outputs put side by side, or summed:
// a backward's parameter gradients, summed over its rows (LayerNorm) or samples (GroupNorm), and not
// BatchNorm training's, whose statistics reduce over the samples. evaluate_magnitudes adds up so
// too, but for the sum's own rounding: its magnitude is its terms' magnitudes plus |the sum|, and
// the slices' |sums| add up to at least the whole's.
bool slices_add_up(const NormSpec &spec, AxisId axis);

}  // namespace normgen
