// The float64 reference: an interpreter of any NormSpec.
//
// It evaluates the declaration as written, with no knowledge of which layer it is: inputs are bound
// to their declared axes (split views resolved from the fixed extents), expressions broadcast by axis
// name, reductions accumulate in double with compensated (Neumaier) summation, and var() is the
// two-pass population variance. It is the "truth" every backend is compared with.
#pragma once

#include "dsl/norm_spec.h"
#include "runtime/shapes.h"

#include <map>
#include <string>
#include <vector>

namespace normgen {

// Evaluates every output (optional ones included). Inputs must be named as declared; parameters too.
// A rank-0 tensor may be given as any one-element array (PyTorch stores scalars as shape [1]).
TensorMap evaluate_reference(const NormSpec &spec, const TensorMap &inputs, const Overrides &overrides = {});

}  // namespace normgen
