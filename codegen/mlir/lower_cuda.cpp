// NormSpec -> MLIR for CUDA (lower.h): one gpu.func, a block per index of the plan's block axes,
// the shared reduction algorithm (algorithm.h) with a statistic per block.
#include "codegen/mlir/lower.h"

#include "codegen/mlir/algorithm.h"
#include "codegen/mlir/emit.h"
#include "runtime/errors.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <set>
#include <stdexcept>

namespace normgen::mlirgen {

namespace {

// ---- CUDA: one block per index of the block axes ---------------------------------------------------

class CudaLowerer {
public:
    using Env = std::map<AxisId, Value>;
    using Step = std::function<SmallVector<Value>(OpBuilder &, Location, const Env &, ValueRange)>;

    CudaLowerer(MLIRContext &ctx, const NormSpec &spec, const KernelPlan &kplan, const CudaPlan &plan)
        : ctx_(ctx), spec_(spec), types_(kplan.types), full_(kplan.variant == Variant::Full), plan_(plan), b_(&ctx), loc_(NameLoc::get(StringAttr::get(&ctx, spec.name))),
          acc_(element_type(ctx, spec.accumulate)),
          emitter_(spec, acc_, extent_f_, kplan.types, [&ctx](DType t) { return element_type(ctx, t); }) {}

    OwningOpRef<ModuleOp> run(const std::string &function) {
        OwningOpRef<ModuleOp> module = ModuleOp::create(loc_);
        (*module)->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), b_.getUnitAttr());
        b_.setInsertionPointToEnd(module->getBody());
        auto gm = gpu::GPUModuleOp::create(b_, loc_, "normgen_cuda");
        b_.setInsertionPointToStart(gm.getBody());

        for (const TensorInfo &t : spec_.tensors) {
            args_.push_back({t.name, spec_.memory_atoms(t.dims)});
            types_in_.push_back(MemRefType::get({ShapedType::kDynamic}, element_type(ctx_, types_.storage.at(t.name))));
        }
        for (const OutputInfo &o : spec_.outputs) {
            if (o.optional && !full_) continue;
            outs_.push_back(&o);
            args_.push_back({o.name, spec_.memory_atoms(o.dims)});
            types_in_.push_back(MemRefType::get({ShapedType::kDynamic}, element_type(ctx_, types_.storage.at(o.name))));
        }
        for (size_t k = 0; k < plan_.column_outputs.size() + plan_.statistics.size(); ++k)
            types_in_.push_back(MemRefType::get({ShapedType::kDynamic}, acc_));
        for (size_t i = 0; i < plan_.extent_axes.size(); ++i) types_in_.push_back(b_.getIndexType());
        if (columns()) types_in_.push_back(b_.getIndexType());  // the block count

        if (!columns()) {
            Env env;
            begin(function, env);
            for (size_t k = 0; k < outs_.size(); ++k) store_output(k, env, plan_.block_axes);
            gpu::ReturnOp::create(b_, loc_);
        } else {
            build_main(function);
            b_.setInsertionPointToEnd(gm.getBody());
            build_final(function + "_final");
        }
        return module;
    }

private:
    bool columns() const { return !plan_.column_outputs.empty(); }

