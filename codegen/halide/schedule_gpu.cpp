#include "codegen/halide/schedule_gpu.h"

#include "runtime/errors.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>

namespace normgen::hl {

using namespace Halide;
using Halide::Internal::Call;
using Halide::Internal::Evaluate;
using Halide::Internal::For;
using Halide::Internal::ForType;
using Halide::Internal::IRMutator;
using Halide::Internal::Store;

namespace {

// The halide-gpu record's knobs, read once (their defaults and ranges live in schedule_knobs alone).
struct Knobs {
    int threads, vector, rows_per_block, column_blocks;
    bool tree, row_in_block;
    explicit Knobs(const ScheduleRecord &r)
        : threads((int)r.get("block_threads")), vector((int)r.get("vector_width")), rows_per_block((int)r.get("rows_per_block")),
          column_blocks((int)r.get("column_blocks")), tree(r.get("block_reduction") == 1), row_in_block(r.flag("row_in_block")) {}
};

// Fuses `vars` (innermost first, neighbours in the stage's loop nest) into one loop named `name`.
template <class Stage_, class V>
V fuse_all(Stage_ s, const std::vector<V> &vars, const std::string &name) {
    V acc = vars.at(0);
    for (size_t i = 1; i < vars.size(); ++i) {
        V next(name + (i + 1 == vars.size() ? "" : "_" + std::to_string(i)));
        s.fuse(acc, vars[i], next);
        acc = next;
    }
    return acc;
}

std::vector<RVar> rvars_of(const RDom &r) {
    std::vector<RVar> v;
    for (int k = 0; k < r.dimensions(); ++k) v.push_back(RVar(r[k].name()));
    return v;
}

// A stage over `pure` (innermost first) as one flat index cut into vectors, threads and blocks;
// a stage without pure dimensions on one GPU thread.
template <class Stage_>
void flat_on_gpu(Stage_ s, const std::vector<Var> &pure, const Knobs &k, const std::string &tag, bool vectorize) {
    if (pure.empty()) {
        s.gpu_single_thread();
        return;
    }
    Var e = pure.size() == 1 ? pure[0] : fuse_all(s, pure, tag + "_e");
    Var eb(tag + "_eb"), et(tag + "_et"), ev(tag + "_ev"), eo(tag + "_eo");
    if (vectorize && k.vector > 1) {
        s.split(e, eo, ev, k.vector, TailStrategy::GuardWithIf).split(eo, eb, et, k.threads, TailStrategy::GuardWithIf);
        s.gpu_blocks(eb).gpu_threads(et).unroll(ev);  // (vectorize with a tail: OpenCL C has no masked vectors)
    } else {
        s.split(e, eb, et, k.threads, TailStrategy::GuardWithIf).gpu_blocks(eb).gpu_threads(et);
    }
}

// A map: every element of f, flat.
void map_on_gpu(Func f, const Knobs &k) { flat_on_gpu(f, f.args(), k, f.name(), true); }

// A Func's pure stage on the GPU (its update stages are scheduled by their own rules).
void init_on_gpu(Func f, const Knobs &k) { flat_on_gpu(f, f.args(), k, f.name() + "_init", false); }

// The threads of a block sum one update's domain (`rk`, already the stage's single innermost
// reduction loop, or the RVars to fuse into it): thread t adds elements t, t + n, t + 2n, ... of it
// (n threads: `threads` per row group; `group` the row within the block when a block holds several),
// each into a private partial (rfactor); then the partials are added by a tree in shared memory
// (groups of 16, then the groups) or by one thread. Intermediates are computed at `at`.
void sum_across_threads(Halide::Stage st, std::vector<RVar> rk, const LoopLevel &at, int threads, const Knobs &k, const std::string &tag,
                        const std::vector<Var> &group) {
    RVar r = rk.size() == 1 ? rk[0] : fuse_all(st, rk, tag + "_rk");
    RVar ro(tag + "_ro"), rt(tag + "_rt");
    Var t(tag + "_t");
    st.split(r, ro, rt, threads, TailStrategy::GuardWithIf);
    Func partial = st.rfactor(rt, t);
    partial.compute_at(at);
    std::vector<VarOrRVar> thread_vars{t};
    for (const Var &g : group) thread_vars.push_back(g);
    // Each thread's serial sweep (ro) inside its own thread loop.
    std::vector<VarOrRVar> order{ro};
    order.insert(order.end(), thread_vars.begin(), thread_vars.end());
    if (group.empty()) {
        partial.gpu_threads(t);
        partial.update().reorder(order).gpu_threads(t);
    } else {
        partial.reorder(t, group[0]).gpu_threads(t, group[0]);
        partial.update().reorder(order).gpu_threads(t, group[0]);
    }
    if (!k.tree || threads <= 16) return;
    // The tree: groups of 16 partials added by threads / 16 threads, then the groups by one.
    RVar go(tag + "_go"), gi(tag + "_gi");
    Var g(tag + "_g");
    st.split(rt, go, gi, 16, TailStrategy::GuardWithIf);
    Func groups = st.rfactor(go, g);
    groups.compute_at(at);
    if (group.empty()) {
        groups.gpu_threads(g);
        groups.update().reorder(gi, g).gpu_threads(g);
    } else {
        groups.reorder(g, group[0]).gpu_threads(g, group[0]);
        groups.update().reorder(gi, g, group[0]).gpu_threads(g, group[0]);
    }
}

// Which way a reduction's sweep runs over the threads of a block.
enum class Sweep {
    Across,  // the innermost axis of memory is reduced: a block's threads stride along it (a row's sum)
    Along,   // the innermost axis of memory is kept: a thread per element of it, serially over the rows
    Serial,  // a short (bounded) or order-dependent (Welford) update: one thread per pure element
};

Sweep sweep_of(const ReductionFuncs::Update &u, const LoweredPipeline &p, AxisId inner) {
    if (!u.associative || u.bounded) return Sweep::Serial;
    for (const Var &v : u.func.args())
        if (v.name() == p.vars[inner].name()) return Sweep::Along;
    return Sweep::Across;
}

// The extent of a Func's pure dimensions together (its statistics' count), from the pipeline's
// axis extents by the Vars' names.
Expr pure_count(const Func &f, const LoweredPipeline &p) {
    Expr n = 1;
    for (const Var &v : f.args())
        for (size_t a = 0; a < p.vars.size(); ++a)
            if (p.extent[a].defined() && p.vars[a].name() == v.name()) n = n * p.extent[a];
    return n;
}

// One reduction update in launches of its own (the partial-sum form): its domain's outermost
// dimension cut into runs, one block per run and pure element group (at most column_blocks
// blocks in all), per-run partial sums in global memory, then a launch that adds the runs.
void reduce_in_launches(ReductionFuncs::Update &u, const LoweredPipeline &p, AxisId inner, const Knobs &k, int index) {
    Func f = u.func;
    const std::string tag = f.name() + "_u" + std::to_string(index);
    f.compute_root();
    init_on_gpu(f, k);
    Halide::Stage st = f.update();
    const Sweep sweep = sweep_of(u, p, inner);
    if (sweep == Sweep::Serial) {
        // One thread per pure element, the domain serially (RVars innermost: the default order).
        flat_on_gpu(st, f.args(), k, tag, false);
        return;
    }
    // The whole domain as one loop, cut into runs: as many as column_blocks allows beside the
    // blocks the pure elements already take, and enough that no thread adds more than 256 terms
    // in a row (BatchNorm NHWC's mean over 3 x 3 x 262144 on one channel, on OpenCL: 786 432
    // terms a thread were 18x past the verifier's bound, 4096 up to 2.8x, 512 0.17x).
    std::vector<RVar> all = rvars_of(u.rdom);
    Expr total = 1;
    for (int d = 0; d < u.rdom.dimensions(); ++d) total = total * u.rdom[d].extent();
    const RVar rk = all.size() == 1 ? all[0] : fuse_all(st, all, tag + "_rk");
    const Expr kept = pure_count(f, p);
    const Expr kept_blocks = sweep == Sweep::Along ? (kept + k.threads - 1) / k.threads : kept;
    const Expr serial_cap = sweep == Sweep::Along ? 256 : 256 * k.threads;
    const Expr runs = max(max(1, k.column_blocks / max(kept_blocks, 1)), (total + serial_cap - 1) / serial_cap);
    const Expr run_length = max(1, (total + runs - 1) / runs);
    RVar rco(tag + "_run"), rci(tag + "_in_run");
    st.split(rk, rco, rci, run_length, TailStrategy::GuardWithIf);
    std::vector<RVar> rv{rci};
    Var pc(tag + "_pc");
    Func part = st.rfactor(rco, pc);
    part.compute_root();
    init_on_gpu(part, k);
    Halide::Stage ps = part.update();
    // The adds of the runs: a thread per pure element, serially over the runs.
    flat_on_gpu(st, f.args(), k, tag + "_runs", false);
    std::vector<Var> pure = part.args();  // innermost first (the run index among them)
    if (sweep == Sweep::Along) {
        // A thread per element of the innermost (kept) axis, every reduced element serially;
        // blocks over the rest and the runs.
        Var vin = p.vars[inner], vo(tag + "_vo"), vt(tag + "_vt");
        ps.split(vin, vo, vt, k.threads, TailStrategy::GuardWithIf);
        std::vector<Var> outer{vo};
        for (const Var &v : pure)
            if (v.name() != vin.name()) outer.push_back(v);
        std::vector<VarOrRVar> order(rv.begin(), rv.end());
        order.push_back(vt);
        order.insert(order.end(), outer.begin(), outer.end());
        ps.reorder(order);
        Var blocks = outer.size() == 1 ? outer[0] : fuse_all(ps, outer, tag + "_blk");
        ps.gpu_blocks(blocks).gpu_threads(vt);
        return;
    }
    // Across: a block per (pure element, run), its threads along the domain. (The threads'
    // rfactors first: an intermediate inherits the directives its stage had, block loops included.)
    Var blocks = pure.size() == 1 ? pure[0] : Var(tag + "_blk");
    sum_across_threads(ps, rv, LoopLevel(part, blocks), k.threads, k, tag, {});
    if (pure.size() > 1) fuse_all(ps, pure, tag + "_blk");
    ps.gpu_blocks(blocks);
}

// The faults of NORMGEN_GPU_FAULT, as lowering passes.
class DropBarriers : public IRMutator {
    using IRMutator::visit;
    Halide::Internal::Stmt visit(const Evaluate *op) override {
        if (const Call *c = op->value.as<Call>(); c && c->is_intrinsic(Call::gpu_thread_barrier)) return Evaluate::make(0);
        return IRMutator::visit(op);
    }
};

// A wrong tail: the last iteration of every serial loop a GPU thread runs (its last vector of a
// row, its last run of a sum) is dropped.
class DropLastIteration : public IRMutator {
    using IRMutator::visit;
    int threads_ = 0;
    Halide::Internal::Stmt visit(const For *op) override {
        const bool thread = op->for_type == ForType::GPUThread;
        threads_ += thread;
        Halide::Internal::Stmt body = mutate(op->body);
        threads_ -= thread;
        Expr extent = threads_ > 0 && op->for_type == ForType::Serial ? max(op->extent - 1, 0) : op->extent;
        return For::make(op->name, op->min, extent, op->for_type, op->partition_policy, op->device_api, body);
    }
};

// Every store inside a GPU block loop: else a stage computes on the host (a schedule that forgot
// one). Throws once the whole statement was seen.
class DeviceOnlyPass : public IRMutator {
    using IRMutator::visit;
    int calls_ = 0, blocks_ = 0;
    std::set<std::string> host_;

public:
    Halide::Internal::Stmt mutate(const Halide::Internal::Stmt &s) override {
        ++calls_;
        Halide::Internal::Stmt r = IRMutator::mutate(s);
        if (--calls_ == 0 && !host_.empty()) {
            std::string names;
            for (const std::string &n : host_) names += (names.empty() ? "" : ", ") + n;
            internal_error("the GPU schedule left stage(s) " + names + " on the host", __FILE__, __LINE__);
        }
        return r;
    }
    Halide::Internal::Stmt visit(const For *op) override {
        const bool block = op->for_type == ForType::GPUBlock;
        blocks_ += block;
        Halide::Internal::Stmt s = IRMutator::visit(op);
        blocks_ -= block;
        return s;
    }
    Halide::Internal::Stmt visit(const Store *op) override {
        // (Halide's own host-side bookkeeping, such as a shared allocation's size, is named with a
        // '.', which no Func's buffer is.)
        if (blocks_ == 0 && op->name.find('.') == std::string::npos) host_.insert(op->name);
        return IRMutator::visit(op);
    }
};

}  // namespace

std::string gpu_fault_from_env() {
    const char *e = std::getenv("NORMGEN_GPU_FAULT");
    return e ? e : "";
}

void require_device_stages(Pipeline &pipeline) {
    pipeline.add_custom_lowering_pass(new DeviceOnlyPass);
    const std::string fault = gpu_fault_from_env();
    if (fault == "barriers") pipeline.add_custom_lowering_pass(new DropBarriers);
    else if (fault == "tail") pipeline.add_custom_lowering_pass(new DropLastIteration);
    else if (!fault.empty()) throw UserError("NORMGEN_GPU_FAULT='" + fault + "': give barriers or tail (or leave it unset)");
}

std::string schedule_gpu(LoweredPipeline &p, const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &record) {
    NORMGEN_ASSERT(record.kind() == ScheduleKind::HalideGpu, std::string("the Halide GPU schedule got a ") + schedule_kind_name(record.kind()) + " record");
    const Knobs k(record);
    std::ostringstream desc;
    size_t main = 0;
    for (size_t i = 0; i < p.outputs.size(); ++i)
        if (p.output_index[i] == plan.main_output) main = i;
    const std::vector<AxisId> &order = plan.main_order;
    const AxisId inner = order.back();

    bool associative = true;
    for (const ReductionFuncs &rf : p.reductions)
        for (const auto &u : rf.updates) associative = associative && u.associative;
    // The output whose blocks compute the statistics: the one shaped like the main output that
    // reads them (fused add + RMSNorm's y, not its h); others of that shape are maps of their own.
    bool all_like_main = true;  // every output of the kernel shaped like the main one (no saved statistics)
    std::vector<size_t> readers;
    for (size_t i = 0; i < p.outputs.size(); ++i) {
        const int o = p.output_index[i];
        all_like_main = all_like_main && (o == plan.main_output || std::count(plan.same_shape.begin(), plan.same_shape.end(), o));
        if (depends_on_reduction(spec, *spec.values[spec.outputs[o].value].expr)) readers.push_back(i);
    }
    const bool in_block = plan.layout == LayoutClass::Row && plan.row_axes >= 1 && k.row_in_block && plan.column_sums.empty() &&
                          associative && all_like_main && readers.size() == 1;
    if (in_block) main = readers[0];
    Func y = p.outputs[main];

    if (in_block) {
        // A block per rows_per_block rows (several only when one axis indexes the rows, so that a
        // block's statistics are exactly its rows'), the row's axes as one loop cut into vectors
        // and threads.
        const size_t nrow = plan.row_axes;
        const int rows = nrow == 1 ? k.rows_per_block : 1;
        const int threads = k.threads / rows;
        std::vector<Var> row_vars, elem_vars;  // innermost first
        for (size_t i = order.size(); i-- > nrow;) elem_vars.push_back(p.vars[order[i]]);
        for (size_t i = nrow; i-- > 0;) row_vars.push_back(p.vars[order[i]]);
        Var e = elem_vars.size() == 1 ? elem_vars[0] : fuse_all(y, elem_vars, "y_e");
        Var r = row_vars.size() == 1 ? row_vars[0] : fuse_all(y, row_vars, "y_r");
        Var rb("y_rb"), rr("y_rr"), eo("y_eo"), et("y_et"), ev("y_ev"), etv("y_etv");
        y.split(e, etv, ev, k.vector, TailStrategy::GuardWithIf).split(etv, eo, et, threads, TailStrategy::GuardWithIf);
        std::vector<Var> group;
        if (rows > 1) {
            y.split(r, rb, rr, rows, TailStrategy::GuardWithIf).reorder(ev, eo, et, rr, rb).gpu_blocks(rb).gpu_threads(et, rr);
            group.push_back(row_vars[0]);
        } else {
            rb = r;
            y.reorder(ev, eo, et, rb).gpu_blocks(rb).gpu_threads(et);
        }
        y.unroll(ev);
        const LoopLevel block(y, rb);
        for (ReductionFuncs &rf : p.reductions) {
            for (Func f : std::vector<Func>{rf.result}) f.compute_at(block);
            for (Func f : rf.helpers) f.compute_at(block);
            for (size_t i = 0; i < rf.updates.size(); ++i) {
                ReductionFuncs::Update &u = rf.updates[i];
                u.func.compute_at(block);
                if (u.bounded) continue;  // a mean's shift: 64 elements, one thread
                sum_across_threads(u.func.update(), rvars_of(u.rdom), block, threads, k, u.func.name() + "_r" + std::to_string(i),
                                   rows > 1 ? group : std::vector<Var>{});
            }
        }
        for (size_t i = 0; i < p.outputs.size(); ++i)
            if (i != main) map_on_gpu(p.outputs[i], k);
        desc << "gpu row schedule: a block per " << (rows > 1 ? std::to_string(rows) + " rows" : "row") << ", " << threads
             << " threads a row summing strided vectors of " << k.vector << ", " << (k.tree ? "a tree of 16" : "one thread")
             << " adding the partials, then the map in the same block";
        return desc.str();
    }

    // Reductions in launches of their own, then the maps.
    int index = 0;
    for (ReductionFuncs &rf : p.reductions)
        for (ReductionFuncs::Update &u : rf.updates) reduce_in_launches(u, p, inner, k, index++);
    for (Func f : p.outputs) map_on_gpu(f, k);
    if (p.reductions.empty())
        desc << "gpu map schedule: every element of " << spec.outputs[plan.main_output].name << " flat, vectors of " << k.vector << ", "
             << k.threads << " threads a block";
    else
        desc << "gpu root schedule: each reduction in launches of its own (per-block partial sums over runs of its outermost "
             << "reduced axis, at most " << k.column_blocks << " blocks, then a launch adding the runs), then the maps flat, vectors of "
             << k.vector << ", " << k.threads << " threads a block";
    return desc.str();
}

}  // namespace normgen::hl
