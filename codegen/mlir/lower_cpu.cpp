// NormSpec -> MLIR for the CPU (lower.h): linalg.generic ops on strided memrefs, the shared
// reduction algorithm (algorithm.h) with statistics held in small buffers; with the schedule's
// pipeline_elements, a call's rows in steps, each step's map fused with the next step's first
// sweep (emit_pipelined).
#include "codegen/mlir/lower.h"

#include "codegen/mlir/algorithm.h"
#include "codegen/mlir/emit.h"
#include "runtime/errors.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <optional>

namespace normgen::mlirgen {

namespace {

// ---- CPU: linalg on memrefs -----------------------------------------------------------------------

class CpuLowerer {
public:
    CpuLowerer(MLIRContext &ctx, const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &schedule)
        : ctx_(ctx), spec_(spec), types_(plan.types), full_(plan.variant == Variant::Full), sum_block_(schedule.get("sum_block")),
          fuse_trailing_(schedule.flag("fuse_trailing")), pipeline_(schedule.get("pipeline_elements")), plan_(plan),
          schedule_streaming_(schedule.flag("streaming_stores")), b_(&ctx), loc_(NameLoc::get(StringAttr::get(&ctx, spec.name))),
          acc_(element_type(ctx, spec.accumulate)),
          emitter_(spec, acc_, extent_f_, plan.types, [&ctx](DType t) { return cpu_storage_type(ctx, t); }) {}

    OwningOpRef<ModuleOp> run(const std::string &function) {
        OwningOpRef<ModuleOp> module = ModuleOp::create(loc_);
        b_.setInsertionPointToEnd(module->getBody());
        std::vector<Type> types;
        std::vector<std::vector<AxisId>> atoms;
        for (const TensorInfo &t : spec_.tensors) {
            atoms.push_back(spec_.memory_atoms(t.dims));
            types.push_back(arg_type(types_.storage.at(t.name), (int)atoms.back().size()));
        }
        for (size_t i = 0; i < spec_.outputs.size(); ++i) {
            const OutputInfo &o = spec_.outputs[i];
            if (o.optional && !full_) continue;
            outs_.push_back((int)i);
            atoms.push_back(spec_.memory_atoms(o.dims));
            types.push_back(arg_type(types_.storage.at(o.name), (int)atoms.back().size()));
        }
        auto fn = func::FuncOp::create(b_, loc_, function, b_.getFunctionType(types, {}));
        fn->setAttr("llvm.emit_c_interface", b_.getUnitAttr());
        b_.setInsertionPointToStart(fn.addEntryBlock());
        for (size_t i = 0; i < spec_.tensors.size(); ++i) args_.targs.push_back(fn.getArgument((unsigned)i));
        for (size_t k = 0; k < outs_.size(); ++k) args_.oargs.push_back(fn.getArgument((unsigned)(spec_.tensors.size() + k)));
        // Streaming stores (the knob streaming_stores): the main output and those of its shape
        // are marked for the LLVM step (pipeline.h, StreamingArgs), which versions the function.
        if (schedule_streaming_)
            for (size_t k = 0; k < outs_.size(); ++k)
                if (outs_[k] == plan_.main_output || std::count(plan_.same_shape.begin(), plan_.same_shape.end(), outs_[k]))
                    fn.setArgAttr((unsigned)(spec_.tensors.size() + k), kStreamingArgAttr, b_.getUnitAttr());
        arg_atoms_ = atoms;

        // The extent of every atomic axis, from the first argument that has it.
        ext_.assign(spec_.axes.size(), Value());
        extent_f_.assign(spec_.axes.size(), Value());
        for (size_t a = 0; a < atoms.size(); ++a)
            for (size_t k = 0; k < atoms[a].size(); ++k) {
                AxisId ax = atoms[a][k];
                if (ext_[ax]) continue;
                ext_[ax] = memref::DimOp::create(b_, loc_, fn.getArgument((unsigned)a), (int64_t)k);
                extent_f_[ax] = index_to_float(b_, loc_, ext_[ax], acc_);
            }
        use(args_);
        if (std::optional<AxisId> p = pipeline_axis()) emit_pipelined(*p);
        else emit_step(SweepMode::Normal, nullptr);
        for (Value m : allocs_) memref::DeallocOp::create(b_, loc_, m);
        func::ReturnOp::create(b_, loc_);
        return module;
    }

private:
    struct Operand {
        Value mem;
        std::vector<AxisId> atoms;
    };
    struct Inputs {
        Leaves leaves;
        std::vector<Operand> ops;  // one per leaf, same order
    };
    using Body = std::function<SmallVector<Value>(OpBuilder &, Location, ValueRange)>;
    // The tensors the ops read and write: the function's arguments, or sub-views of them along one
    // axis (a step of the pipelined rows), with that axis' extent in the view.
    struct Views {
        std::vector<Value> targs, oargs;  // inputs (spec order), then the outputs the kernel writes
        AxisId axis = -1;
        Value extent;
    };
    // How sweep() treats the first sweep of a step (row pipelining, emit_pipelined).
    enum class SweepMode {
        Normal,   // emit it
        Carried,  // its sums are carry_: the step before computed them
        Capture,  // record it in captured_ and stop (CaptureSignal): the step before will emit it
    };
    // The first sweep of a step, as the algorithm asked for it: its reduction, operands (the
    // step's views) and summands (with the statistics they read).
    struct Captured {
        const Node *n = nullptr;
        Inputs in;
        std::vector<Operand> extra;
        std::vector<Term> terms;
    };
    struct CaptureSignal {};
    // An output's map that runs in the loops of a sweep over the same domain (row pipelining).
    struct Rider {
        std::vector<Operand> ins;
        Operand out;
        Body body;
    };

