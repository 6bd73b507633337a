#include "codegen/halide/lower.h"

#include <algorithm>
#include <functional>
#include <tuple>
#include <unordered_map>

namespace normgen::hl {

using namespace Halide;

// ---- Vectorizable f32 transcendentals -----------------------------------------------------------
// Halide lowers exp/tanh of f32 to scalar libm calls (one call per element: DyT ran at 0.7 GB/s).
// These are plain arithmetic, so they vectorize with the rest of the map; accuracy 2-3 x 2^-23
// relative (tests/halide verifies DyT at 1e-5 against the float64 reference, and
// tests/halide/vector_math_test.cpp sweeps them against libm).

// e^x: x = k ln2 + f, |f| <= ln2 / 2, e^f by its Taylor series to f^7 (remainder < 6e-9
// relative), 2^k added to the exponent field of e^f as an integer. Error: a few ulps, mostly
// k * (ln2 - float(ln2)) at |x| near 88 (Halide's simplifier folds a two-constant split of ln2
// back into one). NaN propagates; x > ln(FLT_MAX) is +inf; results below FLT_MIN are 0.
Expr exp_f32(Expr x) {
    Expr xc = clamp(x, -88.0f, 88.8f);
    Expr k = round(xc * 1.44269504088896341f);
    Expr f = xc - k * 0.693147180559945309f;
    Expr p = 1.0f / 5040;
    for (float c : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}) p = p * f + c;
    Expr r = reinterpret(Float(32), reinterpret(Int(32), p) + (cast<int32_t>(k) << 23));
    r = select(x > 88.7228394f, Float(32).max() * 2.0f, r);
    r = select(x < -87.3365447f, 0.0f, r);
    return select(is_nan(x), x, r);
}

// tanh: x P(x^2) / Q(x^2) on x clamped to [-9, 9] (beyond 9, tanh is within 3.1e-8 of +-1), P of
// degree 6 and Q of degree 3: a rational fit of tanh(x) / x in relative error (Lawson-weighted
// linearized least squares by scripts/fit_tanh.py: 6.6e-9 relative in exact arithmetic, 1.99 x
// 2^-23 evaluated in f32 over tests/halide/vector_math_test.cpp's sweep, which allows 2.5). One
// division and nine multiply-adds: the Taylor series below 0.55 and e^{2|x|} beyond it, both
// computed for every lane, made DyT's f32 DRAM case 1.65x slower (21.7 against 35.8 GB/s).
Expr tanh_f32(Expr x) {
    Expr xc = clamp(x, -9.0f, 9.0f), t = xc * xc;
    const float p[] = {-8.488430228e-14f, 5.277874318e-11f, -2.022515488e-08f, 1.115431132e-05f,
                       3.103957977e-03f,  1.308401227e-01f, 1.0f};
    const float q[] = {2.546146861e-04f, 2.449518628e-02f, 4.641734064e-01f, 1.0f};
    Expr num = p[0], den = q[0];
    for (int i = 1; i < 7; ++i) num = num * t + p[i];
    for (int i = 1; i < 4; ++i) den = den * t + q[i];
    return select(is_nan(x), x, xc * num / den);
}

// ---- f16 and bf16 as bits (HalfStorage) -----------------------------------------------------------

namespace {
Expr u32(uint32_t v) { return Halide::Internal::make_const(UInt(32), (uint64_t)v); }
}  // namespace

Expr f16_bits_to_f32(Expr bits) {
    Expr b = cast<uint32_t>(bits);
    Expr sign = (b >> 15) << 31, exp = (b >> 10) & u32(0x1f), mant = b & u32(0x3ff);
    // Normal: rebias the exponent (15 -> 127) and widen the mantissa; infinity and NaN keep
    // exponent 255; a subnormal is mant * 2^-24, exact in f32.
    Expr normal = reinterpret(Float(32), sign | ((exp + u32(112)) << 23) | (mant << 13));
    Expr special = reinterpret(Float(32), sign | u32(0x7f800000) | (mant << 13));
    Expr sub = cast<float>(mant) * (1.0f / 16777216.0f);
    sub = select(sign != u32(0), -sub, sub);
    return select(exp == u32(0), sub, exp == u32(31), special, normal);
}

Expr f32_to_f16_bits(Expr f) {
    Expr u = reinterpret(UInt(32), f);
    Expr sign = (u >> 16) & u32(0x8000), a = u & u32(0x7fffffff);
    // NaN (a quiet NaN), infinity, and anything from 65520 up (rounds to infinity).
    Expr big = select(a > u32(0x7f800000), u32(0x7e00), u32(0x7c00));
    // Normal halves (2^-14 up): rebias (127 -> 15), round the 13 dropped bits to nearest even.
    Expr r = a - u32(112u << 23);
    Expr normal = (r + u32(0xfff) + ((r >> 13) & u32(1))) >> 13;
    // Subnormal halves: |f| * 2^24 (exact) rounded to an integer, ties to even (Halide's round).
    Expr subnormal = cast<uint32_t>(round(abs(f) * 16777216.0f));
    Expr mag = select(a >= u32(0x477ff000), big, a < u32(0x38800000), subnormal, normal);
    return cast<uint16_t>(sign | mag);
}

Expr bf16_bits_to_f32(Expr bits) { return reinterpret(Float(32), cast<uint32_t>(bits) << 16); }

Expr f32_to_bf16_bits(Expr f) {
    Expr u = reinterpret(UInt(32), f);
    Expr rounded = (u + u32(0x7fff) + ((u >> 16) & u32(1))) >> 16;
    return cast<uint16_t>(select(is_nan(f), (u >> 16) | u32(0x40), rounded));  // NaN stays a (quiet) NaN
}

