// Fresh random inputs for a declaration: never zeros, mixed signs, optionally a large common
// offset (x = offset + N(0, 1)) to stress cancellation in variance computations.
#pragma once

#include "dsl/norm_spec.h"
#include "runtime/reference/interpreter.h"

#include <cstdint>
#include <map>
#include <random>

namespace normgen {

struct RandomInputOptions {
    double offset = 0;        // added to the inputs a reduction reads (the activations; every input of a
                              // layer without reductions), not to params or other inputs
    uint64_t seed = 1;
};

// Extents for every atomic axis: fixed ones as declared, the others from `sizes` by name, else
// `fallback`. A split axis's free part gets its extent the same way.
AxisExtents choose_extents(const NormSpec &spec, const std::map<std::string, int64_t> &sizes, int64_t fallback);

// One tensor per input and parameter, shaped by `ext`. Activations are offset + N(0,1) with no
// exact zeros; parameters are U(0.5, 1.5) with a random sign for shifts; variance-like state
// inputs (names containing "var") are positive.
TensorMap random_inputs(const NormSpec &spec, const AxisExtents &ext, const RandomInputOptions &opts);

}  // namespace normgen