    MLIRContext &ctx_;
    const NormSpec &spec_;
    const KernelTypes &types_;
    bool full_;
    const int64_t sum_block_;   // schedule: elements per block of a blocked sum
    const bool fuse_trailing_;  // schedule: fuse contiguous trailing axes of a map
    const int64_t pipeline_;    // schedule: elements per pipelined step (0: no row pipelining)
    const KernelPlan &plan_;
    const bool schedule_streaming_;  // schedule: streaming stores of the main output
    OpBuilder b_;
    Location loc_;
    Type acc_;
    std::vector<Value> targs_, oargs_, ext_, extent_f_, allocs_;
    Views args_;                                   // the function's arguments
    std::vector<std::vector<AxisId>> arg_atoms_;   // each argument's atoms (inputs, then outputs)
    std::vector<int> outs_;                        // the outputs the kernel writes (spec indices)
    SweepMode mode_ = SweepMode::Normal;
    int sweeps_ = 0;                               // sweeps emitted (or carried) in this step so far
    std::vector<Value> carry_;                     // the pipelined sweep's sums for the current step
    const Node *carry_node_ = nullptr;
    std::optional<Captured> captured_;
    ExprEmitter emitter_;
    std::map<const Node *, Value> red_;

    MemRefType arg_type(DType t, int rank) {
        SmallVector<int64_t> shape(rank, ShapedType::kDynamic), strides(rank, ShapedType::kDynamic);
        if (rank) strides.back() = 1;
        return MemRefType::get(shape, cpu_storage_type(ctx_, t), StridedLayoutAttr::get(&ctx_, ShapedType::kDynamic, strides));
    }

    // A buffer over `axes`; an axis past the declaration's (the blocked sums' block index) has
    // extent `pseudo_extent`.
    Value alloc(const AxisSet &axes, std::optional<double> init, Value pseudo_extent = Value()) {
        SmallVector<int64_t> shape(axes.size(), ShapedType::kDynamic);
        SmallVector<Value> sizes;
        for (AxisId a : axes) sizes.push_back(a < (AxisId)ext_.size() ? ext_[a] : pseudo_extent);
        Value m = memref::AllocOp::create(b_, loc_, MemRefType::get(shape, acc_), sizes);
        if (init) linalg::FillOp::create(b_, loc_, ValueRange{emitter_.cst(b_, loc_, *init)}, ValueRange{m});
        allocs_.push_back(m);
        return m;
    }

    void generic(const std::vector<AxisId> &domain, const AxisSet &reduced, const std::vector<Operand> &ins,
                 const std::vector<Operand> &outs, const Body &body) {
        SmallVector<AffineMap> maps;
        SmallVector<Value> in_vals, out_vals;
        auto map_of = [&](const Operand &op) {
            SmallVector<AffineExpr> exprs;
            for (AxisId a : op.atoms) {
                auto it = std::find(domain.begin(), domain.end(), a);
                if (it == domain.end()) throw std::logic_error("mlir lowering: operand axis outside the iteration domain");
                exprs.push_back(getAffineDimExpr((unsigned)(it - domain.begin()), &ctx_));
            }
            return AffineMap::get((unsigned)domain.size(), 0, exprs, &ctx_);
        };
        for (const Operand &op : ins) {
            maps.push_back(map_of(op));
            in_vals.push_back(op.mem);
        }
        for (const Operand &op : outs) {
            maps.push_back(map_of(op));
            out_vals.push_back(op.mem);
        }
        SmallVector<utils::IteratorType> iters;
        for (AxisId a : domain)
            iters.push_back(std::count(reduced.begin(), reduced.end(), a) ? utils::IteratorType::reduction : utils::IteratorType::parallel);
        linalg::GenericOp::create(b_, loc_, ValueRange(in_vals), ValueRange(out_vals), maps, iters,
                                  [&](OpBuilder &nb, Location nl, ValueRange args) {
                                      SmallVector<Value> y = body(nb, nl, args);
                                      linalg::YieldOp::create(nb, nl, y);
                                  });
    }

    // Whether a sum over `inner` alone reads operands that all hold it outside every kept axis (a
    // sum over the outermost axis keeping the inner ones: a backward's column sums).
    static bool summed_outside_kept(const std::vector<Operand> &ins, AxisId inner, const AxisSet &outer, const AxisSet &kept) {
        if (!outer.empty() || kept.empty()) return false;
        bool any = false;
        for (const Operand &op : ins) {
            auto at = std::find(op.atoms.begin(), op.atoms.end(), inner);
            if (at == op.atoms.end()) continue;
            for (auto it = op.atoms.begin(); it != op.atoms.end(); ++it) {
                if (!std::count(kept.begin(), kept.end(), *it)) continue;
                if (it < at) return false;
                any = true;
            }
        }
        return any;
    }

    // The longest trailing run of the output's axes (at least two) that every operand either has
    // as its own trailing axes, in order, or lacks entirely: BatchNorm's (h, w). 0 when none.
    static size_t fusable_suffix(const std::vector<AxisId> &out, const std::vector<Operand> &ops) {
        for (size_t k = out.size(); k >= 2; --k) {
            std::vector<AxisId> tail(out.end() - k, out.end());
            bool ok = true;
            for (const Operand &op : ops) {
                size_t shared = 0;
                for (AxisId a : tail) shared += std::count(op.atoms.begin(), op.atoms.end(), a);
                if (shared == 0) continue;
                ok = ok && shared == k && op.atoms.size() >= k && std::equal(tail.begin(), tail.end(), op.atoms.end() - k);
            }
            if (ok) return k;
        }
        return 0;
    }

