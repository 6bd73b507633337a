// KernelPlan: the facts about one kernel of a declaration that every consumer needs, computed once
// from a NormSpec, a storage type and a variant, and read by both lowerings (Halide CPU, MLIR CPU
// and CUDA), the manifest writers, the registry's argument checks, `normgen describe --plan` and
// the build (`normgen-gen kernels`). Nothing else classifies a layer.
//
//   args        the kernel ABI: inputs and params (NormSpec::tensors order), then the variant's
//               outputs; each with its storage type and its atomic axes in memory order
//   stages      per reduction stage, the axes it reduces, the axes its statistics keep, and the axes
//               its sums are blocked along
//   main output the output with the most axes (y): its memory order is the loop nest
//   layout      map (no reduction), row (the reductions cover a trailing block of the main output's
//               memory order: statistics per row while the row is in cache) or root (some reduction
//               strides across the outer loop: statistics first, then the map), and why
//   split axes  the axes no reduction reduces and every output has: the work may be cut along them
//   kernels     the kernels the plan needs, in launch order (main; with column sums also final)
#pragma once

#include "dsl/norm_spec.h"
#include "runtime/manifest_schema.h"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

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
// The two-pass variances over one axis whose pass 1 is the declaration's own mean of the same
// operand (LayerNorm's row), in declaration order: what the Halide row schedule's checked_variance
// applies to (lower.cpp's checked_mean). Empty for one-pass and Welford declarations.
std::vector<const Node *> checked_variances(const NormSpec &spec);

// Whether the layer has an optional output (then it gets a "full" kernel beside the "core" one).
bool has_optional_outputs(const NormSpec &spec);
// The variants a declaration yields: core, and full when it has optional outputs.
std::vector<Variant> variants_of(const NormSpec &spec);

enum class LayoutClass { Map, Row, Root };
const char *layout_name(LayoutClass l);  // "map", "row", "root"

struct PlanArg {
    enum Role { Input, Param, Output };
    std::string name;
    Role role = Input;
    DType dtype = DType::F32;
    std::vector<AxisId> dims;   // as declared (may be split axes), outermost first
    std::vector<AxisId> atoms;  // atomic axes in memory order, outermost first
    bool optional = false;      // an optional output
    std::string updates;        // the input this output may overwrite in place, or ""
    int output = -1;            // outputs: index into NormSpec::outputs
};
const char *arg_role_name(PlanArg::Role r);  // "input", "param", "output"

struct PlanStage {
    int index = 0;                    // 1-based, as NormSpec::stages
    AxisSet reduced;                  // the union of its reductions' axes
    AxisSet independent;              // the union of its statistics' axes
    AxisSet blocked;                  // the axes its sums are blocked along (each reduction's innermost
                                      // reduced axis: split into blocks of the schedule's sum_block)
    std::vector<NodePtr> reductions;  // those the kernel computes (reached from its outputs)
};

// One kernel of a plan: "main" (the whole layer, or with column sums everything but them, plus
// their per-block partial sums) and, with column sums, "final" (the reduce of the partials). On the
// CPU a plan's kernels are one pipeline; on CUDA each is a launch.
struct PlanKernel {
    std::string role;                  // "main", "final"
    std::vector<std::string> outputs;  // the outputs it writes
};

struct KernelPlan {
    std::string layer;
    DType dtype = DType::F32;  // the storage type asked for
    Variant variant = Variant::Core;
    KernelTypes types;
    std::vector<PlanArg> args;
    std::vector<PlanStage> stages;  // only stages with a reduction this kernel computes
    AxisSet reduced;                // every axis some computed reduction reduces

