#include "codegen/mlir/lower.h"

#include "runtime/errors.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVM/NVVM/Target.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>

namespace normgen::mlirgen {

using namespace mlir;

std::unique_ptr<MLIRContext> make_context() {
    DialectRegistry registry;
    registry.insert<func::FuncDialect, arith::ArithDialect, math::MathDialect, memref::MemRefDialect, linalg::LinalgDialect,
                    scf::SCFDialect, gpu::GPUDialect, vector::VectorDialect, LLVM::LLVMDialect, NVVM::NVVMDialect>();
    registerBuiltinDialectTranslation(registry);
    registerLLVMDialectTranslation(registry);
    registerGPUDialectTranslation(registry);
    registerNVVMDialectTranslation(registry);
    NVVM::registerNVVMTargetInterfaceExternalModels(registry);
    // The dialects' "to LLVM" interfaces, which convert-gpu-to-nvvm applies to every op in a kernel.
    registerAllExtensions(registry);
    auto ctx = std::make_unique<MLIRContext>(registry);
    ctx->loadAllAvailableDialects();
    return ctx;
}

namespace {

Type element_type(MLIRContext &ctx, DType t) {
    switch (t) {
    case DType::F32: return Float32Type::get(&ctx);
    case DType::F16: return Float16Type::get(&ctx);
    case DType::BF16: return BFloat16Type::get(&ctx);
    case DType::F64: return Float64Type::get(&ctx);
    }
    return Float32Type::get(&ctx);
}

// The CPU kernels keep bf16 tensors as i16 bit patterns: x86 without AVX512-BF16 has no bf16
// vectors, and LLVM scalarizes every <N x bfloat> store (RMSNorm bf16 ran at a third of f32).
// Widening is a shift; narrowing rounds to nearest even in integer arithmetic (NaN stays NaN).
Type cpu_storage_type(MLIRContext &ctx, DType t) { return t == DType::BF16 ? Type(IntegerType::get(&ctx, 16)) : element_type(ctx, t); }

Value convert(OpBuilder &b, Location loc, Value v, Type to);

Value bf16_bits_to_f32(OpBuilder &b, Location loc, Value bits) {
    Value w = arith::ExtUIOp::create(b, loc, b.getI32Type(), bits);
    w = arith::ShLIOp::create(b, loc, w, arith::ConstantIntOp::create(b, loc, b.getI32Type(), 16));
    return arith::BitcastOp::create(b, loc, b.getF32Type(), w);
}

Value f32_to_bf16_bits(OpBuilder &b, Location loc, Value f) {
    Type i32 = b.getI32Type();
    auto c = [&](int64_t v) { return arith::ConstantIntOp::create(b, loc, i32, v); };
    Value bits = arith::BitcastOp::create(b, loc, i32, f);
    Value lsb = arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, bits, c(16)), c(1));
    Value rounded = arith::AddIOp::create(b, loc, bits, arith::AddIOp::create(b, loc, lsb, c(0x7fff)));
    Value hi = arith::ShRUIOp::create(b, loc, rounded, c(16));
    Value nan = arith::OrIOp::create(b, loc, arith::ShRUIOp::create(b, loc, bits, c(16)), c(0x40));  // quiet NaN
    Value is_nan = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, f, f);
    return arith::TruncIOp::create(b, loc, b.getI16Type(), arith::SelectOp::create(b, loc, is_nan, nan, hi));
}

Value convert(OpBuilder &b, Location loc, Value v, Type to) {
    Type from = v.getType();
    if (from == to) return v;
    if (from.isInteger(16)) return convert(b, loc, bf16_bits_to_f32(b, loc, v), to);
    if (to.isInteger(16)) return f32_to_bf16_bits(b, loc, convert(b, loc, v, b.getF32Type()));
    if (from.getIntOrFloatBitWidth() < to.getIntOrFloatBitWidth()) return arith::ExtFOp::create(b, loc, to, v);
    if (from.getIntOrFloatBitWidth() > to.getIntOrFloatBitWidth()) {
        // f64 -> bf16/f16 through f32 (x86 has no direct conversion; LLVM would call a libgcc
        // helper that may be missing). The double rounding differs from a direct one only at exact
        // bf16/f16 ties of the f32 value, by one unit: inside the verifier's allowance.
        if (from.getIntOrFloatBitWidth() == 64 && to.getIntOrFloatBitWidth() == 16)
            v = arith::TruncFOp::create(b, loc, Float32Type::get(b.getContext()), v);
        return arith::TruncFOp::create(b, loc, to, v);
    }
    // bf16 <-> f16: through f32.
    Value w = arith::ExtFOp::create(b, loc, Float32Type::get(b.getContext()), v);
    return arith::TruncFOp::create(b, loc, to, w);
}