    // An output's map. When its trailing axes can be fused (fusable_suffix) and every operand is
    // contiguous across them at run time, the map runs over one fused axis instead (a 7x7 plane
    // is one loop of 49, which the vectorizer can use); otherwise over the axes as declared.
    void map(const std::vector<AxisId> &domain, const std::vector<Operand> &ins, const Operand &out, const Body &body) {
        std::vector<Operand> all = ins;
        all.push_back(out);
        const size_t k = fuse_trailing_ ? fusable_suffix(domain, all) : 0;
        if (k < 2) {
            generic(domain, {}, ins, {out}, body);
            return;
        }
        const AxisId fused = (AxisId)spec_.axes.size() + 1;  // a pseudo axis for the fused run
        std::vector<AxisId> tail(domain.end() - k, domain.end()), fdomain(domain.begin(), domain.end() - k);
        fdomain.push_back(fused);
        Value cond = arith::ConstantIntOp::create(b_, loc_, b_.getI1Type(), 1);
        std::vector<Operand> views;
        for (const Operand &op : all) {
            if (!std::count(op.atoms.begin(), op.atoms.end(), tail[0])) {
                views.push_back(op);
                continue;
            }
            auto meta = memref::ExtractStridedMetadataOp::create(b_, loc_, op.mem);
            const size_t r = op.atoms.size(), first = r - k;
            Value n = meta.getSizes()[r - 1];
            Value inner_one = arith::CmpIOp::create(b_, loc_, arith::CmpIPredicate::eq, meta.getStrides()[r - 1], index_cst(b_, loc_, 1));
            cond = arith::AndIOp::create(b_, loc_, cond, inner_one);
            for (size_t j = r - 1; j > first; --j) {
                Value want = arith::MulIOp::create(b_, loc_, meta.getStrides()[j], meta.getSizes()[j]);
                cond = arith::AndIOp::create(b_, loc_, cond,
                                             arith::CmpIOp::create(b_, loc_, arith::CmpIPredicate::eq, meta.getStrides()[j - 1], want));
                n = arith::MulIOp::create(b_, loc_, n, meta.getSizes()[j - 1]);
            }
            SmallVector<OpFoldResult> sizes, strides;
            for (size_t j = 0; j < first; ++j) {
                sizes.push_back(meta.getSizes()[j]);
                strides.push_back(meta.getStrides()[j]);
            }
            sizes.push_back(n);
            strides.push_back(b_.getIndexAttr(1));
            SmallVector<int64_t> shape(first + 1, ShapedType::kDynamic), st(first + 1, ShapedType::kDynamic);
            st.back() = 1;
            auto type = MemRefType::get(shape, cast<MemRefType>(op.mem.getType()).getElementType(),
                                        StridedLayoutAttr::get(&ctx_, ShapedType::kDynamic, st));
            Value v = memref::ReinterpretCastOp::create(b_, loc_, type, meta.getBaseBuffer(), OpFoldResult(meta.getOffset()), sizes, strides);
            std::vector<AxisId> atoms(op.atoms.begin(), op.atoms.begin() + first);
            atoms.push_back(fused);
            views.push_back({v, atoms});
        }
        auto branch = scf::IfOp::create(b_, loc_, cond, /*withElseRegion=*/true);
        OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPoint(branch.thenBlock()->getTerminator());
        generic(fdomain, {}, std::vector<Operand>(views.begin(), views.end() - 1), {views.back()}, body);
        b_.setInsertionPoint(branch.elseBlock()->getTerminator());
        generic(domain, {}, ins, {out}, body);
    }

    Inputs inputs_for(const Node &expr) {
        Inputs in;
        in.leaves.collect(spec_, expr);
        for (const Node *l : in.leaves.nodes) {
            if (l->kind == Node::Tensor) {
                in.ops.push_back(tensor_operand(*l));
            } else {
                Value r = reduce(*l).buf;
                in.ops.push_back({r, l->axes});
            }
        }
        return in;
    }

    // A tensor leaf as an operand; an indexed parameter (weight[0]) is the rank-reduced view of its
    // element along the fixed axes.
    Operand tensor_operand(const Node &leaf) {
        std::vector<AxisId> atoms = spec_.memory_atoms(spec_.tensors[leaf.index].dims);
        Value mem = targs_[leaf.index];
        if (leaf.at.empty()) return {mem, atoms};
        SmallVector<OpFoldResult> offsets, sizes, strides;
        SmallVector<int64_t> shape;
        std::vector<AxisId> kept;
        for (AxisId a : atoms) {
            auto f = std::find_if(leaf.at.begin(), leaf.at.end(), [&](const auto &p) { return p.first == a; });
            strides.push_back(b_.getIndexAttr(1));
            if (f != leaf.at.end()) {
                offsets.push_back(b_.getIndexAttr(f->second));
                sizes.push_back(b_.getIndexAttr(1));
            } else {
                offsets.push_back(b_.getIndexAttr(0));
                sizes.push_back(ext_[a]);
                shape.push_back(ShapedType::kDynamic);
                kept.push_back(a);
            }
        }
        MemRefType type = memref::SubViewOp::inferRankReducedResultType(shape, cast<MemRefType>(mem.getType()), offsets, sizes, strides);
        return {memref::SubViewOp::create(b_, loc_, type, mem, offsets, sizes, strides), kept};
    }

    Value eval(OpBuilder &b, Location loc, const Node &e, const Inputs &in, ValueRange args) {
        return emitter_.emit(b, loc, e, [&](OpBuilder &bb, Location ll, const Node &leaf) {
            int i = in.leaves.find(leaf);
            if (i < 0) throw std::logic_error("mlir lowering: leaf not bound");
            return convert(bb, ll, args[i], acc_);
        });
    }

    // The operand restricted to the first `m` elements of the innermost reduced axis, the other
    // reduced axes at 0 (the shift of a mean).
    Operand restrict(const Operand &op, const AxisSet &over, Value m) {
        bool touches = false;
        for (AxisId a : op.atoms) touches = touches || std::count(over.begin(), over.end(), a);
        if (!touches) return op;
        SmallVector<OpFoldResult> offsets, sizes, strides;
        for (size_t k = 0; k < op.atoms.size(); ++k) {
            AxisId a = op.atoms[k];
            offsets.push_back(b_.getIndexAttr(0));
            strides.push_back(b_.getIndexAttr(1));
            if (a == over.back()) sizes.push_back(m);
            else if (std::count(over.begin(), over.end(), a)) sizes.push_back(b_.getIndexAttr(1));
            else sizes.push_back(ext_[a]);
        }
        return {memref::SubViewOp::create(b_, loc_, op.mem, offsets, sizes, strides), op.atoms};
    }