    // Starts a kernel with the shared argument list and binds its arguments; `env` gets the block's
    // coordinates along the plan's block axes (none in the two-kernel form).
    void begin(const std::string &name, Env &env) {
        bool welford = spec_.variance == VarianceAlgorithm::Welford && spec_.has_var_reduction();
        SmallVector<Type> wg;
        if (welford) {
            auto ws = gpu::AddressSpaceAttr::get(&ctx_, gpu::AddressSpace::Workgroup);
            for (int k = 0; k < 3; ++k) wg.push_back(MemRefType::get({plan_.block_threads}, acc_, MemRefLayoutAttrInterface(), ws));
        }
        auto fn = gpu::GPUFuncOp::create(b_, loc_, name, b_.getFunctionType(types_in_, {}), wg);
        fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b_.getUnitAttr());
        // The block size is fixed: the launcher uses it, and LLVM may rely on it.
        fn.setKnownBlockSizeAttr(b_.getDenseI32ArrayAttr({plan_.block_threads, 1, 1}));
        Block &entry = fn.getBody().front();
        b_.setInsertionPointToStart(&entry);
        mem_.clear();
        atoms_.clear();
        scratch_.clear();
        red_.clear();
        held_.clear();
        for (size_t i = 0; i < args_.size(); ++i) {
            mem_.push_back(entry.getArgument((unsigned)i));
            atoms_.push_back(args_[i].second);
        }
        const size_t nscratch = plan_.column_outputs.size() + plan_.statistics.size();
        for (size_t k = 0; k < nscratch; ++k) scratch_.push_back(entry.getArgument((unsigned)(args_.size() + k)));
        if (welford)
            for (int k = 0; k < 3; ++k) wg_[k] = fn.getWorkgroupAttributions()[k];
        ext_.assign(spec_.axes.size(), Value());
        extent_f_.assign(spec_.axes.size(), Value());
        const size_t first_extent = args_.size() + nscratch;
        for (size_t i = 0; i < plan_.extent_axes.size(); ++i) {
            AxisId a = plan_.extent_axes[i];
            ext_[a] = entry.getArgument((unsigned)(first_extent + i));
            extent_f_[a] = index_to_float(b_, loc_, ext_[a], acc_);
        }
        if (columns()) blocks_ = entry.getArgument((unsigned)(first_extent + plan_.extent_axes.size()));
        tid_ = gpu::ThreadIdOp::create(b_, loc_, gpu::Dimension::x);
        nthreads_ = index_cst(b_, loc_, plan_.block_threads);
        bid_ = gpu::BlockIdOp::create(b_, loc_, gpu::Dimension::x);
        if (!columns()) delinearize(b_, loc_, bid_, plan_.block_axes, env);
    }

    // Output k of the kernel at the coordinates in `env` (the block's), over its other axes.
    void store_output(size_t k, const Env &env, const std::vector<AxisId> &bound) {
        const OutputInfo &o = *outs_[k];
        const Node &e = *spec_.values[o.value].expr;
        ensure_reductions(e, env);
        size_t ai = spec_.tensors.size() + k;
        std::vector<AxisId> rest;
        for (AxisId a : atoms_[ai])
            if (!std::count(bound.begin(), bound.end(), a)) rest.push_back(a);
        Type st = element_type(ctx_, types_.storage.at(o.name));
        strided_loop(rest, {}, env, [&](OpBuilder &b, Location loc, const Env &env2, ValueRange) -> SmallVector<Value> {
            Value v = convert(b, loc, eval(b, loc, e, env2), st);
            memref::StoreOp::create(b, loc, v, mem_[ai], ValueRange{linear(b, loc, atoms_[ai], env2)});
            return {};
        });
    }

    // The column output's index among the kernel's outputs, or -1.
    int column_slot(size_t k) const {
        for (size_t c = 0; c < plan_.column_outputs.size(); ++c)
            if (&spec_.outputs[plan_.column_outputs[c]] == outs_[k]) return (int)c;
        return -1;
    }

    // The main kernel of the two-kernel form: block b takes rows [b R, min(rows, (b + 1) R)) with
    // R = ceil(rows / blocks), one row after the other: the row's statistics, the other outputs'
    // row, and each column output's terms added into its partials[b, kept]. A term summed over the
    // row alone is added by the thread that owns its kept index (each thread owns the same kept
    // indices throughout, so no two threads touch one partial); a term summed over more axes
    // (GroupNorm's d_bias over h, w; a total sum) is the block's all-reduce, added by thread 0.
    void build_main(const std::string &name) {
        Env none;
        begin(name, none);
        Value rows = product(b_, loc_, plan_.row_axes);
        Value one = index_cst(b_, loc_, 1);
        Value per = arith::DivUIOp::create(b_, loc_, arith::SubIOp::create(b_, loc_, arith::AddIOp::create(b_, loc_, rows, blocks_), one), blocks_);
        Value r0 = arith::MulIOp::create(b_, loc_, bid_, per);
        Value r1 = arith::MinUIOp::create(b_, loc_, rows, arith::AddIOp::create(b_, loc_, r0, per));
        for (size_t c = 0; c < plan_.column_outputs.size(); ++c) {
            const Node &n = *spec_.values[spec_.outputs[plan_.column_outputs[c]].value].expr;
            const std::vector<AxisId> kept = memory_order(n.axes);
            Value base = arith::MulIOp::create(b_, loc_, bid_, product(b_, loc_, kept));
            strided_loop(kept, {}, none, [&](OpBuilder &b, Location loc, const Env &e2, ValueRange) -> SmallVector<Value> {
                Value i = arith::AddIOp::create(b, loc, base, linear(b, loc, kept, e2));
                memref::StoreOp::create(b, loc, emitter_.cst(b, loc, 0.0), scratch_[c], ValueRange{i});
                return {};
            });
        }
        gpu::BarrierOp::create(b_, loc_);  // the zeroes are written by other threads than the sums
        auto loop = scf::ForOp::create(b_, loc_, r0, r1, one);
        OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPoint(loop.getBody()->getTerminator());
        Env env;
        delinearize(b_, loc_, loop.getInductionVar(), plan_.row_axes, env);
        for (size_t k = 0; k < outs_.size(); ++k) {
            const int c = column_slot(k);
            if (c < 0) {
                store_output(k, env, plan_.row_axes);
                continue;
            }
            const Node &n = *spec_.values[outs_[k]->value].expr;
            const Node &term = *n.args[0];
            ensure_reductions(term, env);
            const std::vector<AxisId> kept = memory_order(n.axes);
            Value base = arith::MulIOp::create(b_, loc_, bid_, product(b_, loc_, kept));
            std::vector<AxisId> free_kept, free_over;
            for (AxisId a : kept)
                if (!env.count(a)) free_kept.push_back(a);
            for (AxisId a : memory_order(n.over))
                if (!env.count(a)) free_over.push_back(a);
            if (free_over.empty()) {
                strided_loop(free_kept, {}, env, [&](OpBuilder &b, Location loc, const Env &e2, ValueRange) -> SmallVector<Value> {
                    Value i = arith::AddIOp::create(b, loc, base, linear(b, loc, kept, e2));
                    Value old = memref::LoadOp::create(b, loc, scratch_[c], ValueRange{i});
                    memref::StoreOp::create(b, loc, arith::AddFOp::create(b, loc, old, eval(b, loc, term, e2)), scratch_[c], ValueRange{i});
                    return {};
                });
                continue;
            }
            serial_loop(free_kept, env, [&](const Env &e2) {
                Value part = strided_loop(free_over, {emitter_.cst(b_, loc_, 0.0)}, e2,
                                          [&](OpBuilder &b, Location loc, const Env &e3, ValueRange acc) -> SmallVector<Value> {
                                              return {arith::AddFOp::create(b, loc, acc[0], eval(b, loc, term, e3))};
                                          })[0];
                Value sum = all_reduce(part, gpu::AllReduceOperation::ADD);
                Value i = arith::AddIOp::create(b_, loc_, base, linear(b_, loc_, kept, e2));
                if_first_thread([&](OpBuilder &b, Location loc) {
                    Value old = memref::LoadOp::create(b, loc, scratch_[c], ValueRange{i});
                    memref::StoreOp::create(b, loc, arith::AddFOp::create(b, loc, old, sum), scratch_[c], ValueRange{i});
                });
            });
        }
        b_.setInsertionPointAfter(loop);
        gpu::ReturnOp::create(b_, loc_);
    }

    // for (i = 0; i < prod(extents of axes); ++i) { body(env + coords(i)) }, every thread of the
    // block alike (the body may all-reduce); no loop when `axes` is empty.
    void serial_loop(const std::vector<AxisId> &axes, const Env &env, const std::function<void(const Env &)> &body) {
        if (axes.empty()) return body(env);
        auto loop = scf::ForOp::create(b_, loc_, index_cst(b_, loc_, 0), product(b_, loc_, axes), index_cst(b_, loc_, 1));
        OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPoint(loop.getBody()->getTerminator());
        Env env2 = env;
        delinearize(b_, loc_, loop.getInductionVar(), axes, env2);
        body(env2);
    }

    void if_first_thread(const std::function<void(OpBuilder &, Location)> &body) {
        Value first = arith::CmpIOp::create(b_, loc_, arith::CmpIPredicate::eq, tid_, index_cst(b_, loc_, 0));
        scf::IfOp::create(b_, loc_, first, [&](OpBuilder &b, Location loc) {
            body(b, loc);
            scf::YieldOp::create(b, loc);
        });
    }

    // A statistic that keeps axes beyond the rows (CudaPlan::statistics): for the block's current
    // row, its value at every index of those axes into the block's part of its scratch buffer
    // (thread 0 writes; barriers on both sides, since the previous row's readers may still be at
    // work and every thread reads the result).
    void hold(const Node &n, size_t s, const Env &env) {
        ensure_reductions(*n.args[0], env);
        if (n.reduce == ReduceOp::Var)
            if (const Node *m = find_mean_like(spec_, n)) reduce(*m, env);  // the variance's own mean, held first
        gpu::BarrierOp::create(b_, loc_);
        holding_ = true;
        serial_loop(plan_.statistics[s].axes, env, [&](const Env &e2) {
            ScopedLoc at(loc_, node_loc(&ctx_, spec_, n, loc_));
            const Env *saved = env_;
            env_ = &e2;
            Value r = ReductionAlgorithm<CudaLowerer>(*this, spec_).reduction(n);
            env_ = saved;
            Value i = held_index(b_, loc_, s, e2);
            if_first_thread([&](OpBuilder &b, Location loc) { memref::StoreOp::create(b, loc, r, held_buffer(s), ValueRange{i}); });
        });
        holding_ = false;
        gpu::BarrierOp::create(b_, loc_);
        held_.insert(&n);
    }

    // Held statistic s: its scratch buffer (after the partials), the index of the block's element
    // at `env` (which binds its axes), and the value there.
    Value held_buffer(size_t s) const { return scratch_[plan_.column_outputs.size() + s]; }
    Value held_index(OpBuilder &b, Location loc, size_t s, const Env &env) const {
        const std::vector<AxisId> &axes = plan_.statistics[s].axes;
        return arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, bid_, product(b, loc, axes)), linear(b, loc, axes, env));
    }
    Value held_value(OpBuilder &b, Location loc, size_t s, const Env &env) {
        return memref::LoadOp::create(b, loc, held_buffer(s), ValueRange{held_index(b, loc, s, env)});
    }

    int statistic_slot(const Node &n) const {
        for (size_t s = 0; s < plan_.statistics.size(); ++s)
            if (plan_.statistics[s].node == &n) return (int)s;
        return -1;
    }

    // The final kernel: each column output's element i (thread i of the grid) is the sum of its
    // partials over the blocks; a total sum is block 0's all-reduce over the blocks.
    void build_final(const std::string &name) {
        Env none;
        begin(name, none);
        Value zero = index_cst(b_, loc_, 0), one = index_cst(b_, loc_, 1);
        for (size_t k = 0; k < outs_.size(); ++k) {
            const int c = column_slot(k);
            if (c < 0) continue;
            const Node &n = *spec_.values[outs_[k]->value].expr;
            const std::vector<AxisId> kept = memory_order(n.axes);
            const size_t ai = spec_.tensors.size() + k;
            Type st = element_type(ctx_, types_.storage.at(outs_[k]->name));
            if (!kept.empty()) {
                Value count = product(b_, loc_, kept);
                Value i = arith::AddIOp::create(b_, loc_, arith::MulIOp::create(b_, loc_, bid_, nthreads_), tid_);
                Value inside = arith::CmpIOp::create(b_, loc_, arith::CmpIPredicate::ult, i, count);
                scf::IfOp::create(b_, loc_, inside, [&](OpBuilder &b, Location loc) {
                    auto sum = scf::ForOp::create(b, loc, zero, blocks_, one, ValueRange{emitter_.cst(b, loc, 0.0)},
                                                  [&](OpBuilder &bb, Location ll, Value blk, ValueRange acc) {
                                                      Value j = arith::AddIOp::create(bb, ll, arith::MulIOp::create(bb, ll, blk, count), i);
                                                      Value v = memref::LoadOp::create(bb, ll, scratch_[c], ValueRange{j});
                                                      scf::YieldOp::create(bb, ll, ValueRange{arith::AddFOp::create(bb, ll, acc[0], v)});
                                                  });
                    Env e;
                    delinearize(b, loc, i, kept, e);
                    memref::StoreOp::create(b, loc, convert(b, loc, sum.getResult(0), st), mem_[ai], ValueRange{linear(b, loc, atoms_[ai], e)});
                    scf::YieldOp::create(b, loc);
                });
            } else {
                Value first_block = arith::CmpIOp::create(b_, loc_, arith::CmpIPredicate::eq, bid_, zero);
                scf::IfOp::create(b_, loc_, first_block, [&](OpBuilder &b, Location loc) {
                    auto part = scf::ForOp::create(b, loc, tid_, blocks_, nthreads_, ValueRange{emitter_.cst(b, loc, 0.0)},
                                                   [&](OpBuilder &bb, Location ll, Value blk, ValueRange acc) {
                                                       Value v = memref::LoadOp::create(bb, ll, scratch_[c], ValueRange{blk});
                                                       scf::YieldOp::create(bb, ll, ValueRange{arith::AddFOp::create(bb, ll, acc[0], v)});
                                                   });
                    Value s = gpu::AllReduceOp::create(b, loc, part.getResult(0),
                                                       gpu::AllReduceOperationAttr::get(&ctx_, gpu::AllReduceOperation::ADD), true);
                    Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid_, zero);
                    scf::IfOp::create(b, loc, first, [&](OpBuilder &bb, Location ll) {
                        memref::StoreOp::create(bb, ll, convert(bb, ll, s, st), mem_[ai], ValueRange{zero});
                        scf::YieldOp::create(bb, ll);
                    });
                    scf::YieldOp::create(b, loc);
                });
            }
        }
        gpu::ReturnOp::create(b_, loc_);
    }


    MLIRContext &ctx_;
    const NormSpec &spec_;
    const KernelTypes &types_;
    bool full_;
    const CudaPlan &plan_;
    OpBuilder b_;
    Location loc_;
    Type acc_;
    std::vector<Value> mem_, ext_, extent_f_;
    std::vector<std::vector<AxisId>> atoms_;
    std::vector<const OutputInfo *> outs_;
    std::vector<std::pair<std::string, std::vector<AxisId>>> args_;  // name, atoms (tensors, then outputs)
    std::vector<Type> types_in_;                                    // the kernels' shared signature
    std::vector<Value> scratch_;                                    // the column outputs' partials
    Value tid_, nthreads_, bid_, blocks_, wg_[3];
    ExprEmitter emitter_;
    std::map<const Node *, Value> red_;
    std::set<const Node *> held_;  // statistics held in scratch for the current row
    bool holding_ = false;         // inside hold()'s loop

    // Axes in memory order (the first input's when it has them), so that consecutive threads touch
    // consecutive elements.
    std::vector<AxisId> memory_order(std::vector<AxisId> axes) const {
        std::vector<AxisId> ref = spec_.tensors.empty() ? std::vector<AxisId>{} : spec_.memory_atoms(spec_.tensors[0].dims);
        std::stable_sort(axes.begin(), axes.end(), [&](AxisId a, AxisId b) {
            auto pa = std::find(ref.begin(), ref.end(), a) - ref.begin(), pb = std::find(ref.begin(), ref.end(), b) - ref.begin();
            return pa < pb;
        });
        return axes;
    }

    void delinearize(OpBuilder &b, Location loc, Value i, const std::vector<AxisId> &axes, Env &env) const {
        std::vector<AxisId> order = memory_order(axes);
        for (auto it = order.rbegin(); it != order.rend(); ++it) {
            if (it + 1 == order.rend()) {
                env[*it] = i;
                break;
            }
            env[*it] = arith::RemUIOp::create(b, loc, i, ext_[*it]);
            i = arith::DivUIOp::create(b, loc, i, ext_[*it]);
        }
    }

    Value linear(OpBuilder &b, Location loc, const std::vector<AxisId> &atoms, const Env &env) const {
        Value idx = index_cst(b, loc, 0);
        for (AxisId a : atoms) idx = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, idx, ext_[a]), env.at(a));
        return idx;
    }

    Value product(OpBuilder &b, Location loc, const std::vector<AxisId> &axes) const {
        Value p = index_cst(b, loc, 1);
        for (AxisId a : axes) p = arith::MulIOp::create(b, loc, p, ext_[a]);
        return p;
    }

    Value eval(OpBuilder &b, Location loc, const Node &e, const Env &env) {
        std::map<std::pair<int, std::vector<std::pair<AxisId, int64_t>>>, Value> loaded;  // one load per element per evaluation
        return emitter_.emit(b, loc, e, [&](OpBuilder &bb, Location ll, const Node &leaf) -> Value {
            if (leaf.kind == Node::Reduce) {
                if (int s = statistic_slot(leaf); s >= 0) return held_value(bb, ll, (size_t)s, env);
                return red_.at(&leaf);
            }
            Value &v = loaded[{leaf.index, leaf.at}];
            if (v) return v;
            Env at = env;  // an indexed parameter (weight[0]): its fixed axes at their constants
            for (const auto &[axis, i] : leaf.at) at[axis] = index_cst(bb, ll, i);
            v = convert(bb, ll, memref::LoadOp::create(bb, ll, mem_[leaf.index], ValueRange{linear(bb, ll, atoms_[leaf.index], at)}), acc_);
            return v;
        });
    }

    // for (i = tid; i < prod(extents of axes); i += threads) { env + coords(i); step }
    SmallVector<Value> strided_loop(const std::vector<AxisId> &axes, const SmallVector<Value> &init, const Env &env, const Step &step) {
        Value total = product(b_, loc_, axes);
        auto loop = scf::ForOp::create(b_, loc_, tid_, total, nthreads_, init, [&](OpBuilder &b, Location loc, Value iv, ValueRange acc) {
            Env env2 = env;
            delinearize(b, loc, iv, axes, env2);
            SmallVector<Value> y = step(b, loc, env2, acc);
            scf::YieldOp::create(b, loc, y);
        });
        return SmallVector<Value>(loop.getResults().begin(), loop.getResults().end());
    }

    Value all_reduce(Value v, gpu::AllReduceOperation op) {
        return gpu::AllReduceOp::create(b_, loc_, v, gpu::AllReduceOperationAttr::get(&ctx_, op), true);
    }

    void ensure_reductions(const Node &e, const Env &env) {
        Leaves leaves;
        leaves.collect(spec_, e);
        for (const Node *l : leaves.nodes)
            if (l->kind == Node::Reduce) reduce(*l, env);
    }