// The tensor and reduction leaves of an expression (named values inlined; a reduction is a leaf:
// it is computed before the expressions that use it).
struct Leaves {
    std::vector<const Node *> nodes;  // Tensor (first of each index) and Reduce nodes, in first-use order
    void collect(const NormSpec &spec, const Node &n) {
        switch (n.kind) {
        case Node::Tensor:
            for (const Node *l : nodes)
                if (l->kind == Node::Tensor && l->index == n.index) return;
            nodes.push_back(&n);
            return;
        case Node::Reduce:
            if (std::find(nodes.begin(), nodes.end(), &n) == nodes.end()) nodes.push_back(&n);
            return;
        case Node::Value: collect(spec, *spec.values[n.index].expr); return;
        default:
            for (const auto &a : n.args) collect(spec, *a);
        }
    }
    int find(const Node &n) const {
        for (size_t i = 0; i < nodes.size(); ++i) {
            const Node *l = nodes[i];
            if (l == &n || (n.kind == Node::Tensor && l->kind == Node::Tensor && l->index == n.index)) return (int)i;
        }
        return -1;
    }
};

// Emits the arithmetic of an expression in the accumulation type; leaves come from a callback.
class ExprEmitter {
public:
    using LeafFn = std::function<Value(OpBuilder &, Location, const Node &)>;
    ExprEmitter(const NormSpec &spec, Type acc, const std::vector<Value> &extent_f) : spec_(spec), acc_(acc), extent_f_(extent_f) {}

    Value cst(OpBuilder &b, Location loc, double v) const { return arith::ConstantOp::create(b, loc, FloatAttr::get(acc_, v)); }

    Value count(OpBuilder &b, Location loc, const AxisSet &axes) const {
        Value c = cst(b, loc, 1.0);
        for (AxisId a : axes) c = arith::MulFOp::create(b, loc, c, extent_f_.at(a));
        return c;
    }

    Value emit(OpBuilder &b, Location loc, const Node &n, const LeafFn &leaf) {
        std::map<const Node *, Value> memo;
        return emit(b, loc, n, leaf, memo);
    }

private:
    const NormSpec &spec_;
    Type acc_;
    const std::vector<Value> &extent_f_;

    Value emit(OpBuilder &b, Location loc, const Node &n, const LeafFn &leaf, std::map<const Node *, Value> &memo) {
        if (auto it = memo.find(&n); it != memo.end()) return it->second;
        Value r;
        switch (n.kind) {
        case Node::Literal: r = cst(b, loc, n.value); break;
        case Node::Const: r = cst(b, loc, spec_.find_const(n.name)->value); break;
        case Node::Tensor:
        case Node::Reduce: r = leaf(b, loc, n); break;
        case Node::Value: r = emit(b, loc, *spec_.values[n.index].expr, leaf, memo); break;
        case Node::Count: r = count(b, loc, n.over); break;
        case Node::Unary: {
            Value a = emit(b, loc, *n.args[0], leaf, memo);
            switch (n.unary) {
            case UnaryOp::Neg: r = arith::NegFOp::create(b, loc, a); break;
            case UnaryOp::Sqrt: r = math::SqrtOp::create(b, loc, a); break;
            // Exact 1 / sqrt, not an approximate rsqrt instruction.
            case UnaryOp::Rsqrt: r = arith::DivFOp::create(b, loc, cst(b, loc, 1.0), math::SqrtOp::create(b, loc, a)); break;
            case UnaryOp::Tanh: r = math::TanhOp::create(b, loc, a); break;
            case UnaryOp::Exp: r = math::ExpOp::create(b, loc, a); break;
            case UnaryOp::Log: r = math::LogOp::create(b, loc, a); break;
            case UnaryOp::Abs: r = math::AbsFOp::create(b, loc, a); break;
            case UnaryOp::Sigmoid: {
                Value e = math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, a));
                r = arith::DivFOp::create(b, loc, cst(b, loc, 1.0), arith::AddFOp::create(b, loc, cst(b, loc, 1.0), e));
                break;
            }
            }
            break;
        }
        case Node::Binary: {
            Value a = emit(b, loc, *n.args[0], leaf, memo), c = emit(b, loc, *n.args[1], leaf, memo);
            switch (n.binary) {
            case BinaryOp::Add: r = arith::AddFOp::create(b, loc, a, c); break;
            case BinaryOp::Sub: r = arith::SubFOp::create(b, loc, a, c); break;
            case BinaryOp::Mul: r = arith::MulFOp::create(b, loc, a, c); break;
            case BinaryOp::Div: r = arith::DivFOp::create(b, loc, a, c); break;
            // maximumf/minimumf propagate NaN, as the reference does.
            case BinaryOp::Max: r = arith::MaximumFOp::create(b, loc, a, c); break;
            case BinaryOp::Min: r = arith::MinimumFOp::create(b, loc, a, c); break;
            case BinaryOp::Pow: r = math::PowFOp::create(b, loc, a, c); break;
            }
            break;
        }
        }
        if (!r) throw std::logic_error("mlir lowering: unknown node");
        memo[&n] = r;
        return r;
    }
};

