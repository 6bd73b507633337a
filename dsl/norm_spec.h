// NormSpec: the validated IR of one normalization layer.
//
// The semantic model (see DESIGN.md): tensors with named axes, a sequence of reduction stages over
// named axes, then one elementwise map producing the outputs. Everything a backend needs is recorded
// here and queryable: reduction axes per stage, where eps sits, the affine terms, the precisions.
//
// Axes: every axis has an id. An *atomic* axis is a loop dimension. A *split* axis (GroupNorm's
// `c: (g, cg)`) is a view over atomic parts, major part first; a tensor that declares `c` is laid
// out in memory exactly as if it declared `g, cg` in that place. Expression shapes are sets of
// atomic axes; broadcasting is by axis name.
#pragma once

#include "dsl/diagnostics.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace normgen {

enum class DType { F32, F16, BF16, F64 };
enum class VarianceAlgorithm { TwoPass, Welford, OnePass };
enum class ReduceOp { Sum, Mean, Max, Min, Var };
// Step: 1 where the argument is > 0, else 0 (NaN gives 0); the subgradients of max/min/abs use it.
enum class UnaryOp { Neg, Sqrt, Rsqrt, Tanh, Exp, Log, Abs, Sigmoid, Round, Step };
enum class BinaryOp { Add, Sub, Mul, Div, Max, Min, Pow };

const char *dtype_name(DType t);
std::optional<DType> parse_dtype(const std::string &s);
const char *variance_name(VarianceAlgorithm v);
std::optional<VarianceAlgorithm> parse_variance(const std::string &s);
const char *reduce_name(ReduceOp op);
const char *unary_name(UnaryOp op);    // function spelling; Neg is "-"
const char *binary_name(BinaryOp op);  // "+", "-", "*", "/", "max", "min", "pow"

using AxisId = int;
using AxisSet = std::vector<AxisId>;  // atomic axis ids, sorted ascending (= declaration order)
AxisSet axis_union(const AxisSet &a, const AxisSet &b);
AxisSet axis_difference(const AxisSet &a, const AxisSet &b);
AxisSet axis_intersection(const AxisSet &a, const AxisSet &b);

struct Axis {
    std::string name;
    std::vector<AxisId> parts;           // non-empty: a split view over these atomic axes
    std::optional<int64_t> fixed_extent; // from `axis NAME = N`
    bool is_split() const { return !parts.empty(); }
};

struct Node;
struct NormSpec;
using NodePtr = std::shared_ptr<const Node>;

// One node of an expression. Reductions are nodes too: the stage analysis finds them.
struct Node {
    enum Kind { Literal, Const, Tensor, Value, Unary, Binary, Reduce, Count };
    Kind kind = Literal;
    double value = 0;         // Literal, Const
    std::string name;         // Const, Tensor (an input or param), Value (a named definition);
                              // Unary Round: the tensor whose storage type it rounds to ("" = round_type)
    int index = -1;           // Tensor: index into NormSpec::tensors; Value: into NormSpec::values
    UnaryOp unary = UnaryOp::Neg;
    BinaryOp binary = BinaryOp::Add;
    ReduceOp reduce = ReduceOp::Sum;
    std::vector<NodePtr> args;
    AxisSet over;             // Reduce, Count: the atomic axes reduced / counted
    std::vector<AxisId> over_written;  // the axes as written (may name split axes), for printing
    AxisSet axes;             // the atomic axes of the result
    int stage = 0;            // Reduce: its stage (1-based); others: the highest stage they depend on
    // Tensor: an element of the tensor fixed along these atomic axes (an indexed parameter,
    // `weight[0]`: the leading declared axes, each with a fixed extent); the node lacks those axes.
    std::vector<std::pair<AxisId, int64_t>> at;
    // Unary Round: a rounding point. The value is rounded (to nearest even) to a storage type there:
    // `round(e, to: bf16)` names the type, `round(e, to: x)` takes x's storage type in each kernel.
    DType round_type = DType::F32;
    SourceLoc loc;
};

// The type a rounding point rounds to in a kernel whose tensors have these storage types (a tensor
// missing from `storage` takes its declared default).
DType rounding_type(const NormSpec &spec, const Node &round, const std::map<std::string, DType> &storage);