public:
    // ---- The strategy of the shared algorithm (algorithm.h): a statistic is one value per block,
    // each sweep a strided loop of the block's threads and a gpu.all_reduce per term.
    using Stat = Value;

    // Each thread's terms are added in runs of kSumRun (its elements tid, tid + T, ...), each run's
    // sum then added to the thread's total: a serial f32 sum of 9216 terms a thread (BatchNorm
    // training's mean over 3 x 3 x 262144 on one channel, 256 threads) was 1.5x past the
    // verifier's bound (found by the CPU emulation, emulate.h). One loop, the run's end by a
    // counter and selects (a nested loop made ptxas spill).
    static constexpr int64_t kSumRun = 64;
    std::vector<Value> sweep(const Node &n, const std::vector<Value> &stats, const std::vector<Term> &terms) {
        const Node &arg = *n.args[0];
        const size_t nt = terms.size();
        Value zero = emitter_.cst(b_, loc_, 0.0);
        SmallVector<Value> init(2 * nt, zero);  // runs, then totals
        init.push_back(index_cst(b_, loc_, 0));  // terms in the current run
        SmallVector<Value> acc = strided_loop(n.over, init, *env_, [&](OpBuilder &b, Location loc, const Env &e2, ValueRange a) -> SmallVector<Value> {
            Value v = eval(b, loc, arg, e2);
            Value count = arith::AddIOp::create(b, loc, a[2 * nt], index_cst(b, loc, 1));
            Value flush = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, count, index_cst(b, loc, kSumRun));
            Value z = emitter_.cst(b, loc, 0.0);
            SmallVector<Value> runs, totals;
            for (size_t t = 0; t < nt; ++t) {
                Value r = arith::AddFOp::create(b, loc, a[t], terms[t](b, loc, v, ValueRange(stats)));
                totals.push_back(arith::SelectOp::create(b, loc, flush, arith::AddFOp::create(b, loc, a[nt + t], r), a[nt + t]));
                runs.push_back(arith::SelectOp::create(b, loc, flush, z, r));
            }
            SmallVector<Value> y(runs);
            y.append(totals.begin(), totals.end());
            y.push_back(arith::SelectOp::create(b, loc, flush, index_cst(b, loc, 0), count));
            return y;
        });
        std::vector<Value> r;
        for (size_t t = 0; t < nt; ++t)
            r.push_back(all_reduce(arith::AddFOp::create(b_, loc_, acc[nt + t], acc[t]), gpu::AllReduceOperation::ADD));
        return r;
    }

    // The shift of a mean: the mean of the first min(64, extent) elements along the innermost
    // reduced axis (every thread computes it; the loads are shared through the cache).
    Value shift(const Node &n) {
        Value m = arith::MinUIOp::create(b_, loc_, ext_[n.over.back()], index_cst(b_, loc_, 64));
        Env env0 = *env_;
        for (AxisId a : n.over) env0[a] = index_cst(b_, loc_, 0);
        auto loop = scf::ForOp::create(b_, loc_, index_cst(b_, loc_, 0), m, index_cst(b_, loc_, 1), ValueRange{emitter_.cst(b_, loc_, 0.0)},
                                       [&](OpBuilder &b, Location loc, Value iv, ValueRange acc) {
                                           Env e2 = env0;
                                           e2[n.over.back()] = iv;
                                           Value s = arith::AddFOp::create(b, loc, acc[0], eval(b, loc, *n.args[0], e2));
                                           scf::YieldOp::create(b, loc, ValueRange{s});
                                       });
        return arith::DivFOp::create(b_, loc_, loop.getResult(0), index_to_float(b_, loc_, m, acc_));
    }

    Value extreme(const Node &n, bool is_max) {
        const Node &arg = *n.args[0];
        Value part = strided_loop(n.over, {emitter_.cst(b_, loc_, is_max ? -INFINITY : INFINITY)}, *env_,
                                  [&](OpBuilder &b, Location loc, const Env &e2, ValueRange acc) -> SmallVector<Value> {
                                      Value v = eval(b, loc, arg, e2);
                                      if (is_max) return {arith::MaximumFOp::create(b, loc, acc[0], v)};
                                      return {arith::MinimumFOp::create(b, loc, acc[0], v)};
                                  })[0];
        return all_reduce(part, is_max ? gpu::AllReduceOperation::MAXIMUMF : gpu::AllReduceOperation::MINIMUMF);
    }

    // Per thread a serial Welford; the triples meet in workgroup memory and every thread merges
    // them in the same order (Chan et al.), so all hold the same result.
    Value welford(const Node &n) {
        const Node &arg = *n.args[0];
        const Env &env = *env_;
        Value z = emitter_.cst(b_, loc_, 0.0);
        SmallVector<Value> t = strided_loop(n.over, {z, z, z}, env, [&](OpBuilder &b, Location loc, const Env &e2, ValueRange acc) -> SmallVector<Value> {
            auto s = welford_step(b, loc, emitter_, {acc[0], acc[1], acc[2]}, eval(b, loc, arg, e2));
            return {s[0], s[1], s[2]};
        });
        for (int k = 0; k < 3; ++k) memref::StoreOp::create(b_, loc_, t[k], wg_[k], ValueRange{tid_});
        gpu::BarrierOp::create(b_, loc_);
        auto loop = scf::ForOp::create(b_, loc_, index_cst(b_, loc_, 0), nthreads_, index_cst(b_, loc_, 1), ValueRange{z, z, z},
                                       [&](OpBuilder &b, Location loc, Value iv, ValueRange acc) {
                                           std::array<Value, 3> y;
                                           for (int k = 0; k < 3; ++k) y[k] = memref::LoadOp::create(b, loc, wg_[k], ValueRange{iv});
                                           auto m = chan_merge(b, loc, emitter_, {acc[0], acc[1], acc[2]}, y);
                                           scf::YieldOp::create(b, loc, ValueRange{m[0], m[1], m[2]});
                                       });
        gpu::BarrierOp::create(b_, loc_);  // before the next Welford reuses the memory
        Value c = arith::MaximumFOp::create(b_, loc_, loop.getResult(0), emitter_.cst(b_, loc_, 1.0));
        return arith::DivFOp::create(b_, loc_, loop.getResult(2), c);
    }

    Value combine(const Node &, const std::vector<Value> &stats, const Elementwise &f) { return f(b_, loc_, ValueRange(stats)); }
    Value count(const Node &n) { return emitter_.count(b_, loc_, n.over); }
    Value reduce(const Node &n) { return reduce(n, *env_); }

    Value reduce(const Node &n, const Env &env) {
        if (auto it = red_.find(&n); it != red_.end()) return it->second;
        if (int s = statistic_slot(n); s >= 0) {
            if (!held_.count(&n)) {
                // Held before any loop that reads it (ensure_reductions, hold's own mean first).
                if (holding_) throw std::logic_error("mlir-cuda: statistic '" + plan_.statistics[s].name + "' needed inside another's loop");
                hold(n, (size_t)s, env);
            }
            for (AxisId a : plan_.statistics[s].axes)
                if (!env.count(a)) return Value();  // held; read where its axes are bound
            return held_value(b_, loc_, (size_t)s, env);
        }
        ensure_reductions(*n.args[0], env);
        ScopedLoc at(loc_, node_loc(&ctx_, spec_, n, loc_));  // the reduction's ops carry its location
        const Env *saved = env_;
        env_ = &env;
        Value r = ReductionAlgorithm<CudaLowerer>(*this, spec_).reduction(n);
        env_ = saved;
        red_[&n] = r;
        return r;
    }