HalfStorage half_storage_for(const Target &t) {
    HalfStorage h;
    if (t.has_feature(Target::OpenCL) && !t.has_feature(Target::CLHalf)) h.f16_bits = h.bf16_bits = true;
    if (t.has_feature(Target::CUDA)) h.bf16_bits = true;
    return h;
}

std::string half_storage_text(HalfStorage half) {
    if (half.f16_bits && half.bf16_bits) return "; f16 and bf16 stored as bits";
    if (half.f16_bits) return "; f16 stored as bits";
    if (half.bf16_bits) return "; bf16 stored as bits";
    return "";
}

Type buffer_type(DType t, HalfStorage half) { return half.bits(t) ? UInt(16) : halide_type(t); }

namespace {

// Whether a Halide CPU record runs the root layout (statistics first) rather than the row schedule:
// per-channel tables (group_vectors) and sibling sums are lowered only there.
bool cpu_root_layout(const KernelPlan &plan, const ScheduleRecord &r) {
    return r.kind() == ScheduleKind::HalideCpu && !(plan.layout == LayoutClass::Row && r.flag("row_in_cache"));
}

class Lowerer {
public:
    Lowerer(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &schedule, HalfStorage half)
        : spec_(spec), types_(plan.types), plan_(plan), half_(half), welford_lanes_((int)schedule.get("welford_lanes")),
          welford_block_((int)schedule.get("welford_block")), streaming_(streaming_requirement(spec, plan, schedule)),
          fixed_inner_(schedule.kind() == ScheduleKind::HalideCpu ? schedule.get("fixed_inner_extent") : 0),
          tables_(cpu_root_layout(plan, schedule) && schedule.flag("group_vectors") && plan.inner_pair_grouped &&
                  plan.main_order.size() >= 2 && !plan.stages.empty()),
          block_variance_(tables_ && schedule.flag("block_variance") && spec.variance == VarianceAlgorithm::TwoPass),
          siblings_(cpu_root_layout(plan, schedule) && schedule.flag("sibling_sums") && !tables_ ? plan.sibling_sums()
                                                                                             : std::vector<std::vector<const Node *>>{}),
          checked_variances_(schedule.kind() == ScheduleKind::HalideCpu && !cpu_root_layout(plan, schedule) && schedule.flag("checked_variance")
                                 ? checked_variances(spec)
                                 : std::vector<const Node *>{}) {
        p_.acc = spec.accumulate == DType::F64 ? Float(64) : Float(32);
        if (tables_) {
            tbl_inner_ = plan.main_order.back();
            tbl_outer_ = plan.main_order[plan.main_order.size() - 2];
        }
    }

    LoweredPipeline run() {
        declare_axes_and_inputs();
        // Every value's Func declared first and defined where first read (call_value), else in
        // order: a sibling group (sibling_sum) lowers its members' operands together when its
        // first member is reached, and a later member may read a value declared after it.
        for (const ValueDef &v : spec_.values) p_.values.push_back(Func(v.name));
        for (size_t i = 0; i < spec_.values.size(); ++i)
            if (!p_.values[i].defined()) define_value((int)i);
        for (const PlanArg *out : plan_.outputs()) {
            const size_t i = (size_t)out->output;
            const OutputInfo &o = spec_.outputs[i];
            Func f(o.name);
            std::vector<Var> args;
            std::vector<AxisId> atoms = spec_.memory_atoms(o.dims);
            for (auto it = atoms.rbegin(); it != atoms.rend(); ++it) args.push_back(p_.vars[*it]);
            f(args) = store_as(types_.storage.at(o.name), call_value(o.value, identity_env()));
            for (int k = 0; k < (int)args.size(); ++k) f.output_buffer().dim(k).set_extent(p_.extent[atoms[args.size() - 1 - k]]);
            dense(f.output_buffer());
            if (streaming_.alignment && std::count(streaming_.outputs.begin(), streaming_.outputs.end(), o.name)) {
                // Streaming stores (schedule.h): the buffer aligned to the vector and its rows a
                // multiple of it, so Halide proves every full-vector store aligned (and says so in
                // the IR, where the streaming step finds them). A call that cannot give this gets
                // the ordinary kernel (the registry checks first).
                const int m = streaming_.multiple;
                f.output_buffer().set_host_alignment(streaming_.alignment);
                f.output_buffer().dim(0).set_extent((p_.extent[atoms.back()] / m) * m);
            }
            p_.outputs.push_back(f);
            p_.output_index.push_back((int)i);
        }
        return std::move(p_);
    }

private:
    using Env = std::map<AxisId, Expr>;
    const NormSpec &spec_;
    const KernelTypes &types_;
    const KernelPlan &plan_;
    const HalfStorage half_;
    // Welford's update is serial; to vectorize it, each reduction runs welford_lanes_ interleaved
    // Welford accumulators (element i goes to lane i mod L) and combines them with Chan et al.'s
    // pairwise formula, after at most welford_block_ serial steps per lane (schedule knobs: they
    // reorder the merges, not the algorithm).
    const int welford_lanes_, welford_block_;
    const StreamingRequirement streaming_;  // the outputs declared aligned for streaming stores
    const int64_t fixed_inner_;             // the innermost axis's extent as a constant (0: dynamic)
    LoweredPipeline p_;
    std::unordered_map<const Node *, Func> reduce_funcs_;
    // Per-channel tables (the record's group_vectors, root schedules): with (g, cg) fused into one
    // vector loop over the channels, a per-group value read at g = c / cg is a gather per vector
    // (GroupNorm NHWC's mean, its shift and rsqrt(v + eps), at every pixel). Each maximal
    // subexpression that varies along g but not cg, read where cg varies, is read from a table over
    // (cg, its axes) instead: a dense load (with cg a constant, fixed_inner_extent, the fused index
    // is linear). The same operations on the same values (tests/halide/group_tables_test.cpp).
    const bool tables_;
    // Two-pass variance by blocks (the record's block_variance, with group_vectors): see
    // block_moments.
    const bool block_variance_;
    // Sums computed together as one Tuple-valued sum (the record's sibling_sums; root schedules,
    // not with per-channel tables: the row schedule fuses its sums' sweeps with compute_with
    // instead): KernelPlan::sibling_sums's groups. One RDom, one update, each element one sum's
    // running total; the same terms in the same order as apart, so the same rounding.
    const std::vector<std::vector<const Node *>> siblings_;
    // The variances checked (the record's checked_variance, row schedules; KernelPlan's
    // checked_variances): see checked_mean.
    const std::vector<const Node *> checked_variances_;
    std::unordered_map<const Node *, Func> checked_sums_;  // per such variance: its mean's (S1, S2)
    AxisId tbl_inner_ = -1, tbl_outer_ = -1;
    bool consumer_inner_ = false;  // the Func being defined varies along tbl_inner_
    std::unordered_map<const Node *, Func> node_tables_;
    std::map<std::string, Func> func_tables_;

