#include "codegen/halide/schedule.h"

#include "runtime/errors.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace normgen::hl {

using namespace Halide;

namespace {

// Whether a value is a product of inputs, parameters and constants only (PolyNorm's x2 = x * x,
// x3 = x2 * x): recomputing it where it is read costs a multiply or two, and no copy of it can round
// differently from another (no addition for LLVM to contract into an FMA inside it).
bool pure_product(const NormSpec &spec, const Node &n) {
    switch (n.kind) {
    case Node::Tensor:
    case Node::Const:
    case Node::Literal: return true;
    case Node::Value: return pure_product(spec, *spec.values[n.index].expr);
    case Node::Binary: return n.binary == BinaryOp::Mul && pure_product(spec, *n.args[0]) && pure_product(spec, *n.args[1]);
    default: return false;
    }
}

// Does expression `n` read reduction `target` (through named values and other reductions)?
bool reaches(const NormSpec &spec, const Node &n, const Node *target) {
    if (&n == target) return true;
    if (n.kind == Node::Value) return reaches(spec, *spec.values[n.index].expr, target);
    for (const auto &a : n.args)
        if (reaches(spec, *a, target)) return true;
    return false;
}

// The value an output's definition names through plain references (d_x = g_h: g_h's index).
int defining_value(const NormSpec &spec, int value) {
    while (value >= 0 && spec.values[(size_t)value].expr->kind == Node::Value) value = spec.values[(size_t)value].expr->index;
    return value;
}

// The update of a row statistic that sweeps the contiguous axis `inner` alone: a sum's only
// update, or a mean's sum beside its shift (the bounded sum of its first <= 64 elements).
ReductionFuncs::Update *row_sweep_update(ReductionFuncs &rf, AxisId inner) {
    if (!rf.node || (rf.node->reduce != ReduceOp::Sum && rf.node->reduce != ReduceOp::Mean)) return nullptr;
    ReductionFuncs::Update *sum = nullptr;
    for (auto &u : rf.updates) {
        if (u.bounded && rf.node->reduce == ReduceOp::Mean) continue;
        if (sum || u.rdom.dimensions() != 1 || u.rdom_axes.empty() || u.rdom_axes[0] != inner || !u.associative) return nullptr;
        sum = &u;
    }
    return sum;
}

// All Funcs that make up one reduction (result, helpers, the Funcs with RDom updates).
std::vector<Func> funcs_of(const ReductionFuncs &rf) {
    std::vector<Func> fs{rf.result};
    auto add = [&](const Func &f) {
        for (const Func &g : fs)
            if (g.name() == f.name()) return;
        fs.push_back(f);
    };
    for (const Func &h : rf.helpers) add(h);
    for (const auto &u : rf.updates) add(u.func);
    return fs;
}

// Welford's lane accumulators: their first (pure) dimension is the vector lane, not a data axis.
bool is_lane_func(const ReductionFuncs &rf, const Func &f) {
    return std::find(rf.lane_funcs.begin(), rf.lane_funcs.end(), f.name()) != rf.lane_funcs.end();
}

// Summation blocks (the record's sum_block): each vector lane adds at most that many vectors
// before its partial sum moves to the next level, so f32 rounding error grows like sqrt(block) +
// sqrt(n / block / lanes) instead of sqrt(n / lanes). (Measured with one level: BatchNorm over
// 3 x 3 x 262144 f32 had its rstd off by 1.4e-5 relative, past the verifier's 1e-5.)
//
// Sums along rv[0] (contiguous) in vectors and blocks of `block` vectors, rfactored: intm(lanes,
// block, the outermost other RVar) sums one block per lane (RVars between the innermost and the
// outermost run inside that sum); then one level per remaining dimension (blocks, then the
// outermost RVar), vectorized over the lanes, so no serial chain of partial sums is long; the last
// step adds the lanes. Intermediates are computed at `at`, allocated at `hoist` when given (an
// outer loop: not one heap allocation per group). Returns the first rfactor intermediate:
// the Func whose update is the sweep over the data.
// `one_block`: a specialization of f's update on a sum over rv[0] alone (inner_extent given) that
// fits one block: there one level of lane partials and the lanes' sum, no level of blocks
// (GroupNorm NCHW's backward sums two 8 x 8 planes a channel: the level of blocks, a buffer zeroed
// and a masked loop of one iteration a channel, was ~7 % of the kernel). The same terms in the
// same order: with one block, that level only added each lane's partial to 0. Its sweep Func is
// returned in *one_block_sweep.
Func blocked_rfactor(Func f, const std::vector<RVar> &rv, int vw, int block_vectors, const LoopLevel &at, Expr inner_extent = Expr(),
                     const std::optional<LoopLevel> &hoist = std::nullopt, std::optional<Halide::Stage> one_block = std::nullopt,
                     Func *one_block_sweep = nullptr) {
    RVar ro("ro"), ri("ri"), rob("rob"), rib("rib");
    Var lanes("lanes"), block("block");
    auto vectorized = [&](Func t, const Var &l) {
        t.compute_at(at);
        if (hoist) t.hoist_storage(*hoist);
        // The lanes innermost in storage: rfactor puts the reduction's own pure dimensions first,
        // and when those span several rows (the statistics of a block of rows computed at once)
        // the lane accumulators would otherwise be a strided gather / scatter.
        std::vector<Var> dims{l};
        for (const Var &v : t.args())
            if (v.name() != l.name()) dims.push_back(v);
        if (dims.size() > 1) t.reorder_storage(dims);
        t.vectorize(l);
        t.update().vectorize(l);
    };
    // The last step, the lanes added: as a tree of vector adds (atomic: Halide's VectorReduce), not
    // a serial chain of vw scalar adds through memory (LayerNorm BERT 16384 x 768 f32: three chains
    // of 32 dependent adds a row were ~30 % of the kernel's time). Only where every lane holds a
    // partial sum (the summed extent at least vw): the split's guard then folds away, and a guarded
    // vector reduce would be scalarized again.
    auto add_lanes = [&](Halide::Stage st) {
        const Expr full = Halide::Internal::simplify(inner_extent >= vw);
        if (Halide::Internal::is_const_one(full)) st.atomic().vectorize(ri);
        else if (!Halide::Internal::is_const_zero(full)) st.specialize(full).atomic().vectorize(ri);
    };
    if (one_block) {
        NORMGEN_ASSERT(inner_extent.defined() && rv.size() == 1 && one_block_sweep, "a one-block sum is over one RVar of known extent");
        one_block->split(rv[0], ro, ri, vw, TailStrategy::GuardWithIf);
        *one_block_sweep = one_block->rfactor({{ri, lanes}});
        // (all vw lanes, a constant extent to vectorize: a sum shorter than a vector reads fewer)
        one_block_sweep->bound(lanes, 0, vw);
        vectorized(*one_block_sweep, lanes);
        add_lanes(*one_block);
    }
    f.update().split(rv[0], ro, ri, vw, TailStrategy::GuardWithIf).split(ro, rob, rib, block_vectors, TailStrategy::GuardWithIf);
    std::vector<std::pair<RVar, Var>> keep{{ri, lanes}, {rob, block}};
    // The outermost reduced axis gets a level of its own; the axes between it and the innermost
    // (the rows of a plane: BatchNorm's h) stay in the sweep's serial loop, so a lane adds
    // block_vectors x h terms (224 for 56 x 56 planes) instead of keeping a partial per row of
    // every plane (lanes x blocks x h x n: 900 KB a channel at 32 x 56 x 56, written and read back).
    for (size_t k = rv.size() >= 3 ? rv.size() - 1 : 1; k < rv.size(); ++k) keep.push_back({rv[k], Var("k" + std::to_string(k))});
    Func sweep = f.update().rfactor(keep);
    vectorized(sweep, lanes);
    // Then one level per remaining dimension (blocks, then the outermost reduced axis), vectorized
    // over the lanes, so no serial chain of partial sums is long; the last step adds the lanes.
    std::vector<RVar> rest{rob};
    for (size_t k = 2; k < keep.size(); ++k) rest.push_back(keep[k].first);
    for (size_t level = 0; level < rest.size(); ++level) {
        Var l("lanes" + std::to_string(level + 2));
        std::vector<std::pair<RVar, Var>> pres{{ri, l}};
        for (size_t k = level + 1; k < rest.size(); ++k) pres.push_back({rest[k], Var("m" + std::to_string(k))});
        vectorized(f.update().rfactor(pres), l);
    }
    // (`inner_extent`: rv[0]'s; undefined: the lanes added serially.)
    if (inner_extent.defined()) add_lanes(f.update());
    return sweep;
}

// How many of an update's innermost reduced axes to sum as one loop (the schedule's
// fuse_reduced_axes): the longest run of its RDom's leading dimensions that are the innermost axes
// of the memory order `order`, innermost first (BatchNorm's w, h of [n, c, h, w]; all of GroupNorm
// NCHW's w, h, cg). The kernel ABI's tensors are dense, so the run is one contiguous range in every
// tensor laid out like the output; 0 when fewer than two axes qualify.
int fused_reduced_axes(const ReductionFuncs::Update &u, const CpuSchedule &s, const std::vector<AxisId> &order) {
    if (!s.fuse_reduced_axes || !u.associative) return 0;
    int k = 0;
    while (k < u.rdom.dimensions() && k < (int)u.rdom_axes.size() && k < (int)order.size() && u.rdom_axes[(size_t)k] == order[order.size() - 1 - (size_t)k])
        ++k;
    return k >= 2 ? k : 0;
}

// Vectorizes one reduction update along the contiguous axis `inner`.
//   - `inner` is the RDom's innermost dimension: split it into vectors and blocks of vectors and
//     rfactor: intm(lanes, block, outer reduced coords) sums one block per lane; a second rfactor
//     sums the blocks per lane, vectorized; the last step adds the lanes.
//   - `inner` is a pure axis of the reduction: make it the innermost loop and vectorize it.
// Intermediates are computed at `at` (allocated at `hoist` when given: blocked_rfactor's).
// Returns the sweep Func of a blocked sum over the innermost axis (blocked_rfactor), or of one kept
// along the contiguous axis (the channels-last form below), else an undefined Func.
Func vectorize_update(ReductionFuncs &rf, ReductionFuncs::Update &u, const LoweredPipeline &p, AxisId inner, int vw,
                      const CpuSchedule &s, const LoopLevel &at, AxisId next_outer = -1, const std::vector<AxisId> &order = {},
                      const std::optional<LoopLevel> &hoist = std::nullopt, bool one_block = false) {
    Func f = u.func;
    // The innermost reduced axis is contiguous, the axis just outside it in memory is one the
    // statistic keeps (GroupNorm NHWC: reduce (cg, h, w) of [n, h, w, (g, cg)] per (n, g)), and
    // other axes are reduced too: keep the innermost reduced axis as a pure dimension (rfactor)
    // and vectorize along it, so the partial sums over the outer reduced axes (h, w) run over
    // contiguous cg vectors, g by g; the statistic then adds its cg partials. cg is short (10 for
    // 320 channels in 32 groups): masked vectors, but dense loads. (Splitting the short cg into
    // blocks of vectors instead, as for long rows, left NHWC GroupNorm at 0.2-2 GB/s.)
    if (u.associative && u.rdom.dimensions() >= 2 && !u.rdom_axes.empty() && u.rdom_axes[0] == inner && next_outer >= 0) {
        for (const Var &adj : f.args()) {
            if (adj.name() != p.vars[next_outer].name()) continue;
            // With three or more reduced axes the outermost (h) stays a pure dimension too, so each
            // lane's serial sum runs over one w row only (f32 error of a 4096-term serial sum
            // broke the 1e-5 bound on 64 x 64 latents); the statistic adds the (cg, h) partials.
            const int nr = u.rdom.dimensions();
            Var vin(f.name() + "_vin"), vout(f.name() + "_vout");
            std::vector<std::pair<RVar, Var>> keep{{RVar(u.rdom[0].name()), vin}};
            if (nr >= 3) keep.push_back({RVar(u.rdom[nr - 1].name()), vout});
            Func intm = f.update().rfactor(keep);
            intm.compute_at(at);
            std::vector<VarOrRVar> ord{vin, adj};
            for (int k = 1; k < (nr >= 3 ? nr - 1 : nr); ++k) ord.push_back(RVar(u.rdom[k].name()));
            if (nr >= 3) {
                ord.push_back(vout);
                intm.reorder_storage(vin, adj, vout);
            } else {
                // (every dimension named: with a block axis kept too, a blocked variance's pass 2,
                // Halide left g outside it, a scatter per vector)
                std::vector<Var> dims{vin, adj};
                for (const Var &v : intm.args())
                    if (v.name() != vin.name() && v.name() != adj.name()) dims.push_back(v);
                intm.reorder_storage(dims);
            }
            if (s.group_vectors) {
                // Vectors along all channels, across the groups: (cg, g) run as one dense loop c
                // (specialized on cg > 0), full vectors instead of ceil(cg / vw) masked ones per
                // group (cg = 10..40 for 320..1280 channels in 32 groups). The index of x is
                // linear in c only when cg is a constant (fixed_inner_extent); the per-group values
                // the sweep subtracts come from per-channel tables (lower.h), not gathers.
                Var c(f.name() + "_c");
                intm.update().reorder(ord).fuse(vin, adj, c).vectorize(c, vw, TailStrategy::GuardWithIf);
                intm.update().specialize(p.extent[inner] > 0);
                intm.vectorize(vin, vw, TailStrategy::GuardWithIf);
            } else {
                intm.update().reorder(ord).vectorize(vin, vw, TailStrategy::GuardWithIf);
                intm.vectorize(vin, vw, TailStrategy::GuardWithIf);
            }
            // The statistic's own sum over the (cg[, h]) partials, blocked like any long sum (cg
            // can be long: 262144 channels a group broke the bf16 bound when added serially).
            std::vector<RVar> rest{RVar(u.rdom[0].name())};
            if (nr >= 3) rest.push_back(RVar(u.rdom[nr - 1].name()));
            blocked_rfactor(f, rest, vw, s.sum_block, at, Expr(), hoist);
            return intm;
        }
    }
    if (!u.associative) {
        // Welford's blocked lanes: vectorize the lane dimension of every lane Func.
        for (Func h : rf.helpers)
            if (is_lane_func(rf, h)) {
                Var lane = h.args()[0];
                h.vectorize(lane, std::min(vw, s.welford_lanes));
                h.update().vectorize(lane, std::min(vw, s.welford_lanes));
            }
        return Func();
    }
    if (!u.rdom_axes.empty() && u.rdom_axes[0] == inner) {
        std::vector<RVar> rv;
        for (int k = 0; k < u.rdom.dimensions(); ++k) rv.push_back(RVar(u.rdom[k].name()));
        const int fuse = fused_reduced_axes(u, s, order);
        Expr summed = p.extent[u.rdom_axes[0]];
        for (int k = 1; k < fuse; ++k) summed = summed * p.extent[u.rdom_axes[(size_t)k]];
        // A sum over one loop (one reduced axis, or all of them fused) that may fit one block:
        // specialized on it first (blocked_rfactor's one_block), so the fusion below applies to
        // both definitions.
        std::optional<Halide::Stage> small_stage;
        if (one_block && (fuse ? fuse : 1) == u.rdom.dimensions()) {
            const Expr fits = Halide::Internal::simplify(summed <= vw * s.sum_block);
            if (!Halide::Internal::is_const_zero(fits)) small_stage = f.update().specialize(fits);
        }
        Expr nonempty = Halide::Internal::const_true();
        if (fuse) {
            // The innermost reduced axes are dense neighbours (a 7 x 7 plane; GroupNorm NCHW's
            // whole (cg, h, w) block): one loop over them, cut into vectors, instead of a masked
            // vector per 7-element row.
            RVar fused = rv[0];
            for (int k = 1; k < fuse; ++k) {
                RVar next(fused.name() + "_" + rv[(size_t)k].name());
                f.update().fuse(fused, rv[(size_t)k], next);
                if (small_stage) small_stage->fuse(fused, rv[(size_t)k], next);
                fused = next;
                nonempty = nonempty && p.extent[u.rdom_axes[(size_t)k - 1]] > 0;
            }
            rv.erase(rv.begin(), rv.begin() + fuse);
            rv.insert(rv.begin(), fused);
        }
        Func small;  // the sweep of a sum that fits one block
        Func sweep = blocked_rfactor(f, rv, vw, s.sum_block, at, summed, hoist, small_stage, &small);
        // Specialized on non-empty axes, so Halide's x / 0 = 0 rule leaves the fused index linear.
        // And first on whole vectors (GroupNorm's 8 x 8 planes): a plane shorter than one block
        // of vectors runs in the tail loop of the block split, whose per-vector guard (a whole
        // vector or a masked one) kept the lane accumulator in memory, a load-add-store chain
        // per vector; with the guard folded away LLVM keeps it in a register (GroupNorm NCHW
        // backward 8 x 1280 x 8 x 8 f32: see bench/README.md).
        if (fuse)
            for (Func t : {sweep, small}) {
                if (!t.defined()) continue;
                t.update().specialize(nonempty && summed % vw == 0);
                t.update().specialize(nonempty);
            }
        return rv.size() == 1 ? sweep : Func();
    }
    for (const Var &v : f.args())
        if (v.name() == p.vars[inner].name()) {
            // The statistic keeps the contiguous axis (a channels-last BatchNorm's c, a weight
            // gradient's d): vectorize along it, each lane a sum over every reduced element. That
            // sum is blocked, or its f32 error grows with its length (BatchNorm over n, h, w with
            // 2.4M elements a channel was 50x past the verifier's bound): the reduced axes run as
            // one loop (fused), cut into blocks of sum_block terms a lane adds, and the block sums
            // again in blocks, three levels, each a vectorized partial computed at `at`; the last
            // adds what remains (N / sum_block^3 terms).
            if (!u.associative) return Func();
            RVar fused(u.rdom[0].name());
            for (int k = 1; k < u.rdom.dimensions(); ++k) {
                RVar next(fused.name() + "_" + u.rdom[k].name());
                f.update().fuse(fused, RVar(u.rdom[k].name()), next);
                fused = next;
            }
            // When the statistic also keeps the axis just outside (GroupNorm NHWC's per-channel
            // sums keep (g, cg)), that axis runs inside the sweep over the reduced elements, so
            // each element's channels are read as one contiguous run; one loop per group over all
            // of them read every cache line once per group (GroupNorm NHWC's backward: its d_bias
            // and sum(t2 * d_y) swept d_y 32 times). If it is the statistic's outermost axis
            // (nothing else to parallelize), the sweep runs at the root, parallel over its blocks.
            std::optional<Var> sibling;
            if (next_outer >= 0)
                for (const Var &a : f.args())
                    if (a.name() == p.vars[next_outer].name()) sibling = a;
            RVar level = fused;
            for (int l = 0; l < 3; ++l) {
                RVar lo("p" + std::to_string(l) + "_o"), li("p" + std::to_string(l) + "_i");
                Var blk("p" + std::to_string(l) + "_block");
                f.update().split(level, lo, li, s.sum_block, TailStrategy::GuardWithIf);
                Func part = f.update().rfactor(lo, blk);
                part.vectorize(v, vw, TailStrategy::GuardWithIf);
                const bool across = l == 0 && sibling;
                // (serial: rfactor copies the statistic's parallel loop over that axis)
                if (across) part.update().reorder(v, *sibling, li, blk).serial(*sibling);
                else part.update().reorder(v, li, blk);
                part.update().vectorize(v, vw, TailStrategy::GuardWithIf);
                if (across && f.args().back().name() == sibling->name()) {
                    part.compute_root();
                    part.update().parallel(blk);
                } else {
                    part.compute_at(at);
                }
                level = lo;
            }
            f.update().reorder(v, level).vectorize(v, vw, TailStrategy::GuardWithIf);
            return Func();
        }
    return Func();
}

// Is `f` one of the Funcs a blocked variance computes per block (ReductionFuncs::block_funcs)?
bool is_block_func(const std::vector<ReductionFuncs> &rs, const Func &f) {
    for (const ReductionFuncs &rf : rs)
        for (const Func &b : rf.block_funcs)
            if (b.name() == f.name()) return true;
    return false;
}

// sample_statistics: a sum over the outermost axis (a backward's d_weight, d_bias: over n, or
// over n, h, w) as partial sums per sample, computed in the map's parallel loop over samples
// (compute_with), where the statistics they read and the sample's data are in cache; the sum
// over the samples follows at the root. The partials' stage is vectorized along the innermost
// axis of memory: a kept axis (NHWC's cg) as is, with the outermost other reduced axis (h) kept
// too so no lane adds more than a row; a reduced one (NCHW's w) split into lanes. `at`: the map's
// loop the partials' stage is fused into (the samples', or the second axis' with group_statistics).
void sample_partials(ReductionFuncs &rf, const LoweredPipeline &p, Func y, const std::vector<AxisId> &order, const CpuSchedule &s,
                     const Var &at) {
    ReductionFuncs::Update &u = rf.updates[0];
    NORMGEN_ASSERT(rf.updates.size() == 1 && u.associative && u.rdom_axes.back() == order[0],
                   "a sum over the samples is one associative update whose outermost reduced axis is the samples'");
    Func f = u.func;
    const int nr = u.rdom.dimensions();
    const AxisId inner = order.back();
    auto rv = [&](int k) { return RVar(u.rdom[k].name()); };
    // (the sample Var is the map's own: compute_with fuses loops of the same name)
    Var sample = p.vars[order[0]], lane("lane"), blk("row_block");
    RVar wo("lane_o"), wi("lane_i");
    std::vector<std::pair<RVar, Var>> keep{{rv(nr - 1), sample}};
    const bool split = nr >= 2 && u.rdom_axes[0] == inner;
    const bool block = !split && nr >= 3;
    if (split) {
        f.update().split(rv(0), wo, wi, s.vector_width, TailStrategy::GuardWithIf);
        keep.push_back({wi, lane});
    } else if (block) {
        keep.push_back({rv(nr - 2), blk});
    }
    Func part = f.update().rfactor(keep);
    for (Func g : funcs_of(rf)) g.compute_root();
    part.compute_root();
    // Its loops in memory order, innermost first, the sample outermost.
    std::vector<VarOrRVar> ord;
    if (split) ord.push_back(lane);
    for (size_t i = order.size(); i-- > 1;) {
        const AxisId a = order[i];
        for (const Var &v : part.args())
            if (v.name() == p.vars[a].name()) ord.push_back(v);
        for (int k = 0; k + 1 < nr; ++k) {
            if (u.rdom_axes[(size_t)k] != a) continue;
            if (split && k == 0) ord.push_back(wo);
            else if (block && k == nr - 2) ord.push_back(blk);
            else ord.push_back(rv(k));
        }
    }
    ord.push_back(sample);
    part.update().reorder(ord).parallel(sample);
    if (!ord[0].is_rvar) {  // (an innermost reduced axis not split into lanes stays scalar)
        part.update().vectorize(ord[0].var, s.vector_width, TailStrategy::GuardWithIf);
        part.vectorize(ord[0].var, s.vector_width, TailStrategy::GuardWithIf);
    }
    part.update().compute_with(y, at);
}

}  // namespace