private:
    const Env *env_ = nullptr;  // the block's coordinates while a reduction is emitted
};

}  // namespace

CudaPlan cuda_plan(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &schedule) {
    if (!plan.cuda_refusal.empty()) throw UserError(plan.cuda_refusal);
    CudaPlan p;
    p.block_axes = plan.cuda_block_axes;
    if (!plan.cuda_row_axes.empty()) {
        // The two-kernel form: blocks of rows (the block count is an argument, not a grid axis).
        p.column_outputs = plan.cuda_columns;
        p.row_axes = plan.cuda_row_axes;
        p.block_axes.clear();
        p.column_blocks = (int)schedule.get("column_blocks");
        for (const PlanStage &st : plan.stages)
            for (const NodePtr &n : st.reductions) {
                if (is_value_of(spec, plan.cuda_columns, n.get())) continue;
                CudaPlan::Statistic stat{n.get(), {}, ""};
                for (AxisId a : plan.main_order)
                    if (std::count(n->axes.begin(), n->axes.end(), a) && !std::count(p.row_axes.begin(), p.row_axes.end(), a)) stat.axes.push_back(a);
                if (stat.axes.empty()) continue;
                for (const ValueDef &v : spec.values)
                    if (v.expr.get() == n.get()) stat.name = v.name;
                if (stat.name.empty()) stat.name = "r" + std::to_string(p.statistics.size());
                p.statistics.push_back(stat);
            }
    }
    for (size_t a = 0; a < spec.axes.size(); ++a)
        if (!spec.axes[a].is_split()) p.extent_axes.push_back((AxisId)a);
    p.block_threads = (int)schedule.get("block_threads");
    return p;
}

OwningOpRef<ModuleOp> lower_cuda(MLIRContext &ctx, const NormSpec &spec, const KernelPlan &plan, const CudaPlan &cuda,
                                 const std::string &function) {
    return CudaLowerer(ctx, spec, plan, cuda).run(function);
}

}  // namespace normgen::mlirgen