// Whether node `n` itself (not its operands) is a transcendental function: tanh, exp, log,
// sigmoid or pow. Kernels approximate them less exactly than a rounding (the verifier allows two
// ulps), and evaluating one costs tens of instructions a vector.
bool is_transcendental(const Node &n);

// The rounding points of a declaration (Round nodes), in the order they are written.
std::vector<const Node *> rounding_points(const NormSpec &spec);

struct TensorInfo {
    enum Role { Input, Param };
    std::string name;
    Role role = Input;
    std::vector<AxisId> dims;  // as declared (may be split axes); memory order, innermost last
    AxisSet axes;              // atomic
    int storage = -1;          // index into NormSpec::storage, -1 = fixed f32
    SourceLoc loc;
};

struct ValueDef {
    std::string name;
    NodePtr expr;
    SourceLoc loc;
};

struct OutputInfo {
    std::string name;
    int value = -1;            // index into NormSpec::values
    std::vector<AxisId> dims;  // memory order (may be split axes)
    AxisSet axes;
    bool optional = false;
    bool shape_written = false;  // the shape was written in the source (else inferred)
    std::string updates;       // name of the input it may overwrite in place, or empty
    int storage = -1;
    SourceLoc loc;
};

struct ConstInfo {
    std::string name;
    double value = 0;
    std::string spelling;  // as written, so the printer keeps 1e-5 as 1e-5
};

struct StorageGroup {
    std::vector<std::string> tensors;
    std::vector<DType> allowed;  // the first is the default
};

struct Stage {
    int index = 0;                 // 1-based
    std::vector<NodePtr> reductions;
    std::vector<std::string> names;  // the value each reduction defines, or "" when inline
};

enum class EpsPlacement { None, InsideRoot, OutsideRoot, Clamp, Other };
const char *eps_placement_name(EpsPlacement p);

struct EpsUse {
    std::string name;    // the constant
    double value = 0;
    EpsPlacement placement = EpsPlacement::None;
    std::string where;   // the sub-expression, printed, e.g. "rsqrt(var + eps)"
};

struct AffineTerm {
    std::string param;
    std::string role;   // "scale", "shift", "offset scale (1 + w)", "input scale", "other"
    std::string where;  // printed sub-expression
};

struct NormSpec {
    std::string name;
    std::string file;
    std::vector<Axis> axes;
    std::vector<TensorInfo> tensors;   // signature inputs first, then params, in declaration order
    std::vector<ConstInfo> consts;
    std::vector<ValueDef> values;      // in dependency order
    std::vector<OutputInfo> outputs;
    std::vector<Stage> stages;
    DType accumulate = DType::F32;
    bool accumulate_written = false;
    VarianceAlgorithm variance = VarianceAlgorithm::TwoPass;
    bool variance_written = false;
    std::vector<StorageGroup> storage;

    // Queries.
    AxisId find_axis(const std::string &name) const;  // -1 if absent
    const TensorInfo *find_tensor(const std::string &name) const;
    const OutputInfo *find_output(const std::string &name) const;
    const ValueDef *find_value(const std::string &name) const;
    const ConstInfo *find_const(const std::string &name) const;
    std::vector<AxisSet> reduction_axes_per_stage() const;
    std::vector<EpsUse> eps_uses() const;
    std::vector<AffineTerm> affine_terms() const;
    bool has_var_reduction() const;
    // The tensors (indices into `tensors`) some reduction reads, directly or through named values.
    std::set<int> reduced_tensors() const;
    std::string axes_text(const std::vector<AxisId> &ids) const;  // "[rows, d]"
    // The atomic axes of a declared shape in memory order (split views expanded, major part first):
    // a tensor declared [n, c: (g, cg), h, w] is laid out exactly like one declared [n, g, cg, h, w].
    std::vector<AxisId> memory_atoms(const std::vector<AxisId> &dims) const;
    // The storage types a tensor (input, param or output) may take; {F32} when not declared.
    std::vector<DType> storage_of(const std::string &tensor) const;
};

}  // namespace normgen