    static bool has(const AxisSet &s, AxisId a) { return std::binary_search(s.begin(), s.end(), a); }
    AxisSet with_inner(AxisSet s) const {
        s.insert(std::upper_bound(s.begin(), s.end(), tbl_inner_), tbl_inner_);
        return s;
    }
    bool per_group(const AxisSet &axes) const { return tables_ && has(axes, tbl_outer_) && !has(axes, tbl_inner_); }
    bool iterates_inner(const Node &r) const { return tables_ && (has(r.over, tbl_inner_) || has(r.axes, tbl_inner_)); }

    Expr lower_in(const Node &n, const Env &env, bool inner) {
        const bool saved = consumer_inner_;
        consumer_inner_ = inner;
        Expr e = lower(n, env);
        consumer_inner_ = saved;
        return e;
    }

    // The table of Func `f` over `axes` (per group): f repeated along cg.
    Func table_of(const Func &f, const AxisSet &axes) {
        Func &t = func_tables_[f.name()];
        if (!t.defined()) {
            t = Func("table_" + f.name());
            t(pure_vars(with_inner(axes))) = f(pure_vars(axes));
            p_.tables.push_back(t);
        }
        return t;
    }

    // Node `n` (per group) read where cg varies: from its table (a reduction's from the table of
    // its Func, which its consumers inside other reductions share; a named value's from its
    // definition's, so `mu = mean(...)` and the variance's pass 2 read one table).
    Expr from_table(const Node &n, const Env &env) {
        if (n.kind == Node::Value) return from_table(*spec_.values[n.index].expr, env);
        const std::vector<Expr> at = args_at(with_inner(n.axes), env);
        if (n.kind == Node::Reduce) return table_of(reduction(n), n.axes)(at);
        auto it = node_tables_.find(&n);
        if (it == node_tables_.end()) {
            Func t("table" + std::to_string(p_.tables.size()));
            t(pure_vars(with_inner(n.axes))) = lower_in(n, identity_env(), false);
            p_.tables.push_back(t);
            it = node_tables_.emplace(&n, t).first;
        }
        return it->second(at);
    }

    // Func `f` over reduction `r`'s kept axes, read in the reduction's operand at `env`: from a table
    // when the operand varies along cg and f does not.
    Expr stat_at(const Func &f, const Node &r, const Env &env) {
        if (!iterates_inner(r)) return f(args_at(r.axes, env));
        return group_value_at(f, r.axes, env);
    }

    // A per-group value `f` over `axes` read at `env` inside a sweep along cg: from its table.
    Expr group_value_at(const Func &f, const AxisSet &axes, const Env &env) {
        if (!per_group(axes)) return f(args_at(axes, env));
        return table_of(f, axes)(args_at(with_inner(axes), env));
    }

    // The ABI's tensors start at 0 and are dense, with one extent per axis across all tensors
    // (runtime/run.cpp refuses anything else). Telling Halide lets it see two fused neighbouring
    // axes as one contiguous range (schedule.cpp fuses BatchNorm's (h, w), for instance).
    template <typename B>
    static void dense(B b) {
        for (int k = 0; k < b.dimensions(); ++k) b.dim(k).set_min(0);
        for (int k = 1; k < b.dimensions(); ++k) b.dim(k).set_stride(b.dim(k - 1).stride() * b.dim(k - 1).extent());
    }

    void declare_axes_and_inputs() {
        p_.vars.resize(spec_.axes.size());
        p_.extent.resize(spec_.axes.size());
        for (size_t a = 0; a < spec_.axes.size(); ++a) p_.vars[a] = Var(spec_.axes[a].name);
        // A fixed innermost extent (the record's fixed_inner_extent): a constant in every index and
        // bound, asserted on every buffer that has the axis (the registry never hands such a
        // kernel another extent).
        if (fixed_inner_ > 0 && !plan_.main_order.empty()) p_.extent[plan_.main_order.back()] = Expr((int)fixed_inner_);
        for (const TensorInfo &t : spec_.tensors) {
            std::vector<AxisId> atoms = spec_.memory_atoms(t.dims);
            ImageParam in(buffer_type(types_.storage.at(t.name), half_), (int)atoms.size(), t.name);
            int rank = (int)atoms.size();
            for (int k = 0; k < rank; ++k) {
                AxisId a = atoms[rank - 1 - k];
                if (!p_.extent[a].defined())
                    p_.extent[a] = in.dim(k).extent();
                else
                    in.dim(k).set_extent(p_.extent[a]);
            }
            dense(in);
            p_.inputs.push_back(in);
        }
    }

