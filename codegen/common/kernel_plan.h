// Analysis shared by the backends (Halide, MLIR): the storage types of one kernel, and facts about a
// declaration's reductions that every lowering uses the same way.
#pragma once

#include "dsl/norm_spec.h"

#include <map>
#include <string>

namespace normgen {

// The storage type of every input, parameter and output of one kernel.
struct KernelTypes {
    std::string tag;  // "f32", "bf16", "f16": the type asked for
    std::map<std::string, DType> storage;
};

// Each storage group takes `want` if it allows it, else its first (default) type; undeclared
// tensors are f32.
KernelTypes kernel_types(const NormSpec &spec, DType want);

// Whether two expression trees are the same computation.
bool same_tree(const Node &a, const Node &b);

// A mean(operand, over: same axes) of the same operand as `var` somewhere in the declaration
// (LayerNorm's mu beside its var): a two-pass variance takes it as its first pass. nullptr if none.
const Node *find_mean_like(const NormSpec &spec, const Node &var);

// Whether the layer has an optional output (then it gets a "full" kernel beside the "core" one).
bool has_optional_outputs(const NormSpec &spec);

}  // namespace normgen