    // The operand with its axis `a` cut to [offset, offset + size).
    Operand slice(const Operand &op, AxisId a, OpFoldResult offset, OpFoldResult size) {
        auto it = std::find(op.atoms.begin(), op.atoms.end(), a);
        if (it == op.atoms.end()) return op;
        SmallVector<OpFoldResult> offsets, sizes, strides;
        for (AxisId x : op.atoms) {
            offsets.push_back(x == a ? offset : b_.getIndexAttr(0));
            sizes.push_back(x == a ? size : OpFoldResult(ext_[x]));
            strides.push_back(b_.getIndexAttr(1));
        }
        return {memref::SubViewOp::create(b_, loc_, op.mem, offsets, sizes, strides), op.atoms};
    }

    // Sums over n's reduced axes of each `terms[t](operand value, extra input values)`, one buffer
    // over n.axes each. Blocked, so that no f32 partial sum runs long: along the innermost reduced
    // axis, blocks of kBlock elements sum into P[kept axes, block] (kept = n.axes and the other
    // reduced axes) and the remainder into T[kept axes]; then P and T over the other reduced
    // axes and P over the blocks, one axis at a time. (A shifted sum of zero-mean data drifts
    // linearly with its length: one 262144-element row summed straight through was 1e-6 off in
    // its mean.)
    //
    // With a rider (row pipelining), an output's map over the same domain runs in the same loops:
    // one pass over the step reads the next rows for these sums while it writes this step's rows.
    std::vector<Value> sums(const Node &n, const Inputs &in, const std::vector<Operand> &extra, const std::vector<Term> &terms,
                            const Rider *rider = nullptr) {
        const int64_t kBlock = sum_block_;
        const Node &arg = *n.args[0];
        AxisId inner = n.over.back();
        AxisSet outer(n.over.begin(), n.over.end() - 1);
        AxisSet kept = union_of(n.axes, outer);
        Value block = index_cst(b_, loc_, kBlock);
        Value nb = arith::DivUIOp::create(b_, loc_, ext_[inner], block);
        Value main_len = arith::MulIOp::create(b_, loc_, nb, block);
        Value rest = arith::SubIOp::create(b_, loc_, ext_[inner], main_len);
        std::vector<Operand> ins = in.ops;
        ins.insert(ins.end(), extra.begin(), extra.end());
        auto body = [&](size_t nouts) {
            return [&, nouts](OpBuilder &b, Location loc, ValueRange args) -> SmallVector<Value> {
                Value v = eval(b, loc, arg, in, args);
                ValueRange ex = args.slice(in.ops.size(), extra.size());
                SmallVector<Value> y;
                for (size_t t = 0; t < terms.size(); ++t)
                    y.push_back(add_reassoc(b, loc, args[args.size() - nouts + t], terms[t](b, loc, v, ex)));
                return y;
            };
        };

        // Level 1a: whole blocks. Domain: kept axes, block, j; x[.., inner] = block * kBlock + j.
        // A sum over the outermost axis that keeps the inner ones (a backward's column sums,
        // d_weight = sum(..., over: rows)) runs block, j outside the kept axes instead, and P is
        // [block, kept]: the loops then walk memory in order (kept innermost, contiguous)
        // instead of down a column (LayerNorm's backward at 4096 x 8192: 0.6 GB/s so).
        const bool sum_outer = summed_outside_kept(ins, inner, outer, kept);
        std::vector<Value> P, T, S;
        {
            const unsigned nk = (unsigned)kept.size(), nd = nk + 2;
            const unsigned dim_block = sum_outer ? 0 : nk, dim_j = dim_block + 1, dim_kept0 = sum_outer ? 2 : 0;
            auto map_of = [&](const std::vector<AxisId> &atoms) {
                SmallVector<AffineExpr> exprs;
                for (AxisId a : atoms) {
                    if (a == inner) exprs.push_back(getAffineDimExpr(dim_block, &ctx_) * kBlock + getAffineDimExpr(dim_j, &ctx_));
                    else exprs.push_back(getAffineDimExpr(dim_kept0 + (unsigned)(std::find(kept.begin(), kept.end(), a) - kept.begin()), &ctx_));
                }
                return AffineMap::get(nd, 0, exprs, &ctx_);
            };
            SmallVector<AffineMap> maps;
            SmallVector<Value> in_vals, out_vals;
            for (const Operand &op : ins) {
                maps.push_back(map_of(op.atoms));
                in_vals.push_back(op.mem);
            }
            // A kBlock-element operand that gives j its range (never read).
            Value lanes = memref::AllocaOp::create(b_, loc_, MemRefType::get({kBlock}, acc_));
            maps.push_back(AffineMap::get(nd, 0, {getAffineDimExpr(dim_j, &ctx_)}, &ctx_));
            in_vals.push_back(lanes);
            const size_t nr = rider ? rider->ins.size() : 0;
            if (rider)
                for (const Operand &op : rider->ins) {
                    maps.push_back(map_of(op.atoms));
                    in_vals.push_back(op.mem);
                }
            // P: [kept..., block], or [block, kept...] when the sum runs outside.
            SmallVector<AffineExpr> pe;
            SmallVector<Value> psizes;
            if (sum_outer) {
                pe.push_back(getAffineDimExpr(dim_block, &ctx_));
                psizes.push_back(nb);
            }
            for (unsigned k = 0; k < nk; ++k) {
                pe.push_back(getAffineDimExpr(dim_kept0 + k, &ctx_));
                psizes.push_back(ext_[kept[k]]);
            }
            if (!sum_outer) {
                pe.push_back(getAffineDimExpr(dim_block, &ctx_));
                psizes.push_back(nb);
            }
            for (size_t t = 0; t < terms.size(); ++t) {
                Value p = memref::AllocOp::create(b_, loc_, MemRefType::get(SmallVector<int64_t>(nk + 1, ShapedType::kDynamic), acc_), psizes);
                linalg::FillOp::create(b_, loc_, ValueRange{emitter_.cst(b_, loc_, 0.0)}, ValueRange{p});
                allocs_.push_back(p);
                P.push_back(p);
                maps.push_back(AffineMap::get(nd, 0, pe, &ctx_));
                out_vals.push_back(p);
            }
            if (rider) {
                maps.push_back(map_of(rider->out.atoms));
                out_vals.push_back(rider->out.mem);
            }
            SmallVector<utils::IteratorType> iters(nd, utils::IteratorType::parallel);
            iters[dim_j] = utils::IteratorType::reduction;
            auto f = body(terms.size());
            linalg::GenericOp::create(b_, loc_, ValueRange(in_vals), ValueRange(out_vals), maps, iters,
                                      [&](OpBuilder &nb2, Location nl, ValueRange args) {
                                          // args: ins..., lanes, rider ins..., sums..., rider out: the
                                          // sweep's body gets ins and sums, the rider's its own.
                                          const size_t ni = ins.size(), nt = terms.size();
                                          SmallVector<Value> a(args.begin(), args.begin() + ni);
                                          a.append(args.begin() + ni + 1 + nr, args.begin() + ni + 1 + nr + nt);
                                          SmallVector<Value> y = f(nb2, nl, ValueRange(a));
                                          if (rider) {
                                              SmallVector<Value> m(args.begin() + ni + 1, args.begin() + ni + 1 + nr);
                                              m.push_back(args.back());
                                              y.append(rider->body(nb2, nl, ValueRange(m)));
                                          }
                                          linalg::YieldOp::create(nb2, nl, y);
                                      });
        }
        // Level 1b: the remainder of the innermost axis, per kept coordinate.
        {
            std::vector<Operand> tin;
            for (const Operand &op : ins) tin.push_back(slice(op, inner, main_len, rest));
            std::vector<Operand> outs;
            for (size_t t = 0; t < terms.size(); ++t) {
                T.push_back(alloc(kept, 0.0));
                outs.push_back({T.back(), kept});
            }
            if (!rider) {
                generic(union_of(kept, {inner}), {inner}, tin, outs, body(terms.size()));
            } else {
                const size_t ni = tin.size(), nr = rider->ins.size(), nt = terms.size();
                for (const Operand &op : rider->ins) tin.push_back(slice(op, inner, main_len, rest));
                outs.push_back(slice(rider->out, inner, main_len, rest));
                auto f = body(nt);
                generic(union_of(kept, {inner}), {inner}, tin, outs, [&](OpBuilder &b, Location loc, ValueRange args) -> SmallVector<Value> {
                    SmallVector<Value> a(args.begin(), args.begin() + ni);
                    a.append(args.begin() + ni + nr, args.begin() + ni + nr + nt);
                    SmallVector<Value> y = f(b, loc, ValueRange(a));
                    SmallVector<Value> m(args.begin() + ni, args.begin() + ni + nr);
                    m.push_back(args.back());
                    y.append(rider->body(b, loc, ValueRange(m)));
                    return y;
                });
            }
        }
        // Level 2: P and T over the other reduced axes one at a time, innermost first, then P over
        // its blocks, so that no serial f32 chain is longer than one axis (GroupNorm NHWC's h x w
        // summed in one chain of 16384 partial sums left y up to 1.4e-5 off, 15 bf16 ulps near
        // 1e-4, at 16 x 128 x 128 x 320 bf16: past the bound); then P's result added to T's.
        const AxisId blk_axis = (AxisId)spec_.axes.size();  // a pseudo axis for the block index
        std::vector<AxisId> kept_blk = kept;
        kept_blk.insert(sum_outer ? kept_blk.begin() : kept_blk.end(), blk_axis);  // P's axes, in its memory order
        auto add = [&](OpBuilder &b, Location loc, ValueRange a) -> SmallVector<Value> { return {add_reassoc(b, loc, a[1], a[0])}; };
        std::vector<AxisId> order(outer.rbegin(), outer.rend());
        auto reduce_axes = [&](Value buf, AxisSet have, const std::vector<AxisId> &axes) {
            for (AxisId a : axes) {
                AxisSet next;
                for (AxisId x : have)
                    if (x != a) next.push_back(x);
                Value r = alloc(next, 0.0, nb);
                generic(have, {a}, {{buf, have}}, {{r, next}}, add);
                buf = r;
                have = next;
            }
            return buf;
        };
        for (size_t t = 0; t < terms.size(); ++t) {
            std::vector<AxisId> p_order = order;
            p_order.push_back(blk_axis);
            Value pr = reduce_axes(P[t], kept_blk, p_order);  // over n.axes
            Value s = reduce_axes(T[t], kept, order);         // over n.axes (T itself when nothing else is reduced)
            generic(n.axes, {}, {{pr, n.axes}}, {{s, n.axes}}, add);
            S.push_back(s);
        }
        return S;
    }