// A sum that may be reassociated: LLVM's vectorizer splits it into vector lanes (which also keeps
// each partial sum shorter, so it is at least as accurate as the serial order).
Value add_reassoc(OpBuilder &b, Location loc, Value acc, Value v) {
    auto op = arith::AddFOp::create(b, loc, acc, v);
    op.setFastmath(arith::FastMathFlags::reassoc);
    return op;
}

AxisSet union_of(const AxisSet &a, const AxisSet &b) {
    AxisSet r = a;
    r.insert(r.end(), b.begin(), b.end());
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
    return r;
}

// Chan et al.'s merge of two Welford (count, mean, m2) triples.
std::array<Value, 3> chan_merge(OpBuilder &b, Location loc, const ExprEmitter &e, std::array<Value, 3> x, std::array<Value, 3> y) {
    Value nn = arith::AddFOp::create(b, loc, x[0], y[0]);
    Value d = arith::SubFOp::create(b, loc, y[1], x[1]);
    Value safe = arith::MaximumFOp::create(b, loc, nn, e.cst(b, loc, 1.0));
    Value w = arith::DivFOp::create(b, loc, y[0], safe);
    Value mean = arith::AddFOp::create(b, loc, x[1], arith::MulFOp::create(b, loc, d, w));
    Value m2 = arith::AddFOp::create(
        b, loc, arith::AddFOp::create(b, loc, x[2], y[2]),
        arith::MulFOp::create(b, loc, arith::MulFOp::create(b, loc, d, d), arith::MulFOp::create(b, loc, x[0], w)));
    return {nn, mean, m2};
}

// One Welford step: the triple (count, mean, m2) after adding x.
std::array<Value, 3> welford_step(OpBuilder &b, Location loc, const ExprEmitter &e, std::array<Value, 3> s, Value x) {
    Value c1 = arith::AddFOp::create(b, loc, s[0], e.cst(b, loc, 1.0));
    Value d = arith::SubFOp::create(b, loc, x, s[1]);
    Value mean1 = arith::AddFOp::create(b, loc, s[1], arith::DivFOp::create(b, loc, d, c1));
    Value m21 = arith::AddFOp::create(b, loc, s[2], arith::MulFOp::create(b, loc, d, arith::SubFOp::create(b, loc, x, mean1)));
    return {c1, mean1, m21};
}

Value index_to_float(OpBuilder &b, Location loc, Value idx, Type acc) {
    Value i = arith::IndexCastOp::create(b, loc, b.getI64Type(), idx);
    return arith::SIToFPOp::create(b, loc, acc, i);
}

Value index_cst(OpBuilder &b, Location loc, int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }

// ---- CPU: linalg on memrefs -----------------------------------------------------------------------

class CpuLowerer {
public:
    CpuLowerer(MLIRContext &ctx, const NormSpec &spec, const KernelTypes &types, bool full)
        : ctx_(ctx), spec_(spec), types_(types), full_(full), b_(&ctx), loc_(NameLoc::get(StringAttr::get(&ctx, spec.name))),
          acc_(element_type(ctx, spec.accumulate)), emitter_(spec, acc_, extent_f_) {}

    OwningOpRef<ModuleOp> run(const std::string &function) {
        OwningOpRef<ModuleOp> module = ModuleOp::create(loc_);
        b_.setInsertionPointToEnd(module->getBody());
        std::vector<Type> types;
        std::vector<std::vector<AxisId>> atoms;
        for (const TensorInfo &t : spec_.tensors) {
            atoms.push_back(spec_.memory_atoms(t.dims));
            types.push_back(arg_type(types_.storage.at(t.name), (int)atoms.back().size()));
        }
        std::vector<int> outs;
        for (size_t i = 0; i < spec_.outputs.size(); ++i) {
            const OutputInfo &o = spec_.outputs[i];
            if (o.optional && !full_) continue;
            outs.push_back((int)i);
            atoms.push_back(spec_.memory_atoms(o.dims));
            types.push_back(arg_type(types_.storage.at(o.name), (int)atoms.back().size()));
        }
        auto fn = func::FuncOp::create(b_, loc_, function, b_.getFunctionType(types, {}));
        fn->setAttr("llvm.emit_c_interface", b_.getUnitAttr());
        b_.setInsertionPointToStart(fn.addEntryBlock());
        for (size_t i = 0; i < spec_.tensors.size(); ++i) targs_.push_back(fn.getArgument((unsigned)i));

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

        for (size_t k = 0; k < outs.size(); ++k) {
            const OutputInfo &o = spec_.outputs[outs[k]];
            const Node &e = *spec_.values[o.value].expr;
            Inputs in = inputs_for(e);
            std::vector<AxisId> oat = spec_.memory_atoms(o.dims);
            Type st = cpu_storage_type(ctx_, types_.storage.at(o.name));
            map(oat, in.ops, {fn.getArgument((unsigned)(spec_.tensors.size() + k)), oat},
                [&](OpBuilder &b, Location loc, ValueRange args) -> SmallVector<Value> {
                    return {convert(b, loc, eval(b, loc, e, in, args), st)};
                });
        }
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

    MLIRContext &ctx_;
    const NormSpec &spec_;
    const KernelTypes &types_;
    bool full_;
    OpBuilder b_;
    Location loc_;
    Type acc_;
    std::vector<Value> targs_, ext_, extent_f_, allocs_;
    ExprEmitter emitter_;
    std::map<const Node *, Value> red_;

    MemRefType arg_type(DType t, int rank) {
        SmallVector<int64_t> shape(rank, ShapedType::kDynamic), strides(rank, ShapedType::kDynamic);
        if (rank) strides.back() = 1;
        return MemRefType::get(shape, cpu_storage_type(ctx_, t), StridedLayoutAttr::get(&ctx_, ShapedType::kDynamic, strides));
    }

    Value alloc(const AxisSet &axes, std::optional<double> init) {
        SmallVector<int64_t> shape(axes.size(), ShapedType::kDynamic);
        SmallVector<Value> sizes;
        for (AxisId a : axes) sizes.push_back(ext_[a]);
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
        const size_t k = fusable_suffix(domain, all);
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
                in.ops.push_back({targs_[l->index], spec_.memory_atoms(spec_.tensors[l->index].dims)});
            } else {
                Value r = reduce(*l);
                in.ops.push_back({r, l->axes});
            }
        }
        return in;
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