    // A stored element as the accumulation type, and a value rounded to a storage type (f16 and
    // bf16 as bits: converted with integer operations).
    Expr load_as(DType t, Expr stored) const {
        if (half_.bits(t) && t == DType::F16) return cast(p_.acc, f16_bits_to_f32(stored));
        if (half_.bits(t) && t == DType::BF16) return cast(p_.acc, bf16_bits_to_f32(stored));
        return cast(p_.acc, stored);
    }
    Expr store_as(DType t, Expr v) const {
        if (half_.bits(t) && t == DType::F16) return f32_to_f16_bits(cast<float>(v));
        if (half_.bits(t) && t == DType::BF16) return f32_to_bf16_bits(cast<float>(v));
        return cast(halide_type(t), v);
    }

    Env identity_env() const {
        Env env;
        for (size_t a = 0; a < spec_.axes.size(); ++a)
            if (!spec_.axes[a].is_split()) env[(AxisId)a] = p_.vars[a];
        return env;
    }

    // Pure args of a Func over `axes` (ascending ids = declaration order): innermost first.
    std::vector<Expr> args_at(const AxisSet &axes, const Env &env) const {
        std::vector<Expr> r;
        for (auto it = axes.rbegin(); it != axes.rend(); ++it) r.push_back(env.at(*it));
        return r;
    }
    std::vector<Var> pure_vars(const AxisSet &axes) const {
        std::vector<Var> r;
        for (auto it = axes.rbegin(); it != axes.rend(); ++it) r.push_back(p_.vars[*it]);
        return r;
    }

    void define_value(int i) {
        const ValueDef &v = spec_.values[i];
        Func f = p_.values[i];
        f(pure_vars(v.expr->axes)) = lower_in(*v.expr, identity_env(), tables_ && has(v.expr->axes, tbl_inner_));
    }

    Expr call_value(int i, const Env &env) {
        if (!p_.values[i].defined()) define_value(i);
        return p_.values[i](args_at(spec_.values[i].expr->axes, env));
    }

    Expr count_of(const AxisSet &axes) const {
        Expr c = cast(p_.acc, 1);
        for (AxisId a : axes) c = c * cast(p_.acc, p_.extent[a]);
        return c;
    }

    Expr lower(const Node &n, const Env &env) {
        if (consumer_inner_ && per_group(n.axes) && n.kind != Node::Literal && n.kind != Node::Const && n.kind != Node::Count)
            return from_table(n, env);
        switch (n.kind) {
        case Node::Literal: return cast(p_.acc, Expr(n.value));
        case Node::Const: return cast(p_.acc, Expr(spec_.find_const(n.name)->value));
        case Node::Tensor: {
            const TensorInfo &t = spec_.tensors[n.index];
            std::vector<AxisId> atoms = spec_.memory_atoms(t.dims);
            std::vector<Expr> coords;
            for (auto it = atoms.rbegin(); it != atoms.rend(); ++it) {
                auto fixed = std::find_if(n.at.begin(), n.at.end(), [&](const auto &f) { return f.first == *it; });
                coords.push_back(fixed != n.at.end() ? Expr((int)fixed->second) : env.at(*it));
            }
            return load_as(types_.storage.at(t.name), p_.inputs[n.index](coords));
        }
        case Node::Value: return call_value(n.index, env);
        case Node::Count: return count_of(n.over);
        case Node::Unary: {
            Expr a = lower(*n.args[0], env);
            switch (n.unary) {
            case UnaryOp::Neg: return -a;
            case UnaryOp::Sqrt: return sqrt(a);
            case UnaryOp::Rsqrt: return cast(p_.acc, 1) / sqrt(a);  // exact, not fast_inverse_sqrt
            case UnaryOp::Tanh: return p_.acc == Float(32) ? tanh_f32(a) : tanh(a);
            case UnaryOp::Exp: return p_.acc == Float(32) ? exp_f32(a) : exp(a);
            case UnaryOp::Log: return log(a);
            case UnaryOp::Abs: return abs(a);
            case UnaryOp::Sigmoid: return cast(p_.acc, 1) / (cast(p_.acc, 1) + (p_.acc == Float(32) ? exp_f32(-a) : exp(-a)));
            case UnaryOp::Step: return select(a > cast(p_.acc, 0), cast(p_.acc, 1), cast(p_.acc, 0));
            // A rounding point: to nearest even in the storage type, then on in the accumulation type.
            // strict_float keeps the value the point rounds: without it, when the type is the
            // accumulation type (an f32 kernel), w * (x * rstd) was reassociated across the point.
            case UnaryOp::Round: {
                const DType to = rounding_type(spec_, n, types_.storage);
                if (half_.bits(to) && to == DType::F16) return cast(p_.acc, f16_bits_to_f32(f32_to_f16_bits(strict_float(cast<float>(a)))));
                if (half_.bits(to) && to == DType::BF16) return cast(p_.acc, bf16_bits_to_f32(f32_to_bf16_bits(strict_float(cast<float>(a)))));
                return cast(p_.acc, cast(halide_type(to), strict_float(a)));
            }
            }
            break;
        }
        case Node::Binary: {
            Expr a = lower(*n.args[0], env), b = lower(*n.args[1], env);
            switch (n.binary) {
            case BinaryOp::Add: return a + b;
            case BinaryOp::Sub: return a - b;
            case BinaryOp::Mul: return a * b;
            case BinaryOp::Div: return a / b;
            // NaN must propagate (the reference does): Halide's max/min may drop it.
            case BinaryOp::Max: return select(is_nan(a) || is_nan(b), a + b, max(a, b));
            case BinaryOp::Min: return select(is_nan(a) || is_nan(b), a + b, min(a, b));
            case BinaryOp::Pow: return pow(a, b);
            }
            break;
        }
        case Node::Reduce: return reduction(n)(args_at(n.axes, env));
        }
        throw std::logic_error("halide lowering: unknown node");
    }