    // result(n.axes) = f(buffers...), elementwise.
    Value combine(const AxisSet &axes, const std::vector<Value> &bufs, const std::function<Value(OpBuilder &, Location, ValueRange)> &f) {
        Value r = alloc(axes, std::nullopt);
        std::vector<Operand> ins;
        for (Value v : bufs) ins.push_back({v, axes});
        generic(axes, {}, ins, {{r, axes}}, [&](OpBuilder &b, Location loc, ValueRange args) -> SmallVector<Value> {
            return {f(b, loc, args.take_front(bufs.size()))};
        });
        return r;
    }

    // ---- Row pipelining (the schedule's pipeline_elements) -------------------------------------
    //
    // The rows of a call run in steps of about pipeline_elements elements. Step k's map and step
    // k + 1's first statistics sweep (LayerNorm's shifted sum, RMSNorm's sum of squares) run in
    // one loop: the next rows' reads from memory overlap this step's writes, and when the next
    // step starts, its rows are in the cache for the sweeps left. The sums are the same blocked
    // sums as without pipelining. Only for layers whose every reduction is over the innermost
    // axis alone and keeps the axis outside it (the rows): LayerNorm, RMSNorm and their variants.

    void use(const Views &v) {
        targs_ = v.targs;
        oargs_ = v.oargs;
        if (v.axis >= 0) ext_[v.axis] = v.extent;  // extent_f_ stays the call's: a Count means the whole axis
    }