    int main_output = -1;              // index into NormSpec::outputs
    std::vector<AxisId> main_order;    // its atomic axes, memory order, outermost first
    std::vector<int> same_shape;       // other outputs of the same shape (they share the loop nest)
    LayoutClass layout = LayoutClass::Map;
    std::string layout_reason;
    // Row layout: the leading axes of main_order that index rows (the reduced block follows);
    // map layout: all but the innermost; root layout: 0.
    size_t row_axes = 0;
    // Row layout: outputs (indices into NormSpec::outputs) that are a sum over the row axis itself,
    // keeping the row's own axes: a backward's parameter gradients (d_weight = sum(..., over: rows)).
    // They are summed in the same sweep as the rows, as per-block partial sums (one block of rows a
    // task), then a final reduce over the blocks; the plan's kernels say so.
    std::vector<int> column_sums;
    // The two innermost axes of main_order travel together in every tensor and no statistic varies
    // along them (BatchNorm's (h, w)): a map may run them as one contiguous loop.
    bool inner_pair_fusable = false;
    // The same pair travels together in every tensor, but statistics vary along its outer axis
    // (GroupNorm NHWC's (g, cg)): a map may still run it as one loop, reading the per-group values
    // by index (the halide-cpu knob group_vectors).
    bool inner_pair_grouped = false;
    // Axes no computed reduction reduces that every output of the kernel has, outermost first: the
    // CPU runtime may cut an MLIR kernel's work along one of them (runtime/mlir_abi.h).
    std::vector<AxisId> split_axes;
    // CUDA: one block per index of these axes (ascending), or the reason the CUDA plan cannot take
    // the declaration, located at the reduction that breaks it (file:line:col: ...).
    std::vector<AxisId> cuda_block_axes;
    std::string cuda_refusal;
    // CUDA's two-kernel form: blocks of rows, a row being one index of cuda_row_axes (memory order;
    // with column sums, the row axis; for a root plan whose statistics all keep these axes,
    // GroupNorm's (n, g) or QKNorm's (b, t, heads), their common axes). The main kernel computes
    // each row's statistics (one that keeps more axes, GroupNorm's per-channel sum, is held per
    // block in scratch memory) and adds the terms of the cuda_columns outputs (sums over a row
    // axis) into per-block partials; the final kernel adds the blocks; cuda_block_axes repeats the
    // row axes. Empty: one kernel, a block per index of cuda_block_axes.
    std::vector<AxisId> cuda_row_axes;
    std::vector<int> cuda_columns;
    std::vector<PlanKernel> kernels;

    // The args that are outputs, in order, and the index of an arg by name (-1 if absent).
    std::vector<const PlanArg *> outputs() const;
    int find_arg(const std::string &name) const;
    // Whether reduction `n` is one of the column sums (the whole value of a column_sums output).
    bool is_column_sum(const NormSpec &spec, const Node *n) const;
    // A root plan whose reductions all keep the outermost axis of the main output's memory order
    // (GroupNorm NHWC: statistics per sample and group), except sums over it that are the whole
    // value of the kernel's other outputs (a backward's d_weight, d_bias): its statistics may be
    // computed per index of that axis inside the map's loop, those sums as per-index partials in
    // the same loop (the halide-cpu knob sample_statistics). Not with saved statistics as outputs.
    bool statistics_per_outer_index(const NormSpec &spec) const;
    // Such a plan whose statistics also keep the second axis of that order (GroupNorm NCHW's
    // groups, an affine InstanceNorm's channels; the catalog's InstanceNorm has no parameters, so its
    // backward is a row plan): they may be computed per index of that axis, inside the
    // map's loop over it (the halide-cpu knob group_statistics).
    bool statistics_per_second_index(const NormSpec &spec) const;
    // Groups of two or more sums of one stage over the same axes that keep the same axes (a
    // backward's sum(t1 * d_y) and sum(d_y) per channel, its d_weight and d_bias): independent of
    // each other (one stage), so one sweep over the data may compute a group together (the
    // halide-cpu knob sibling_sums). Each group in stage order.
    std::vector<std::vector<const Node *>> sibling_sums() const;
    // Row layout with column sums: full-size values (the main output's axes) whose own expression
    // calls a transcendental (tanh, exp, log, sigmoid, pow) and that a sum reads (DyT's backward's
    // t1 = tanh(alpha * x), read by d_x, d_alpha and d_weight): inlined, each sweep over a block of
    // rows evaluates it again; the halide-cpu knob block_values computes them once per block of
    // rows, kept in cache (indices into NormSpec::values).
    std::vector<int> block_values(const NormSpec &spec) const;
};

KernelPlan make_plan(const NormSpec &spec, DType want, Variant variant);

// Whether reduction `n` is the whole value of one of `outputs` (indices into NormSpec::outputs).
template <class Outputs>
bool is_value_of(const NormSpec &spec, const Outputs &outputs, const Node *n) {
    for (int o : outputs)
        if (spec.values[spec.outputs[o].value].expr.get() == n) return true;
    return false;
}

// Whether an expression depends on a reduction (through named values).
bool depends_on_reduction(const NormSpec &spec, const Node &n);

// Whether value `v` is read directly by the operand of some reduction.
bool read_by_reduction(const NormSpec &spec, int v);

// Axis names as a JSON array ["n", "h", "w"] (the manifest's and the plan's spelling of axis lists).
nlohmann::json axis_names_json(const NormSpec &spec, const std::vector<AxisId> &axes);

// `normgen describe --plan`: the plans of every variant, as text or JSON.
std::string plan_text(const NormSpec &spec, const KernelPlan &plan);
nlohmann::json plan_json(const NormSpec &spec, const KernelPlan &plan);

}  // namespace normgen