    // The RDom over a reduction's axes, innermost (highest id) first, and the env binding them.
    std::pair<RDom, std::vector<AxisId>> rdom_for(const AxisSet &over, const std::string &name) const {
        Region ranges;
        std::vector<AxisId> axes;
        for (auto it = over.rbegin(); it != over.rend(); ++it) {
            ranges.push_back(Range(0, p_.extent[*it]));
            axes.push_back(*it);
        }
        return {RDom(ranges, name), axes};
    }

    Env bind(const Node &n, const RDom &r, const std::vector<AxisId> &axes) const {
        Env env = identity_env();
        for (size_t k = 0; k < axes.size(); ++k) env[axes[k]] = r[(int)k];
        (void)n;
        return env;
    }

    // The shift of a mean: the mean of the first (up to) 64 elements along the innermost reduced
    // axis. Summing x - shift instead of x keeps the partial sums near sigma * sqrt(block) whether
    // the data sit far from zero (x = 1e4 + N(0,1): unshifted partial sums carry the offset and f32
    // loses its digits to it) or not (a shift of one element would itself be sigma away from the
    // mean and make zero-mean sums worse). The mean is shift + sum / n.
    // (Measured: DeepNorm f16 on x, f = 1e4 + N(0,1), 2 x 65536 on AVX2 had rstd 8 % off without
    // a shift, 5e-6 with it; a one-element shift made LayerNorm's mu on N(0,1) rows 85x less exact.)
    Func shift(const Node &n, const std::string &base, const std::vector<Var> &pv, const std::function<Expr(const Env &)> &operand,
               ReductionFuncs &rf) {
        AxisId inner = n.over.back();
        Expr m = min(p_.extent[inner], 64);
        RDom r(0, m, "r_" + base + "_shift");
        Env env = identity_env();
        for (AxisId a : n.over) env[a] = 0;
        env[inner] = r.x;
        Func ks(base + "_shift_sum");
        ks(pv) = cast(p_.acc, 0);
        ks(pv) += operand(env);
        rf.updates.push_back({ks, r, {inner}, true, true});
        Func k(base + "_shift");
        k(pv) = ks(pv) / cast(p_.acc, m);
        rf.helpers.push_back(k);
        return k;
    }

    // sum(term) over n's reduced axes; with `where`, only where it holds (a predicate of n's pure
    // vars: an empty sweep elsewhere).
    Func sum_of(const Node &n, const std::string &name, const std::function<Expr(const Env &)> &term, ReductionFuncs &rf,
                const Expr &where = Expr()) {
        Func s(name);
        std::vector<Var> pv = pure_vars(n.axes);
        auto [r, axes] = rdom_for(n.over, "r_" + name);
        if (where.defined()) r.where(where);
        s(pv) = cast(p_.acc, 0);
        s(pv) += term(bind(n, r, axes));
        rf.updates.push_back({s, r, axes, true});
        return s;
    }

    Func reduction(const Node &n) {
        auto it = reduce_funcs_.find(&n);
        if (it != reduce_funcs_.end()) return it->second;
        // A variance computed by blocks together with its mean (block_moments): lowering the mean
        // defines both.
        if (n.reduce == ReduceOp::Var && blocked_mean_of(n)) {
            reduction(*blocked_mean_of(n));
            return reduce_funcs_.at(&n);
        }
        std::string base = "red" + std::to_string(reduce_funcs_.size()) + "_" + reduce_name(n.reduce);
        ReductionFuncs rf;
        rf.node = &n;
        std::vector<Var> pv = pure_vars(n.axes);
        const Node &arg = *n.args[0];
        Func result;
        auto operand = [&](const Env &env) { return lower_in(arg, env, iterates_inner(n)); };
        const Node *blocked_var = nullptr;  // the variance lowered with this mean (block_moments)
        Func blocked_var_func;
        for (const auto &group : siblings_)
            if (n.reduce == ReduceOp::Sum && std::count(group.begin(), group.end(), &n)) return sibling_sum(group, &n, base);
        switch (n.reduce) {
        case ReduceOp::Sum: result = sum_of(n, base, operand, rf); break;
        case ReduceOp::Mean: {
            if ((blocked_var = blocked_variance_of(n))) {
                std::tie(result, blocked_var_func) = block_moments(n, base, pv, operand, rf);
                break;
            }
            if (const Node *var = checked_variance_of(n)) {
                result = checked_mean(n, *var, base, pv, operand, rf);
                break;
            }
            Func k = shift(n, base, pv, operand, rf);
            Func s = sum_of(n, base + "_sum", [&](const Env &env) { return operand(env) - stat_at(k, n, env); }, rf);
            result = Func(base);
            result(pv) = k(pv) + s(pv) / count_of(n.over);
            break;
        }
        case ReduceOp::Max:
        case ReduceOp::Min: {
            // A plain max/min update, which Halide can prove associative (so it vectorizes), plus a
            // sum that is NaN exactly when some element is NaN: the result propagates NaN as the
            // reference does (x86 max/min would silently drop it).
            bool is_max = n.reduce == ReduceOp::Max;
            auto [r, axes] = rdom_for(n.over, "r_" + base);
            Func mm(base + "_extreme");
            mm(pv) = is_max ? p_.acc.min() : p_.acc.max();
            Expr x = operand(bind(n, r, axes));
            mm(pv) = is_max ? max(mm(pv), x) : min(mm(pv), x);
            rf.updates.push_back({mm, r, axes, true});
            Func nan = sum_of(n, base + "_nan", [&](const Env &env) {
                Expr v = operand(env);
                return select(is_nan(v), v, cast(p_.acc, 0));
            }, rf);
            result = Func(base);
            result(pv) = mm(pv) + nan(pv);
            break;
        }
        case ReduceOp::Var: result = variance(n, base, pv, operand, rf); break;
        }
        rf.result = result;
        p_.reductions.push_back(rf);
        reduce_funcs_[&n] = result;
        if (blocked_var) {
            ReductionFuncs vr;
            vr.node = blocked_var;
            vr.result = blocked_var_func;
            p_.reductions.push_back(vr);
            reduce_funcs_[blocked_var] = blocked_var_func;
        }
        return result;
    }