CpuSchedule CpuSchedule::from(const ScheduleRecord &r) {
    NORMGEN_ASSERT(r.kind() == ScheduleKind::HalideCpu, std::string("the Halide CPU schedule got a ") + schedule_kind_name(r.kind()) + " record");
    CpuSchedule s;
    s.vector_width = (int)r.get("vector_width");
    s.row_accumulators = (int)r.get("row_accumulators");
    s.sum_block = (int)r.get("sum_block");
    s.welford_lanes = (int)r.get("welford_lanes");
    s.welford_block = (int)r.get("welford_block");
    s.min_task_elements = (int)r.get("min_task_elements");
    s.fuse_reduced_axes = r.flag("fuse_reduced_axes");
    s.multi_axis_accumulators = r.flag("multi_axis_accumulators");
    s.group_vectors = r.flag("group_vectors");
    s.streaming_stores = r.flag("streaming_stores");
    s.row_in_cache = r.flag("row_in_cache");
    s.column_block_elements = (int)r.get("column_block_elements");
    s.fuse_inner_pair = r.flag("fuse_inner_pair");
    s.sample_statistics = r.flag("sample_statistics");
    s.group_statistics = r.flag("group_statistics");
    s.block_values = r.flag("block_values");
    s.column_rows = (int)r.get("column_rows");
    return s;
}