    // The arguments cut to [begin, begin + size) along `axis`.
    Views step_views(AxisId axis, Value begin, Value size) {
        Views v;
        v.axis = axis;
        v.extent = size;
        for (size_t a = 0; a < arg_atoms_.size(); ++a) {
            Value mem = a < args_.targs.size() ? args_.targs[a] : args_.oargs[a - args_.targs.size()];
            const std::vector<AxisId> &atoms = arg_atoms_[a];
            if (std::count(atoms.begin(), atoms.end(), axis)) {
                SmallVector<OpFoldResult> offsets, sizes, strides;
                for (size_t k = 0; k < atoms.size(); ++k) {
                    offsets.push_back(atoms[k] == axis ? OpFoldResult(begin) : OpFoldResult(b_.getIndexAttr(0)));
                    sizes.push_back(atoms[k] == axis ? OpFoldResult(size) : OpFoldResult(memref::DimOp::create(b_, loc_, mem, (int64_t)k).getResult()));
                    strides.push_back(b_.getIndexAttr(1));
                }
                mem = memref::SubViewOp::create(b_, loc_, mem, offsets, sizes, strides);
            }
            (a < args_.targs.size() ? v.targs : v.oargs).push_back(mem);
        }
        return v;
    }

    // Emits f's ops and frees the buffers they allocated at the end of the current block.
    template <class F>
    void region(F &&f) {
        const size_t mark = allocs_.size();
        f();
        for (size_t i = mark; i < allocs_.size(); ++i) memref::DeallocOp::create(b_, loc_, allocs_[i]);
        allocs_.resize(mark);
    }

    // The reductions the outputs read, directly or through other reductions.
    void collect_reductions(const Node &n, std::vector<const Node *> &out) const {
        if (n.kind == Node::Value) return collect_reductions(*spec_.values[n.index].expr, out);
        if (n.kind == Node::Reduce) {
            if (std::count(out.begin(), out.end(), &n)) return;
            out.push_back(&n);
        }
        for (const auto &a : n.args) collect_reductions(*a, out);
    }

    // The axis the steps cut (the main output's second innermost), when the schedule asks for
    // pipelining and the layer allows it.
    std::optional<AxisId> pipeline_axis() const {
        if (pipeline_ <= 0 || outs_.empty()) return std::nullopt;
        const std::vector<AxisId> oat = spec_.memory_atoms(spec_.outputs[outs_[0]].dims);
        if (oat.size() < 2) return std::nullopt;
        const AxisId inner = oat.back(), p = oat[oat.size() - 2];
        std::vector<const Node *> reds;
        for (int k : outs_) collect_reductions(*spec_.values[spec_.outputs[k].value].expr, reds);
        bool summed = false;
        for (const Node *r : reds) {
            if (r->over != AxisSet{inner} || !std::count(r->axes.begin(), r->axes.end(), p)) return std::nullopt;
            // A Welford variance is not a sweep of sums (algorithm.h): nothing to carry.
            if (r->reduce == ReduceOp::Var && spec_.variance == VarianceAlgorithm::Welford) return std::nullopt;
            summed = summed || r->reduce == ReduceOp::Sum || r->reduce == ReduceOp::Mean || r->reduce == ReduceOp::Var;
        }
        if (!summed) return std::nullopt;
        return p;
    }

    // Emits the ops the first sweep of `next`'s step depends on (its mean's shift) and returns that
    // sweep, not emitted; nothing when e's reductions have no sweep.
    std::optional<Captured> capture_first_sweep(const Views &next, const Node &e) {
        const auto saved_red = red_;
        const SweepMode saved_mode = mode_;
        const int saved_sweeps = sweeps_;
        const Views saved{targs_, oargs_, next.axis, ext_[next.axis]};
        use(next);
        red_.clear();
        sweeps_ = 0;
        mode_ = SweepMode::Capture;
        captured_.reset();
        try {
            inputs_for(e);
        } catch (const CaptureSignal &) {
        }
        use(saved);
        red_ = saved_red;
        mode_ = saved_mode;
        sweeps_ = saved_sweeps;
        std::optional<Captured> c = std::move(captured_);
        captured_.reset();
        return c;
    }

    // Whether a map over `out` can run in the loops of the captured sweep: its domain is the
    // sweep's (kept axes and the reduced one) and its operands index nothing else.
    static bool rider_fits(const Captured &c, const std::vector<Operand> &ins, const Operand &out) {
        const AxisSet dom = union_of(c.n->axes, c.n->over);
        auto inside = [&](const Operand &op) {
            for (AxisId a : op.atoms)
                if (!std::count(dom.begin(), dom.end(), a)) return false;
            return true;
        };
        if (out.atoms.size() != dom.size() || !inside(out)) return false;
        for (const Operand &op : ins)
            if (!inside(op)) return false;
        return true;
    }