    // The sums of one sibling group (siblings_) as one Tuple-valued Func over one RDom; each member's
    // value an element of it (a Func Halide inlines). Returns member `n`'s.
    Func sibling_sum(const std::vector<const Node *> &group, const Node *n, const std::string &base) {
        const Node &first = *group[0];
        ReductionFuncs rf;
        rf.node = &first;
        const std::vector<Var> pv = pure_vars(first.axes);
        auto [r, axes] = rdom_for(first.over, "r_" + base);
        const Env env = bind(first, r, axes);
        Func s(base + "_siblings");
        s(pv) = Tuple(std::vector<Expr>(group.size(), cast(p_.acc, 0)));
        std::vector<Expr> next;
        for (size_t i = 0; i < group.size(); ++i) next.push_back(s(pv)[(int)i] + lower_in(*group[i]->args[0], env, false));
        s(pv) = Tuple(next);
        rf.updates.push_back({s, r, axes, true});
        rf.result = s;
        p_.reductions.push_back(rf);
        for (size_t i = 0; i < group.size(); ++i) {
            Func member(base + "_" + std::to_string(i));
            member(pv) = s(pv)[(int)i];
            reduce_funcs_[group[i]] = member;
        }
        return reduce_funcs_.at(n);
    }

    // The checked variance whose pass 1 is `mean` (checked_variances_), or nullptr.
    const Node *checked_variance_of(const Node &mean) const {
        for (const Node *var : checked_variances_)
            if (find_mean_like(spec_, *var) == &mean) return var;
        return nullptr;
    }

    // The mean of a checked two-pass variance's operand, with its shifted sums S1 = sum(x - k) and
    // S2 = sum((x - k)^2) in one sweep (k the mean's shift; a Tuple-valued sum). The variance
    // (variance()) is then S2 / n - (S1 / n)^2, exact to a few ulps of the variance whenever
    // (S1 / n)^2, the squared distance of the shift from the mean, is at most a quarter of it:
    // the subtraction then cancels at most a factor 1.25. On a row where it is not (the first 64
    // elements unlike the rest: a trend, a step, sorted data) the second pass over the row runs
    // as before, the squared deviations from the mean, and gives the variance; its sweep is an
    // update whose domain is empty on the other rows.
    Func checked_mean(const Node &n, const Node &var, const std::string &base, const std::vector<Var> &pv,
                      const std::function<Expr(const Env &)> &operand, ReductionFuncs &rf) {
        Func k = shift(n, base, pv, operand, rf);
        auto [r, axes] = rdom_for(n.over, "r_" + base + "_sums");
        const Env env = bind(n, r, axes);
        const Expr zero = cast(p_.acc, 0);
        Func s(base + "_sums");
        s(pv) = Tuple(zero, zero);
        const Expr d = operand(env) - stat_at(k, n, env);
        s(pv) = Tuple(s(pv)[0] + d, s(pv)[1] + d * d);
        rf.updates.push_back({s, r, axes, true});
        rf.checked_variance = true;
        checked_sums_[&var] = s;
        Func mu(base);
        mu(pv) = k(pv) + s(pv)[0] / count_of(n.over);
        return mu;
    }

    // block_variance applies to a two-pass variance whose pass 1 is the declaration's own mean, over
    // at least three axes, the innermost the group's channels (GroupNorm NHWC's (h, w, cg): a block
    // is a row of pixels, swept along the channels as the statistics' usual sweep is).
    const Node *blocked_mean_of(const Node &var) const {
        if (!block_variance_ || var.reduce != ReduceOp::Var || var.over.size() < 3 || var.over.back() != tbl_inner_) return nullptr;
        return find_mean_like(spec_, var);
    }
    const Node *blocked_variance_of(const Node &mean) const {
        if (!block_variance_) return nullptr;
        const Node *found = nullptr;
        std::function<void(const Node &)> walk = [&](const Node &m) {
            if (!found && m.kind == Node::Reduce && blocked_mean_of(m) == &mean) found = &m;
            for (const auto &a : m.args) walk(*a);
        };
        for (const ValueDef &d : spec_.values) walk(*d.expr);
        return found;
    }

