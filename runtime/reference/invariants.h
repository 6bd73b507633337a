// The invariance table of any declaration: which of the six transformations of the Layer
// Normalization paper's table 1 (and the RMSNorm paper's row) leave the layer's outputs unchanged.
//
// The layer's normalized tensor is read as the output a = W x of a linear layer, with its axes in
// three roles: sample axes S (the training cases: the outermost axis), unit axes U (the neurons:
// the axes of the per-unit parameters, e.g. LayerNorm's weight [d], BatchNorm's [c]; without such
// parameters the axes the statistics keep besides S, InstanceNorm's c; else all but S) and the
// rest, positions P (a convolution's h, w). The transformations act on every input shaped like the
// normalized tensor (a residual stream beside it moves with it) and are judged on the outputs of
// that shape that depend on a statistic (fused add-norm's y, not its h):
//
//   weight-matrix re-scaling      W -> delta W                a -> delta a (one scalar)
//   weight-matrix re-centering    W -> W + 1 gamma^T          a -> a + t, t varies along S and P, constant along U
//   weight-vector re-scaling      w_u -> delta_u w_u          a -> delta_u a, a scale per unit
//   dataset re-scaling            x -> delta x                a -> delta a
//   dataset re-centering          x -> x + gamma              a -> a + t_u, a shift per unit, constant along S and P
//   single-training-case re-scal. x_s -> delta_s x_s          a -> delta_s a, a scale per sample
//
// A layer whose normalized tensor is a parameter (WeightNorm's v [o, i]) is the weight itself: the
// weight transformations act on it directly (rows o are the units, a shift per input index i is the
// re-centering), and the data ones on the x of a = w x (the layer's output is judged through a).
//
// Each transformation is decided by metamorphic tests on the float64 reference with every eps-like
// constant set to 0 (eps_uses: inside or outside a root, or a clamp): several random draws (scales
// in [0.5, 2], shifts of the data's size), invariant when the judged outputs move by at most
// 1e-9 of their largest magnitude in every draw. Where the declaration makes it evident, a
// symbolic argument is given as well (each value's behaviour: unchanged, scaled by s^k, shifted).
#pragma once

#include "dsl/norm_spec.h"

#include <cstdint>
#include <string>
#include <vector>

namespace normgen {

struct InvarianceOptions {
    uint64_t seed = 1;
    int draws = 4;
    double tolerance = 1e-9;  // relative to the largest magnitude of the judged outputs
    // Overrides of the roles (axis names); empty = the rule above.
    std::vector<std::string> sample_axes, unit_axes;
    // The tensors the transformations act on; empty = every input with the normalized tensor's axes.
    std::vector<std::string> transformed;
};

struct InvarianceRow {
    std::string transform;  // "weight-matrix re-scaling", ...
    std::string action;     // what it does to this layer's tensors, in its axes
    bool invariant = false;
    double max_change = 0;  // the largest relative move of the judged outputs over the draws
    std::string argument;   // the symbolic argument, when the declaration makes it evident
};

struct InvarianceReport {
    std::string layer;
    std::string normalized;                // the normalized tensor
    bool weight_layer = false;             // it is a parameter: the layer normalizes a weight
    std::vector<std::string> sample_axes, unit_axes, position_axes;
    std::vector<std::string> transformed;  // the tensors the transformations act on
    std::vector<std::string> judged;       // the outputs judged (the normalized ones)
    std::vector<std::string> zeroed;       // the eps-like constants set to 0
    std::vector<InvarianceRow> rows;       // the six, in the table's order
};

// Throws UserError when the declaration has nothing to transform or an override names no axis.
InvarianceReport invariance_table(const NormSpec &spec, const InvarianceOptions &options = {});

// The report as `normgen describe --invariants` prints it.
std::string invariance_text(const InvarianceReport &r);

// The six transformations' names, in the table's order.
const std::vector<std::string> &invariance_transforms();

}  // namespace normgen