    using Term = std::function<Value(OpBuilder &, Location, Value, ValueRange)>;

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
    // reduced axes) and the remainder into T[kept axes]; then P and T are summed over the other
    // reduced axes and the blocks. (A shifted sum of zero-mean data drifts linearly with its
    // length: one 262144-element row summed straight through was 1e-6 off in its mean.)
    std::vector<Value> sums(const Node &n, const Inputs &in, const std::vector<Operand> &extra, const std::vector<Term> &terms) {
        constexpr int64_t kBlock = 256;
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
        std::vector<Value> P, T, S;
        {
            const unsigned nk = (unsigned)kept.size(), nd = nk + 2;
            auto map_of = [&](const std::vector<AxisId> &atoms) {
                SmallVector<AffineExpr> exprs;
                for (AxisId a : atoms) {
                    if (a == inner) exprs.push_back(getAffineDimExpr(nk, &ctx_) * kBlock + getAffineDimExpr(nk + 1, &ctx_));
                    else exprs.push_back(getAffineDimExpr((unsigned)(std::find(kept.begin(), kept.end(), a) - kept.begin()), &ctx_));
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
            maps.push_back(AffineMap::get(nd, 0, {getAffineDimExpr(nk + 1, &ctx_)}, &ctx_));
            in_vals.push_back(lanes);
            SmallVector<AffineExpr> pe;
            for (unsigned k = 0; k <= nk; ++k) pe.push_back(getAffineDimExpr(k, &ctx_));
            SmallVector<Value> psizes;
            for (AxisId a : kept) psizes.push_back(ext_[a]);
            psizes.push_back(nb);
            for (size_t t = 0; t < terms.size(); ++t) {
                Value p = memref::AllocOp::create(b_, loc_, MemRefType::get(SmallVector<int64_t>(nk + 1, ShapedType::kDynamic), acc_), psizes);
                linalg::FillOp::create(b_, loc_, ValueRange{emitter_.cst(b_, loc_, 0.0)}, ValueRange{p});
                allocs_.push_back(p);
                P.push_back(p);
                maps.push_back(AffineMap::get(nd, 0, pe, &ctx_));
                out_vals.push_back(p);
            }
            SmallVector<utils::IteratorType> iters(nd, utils::IteratorType::parallel);
            iters.back() = utils::IteratorType::reduction;
            auto f = body(terms.size());
            linalg::GenericOp::create(b_, loc_, ValueRange(in_vals), ValueRange(out_vals), maps, iters,
                                      [&](OpBuilder &nb2, Location nl, ValueRange args) {
                                          // args: ins..., lanes, outs...: drop the lanes operand.
                                          SmallVector<Value> a(args.begin(), args.begin() + ins.size());
                                          a.append(args.begin() + ins.size() + 1, args.end());
                                          SmallVector<Value> y = f(nb2, nl, ValueRange(a));
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
            generic(union_of(kept, {inner}), {inner}, tin, outs, body(terms.size()));
        }
        // Level 2: over the other reduced axes and the blocks.
        std::vector<AxisId> kept_blk = kept;
        const AxisId blk_axis = (AxisId)spec_.axes.size();  // a pseudo axis for the block index
        kept_blk.push_back(blk_axis);
        for (size_t t = 0; t < terms.size(); ++t) {
            Value s = alloc(n.axes, 0.0);
            AxisSet red_blk = outer;
            red_blk.push_back(blk_axis);
            generic(kept_blk, red_blk, {{P[t], kept_blk}}, {{s, n.axes}}, [&](OpBuilder &b, Location loc, ValueRange a) -> SmallVector<Value> {
                return {add_reassoc(b, loc, a[1], a[0])};
            });
            generic(kept, outer, {{T[t], kept}}, {{s, n.axes}}, [&](OpBuilder &b, Location loc, ValueRange a) -> SmallVector<Value> {
                return {add_reassoc(b, loc, a[1], a[0])};
            });
            S.push_back(s);
        }
        return S;
    }

    Value sum(const Node &n, const Inputs &in, const std::vector<Operand> &extra, const Term &term) {
        return sums(n, in, extra, {term})[0];
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

    // The mean of n's operand: the mean of the first min(64, extent) elements of the innermost
    // reduced axis (the shift k) plus the mean of (x - k) — the same shifted sum as the Halide
    // lowering, so large offsets do not eat the f32 digits of the partial sums.
    Value mean(const Node &n, const Inputs &in) {
        Value m = arith::MinUIOp::create(b_, loc_, ext_[n.over.back()], index_cst(b_, loc_, 64));
        Value mf = index_to_float(b_, loc_, m, acc_);
        Value ks = alloc(n.axes, 0.0);
        std::vector<Operand> rin;
        for (const Operand &op : in.ops) rin.push_back(restrict(op, n.over, m));
        const Node &arg = *n.args[0];
        generic(union_of(n.axes, n.over), n.over, rin, {{ks, n.axes}}, [&](OpBuilder &b, Location loc, ValueRange args) -> SmallVector<Value> {
            return {arith::AddFOp::create(b, loc, args.back(), eval(b, loc, arg, in, args))};
        });
        Value s = sum(n, in, {{ks, n.axes}}, [&](OpBuilder &b, Location loc, Value v, ValueRange ex) -> Value {
            return arith::SubFOp::create(b, loc, v, arith::DivFOp::create(b, loc, ex[0], mf));
        });
        Value cnt = emitter_.count(b_, loc_, n.over);
        return combine(n.axes, {ks, s}, [&](OpBuilder &b, Location loc, ValueRange a) -> Value {
            return arith::AddFOp::create(b, loc, arith::DivFOp::create(b, loc, a[0], mf), arith::DivFOp::create(b, loc, a[1], cnt));
        });
    }

    Value reduce(const Node &n) {
        if (auto it = red_.find(&n); it != red_.end()) return it->second;
        const Node &arg = *n.args[0];
        Inputs in = inputs_for(arg);
        Value cnt = emitter_.count(b_, loc_, n.over);
        Value r;
        switch (n.reduce) {
        case ReduceOp::Sum: r = sum(n, in, {}, [](OpBuilder &, Location, Value v, ValueRange) { return v; }); break;
        case ReduceOp::Mean: r = mean(n, in); break;
        case ReduceOp::Max:
        case ReduceOp::Min: {
            bool is_max = n.reduce == ReduceOp::Max;
            r = alloc(n.axes, is_max ? -INFINITY : INFINITY);
            generic(union_of(n.axes, n.over), n.over, in.ops, {{r, n.axes}}, [&](OpBuilder &b, Location loc, ValueRange args) -> SmallVector<Value> {
                Value v = eval(b, loc, arg, in, args);
                if (is_max) return {arith::MaximumFOp::create(b, loc, args.back(), v)};
                return {arith::MinimumFOp::create(b, loc, args.back(), v)};
            });
            break;
        }
        case ReduceOp::Var: r = variance(n, in, cnt); break;
        }
        red_[&n] = r;
        return r;
    }

    Value variance(const Node &n, const Inputs &in, Value cnt) {
        const Node &arg = *n.args[0];
        switch (spec_.variance) {
        case VarianceAlgorithm::TwoPass: {
            // Pass 1: the mean (LayerNorm's own mu when it declares one); pass 2: the mean squared
            // deviation from it.
            const Node *m = find_mean_like(spec_, n);
            Value mu = m ? reduce(*m) : mean(n, in);
            Value ss = sum(n, in, {{mu, n.axes}}, [](OpBuilder &b, Location loc, Value v, ValueRange ex) -> Value {
                Value d = arith::SubFOp::create(b, loc, v, ex[0]);
                return arith::MulFOp::create(b, loc, d, d);
            });
            return combine(n.axes, {ss}, [&](OpBuilder &b, Location loc, ValueRange a) -> Value { return arith::DivFOp::create(b, loc, a[0], cnt); });
        }
        case VarianceAlgorithm::OnePass: {
            // E[x^2] - E[x]^2 in one sweep, clamped at 0: fast, and unstable for large means, as declared.
            std::vector<Value> r = sums(n, in, {}, {[](OpBuilder &, Location, Value v, ValueRange) { return v; },
                                                    [](OpBuilder &b, Location loc, Value v, ValueRange) -> Value { return arith::MulFOp::create(b, loc, v, v); }});
            Value s = r[0], s2 = r[1];
            return combine(n.axes, {s, s2}, [&](OpBuilder &b, Location loc, ValueRange a) -> Value {
                Value mu = arith::DivFOp::create(b, loc, a[0], cnt);
                Value v = arith::SubFOp::create(b, loc, arith::DivFOp::create(b, loc, a[1], cnt), arith::MulFOp::create(b, loc, mu, mu));
                return arith::MaximumFOp::create(b, loc, v, emitter_.cst(b, loc, 0.0));
            });
        }
        case VarianceAlgorithm::Welford: {
            // Serial Welford per result element (count, mean, m2): exact to the declared algorithm.
            Value c = alloc(n.axes, 0.0), mu = alloc(n.axes, 0.0), m2 = alloc(n.axes, 0.0);
            generic(union_of(n.axes, n.over), n.over, in.ops, {{c, n.axes}, {mu, n.axes}, {m2, n.axes}},
                    [&](OpBuilder &b, Location loc, ValueRange args) -> SmallVector<Value> {
                        Value v = eval(b, loc, arg, in, args);
                        size_t o = in.ops.size();
                        auto s = welford_step(b, loc, emitter_, {args[o], args[o + 1], args[o + 2]}, v);
                        return {s[0], s[1], s[2]};
                    });
            return combine(n.axes, {c, m2}, [&](OpBuilder &b, Location loc, ValueRange a) -> Value {
                return arith::DivFOp::create(b, loc, a[1], arith::MaximumFOp::create(b, loc, a[0], emitter_.cst(b, loc, 1.0)));
            });
        }
        }
        throw std::logic_error("mlir lowering: unknown variance algorithm");
    }
};

// ---- CUDA: one block per index of the block axes ---------------------------------------------------

class CudaLowerer {
public:
    CudaLowerer(MLIRContext &ctx, const NormSpec &spec, const KernelTypes &types, bool full, const CudaPlan &plan)
        : ctx_(ctx), spec_(spec), types_(types), full_(full), plan_(plan), b_(&ctx), loc_(NameLoc::get(StringAttr::get(&ctx, spec.name))),
          acc_(element_type(ctx, spec.accumulate)), emitter_(spec, acc_, extent_f_) {}

    OwningOpRef<ModuleOp> run(const std::string &function) {
        OwningOpRef<ModuleOp> module = ModuleOp::create(loc_);
        (*module)->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), b_.getUnitAttr());
        b_.setInsertionPointToEnd(module->getBody());
        auto gm = gpu::GPUModuleOp::create(b_, loc_, "normgen_cuda");
        b_.setInsertionPointToStart(gm.getBody());

        std::vector<Type> types;
        std::vector<std::pair<std::string, std::vector<AxisId>>> args;  // name, atoms
        for (const TensorInfo &t : spec_.tensors) {
            args.push_back({t.name, spec_.memory_atoms(t.dims)});
            types.push_back(MemRefType::get({ShapedType::kDynamic}, element_type(ctx_, types_.storage.at(t.name))));
        }
        for (const OutputInfo &o : spec_.outputs) {
            if (o.optional && !full_) continue;
            outs_.push_back(&o);
            args.push_back({o.name, spec_.memory_atoms(o.dims)});
            types.push_back(MemRefType::get({ShapedType::kDynamic}, element_type(ctx_, types_.storage.at(o.name))));
        }
        for (size_t i = 0; i < plan_.extent_axes.size(); ++i) types.push_back(b_.getIndexType());
        bool welford = spec_.variance == VarianceAlgorithm::Welford && spec_.has_var_reduction();
        SmallVector<Type> wg;
        if (welford) {
            auto ws = gpu::AddressSpaceAttr::get(&ctx_, gpu::AddressSpace::Workgroup);
            for (int k = 0; k < 3; ++k) wg.push_back(MemRefType::get({plan_.block_threads}, acc_, MemRefLayoutAttrInterface(), ws));
        }
        auto fn = gpu::GPUFuncOp::create(b_, loc_, function, b_.getFunctionType(types, {}), wg);
        fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b_.getUnitAttr());
        // The block size is fixed: the launcher uses it, and LLVM may rely on it.
        fn.setKnownBlockSizeAttr(b_.getDenseI32ArrayAttr({plan_.block_threads, 1, 1}));
        Block &entry = fn.getBody().front();
        b_.setInsertionPointToStart(&entry);
        for (size_t i = 0; i < args.size(); ++i) {
            mem_.push_back(entry.getArgument((unsigned)i));
            atoms_.push_back(args[i].second);
        }
        if (welford)
            for (int k = 0; k < 3; ++k) wg_[k] = fn.getWorkgroupAttributions()[k];
        ext_.assign(spec_.axes.size(), Value());
        extent_f_.assign(spec_.axes.size(), Value());
        for (size_t i = 0; i < plan_.extent_axes.size(); ++i) {
            AxisId a = plan_.extent_axes[i];
            ext_[a] = entry.getArgument((unsigned)(args.size() + i));
            extent_f_[a] = index_to_float(b_, loc_, ext_[a], acc_);
        }
        tid_ = gpu::ThreadIdOp::create(b_, loc_, gpu::Dimension::x);
        nthreads_ = index_cst(b_, loc_, plan_.block_threads);
        Value bid = gpu::BlockIdOp::create(b_, loc_, gpu::Dimension::x);
        Env env;
        delinearize(b_, loc_, bid, plan_.block_axes, env);

        for (size_t k = 0; k < outs_.size(); ++k) {
            const OutputInfo &o = *outs_[k];
            const Node &e = *spec_.values[o.value].expr;
            ensure_reductions(e, env);
            size_t ai = spec_.tensors.size() + k;
            std::vector<AxisId> rest;
            for (AxisId a : atoms_[ai])
                if (!std::count(plan_.block_axes.begin(), plan_.block_axes.end(), a)) rest.push_back(a);
            Type st = element_type(ctx_, types_.storage.at(o.name));
            strided_loop(rest, {}, env, [&](OpBuilder &b, Location loc, const Env &env2, ValueRange) -> SmallVector<Value> {
                Value v = convert(b, loc, eval(b, loc, e, env2), st);
                memref::StoreOp::create(b, loc, v, mem_[ai], ValueRange{linear(b, loc, atoms_[ai], env2)});
                return {};
            });
        }
        gpu::ReturnOp::create(b_, loc_);
        return module;
    }

private:
    using Env = std::map<AxisId, Value>;
    using Step = std::function<SmallVector<Value>(OpBuilder &, Location, const Env &, ValueRange)>;

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
    Value tid_, nthreads_, wg_[3];
    ExprEmitter emitter_;
    std::map<const Node *, Value> red_;

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
        std::map<int, Value> loaded;  // one load per tensor per evaluation
        return emitter_.emit(b, loc, e, [&](OpBuilder &bb, Location ll, const Node &leaf) -> Value {
            if (leaf.kind == Node::Reduce) return red_.at(&leaf);
            Value &v = loaded[leaf.index];
            if (!v) v = convert(bb, ll, memref::LoadOp::create(bb, ll, mem_[leaf.index], ValueRange{linear(bb, ll, atoms_[leaf.index], env)}), acc_);
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

    // The shift of a mean: the mean of the first min(64, extent) elements along the innermost
    // reduced axis (every thread computes it; the loads are shared through the cache).
    Value shift(const Node &n, const Env &env) {
        Value m = arith::MinUIOp::create(b_, loc_, ext_[n.over.back()], index_cst(b_, loc_, 64));
        Env env0 = env;
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

    Value mean(const Node &n, const Env &env) {
        Value k = shift(n, env);
        Value part = strided_loop(n.over, {emitter_.cst(b_, loc_, 0.0)}, env, [&](OpBuilder &b, Location loc, const Env &e2, ValueRange acc) -> SmallVector<Value> {
            return {arith::AddFOp::create(b, loc, acc[0], arith::SubFOp::create(b, loc, eval(b, loc, *n.args[0], e2), k))};
        })[0];
        Value s = all_reduce(part, gpu::AllReduceOperation::ADD);
        return arith::AddFOp::create(b_, loc_, k, arith::DivFOp::create(b_, loc_, s, emitter_.count(b_, loc_, n.over)));
    }

    Value reduce(const Node &n, const Env &env) {
        if (auto it = red_.find(&n); it != red_.end()) return it->second;
        ensure_reductions(*n.args[0], env);
        const Node &arg = *n.args[0];
        Value cnt = emitter_.count(b_, loc_, n.over);
        Value r;
        switch (n.reduce) {
        case ReduceOp::Sum: {
            Value part = strided_loop(n.over, {emitter_.cst(b_, loc_, 0.0)}, env, [&](OpBuilder &b, Location loc, const Env &e2, ValueRange acc) -> SmallVector<Value> {
                return {arith::AddFOp::create(b, loc, acc[0], eval(b, loc, arg, e2))};
            })[0];
            r = all_reduce(part, gpu::AllReduceOperation::ADD);
            break;
        }
        case ReduceOp::Mean: r = mean(n, env); break;
        case ReduceOp::Max:
        case ReduceOp::Min: {
            bool is_max = n.reduce == ReduceOp::Max;
            Value part = strided_loop(n.over, {emitter_.cst(b_, loc_, is_max ? -INFINITY : INFINITY)}, env,
                                      [&](OpBuilder &b, Location loc, const Env &e2, ValueRange acc) -> SmallVector<Value> {
                                          Value v = eval(b, loc, arg, e2);
                                          if (is_max) return {arith::MaximumFOp::create(b, loc, acc[0], v)};
                                          return {arith::MinimumFOp::create(b, loc, acc[0], v)};
                                      })[0];
            r = all_reduce(part, is_max ? gpu::AllReduceOperation::MAXIMUMF : gpu::AllReduceOperation::MINIMUMF);
            break;
        }
        case ReduceOp::Var: r = variance(n, env, cnt); break;
        }
        red_[&n] = r;
        return r;
    }

    Value variance(const Node &n, const Env &env, Value cnt) {
        const Node &arg = *n.args[0];
        switch (spec_.variance) {
        case VarianceAlgorithm::TwoPass: {
            const Node *m = find_mean_like(spec_, n);
            Value mu = m ? reduce(*m, env) : mean(n, env);
            Value part = strided_loop(n.over, {emitter_.cst(b_, loc_, 0.0)}, env, [&](OpBuilder &b, Location loc, const Env &e2, ValueRange acc) -> SmallVector<Value> {
                Value d = arith::SubFOp::create(b, loc, eval(b, loc, arg, e2), mu);
                return {arith::AddFOp::create(b, loc, acc[0], arith::MulFOp::create(b, loc, d, d))};
            })[0];
            return arith::DivFOp::create(b_, loc_, all_reduce(part, gpu::AllReduceOperation::ADD), cnt);
        }
        case VarianceAlgorithm::OnePass: {
            Value z = emitter_.cst(b_, loc_, 0.0);
            SmallVector<Value> p = strided_loop(n.over, {z, z}, env, [&](OpBuilder &b, Location loc, const Env &e2, ValueRange acc) -> SmallVector<Value> {
                Value v = eval(b, loc, arg, e2);
                return {arith::AddFOp::create(b, loc, acc[0], v), arith::AddFOp::create(b, loc, acc[1], arith::MulFOp::create(b, loc, v, v))};
            });
            Value mu = arith::DivFOp::create(b_, loc_, all_reduce(p[0], gpu::AllReduceOperation::ADD), cnt);
            Value ex2 = arith::DivFOp::create(b_, loc_, all_reduce(p[1], gpu::AllReduceOperation::ADD), cnt);
            Value v = arith::SubFOp::create(b_, loc_, ex2, arith::MulFOp::create(b_, loc_, mu, mu));
            return arith::MaximumFOp::create(b_, loc_, v, z);
        }
        case VarianceAlgorithm::Welford: {
            // Per thread a serial Welford; the triples meet in workgroup memory and every thread
            // merges them in the same order (Chan et al.), so all hold the same result.
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
        }
        throw std::logic_error("mlir lowering: unknown variance algorithm");
    }
};

AxisSet reduced_axes(const NormSpec &spec) {
    AxisSet r;
    for (const Stage &s : spec.stages)
        for (const NodePtr &n : s.reductions) r = union_of(r, n->over);
    return r;
}

}  // namespace

OwningOpRef<ModuleOp> lower_cpu(MLIRContext &ctx, const NormSpec &spec, const KernelTypes &types, bool full, const std::string &function) {
    return CpuLowerer(ctx, spec, types, full).run(function);
}

CudaPlan plan_cuda(const NormSpec &spec) {
    CudaPlan p;
    AxisSet reduced = reduced_axes(spec);
    for (size_t a = 0; a < spec.axes.size(); ++a)
        if (!spec.axes[a].is_split()) p.extent_axes.push_back((AxisId)a);
    if (reduced.empty()) {
        // No statistics: a block per row of the first output's innermost axis.
        std::vector<AxisId> atoms = spec.memory_atoms(spec.outputs.at(0).dims);
        if (!atoms.empty()) atoms.pop_back();
        std::sort(atoms.begin(), atoms.end());
        p.block_axes = atoms;
        return p;
    }
    for (AxisId a : p.extent_axes)
        if (!std::count(reduced.begin(), reduced.end(), a)) p.block_axes.push_back(a);
    for (const Stage &s : spec.stages)
        for (const NodePtr &n : s.reductions)
            for (AxisId a : n->axes)
                if (!std::count(p.block_axes.begin(), p.block_axes.end(), a))
                    throw UserError(spec.file + ":" + std::to_string(n->loc.line) + ":" + std::to_string(n->loc.col) +
                                    ": mlir-cuda: this reduction keeps axis '" + spec.axes[a].name +
                                    "', which another stage reduces; the CUDA lowering needs every statistic to be per block "
                                    "(over axes no stage reduces)");
    return p;
}

OwningOpRef<ModuleOp> lower_cuda(MLIRContext &ctx, const NormSpec &spec, const KernelTypes &types, bool full, const std::string &function,
                                 const CudaPlan &plan) {
    return CudaLowerer(ctx, spec, types, full, plan).run(function);
}

std::vector<AxisId> split_candidates(const NormSpec &spec, bool full) {
    AxisSet reduced = reduced_axes(spec);
    std::vector<AxisId> r;
    for (size_t a = 0; a < spec.axes.size(); ++a) {
        if (spec.axes[a].is_split() || std::count(reduced.begin(), reduced.end(), (AxisId)a)) continue;
        bool everywhere = true;
        for (const OutputInfo &o : spec.outputs) {
            if (o.optional && !full) continue;
            std::vector<AxisId> at = spec.memory_atoms(o.dims);
            everywhere = everywhere && std::count(at.begin(), at.end(), (AxisId)a);
        }
        if (everywhere) r.push_back((AxisId)a);
    }
    return r;
}

}  // namespace normgen::mlirgen