    // The mean and the two-pass variance of one operand, by blocks (block_variance). A block is one
    // index b of the outermost reduced axis (GroupNorm NHWC's h: one row of pixels, every group).
    // Pass 1 of a block: its mean m_b = k + sum_b(x - k) / n_b (k the mean's shift); pass 2, with
    // the block in cache (the schedule computes a block's m_b just before its pass 2): the squared
    // deviations from m_b, q_b = sum_b (x - m_b)^2, and again s_b = sum_b (x - k) (the same sum, so
    // nothing computed per block outlives the block). Then exactly: mu = k + sum_b s_b / N, and
    // N var = sum_b q_b + n_b sum_b (m_b - mu)^2, m_b = k + s_b / n_b: every term a square, no
    // cancellation whatever the mean. The data are read from memory once for both statistics
    // instead of twice. Returns (mu, var); the sweeps are updates of `rf` (the mean's).
    std::pair<Func, Func> block_moments(const Node &n, const std::string &base, const std::vector<Var> &pv,
                                        const std::function<Expr(const Env &)> &operand, ReductionFuncs &rf) {
        const AxisId outer = n.over.front();
        AxisSet rest(n.over.begin() + 1, n.over.end());
        AxisSet bax = n.axes;
        bax.insert(std::upper_bound(bax.begin(), bax.end(), outer), outer);
        const std::vector<Var> bv = pure_vars(bax);
        Func k = shift(n, base, pv, operand, rf);
        const Expr nb = count_of(rest), count = count_of(n.over);
        const Expr zero = cast(p_.acc, 0);

        // Pass 1, per block.
        auto [rr, raxes] = rdom_for(rest, "r_" + base + "_block");
        const Env benv = bind(n, rr, raxes);  // the block's own index stays the pure var
        Func b1(base + "_block_sum");
        b1(bv) = zero;
        b1(bv) += operand(benv) - stat_at(k, n, benv);
        rf.updates.push_back({b1, rr, raxes, true});
        Func mb(base + "_block_mean");
        mb(bv) = k(pv) + b1(bv) / nb;
        rf.block_funcs = {b1, mb};
        if (per_group(bax)) rf.block_funcs.push_back(table_of(mb, bax));
        rf.block_axis = outer;

        // Pass 2, per block: (q_b, s_b).
        auto [rq, qaxes] = rdom_for(rest, "r_" + base + "_block_ssd");
        const Env qenv = bind(n, rq, qaxes);
        Func b2(base + "_block_ssd");
        b2(bv) = Tuple(zero, zero);
        const Expr x = operand(qenv), d = x - group_value_at(mb, bax, qenv);
        b2(bv) = Tuple(b2(bv)[0] + d * d, b2(bv)[1] + (x - stat_at(k, n, qenv)));
        rf.block_second = (int)rf.updates.size();
        rf.updates.push_back({b2, rq, qaxes, true});

        // Over the blocks: a serial sum per statistic (one term a block).
        RDom ro(0, p_.extent[outer], "r_" + base + "_blocks");
        Env oenv = identity_env();
        oenv[outer] = ro.x;
        const std::vector<Expr> at = args_at(bax, oenv);
        Func s1(base + "_sum");
        s1(pv) = zero;
        s1(pv) += b2(at)[1];
        rf.updates.push_back({s1, ro, {outer}, true});
        Func mu(base);
        mu(pv) = k(pv) + s1(pv) / count;
        Func s2(base + "_var_ssd");
        s2(pv) = zero;
        const Expr dm = k(pv) + b2(at)[1] / nb - mu(pv);
        s2(pv) += b2(at)[0] + nb * (dm * dm);
        rf.updates.push_back({s2, ro, {outer}, true});
        rf.helpers.push_back(mb);
        Func v(base + "_var");
        v(pv) = s2(pv) / count;
        return {mu, v};
    }

    Func variance(const Node &n, const std::string &base, const std::vector<Var> &pv,
                  const std::function<Expr(const Env &)> &operand, ReductionFuncs &rf) {
        Func v(base);
        Expr count = count_of(n.over);
        switch (spec_.variance) {
        case VarianceAlgorithm::TwoPass: {
            // Pass 1: the mean (of the data shifted by its first element). Pass 2: the mean squared
            // deviation from it. Robust for large means. When the declaration also takes the mean
            // of the same operand over the same axes (LayerNorm's mu), pass 1 is that mean: one
            // sweep fewer per row.
            Func mu;
            if (const Node *m = find_mean_like(spec_, n)) {
                mu = reduction(*m);
            } else {
                Func k = shift(n, base, pv, operand, rf);
                Func s = sum_of(n, base + "_sum", [&](const Env &env) { return operand(env) - stat_at(k, n, env); }, rf);
                mu = Func(base + "_mean");
                mu(pv) = k(pv) + s(pv) / count;
                rf.helpers.push_back(mu);
            }
            auto squared_deviation = [&](const Env &env) {
                Expr d = operand(env) - stat_at(mu, n, env);
                return d * d;
            };
            if (auto it = checked_sums_.find(&n); it != checked_sums_.end()) {
                // (checked_mean) The one-pass estimate from the shifted sums where the shift is
                // within half a standard deviation of the mean, else the second pass.
                const Func &sums = it->second;
                const Expr m1 = sums(pv)[0] / count;
                Func one(base + "_one_pass");
                one(pv) = max(sums(pv)[1] / count - m1 * m1, cast(p_.acc, 0));
                Func ok(base + "_one_pass_ok");
                ok(pv) = m1 * m1 * cast(p_.acc, 4) <= one(pv);
                rf.helpers.push_back(one);
                Func ss = sum_of(n, base + "_ssd", squared_deviation, rf, !ok(pv));
                v(pv) = select(ok(pv), one(pv), ss(pv) / count);
                break;
            }
            Func ss = sum_of(n, base + "_ssd", squared_deviation, rf);
            v(pv) = ss(pv) / count;
            break;
        }
        case VarianceAlgorithm::OnePass: {
            // E[x^2] - E[x]^2 in one sweep: fast, and cancels catastrophically for large means, as
            // declared. Clamped at 0 so rounding cannot make it negative.
            Func s = sum_of(n, base + "_sum", operand, rf);
            Func s2 = sum_of(n, base + "_sumsq", [&](const Env &env) { Expr x = operand(env); return x * x; }, rf);
            Expr m = s(pv) / count;
            v(pv) = max(s2(pv) / count - m * m, cast(p_.acc, 0));
            break;
        }
        case VarianceAlgorithm::Welford: v = welford(n, base, pv, operand, rf); break;
        }
        return v;
    }