std::string schedule_cpu(LoweredPipeline &p, const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &record) {
    const CpuSchedule s = CpuSchedule::from(record);
    const int vw = s.vector_width;
    std::ostringstream desc;

    // The main output (y) and its loop nest, and the layout class, from the plan.
    size_t main = 0;
    for (size_t i = 0; i < p.outputs.size(); ++i)
        if (p.output_index[i] == plan.main_output) main = i;
    const std::vector<AxisId> &order = plan.main_order;
    AxisId inner = order.back();
    const bool row = plan.layout == LayoutClass::Row && s.row_in_cache;
    const size_t first_reduced = plan.layout == LayoutClass::Row ? plan.row_axes : 0;

    Func y = p.outputs[main];
    Var vi = p.vars[inner];
    std::vector<size_t> same_shape;  // the outputs that share y's loop nest (indices in p.outputs)
    for (size_t i = 0; i < p.outputs.size(); ++i)
        if (std::count(plan.same_shape.begin(), plan.same_shape.end(), p.output_index[i])) same_shape.push_back(i);

    // A map whose two innermost axes always travel together (BatchNorm's (h, w), GroupNorm NCHW's)
    // runs them as one contiguous loop: vectorized across a 7 x 7 plane, not along its 7-element
    // rows (BatchNorm eval 32 x 2048 x 7 x 7: ~10 -> ~20 GB/s).
    // (Specialized on a non-empty plane, so Halide's x / 0 rule does not make the index a select.)
    // With group_vectors the same holds for a pair along whose outer axis statistics vary
    // (GroupNorm NHWC's (g, cg)): full vectors across the groups, the per-group values read from
    // per-channel tables (lower.h).
    // Not with streaming stores: their alignment constraint on the innermost extent keeps Halide
    // from seeing the fused index as linear (GroupNorm NCHW 16 x 320 x 128 x 128: 7.9 -> 2.1 GB/s);
    // each row of the pair is then its own vector loop, aligned.
    const bool fuse_pair = s.fuse_inner_pair && !s.streaming_stores && (p.reductions.empty() || !row || first_reduced + 2 < order.size()) &&
                           same_shape.empty() && (plan.inner_pair_fusable || (s.group_vectors && plan.inner_pair_grouped));
    Var vfused(spec.axes[inner].name + "_" + spec.axes[order.size() >= 2 ? order[order.size() - 2] : inner].name);
    auto map_inner = [&](Func f) -> Var {
        if (!fuse_pair) return vi;
        f.fuse(vi, p.vars[order[order.size() - 2]], vfused);
        return vfused;
    };

    // The sums over the rows themselves (a backward's parameter gradients, plan.column_sums).
    auto is_column = [&](const ReductionFuncs &rf) { return plan.is_column_sum(spec, rf.node); };
    const bool columns = row && !plan.column_sums.empty();

    bool per_sample = false;  // root schedule with statistics per index of the outermost axis
    if (p.reductions.empty() || row) {
        // Rows = the axes outside the reduced block (all but the innermost for a pure map).
        size_t nrow = p.reductions.empty() ? order.size() - (fuse_pair ? 2 : 1) : first_reduced;
        Expr row_elems = 1;
        for (size_t i = nrow; i < order.size(); ++i) row_elems = row_elems * p.extent[order[i]];
        Var r("row"), ro("row_task"), ri("row_in");
        // With sums over the rows, a task is one block of rows sized for the cache
        // (column_block_elements): its statistics, its map and its partial sums are three sweeps
        // over the block, the last two from cache.
        Expr task = max(1, s.min_task_elements / max(row_elems, 1));
        if (columns) task = max(task, s.column_block_elements / max(row_elems, 1));
        // (column_rows > 1: a block is a whole number of such groups of rows, so the partial
        // sums' blocks are the map's)
        const int group_rows = columns ? std::max(1, s.column_rows) : 1;
        if (group_rows > 1) task = (task + (group_rows - 1)) / group_rows * group_rows;
        auto shape_loops = [&](Func f) {
            if (nrow == 0) return;
            std::vector<VarOrRVar> outer;
            for (size_t i = nrow; i-- > 0;) outer.push_back(p.vars[order[i]]);  // innermost first
            Var fused = p.vars[order[0]];
            if (outer.size() > 1) {
                // fuse(inner, outer, fused): fold the row axes, innermost first.
                Var acc = p.vars[order[nrow - 1]];
                for (size_t i = nrow - 1; i-- > 0;) {
                    Var next(acc.name() + "_" + p.vars[order[i]].name());
                    f.fuse(acc, p.vars[order[i]], next);
                    acc = next;
                }
                fused = acc;
            }
            f.rename(fused, r);
            f.split(r, ro, ri, task, TailStrategy::GuardWithIf).parallel(ro);
        };
        shape_loops(y);
        y.vectorize(map_inner(y), vw, TailStrategy::GuardWithIf);
        if (fuse_pair) y.specialize(p.extent[inner] > 0);
        // An output of y's shape in y's row loop; one that is the same value as y (a fused residual
        // add's backward writes its gradient as d_x and as d_residual) in y's vector loop too: one
        // loop computes it and stores both (fused_add_rms_norm's backward 4096 x 4096 f32: 0.94x
        // the time of a loop each, AMD EPYC). Not outputs of other values: the fused forward's h
        // beside its y took 1.085x.
        const int main_value = defining_value(spec, spec.outputs[(size_t)p.output_index[main]].value);
        for (size_t i : same_shape) {
            Func f = p.outputs[i];
            shape_loops(f);
            f.vectorize(vi, vw, TailStrategy::GuardWithIf);  // (y's too: no fuse_pair with same_shape)
            const bool same_value = defining_value(spec, spec.outputs[(size_t)p.output_index[i]].value) == main_value;
            if (nrow > 0) f.compute_with(y, same_value ? vi : ri);
        }
        // Independent sums over the same contiguous axis (a backward's two row sums) and the
        // partial sums over the rows: each set fused into one sweep (compute_with).
        // (one set of sums, one of means)
        std::map<ReduceOp, std::vector<std::pair<const Node *, Func>>> row_sweeps;
        Func column_group;
        // Does one of the two statistics read the other?
        auto depends = [&](const Node *a, const Node *b) { return reaches(spec, *a->args[0], b) || reaches(spec, *b->args[0], a); };
        // A mean independent of another mean of the row's.
        auto has_partner = [&](const ReductionFuncs &rf) {
            for (ReductionFuncs &other : p.reductions)
                if (&other != &rf && !is_column(other) && other.node && other.node->reduce == rf.node->reduce && row_sweep_update(other, inner) &&
                    !depends(rf.node, other.node))
                    return true;
            return false;
        };
        for (ReductionFuncs &rf : p.reductions) {
            if (is_column(rf)) {
                // A sum over the rows: per block of rows (one task of y's row loop) a partial sum
                // intm(kept axes, block), in the same block loop as y (compute_with at the block:
                // Halide fuses a pure row loop with no reduction loop, so the partial sums are a
                // second sweep over the block, from cache), vectorized along the kept innermost
                // axis; then the final reduce adds the blocks, in blocks of 32.
                NORMGEN_ASSERT(nrow == 1 && rf.updates.size() == 1 && rf.updates[0].rdom_axes.back() == order[0],
                               "a column sum reduces the one row axis");
                Func f = rf.updates[0].func;
                if (rf.updates[0].rdom.dimensions() == 2) {
                    // A total sum over rows x d (DyT's d_alpha): partial sums per row, lane and
                    // block of sum_block vectors, in the same row loop as y (the rows are pure
                    // dimensions of the partials, so Halide fuses the loops at the row: one sweep);
                    // then per block of rows (vectorized over the lanes), then the blocks.
                    NORMGEN_ASSERT(rf.updates[0].rdom_axes[0] == inner && f.dimensions() == 0, "a total column sum is over rows x d");
                    RVar rd(rf.updates[0].rdom[0].name()), rr(rf.updates[0].rdom[1].name());
                    RVar rdo("rd_o"), rdi("rd_i"), rdb("rd_blk"), rdv("rd_vec"), rbo("row_block"), rbi("row_in_block");
                    Var lane("lane"), dblk("d_block");
                    f.update()
                        .split(rd, rdo, rdi, vw, TailStrategy::GuardWithIf)
                        .split(rdo, rdb, rdv, s.sum_block, TailStrategy::GuardWithIf)
                        .split(rr, rbo, rbi, task, TailStrategy::GuardWithIf);
                    Func rows_part = f.update().rfactor({{rdi, lane}, {rdb, dblk}, {rbi, ri}, {rbo, ro}});
                    rows_part.compute_root().reorder_storage(lane, dblk, ri, ro).vectorize(lane);
                    rows_part.update().reorder(lane, rdv, dblk, ri, ro).vectorize(lane).parallel(ro);
                    rows_part.update().compute_with(y, ri);
                    // rows_part(lane, dblk, ri, ro) -> per (lane, block of rows), vectorized over lanes.
                    Func blocks_part = f.update().rfactor({{rdi, lane}, {rbo, ro}});
                    blocks_part.compute_root().vectorize(lane);
                    blocks_part.update().reorder(lane, rdb, rbi, ro).vectorize(lane).parallel(ro);
                    for (Func g : funcs_of(rf)) g.compute_root();
                    continue;
                }
                RVar rr(rf.updates[0].rdom[0].name()), rbo("row_block"), rbi("row_in_block");
                RVar rq("row_group"), rk("row_in_group");
                // column_rows > 1: the rows of a block in groups of that many, the group's terms added
                // to one vector of the partial sums with the group's rows unrolled innermost (the
                // partial row, d floats, loaded and stored once per group, not once per row).
                if (group_rows > 1)
                    f.update().split(rr, rq, rk, group_rows, TailStrategy::GuardWithIf).split(rq, rbo, rbi, task / group_rows, TailStrategy::GuardWithIf);
                else f.update().split(rr, rbo, rbi, task, TailStrategy::GuardWithIf);
                const std::vector<Var> kept = f.args();
                Func intm = f.update().rfactor(rbo, ro);
                intm.compute_root().vectorize(vi, vw, TailStrategy::GuardWithIf);
                std::vector<VarOrRVar> ord(kept.begin(), kept.end());
                ord.push_back(rbi);
                ord.push_back(ro);
                if (group_rows > 1) {
                    // The lanes innermost, then the group's rows (unrolled), then the vectors; the
                    // vectors' loop keeps the name of vi: Halide looks a nested compute_with's level
                    // up among the outermost fused stage's loops, y's.
                    Var lane("col_lane");
                    intm.update().split(vi, vi, lane, vw, TailStrategy::GuardWithIf);
                    ord.erase(std::find_if(ord.begin(), ord.end(), [&](const VarOrRVar &v) { return v.name() == vi.name(); }));
                    ord.insert(ord.begin(), {lane, rk, vi});
                    intm.update().reorder(ord).parallel(ro).vectorize(lane).unroll(rk);
                } else {
                    intm.update().reorder(ord).parallel(ro).vectorize(vi, vw, TailStrategy::GuardWithIf);
                }
                // Fused with the other column sums' sweeps that read no statistics (one pass over
                // the block for all of them); one that reads statistics makes its own pass (Halide
                // cannot bound a statistic read inside another stage's fused loop).
                const bool reads_stats = depends_on_reduction(spec, *rf.node->args[0]);
                if (reads_stats || !column_group.defined()) intm.update().compute_with(y, ro);
                else intm.update().compute_with(column_group.update(), vi);
                if (!reads_stats && !column_group.defined()) column_group = intm;
                for (Func g : funcs_of(rf)) g.compute_root();
                RVar rbg("row_block_group"), rbb("row_block_in_group");
                Var grp("block_group");
                f.update().split(rbo, rbg, rbb, 32, TailStrategy::GuardWithIf);
                Func groups = f.update().rfactor(rbg, grp);
                groups.compute_root().vectorize(vi, vw, TailStrategy::GuardWithIf);
                std::vector<VarOrRVar> gord(kept.begin(), kept.end());
                gord.push_back(rbb);
                gord.push_back(grp);
                groups.update().reorder(gord).vectorize(vi, vw, TailStrategy::GuardWithIf);
                std::vector<VarOrRVar> ford(kept.begin(), kept.end());
                ford.push_back(rbg);
                f.update().reorder(ford).vectorize(vi, vw, TailStrategy::GuardWithIf);
                f.vectorize(vi, vw, TailStrategy::GuardWithIf);
                continue;
            }
            // Every Func of the reduction at the same level: per row, inside the row loop (with
            // column sums: per block, so the partial sums may read them too).
            const LoopLevel stats_at = nrow > 0 ? LoopLevel(y, columns ? ro : ri) : LoopLevel::root();
            for (Func f : funcs_of(rf)) {
                if (nrow > 0) f.compute_at(y, columns ? ro : ri);
                else f.compute_root();
            }
            // A plain sum over one contiguous axis: its sweep is placed with the statistics, so
            // independent sums over the same axis share one sweep (below). So do independent
            // means (each one's shift, a sum of at most 64 elements, apart): PolyNorm's mean(x^2),
            // mean(x^4), mean(x^6), three sweeps of the row before, one now (bf16 16384 x 8192:
            // 0.84x the time, AMD EPYC). A mean does not join the sums' sweep: a backward's
            // recomputed mean(x) with its sum(weight * d_y) took 1.06x the time of the two apart
            // (LayerNorm weight-only backward 2048 x 8192 f32), and a lone mean (LayerNorm's,
            // RMSNorm's) keeps its kernel as it was.
            if (ReductionFuncs::Update *sum = row_sweep_update(rf, inner); sum && (rf.node->reduce == ReduceOp::Sum || has_partner(rf))) {
                for (auto &u : rf.updates)
                    if (&u != sum) vectorize_update(rf, u, p, inner, s.row_accumulators * vw, s, LoopLevel(u.func, Var::outermost()), -1, order);
                Func sweep = vectorize_update(rf, *sum, p, inner, s.row_accumulators * vw, s, stats_at);
                if (sweep.defined()) {
                    std::vector<std::pair<const Node *, Func>> &group = row_sweeps[rf.node->reduce];
                    bool independent = true;
                    for (const auto &[node, f] : group) independent = independent && !depends(rf.node, node);
                    if (independent) group.push_back({rf.node, sweep});
                }
                continue;
            }
            // Over one long contiguous axis (LayerNorm's d): row_accumulators vectors of lanes per
            // reduction, as many independent add chains, so a row's sum is not bound by the latency
            // of one (four: LayerNorm 16384 x 768 f32 14.2 -> 17.1 GB/s in the lab, bench/README.md). Over
            // several axes the innermost may be short (GroupNorm NCHW's w = 8..64): one vector
            // (64 lanes there took 8 x 640 x 32 x 32 from 15.6 to 6.7 GB/s), unless the record's
            // multi_axis_accumulators says otherwise (a tuner's choice for large planes).
            for (auto &u : rf.updates) {
                const int fused = fused_reduced_axes(u, s, order);
                const int dims = u.rdom.dimensions() - (fused ? fused - 1 : 0);
                const int lanes = dims == 1 || s.multi_axis_accumulators ? s.row_accumulators * vw : vw;
                vectorize_update(rf, u, p, inner, lanes, s, LoopLevel(u.func, Var::outermost()), -1, order);
            }
        }
        for (auto &[op, group] : row_sweeps)
            for (size_t k = 1; k < group.size(); ++k) group[k].second.update().compute_with(group[0].second.update(), RVar("rib"));
        // A full-size value that both a reduction and the map read (DeepNorm's h = alpha * x + f,
        // the fused residual sum) is computed once per row and kept in cache: cheaper than computing
        // it twice, and the statistics then describe exactly the values that are normalized (two
        // inlined copies may round differently once LLVM contracts one of them into an FMA). Not a
        // pure product (PolyNorm's powers of x): kept, it was an f32 row written and read back by
        // three sweeps; inlined, PolyNorm bf16 1024 x 4096 ran 19.4 -> 28.6 GB/s (AMD EPYC).
        if (nrow > 0 && !columns) {
            AxisSet main_axes = spec.outputs[p.output_index[main]].axes;
            for (size_t i = 0; i < spec.values.size(); ++i)
                if (spec.values[i].expr->kind != Node::Reduce && spec.values[i].expr->axes == main_axes && read_by_reduction(spec, (int)i) &&
                    !pure_product(spec, *spec.values[i].expr))
                    p.values[i].compute_at(y, ri).vectorize(vi, vw, TailStrategy::GuardWithIf);
        }
        // With sums over the rows, a transcendental value that the map and the sums read (DyT's
        // backward's tanh(alpha x)) once per block of rows, in cache (block_values): inlined, the
        // map, the per-row sum of d_alpha and the block's partial sums of d_weight each evaluated it.
        const std::vector<int> kept_values = columns && s.block_values ? plan.block_values(spec) : std::vector<int>{};
        for (int i : kept_values) p.values[(size_t)i].compute_at(y, ro).vectorize(vi, vw, TailStrategy::GuardWithIf);
        desc << (p.reductions.empty() ? "map" : "row") << " schedule: " << (nrow ? "rows parallel (>= " : "") ;
        if (nrow) desc << s.min_task_elements << " elements a task), ";
        desc << "statistics per row in cache, vectorize " << spec.axes[inner].name << " x" << vw;
        if (std::any_of(p.reductions.begin(), p.reductions.end(), [](const ReductionFuncs &rf) { return rf.checked_variance; }))
            desc << "; the variance from the mean's shifted sums (its second pass only on rows whose shift is far from the mean)";
        if (!kept_values.empty()) desc << "; " << kept_values.size() << " transcendental value(s) computed once per block of rows";
        if (columns) desc << "; sums over " << spec.axes[order[0]].name << " as partials per block of rows (>= " << s.column_block_elements
                          << " elements) in the same block loop" << (group_rows > 1 ? ", " + std::to_string(group_rows) + " rows a vector of partials" : "")
                          << ", then a final reduce";
    } else {
        // Root schedule: statistics first, parallel over their outermost independent axis; or,
        // with sample_statistics, per index of the map's outermost (parallel) axis, inside its loop.
        Var outer = p.vars[order[0]];
        per_sample = s.sample_statistics && plan.statistics_per_outer_index(spec);
        // group_statistics: those statistics per index of the map's second axis instead (a group
        // of GroupNorm NCHW, 40 channels of 8 x 8 = 10 KiB of each tensor), computed in its loop
        // over that axis: the group's later sweeps (the second sum, the map) read it from L1, not
        // the sample's slab (960 KiB for the backward at 1280 channels) from L2 / L3. The
        // per-sample partials of the sums over the samples join that loop. (Not with per-channel
        // tables, computed per sample.)
        const bool per_group = per_sample && s.group_statistics && plan.statistics_per_second_index(spec) && p.tables.empty();
        const Var stats_at = per_group ? p.vars[order[1]] : outer;
        // (their buffers allocated once a sample: per group, each was a heap allocation)
        const std::optional<LoopLevel> group_storage = per_group ? std::optional<LoopLevel>(LoopLevel(y, outer)) : std::nullopt;
        AxisId block_axis = -1;  // a blocked variance's (for the description)
        for (ReductionFuncs &rf : p.reductions) {
            // (statistics_per_outer_index: a sum over the outermost axis is an output's whole value)
            if (per_sample && !rf.updates.empty() && std::count(rf.updates[0].rdom_axes.begin(), rf.updates[0].rdom_axes.end(), order[0])) {
                sample_partials(rf, p, y, order, s, stats_at);
                continue;
            }
            for (Func f : funcs_of(rf)) {
                if (is_block_func(p.reductions, f)) continue;  // per block, below
                if (per_sample) {
                    f.compute_at(y, stats_at);
                    if (group_storage) f.hoist_storage(*group_storage);
                    continue;
                }
                f.compute_root();
                // Parallel over the outermost pure axis; a Welford lane Func's first dimension is
                // its lane (vectorized), so it needs a data axis beyond it. (Without this, BatchNorm
                // training ran its whole statistics pass on one thread: 0.5 GB/s.)
                const int first_data = is_lane_func(rf, f) ? 1 : 0;
                if (f.dimensions() > first_data) {
                    Var outer = f.args().back();
                    f.parallel(outer);
                    if (f.has_update_definition()) f.update().parallel(outer);
                }
            }
            const AxisId next_outer = order.size() >= 2 ? order[order.size() - 2] : -1;
            Func second;  // a blocked variance's pass-2 sweep
            for (size_t k = 0; k < rf.updates.size(); ++k) {
                ReductionFuncs::Update &u = rf.updates[k];
                bool has_pure = u.associative && u.func.dimensions() > 0;
                // (a plane sum that fits one block without a level of blocks: the row schedule's
                // sums are left as they are, their sweeps fused with compute_with)
                Func sweep = vectorize_update(rf, u, p, inner, vw, s,
                                              has_pure ? LoopLevel(u.func, u.func.args().back()) : LoopLevel(u.func, Var::outermost()),
                                              next_outer, order, group_storage, true);
                if ((int)k == rf.block_second) second = sweep;
            }
            // A blocked variance (block_variance): pass 1 of a block (its sum, its mean, the mean's
            // per-channel table) inside pass 2's loop over the blocks, just before the block's own
            // pass 2, which then reads the block from cache.
            if (rf.block_second >= 0 && second.defined()) {
                const LoopLevel per_block(second, Var(p.vars[rf.block_axis].name()));
                // (stored in the loop around the blocks, pass 2's outermost, parallel without
                // sample_statistics: one allocation, not one per block)
                const bool has_outer = std::any_of(second.args().begin(), second.args().end(), [&](const Var &v) { return v.name() == outer.name(); });
                for (Func f : rf.block_funcs) {
                    if (has_outer) f.store_at(LoopLevel(second, outer));
                    f.compute_at(per_block);
                }
                block_axis = rf.block_axis;
            } else {
                for (Func f : rf.block_funcs) {  // (pass 2 not a sweep along the channels: no interleaving)
                    if (per_sample) f.compute_at(y, stats_at);
                    else f.compute_root();
                }
            }
        }
        y.parallel(outer).vectorize(map_inner(y), vw, TailStrategy::GuardWithIf);
        if (fuse_pair) y.specialize(p.extent[inner] > 0);
        for (size_t i : same_shape) {
            Func f = p.outputs[i];
            f.parallel(outer).vectorize(vi, vw, TailStrategy::GuardWithIf);
            f.compute_with(y, outer);
        }
        if (per_group)
            desc << "root schedule: per " << spec.axes[order[0]].name << " (parallel) and " << spec.axes[order[1]].name
                 << ", its statistics, then its map; vectorize " << spec.axes[inner].name << " x" << vw;
        else if (per_sample)
            desc << "root schedule: per " << spec.axes[order[0]].name << " (parallel), its statistics, then its map; vectorize "
                 << spec.axes[inner].name << " x" << vw;
        else
            desc << "root schedule: statistics first (parallel over their outer axis), then the map parallel over "
                 << spec.axes[order[0]].name << ", vectorize " << spec.axes[inner].name << " x" << vw;
        if (block_axis >= 0) desc << "; two-pass variance by blocks of one " << spec.axes[(size_t)block_axis].name
                             << " (pass 1 and pass 2 of a block in turn, the block from cache)";
    }
    // The per-channel tables of per-group values (lower.h; group_vectors): small (one value per
    // channel and sample), computed once (at the root, or per sample with the statistics they
    // read), read as dense vectors by the fused loops.
    for (Func t : p.tables) {
        if (is_block_func(p.reductions, t)) {}  // placed with its block
        else if (per_sample) t.compute_at(y, p.vars[order[0]]);
        else t.compute_root();
        t.vectorize(t.args()[0], vw, TailStrategy::GuardWithIf);
    }
    if (!p.tables.empty()) desc << "; per-group values read from per-channel tables";
    if (std::any_of(p.reductions.begin(), p.reductions.end(), [](const ReductionFuncs &rf) { return rf.result.defined() && rf.result.outputs() > 1; }))
        desc << "; a stage's sums over the same axes computed together, one sweep for each group of them";
    // Small outputs (saved statistics, running statistics): computed on their own.
    for (size_t i = 0; i < p.outputs.size(); ++i) {
        if (i == main || std::count(same_shape.begin(), same_shape.end(), i)) continue;
        Func f = p.outputs[i];
        if (f.dimensions() > 0) f.vectorize(f.args()[0], vw, TailStrategy::GuardWithIf);
    }
    return desc.str();
}

}  // namespace normgen::hl