    // One step of the kernel's work on the current views: every output's map and the reductions it
    // reads. `next`: also the first sweep of the step on those views, in the loops of the first map
    // that fits (else after the maps), its sums copied into carry_ for that step.
    void emit_step(SweepMode mode, const Views *next) {
        red_.clear();
        sweeps_ = 0;
        mode_ = mode;
        std::optional<Captured> cap;
        std::vector<Value> sums_next;
        for (size_t k = 0; k < outs_.size(); ++k) {
            const OutputInfo &o = spec_.outputs[outs_[k]];
            const Node &e = *spec_.values[o.value].expr;
            Inputs in = inputs_for(e);
            std::vector<AxisId> oat = spec_.memory_atoms(o.dims);
            Type st = cpu_storage_type(ctx_, types_.storage.at(o.name));
            Body body = [this, &e, in, st](OpBuilder &b, Location loc, ValueRange args) -> SmallVector<Value> {
                return {convert(b, loc, eval(b, loc, e, in, args), st)};
            };
            const Operand out{oargs_[k], oat};
            if (next && !cap && sweeps_ > 0) cap = capture_first_sweep(*next, e);
            if (cap && sums_next.empty() && rider_fits(*cap, in.ops, out)) {
                Rider rider{in.ops, out, body};
                sums_next = sums(*cap->n, cap->in, cap->extra, cap->terms, &rider);
                continue;
            }
            map(oat, in.ops, out, body);
        }
        mode_ = SweepMode::Normal;
        if (!next) return;
        if (!cap) throw std::logic_error("mlir lowering: a pipelined step without a sweep");
        if (sums_next.empty()) sums_next = sums(*cap->n, cap->in, cap->extra, cap->terms);
        copy_into_carry(*cap->n, sums_next);
    }

    void copy_into_carry(const Node &n, const std::vector<Value> &sums) {
        for (size_t t = 0; t < carry_.size(); ++t)
            generic(n.axes, {}, {{sums[t], n.axes}}, {{carry_[t], n.axes}},
                    [](OpBuilder &, Location, ValueRange a) -> SmallVector<Value> { return {a[0]}; });
    }

    // The call's rows in steps: the first step's sweep, then steps 0 .. n - 2 each with the next
    // one's sweep in its map, the last full step, and the rows left (fewer than a step) as an
    // ordinary pass. With fewer than two full steps, the ordinary kernel.
    void emit_pipelined(AxisId p) {
        const AxisId inner = spec_.memory_atoms(spec_.outputs[outs_[0]].dims).back();
        args_.axis = p;
        args_.extent = ext_[p];
        Value zero = index_cst(b_, loc_, 0), one = index_cst(b_, loc_, 1);
        Value width = arith::MaxUIOp::create(b_, loc_, one, ext_[inner]);  // an empty row: no division by zero
        Value step = arith::MaxUIOp::create(b_, loc_, one, arith::DivUIOp::create(b_, loc_, index_cst(b_, loc_, pipeline_), width));
        Value nfull = arith::DivUIOp::create(b_, loc_, ext_[p], step);
        Value done = arith::MulIOp::create(b_, loc_, nfull, step);
        Value rest = arith::SubIOp::create(b_, loc_, ext_[p], done);
        Value worth = arith::CmpIOp::create(b_, loc_, arith::CmpIPredicate::uge, nfull, index_cst(b_, loc_, 2));
        auto branch = scf::IfOp::create(b_, loc_, worth, /*withElseRegion=*/true);
        OpBuilder::InsertionGuard guard(b_);
        b_.setInsertionPoint(branch.thenBlock()->getTerminator());
        region([&] {
            Views first = step_views(p, zero, step);
            use(first);
            red_.clear();
            sweeps_ = 0;
            std::optional<Captured> cap;
            for (size_t k = 0; k < outs_.size() && !cap; ++k) cap = capture_first_sweep(first, *spec_.values[spec_.outputs[outs_[k]].value].expr);
            if (!cap) throw std::logic_error("mlir lowering: a pipelined kernel without a sweep");
            std::vector<Value> s0 = sums(*cap->n, cap->in, cap->extra, cap->terms);
            carry_.clear();
            carry_node_ = cap->n;
            for (size_t t = 0; t < s0.size(); ++t) carry_.push_back(alloc(cap->n->axes, std::nullopt));
            copy_into_carry(*cap->n, s0);

            Value last = arith::SubIOp::create(b_, loc_, nfull, one);
            auto loop = scf::ForOp::create(b_, loc_, zero, last, one);
            loop->setAttr("normgen.pipelined_rows", b_.getUnitAttr());  // explain shows it
            {
                OpBuilder::InsertionGuard g(b_);
                b_.setInsertionPoint(loop.getBody()->getTerminator());
                region([&] {
                    Value begin = arith::MulIOp::create(b_, loc_, loop.getInductionVar(), step);
                    Views cur = step_views(p, begin, step);
                    Views nxt = step_views(p, arith::AddIOp::create(b_, loc_, begin, step), step);
                    use(cur);
                    emit_step(SweepMode::Carried, &nxt);
                });
            }
            region([&] {
                use(step_views(p, arith::MulIOp::create(b_, loc_, last, step), step));
                emit_step(SweepMode::Carried, nullptr);
            });
            Value any = arith::CmpIOp::create(b_, loc_, arith::CmpIPredicate::ugt, rest, zero);
            auto tail = scf::IfOp::create(b_, loc_, any, /*withElseRegion=*/false);
            OpBuilder::InsertionGuard g(b_);
            b_.setInsertionPoint(tail.thenBlock()->getTerminator());
            region([&] {
                use(step_views(p, done, rest));
                emit_step(SweepMode::Normal, nullptr);
            });
        });
        b_.setInsertionPoint(branch.elseBlock()->getTerminator());
        region([&] {
            use(args_);
            emit_step(SweepMode::Normal, nullptr);
        });
        use(args_);
    }

public:
    // ---- The strategy of the shared algorithm (algorithm.h): statistics are buffers over the
    // reduction's kept axes, each sweep is linalg.generic ops (blocked sums, `sums` above). A
    // statistic may carry a divisor applied where it is read: the shift of a mean is its sum over
    // the first elements and their count, so no pass over the kept axes divides it.
    struct Stat {
        Value buf;
        Value divisor;  // null: the buffer holds the statistic itself
    };