    // Welford, blocked so it vectorizes and stays accurate on long reductions: element i of the
    // innermost reduced axis goes to lane i mod L and block i / (L * B); each (lane, block, outer
    // reduced coordinate) runs a serial Welford over at most B elements; the partial (count, mean,
    // m2) triples are merged with Chan et al.'s pairwise formula, first over blocks and outer
    // coordinates per lane (vectorized), then over the L lanes.
    Func welford(const Node &n, const std::string &base, const std::vector<Var> &pv,
                 const std::function<Expr(const Env &)> &operand, ReductionFuncs &rf) {
        const int L = welford_lanes_, B = welford_block_;
        AxisId inner = n.over.back();  // the innermost reduced axis (highest id)
        Expr e0 = p_.extent[inner];
        Expr nblocks = (e0 + (L * B - 1)) / (L * B);
        Var lane("lane"), block("block");
        std::vector<Var> outer_vars;     // the other reduced axes, kept as pure dimensions
        std::vector<AxisId> outer_axes;
        for (auto it = n.over.rbegin() + 1; it != n.over.rend(); ++it) {
            outer_vars.push_back(Var("o_" + spec_.axes[*it].name));
            outer_axes.push_back(*it);
        }
        std::vector<Var> wv{lane, block};
        wv.insert(wv.end(), outer_vars.begin(), outer_vars.end());
        wv.insert(wv.end(), pv.begin(), pv.end());

        Func w(base + "_lanes");
        Expr zero = cast(p_.acc, 0);
        w(wv) = Tuple(zero, zero, zero);
        RDom kb(0, B, "r_" + base + "_welford");
        Env env = identity_env();
        Expr i = (block * B + kb.x) * L + lane;
        env[inner] = min(i, e0 - 1);  // clamped: out-of-range lanes load a valid element and ignore it
        for (size_t k = 0; k < outer_axes.size(); ++k) env[outer_axes[k]] = outer_vars[k];
        Expr x = operand(env);
        Expr cnt = w(wv)[0], mean = w(wv)[1], m2 = w(wv)[2];
        Expr cnt1 = cnt + 1, delta = x - mean, mean1 = mean + delta / cnt1, m21 = m2 + delta * (x - mean1);
        Expr valid = i < e0;
        w(wv) = Tuple(select(valid, cnt1, cnt), select(valid, mean1, mean), select(valid, m21, m2));
        rf.updates.push_back({w, kb, {inner}, false});

        // Chan's merge of two partial (count, mean, m2) triples.
        auto merge = [&](Expr na, Expr ma, Expr m2a, Expr nb, Expr mb, Expr m2b) {
            Expr nn = na + nb, d = mb - ma, safe = max(nn, cast(p_.acc, 1));
            return Tuple(nn, select(nn == 0, zero, ma + d * nb / safe), m2a + m2b + d * d * na * nb / safe);
        };
        // Per lane, one level per dimension: first the blocks, then each outer reduced axis in turn
        // (each merge chain stays short: a long serial chain of merges drifts like a long sum).
        rf.helpers.push_back(w);
        rf.lane_funcs.push_back(w.name());
        Func prev = w;
        std::vector<Expr> dims_extent{nblocks};
        for (AxisId a : outer_axes) dims_extent.push_back(p_.extent[a]);
        for (size_t level = 0; level < dims_extent.size(); ++level) {
            RDom rb(0, dims_extent[level], "r_" + base + "_merge" + std::to_string(level));
            std::vector<Var> keep{lane};
            keep.insert(keep.end(), outer_vars.begin() + level, outer_vars.end());
            keep.insert(keep.end(), pv.begin(), pv.end());
            std::vector<Expr> at{lane, rb.x};
            for (size_t k = level; k < outer_vars.size(); ++k) at.push_back(outer_vars[k]);
            for (const Var &v : pv) at.push_back(v);
            Func m(base + "_merge" + std::to_string(level));
            m(keep) = Tuple(zero, zero, zero);
            m(keep) = merge(m(keep)[0], m(keep)[1], m(keep)[2], prev(at)[0], prev(at)[1], prev(at)[2]);
            rf.helpers.push_back(m);
            rf.lane_funcs.push_back(m.name());
            prev = m;
        }
        // Over the lanes.
        Func c(base + "_combined");
        RDom rl(0, L, "r_" + base + "_lane");
        c(pv) = Tuple(zero, zero, zero);
        std::vector<Expr> lat{rl.x};
        for (const Var &v : pv) lat.push_back(v);
        c(pv) = merge(c(pv)[0], c(pv)[1], c(pv)[2], prev(lat)[0], prev(lat)[1], prev(lat)[2]);
        rf.helpers.push_back(c);

        Func v(base);
        v(pv) = c(pv)[2] / max(c(pv)[0], cast(p_.acc, 1));
        return v;
    }
};

}  // namespace

Type halide_type(DType t) {
    switch (t) {
    case DType::F32: return Float(32);
    case DType::F16: return Float(16);
    case DType::BF16: return BFloat(16);
    case DType::F64: return Float(64);
    }
    return Float(32);
}

std::vector<Argument> LoweredPipeline::arguments() const {
    std::vector<Argument> args;
    for (const ImageParam &p : inputs) args.push_back(p);
    return args;
}

LoweredPipeline lower_to_halide(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &schedule, HalfStorage half) {
    return Lowerer(spec, plan, schedule, half).run();
}

}  // namespace normgen::hl
