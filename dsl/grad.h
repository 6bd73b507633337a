// Reverse-mode differentiation of a declaration: the backward layer, as a declaration in the same
// language (`normgen grad`).
//
// The backward of layer L is `norm L_grad(...)`: its inputs are the forward's inputs and parameters
// that the gradients read, the forward's optional outputs (saved statistics such as mu and rstd)
// that they read, and one upstream gradient `d_<out>` per differentiable output (every output that
// is neither optional nor `updates`); its outputs are `d_<name>` for every input and parameter some
// differentiable output depends on: the gradients of sum over outputs of <out, d_out>. A parameter
// broadcast along axes (rows, a batch) gets its gradient summed over them; an indexed parameter
// (`weight[0]`) gets one scalar output per element used (`d_weight_0`).
//
// Subgradients (documented in the README): d max(a, b) = step(a - b) da + (1 - step(a - b)) db (a tie
// goes to b: the clamp `max(norm, eps)` of an all-zero row passes nothing to norm); min likewise with
// step(b - a); d abs(a) = (step(a) - step(-a)) da (0 at 0); a max/min reduction passes the gradient to
// every element equal to the result. A rounding point `round(e, to: T)` passes the gradient through
// unchanged (as a cast does in PyTorch); count() and constants carry none.
//
// Simplification: the expressions are hash-consed (a common subexpression is computed once, and
// `mean(x, over: d)` inside var's derivative is the forward's `mu`), constants fold, x * 1 and x + 0
// vanish, and a factor that does not vary along a reduction's axes moves out of it, so LayerNorm's
// gradient comes out as rstd * (g - mean(g) - xhat * mean(g * xhat)) with two reductions in one
// stage, not a sweep per term.
#pragma once

#include "dsl/norm_spec.h"

#include <string>
#include <vector>

namespace normgen {

struct GradOptions {
    bool recompute = false;  // recompute every statistic instead of reading the forward's saved ones
};

struct GradResult {
    std::string text;   // the backward declaration: a header comment, then its canonical text
    NormSpec spec;      // the same, checked
    std::vector<std::string> saved;        // forward values the backward reads as inputs
    std::vector<std::string> recomputed;   // named forward values the backward recomputes
    std::vector<std::string> no_gradient;  // inputs/params no differentiable output depends on
    std::vector<std::string> upstream;     // the d_<out> inputs
    std::vector<std::string> gradients;    // the d_<name> outputs
};

// Throws DiagnosticError (located in the forward's source) when the layer cannot be differentiated:
// no differentiable output, or a gradient name already used by the declaration.
GradResult differentiate(const NormSpec &forward, const GradOptions &options = {});

}  // namespace normgen