    // The statistics' values at a point, from their buffers' elements.
    static SmallVector<Value> values_of(OpBuilder &b, Location loc, const std::vector<Stat> &stats, ValueRange elems) {
        SmallVector<Value> v;
        for (size_t i = 0; i < stats.size(); ++i)
            v.push_back(stats[i].divisor ? Value(arith::DivFOp::create(b, loc, elems[i], stats[i].divisor)) : elems[i]);
        return v;
    }

    std::vector<Stat> sweep(const Node &n, const std::vector<Stat> &stats, const std::vector<Term> &terms) {
        const bool first = sweeps_++ == 0;
        std::vector<Stat> r;
        if (first && mode_ == SweepMode::Carried) {
            if (&n != carry_node_ || carry_.size() != terms.size()) throw std::logic_error("mlir lowering: the pipelined sweep differs between steps");
            for (Value c : carry_) r.push_back({c, Value()});
            return r;
        }
        Inputs in = inputs_for(*n.args[0]);
        std::vector<Operand> extra;
        for (const Stat &st : stats) extra.push_back({st.buf, n.axes});
        std::vector<Term> scaled;
        for (const Term &t : terms)
            scaled.push_back([stats, t](OpBuilder &b, Location loc, Value v, ValueRange ex) { return t(b, loc, v, values_of(b, loc, stats, ex)); });
        if (first && mode_ == SweepMode::Capture) {
            captured_ = Captured{&n, in, extra, scaled};
            throw CaptureSignal{};
        }
        for (Value buf : sums(n, in, extra, scaled)) r.push_back({buf, Value()});
        return r;
    }

    // The mean of the first min(64, extent) elements of the innermost reduced axis: their sum, to
    // be divided by their count where it is read.
    Stat shift(const Node &n) {
        Inputs in = inputs_for(*n.args[0]);
        Value m = arith::MinUIOp::create(b_, loc_, ext_[n.over.back()], index_cst(b_, loc_, 64));
        Value mf = index_to_float(b_, loc_, m, acc_);
        Value ks = alloc(n.axes, 0.0);
        std::vector<Operand> rin;
        for (const Operand &op : in.ops) rin.push_back(restrict(op, n.over, m));
        const Node &arg = *n.args[0];
        generic(union_of(n.axes, n.over), n.over, rin, {{ks, n.axes}}, [&](OpBuilder &b, Location loc, ValueRange args) -> SmallVector<Value> {
            return {arith::AddFOp::create(b, loc, args.back(), eval(b, loc, arg, in, args))};
        });
        return {ks, mf};
    }

    Stat extreme(const Node &n, bool is_max) {
        Inputs in = inputs_for(*n.args[0]);
        const Node &arg = *n.args[0];
        Value r = alloc(n.axes, is_max ? -INFINITY : INFINITY);
        generic(union_of(n.axes, n.over), n.over, in.ops, {{r, n.axes}}, [&](OpBuilder &b, Location loc, ValueRange args) -> SmallVector<Value> {
            Value v = eval(b, loc, arg, in, args);
            if (is_max) return {arith::MaximumFOp::create(b, loc, args.back(), v)};
            return {arith::MinimumFOp::create(b, loc, args.back(), v)};
        });
        return {r, Value()};
    }

    // Serial Welford per result element (count, mean, m2): exact to the declared algorithm.
    Stat welford(const Node &n) {
        Inputs in = inputs_for(*n.args[0]);
        const Node &arg = *n.args[0];
        Value c = alloc(n.axes, 0.0), mu = alloc(n.axes, 0.0), m2 = alloc(n.axes, 0.0);
        generic(union_of(n.axes, n.over), n.over, in.ops, {{c, n.axes}, {mu, n.axes}, {m2, n.axes}},
                [&](OpBuilder &b, Location loc, ValueRange args) -> SmallVector<Value> {
                    Value v = eval(b, loc, arg, in, args);
                    size_t o = in.ops.size();
                    auto s = welford_step(b, loc, emitter_, {args[o], args[o + 1], args[o + 2]}, v);
                    return {s[0], s[1], s[2]};
                });
        return {combine(n.axes, {c, m2}, [&](OpBuilder &b, Location loc, ValueRange a) -> Value {
                    return arith::DivFOp::create(b, loc, a[1], arith::MaximumFOp::create(b, loc, a[0], emitter_.cst(b, loc, 1.0)));
                }),
                Value()};
    }

    Stat combine(const Node &n, const std::vector<Stat> &stats, const Elementwise &f) {
        std::vector<Value> bufs;
        for (const Stat &st : stats) bufs.push_back(st.buf);
        return {combine(n.axes, bufs, [&](OpBuilder &b, Location loc, ValueRange a) { return f(b, loc, values_of(b, loc, stats, a)); }), Value()};
    }
    Value count(const Node &n) { return emitter_.count(b_, loc_, n.over); }

    // A reduction's result (a buffer over its kept axes), computed once.
    Stat reduce(const Node &n) {
        if (auto it = red_.find(&n); it != red_.end()) return {it->second, Value()};
        inputs_for(*n.args[0]);  // the reductions its operand reads come first
        ScopedLoc at(loc_, node_loc(&ctx_, spec_, n, loc_));  // the reduction's ops carry its location
        Stat r = ReductionAlgorithm<CpuLowerer>(*this, spec_).reduction(n);
        if (r.divisor) r = combine(n, {r}, [](OpBuilder &, Location, ValueRange a) { return a[0]; });
        red_[&n] = r.buf;
        return r;
    }
};

}  // namespace

OwningOpRef<ModuleOp> lower_cpu(MLIRContext &ctx, const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &schedule,
                                const std::string &function) {
    return CpuLowerer(ctx, spec, plan, schedule).run(function);
}

}  // namespace normgen::mlirgen
