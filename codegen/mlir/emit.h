// The MLIR lowerings' shared emitters (lower_cpu.cpp, lower_cuda.cpp): storage and accumulation
// types and the conversions between them, DSL locations as MLIR locations, the leaves of an
// expression, the expression emitter, and the Welford step and merge. The algorithm of the
// reductions is algorithm.h; the pass pipelines are pipeline.cpp.
#pragma once

#include "codegen/common/kernel_plan.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <stdexcept>
#include <vector>

namespace normgen::mlirgen {

using namespace mlir;


inline Type element_type(MLIRContext &ctx, DType t) {
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
inline Type cpu_storage_type(MLIRContext &ctx, DType t) { return t == DType::BF16 ? Type(IntegerType::get(&ctx, 16)) : element_type(ctx, t); }

inline Value convert(OpBuilder &b, Location loc, Value v, Type to);

inline Value bf16_bits_to_f32(OpBuilder &b, Location loc, Value bits) {
    Value w = arith::ExtUIOp::create(b, loc, b.getI32Type(), bits);
    w = arith::ShLIOp::create(b, loc, w, arith::ConstantIntOp::create(b, loc, b.getI32Type(), 16));
    return arith::BitcastOp::create(b, loc, b.getF32Type(), w);
}

inline Value f32_to_bf16_bits(OpBuilder &b, Location loc, Value f) {
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

inline Value convert(OpBuilder &b, Location loc, Value v, Type to) {
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

// A DSL node's location as an MLIR location (file:line:col of the declaration), so `explain` and
// MLIR's diagnostics point at the source; `fallback` for nodes without one.
inline Location node_loc(MLIRContext *ctx, const NormSpec &spec, const Node &n, Location fallback) {
    if (n.loc.line <= 0) return fallback;
    return FileLineColLoc::get(ctx, spec.file.empty() ? spec.name : spec.file, (unsigned)n.loc.line, (unsigned)n.loc.col);
}

// Sets a lowerer's current location for the ops of one DSL node, and restores it.
struct ScopedLoc {
    Location &l;
    Location saved;
    ScopedLoc(Location &current, Location now) : l(current), saved(current) { l = now; }
    ~ScopedLoc() { l = saved; }
};

// The tensor and reduction leaves of an expression (named values inlined; a reduction is a leaf:
// it is computed before the expressions that use it).
struct Leaves {
    std::vector<const Node *> nodes;  // Tensor (first of each index) and Reduce nodes, in first-use order
    void collect(const NormSpec &spec, const Node &n) {
        switch (n.kind) {
        case Node::Tensor:
            for (const Node *l : nodes)
                if (same_element(*l, n)) return;
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
            if (l == &n || same_element(*l, n)) return (int)i;
        }
        return -1;
    }
    // The same tensor, or the same element of an indexed one (weight[0] and weight[1] are two leaves).
    static bool same_element(const Node &a, const Node &b) {
        return a.kind == Node::Tensor && b.kind == Node::Tensor && a.index == b.index && a.at == b.at;
    }
};

// Emits the arithmetic of an expression in the accumulation type; leaves come from a callback.
class ExprEmitter {
public:
    using LeafFn = std::function<Value(OpBuilder &, Location, const Node &)>;
    // `storage`: the kernel's storage types, and the MLIR type a value of a storage type is kept in
    // (the CPU keeps bf16 as i16 bits): a rounding point converts there and back.
    using StorageTypeFn = std::function<Type(DType)>;
    ExprEmitter(const NormSpec &spec, Type acc, const std::vector<Value> &extent_f, const KernelTypes &storage, StorageTypeFn storage_type)
        : spec_(spec), acc_(acc), extent_f_(extent_f), storage_(storage), storage_type_(std::move(storage_type)) {}

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
    const KernelTypes &storage_;
    StorageTypeFn storage_type_;

    Value emit(OpBuilder &b, Location outer, const Node &n, const LeafFn &leaf, std::map<const Node *, Value> &memo) {
        if (auto it = memo.find(&n); it != memo.end()) return it->second;
        const Location loc = node_loc(b.getContext(), spec_, n, outer);
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
            case UnaryOp::Step: {
                Value gt = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, a, cst(b, loc, 0.0));
                r = arith::SelectOp::create(b, loc, gt, cst(b, loc, 1.0), cst(b, loc, 0.0));
                break;
            }
            case UnaryOp::Sigmoid: {
                Value e = math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, a));
                r = arith::DivFOp::create(b, loc, cst(b, loc, 1.0), arith::AddFOp::create(b, loc, cst(b, loc, 1.0), e));
                break;
            }
            // A rounding point: to nearest even in the storage type, then back to the accumulation type.
            case UnaryOp::Round:
                r = convert(b, loc, convert(b, loc, a, storage_type_(rounding_type(spec_, n, storage_.storage))), acc_);
                break;
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
inline Value add_reassoc(OpBuilder &b, Location loc, Value acc, Value v) {
    auto op = arith::AddFOp::create(b, loc, acc, v);
    op.setFastmath(arith::FastMathFlags::reassoc);
    return op;
}

inline AxisSet union_of(const AxisSet &a, const AxisSet &b) {
    AxisSet r = a;
    r.insert(r.end(), b.begin(), b.end());
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
    return r;
}

// Chan et al.'s merge of two Welford (count, mean, m2) triples.
inline std::array<Value, 3> chan_merge(OpBuilder &b, Location loc, const ExprEmitter &e, std::array<Value, 3> x, std::array<Value, 3> y) {
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
inline std::array<Value, 3> welford_step(OpBuilder &b, Location loc, const ExprEmitter &e, std::array<Value, 3> s, Value x) {
    Value c1 = arith::AddFOp::create(b, loc, s[0], e.cst(b, loc, 1.0));
    Value d = arith::SubFOp::create(b, loc, x, s[1]);
    Value mean1 = arith::AddFOp::create(b, loc, s[1], arith::DivFOp::create(b, loc, d, c1));
    Value m21 = arith::AddFOp::create(b, loc, s[2], arith::MulFOp::create(b, loc, d, arith::SubFOp::create(b, loc, x, mean1)));
    return {c1, mean1, m21};
}

inline Value index_to_float(OpBuilder &b, Location loc, Value idx, Type acc) {
    Value i = arith::IndexCastOp::create(b, loc, b.getI64Type(), idx);
    return arith::SIToFPOp::create(b, loc, acc, i);
}

inline Value index_cst(OpBuilder &b, Location loc, int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }

}  // namespace normgen::mlirgen
