// The declared algorithm of every reduction, written once for both MLIR lowerings: sums, means
// shifted by their first elements, the three variance algorithms, max/min. What differs between
// the CPU and the CUDA lowering is only how a statistic is held and how one sweep over the reduced
// axes is emitted; a Strategy says that:
//
//   using Stat = ...;          CPU: a buffer over the reduction's kept axes (and a divisor, so the
//                              shift of a mean costs no extra pass); CUDA: a value per block
//   std::vector<Stat> sweep(const Node &n, const std::vector<Stat> &stats, const std::vector<Term> &terms)
//                        for each term t, the sum over n.over of t(operand value, stats): one sweep
//   Stat shift(const Node &n)      the mean of the first min(64, extent) elements of the innermost
//                                  reduced axis (the shift of a mean)
//   Stat extreme(const Node &n, bool is_max)
//   Stat welford(const Node &n)    the declared Welford variance (serial steps merged by Chan's rule)
//   Stat combine(const Node &n, const std::vector<Stat> &stats, const Elementwise &f)
//                                  f of the statistics, element by element
//   Stat reduce(const Node &n)     memoized: a reduction the algorithm reuses (LayerNorm's own mu)
//   mlir::Value count(const Node &n)   the number of elements reduced, in the accumulation type
//
// Why shifted means: summing x - k, k the mean of the first 64 elements, keeps the partial sums near
// sigma * sqrt(block) whether the data sit far from zero or not (the same shift as the Halide
// lowering, codegen/halide/lower.cpp).
#pragma once

#include "codegen/common/kernel_plan.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"

#include <functional>
#include <stdexcept>
#include <vector>

namespace normgen::mlirgen {

// One summand of a sweep: the operand's value at a point and the statistics it may use.
using Term = std::function<mlir::Value(mlir::OpBuilder &, mlir::Location, mlir::Value v, mlir::ValueRange stats)>;
using Elementwise = std::function<mlir::Value(mlir::OpBuilder &, mlir::Location, mlir::ValueRange stats)>;

template <class Strategy>
class ReductionAlgorithm {
public:
    using Stat = typename Strategy::Stat;
    ReductionAlgorithm(Strategy &s, const NormSpec &spec) : s_(s), spec_(spec) {}

    Stat reduction(const Node &n) {
        switch (n.reduce) {
        case ReduceOp::Sum: return s_.sweep(n, {}, {identity()})[0];
        case ReduceOp::Mean: return mean(n);
        case ReduceOp::Max: return s_.extreme(n, true);
        case ReduceOp::Min: return s_.extreme(n, false);
        case ReduceOp::Var: return variance(n);
        }
        throw std::logic_error("mlir lowering: unknown reduction");
    }

    // shift + sum(x - shift) / count.
    Stat mean(const Node &n) {
        Stat k = s_.shift(n);
        Stat sum = s_.sweep(n, {k}, {[](mlir::OpBuilder &b, mlir::Location loc, mlir::Value v, mlir::ValueRange st) -> mlir::Value {
                                           return mlir::arith::SubFOp::create(b, loc, v, st[0]);
                                       }})[0];
        mlir::Value cnt = s_.count(n);
        return s_.combine(n, {k, sum}, [cnt](mlir::OpBuilder &b, mlir::Location loc, mlir::ValueRange a) -> mlir::Value {
            return mlir::arith::AddFOp::create(b, loc, a[0], mlir::arith::DivFOp::create(b, loc, a[1], cnt));
        });
    }

    Stat variance(const Node &n) {
        mlir::Value cnt = s_.count(n);
        switch (spec_.variance) {
        case VarianceAlgorithm::TwoPass: {
            // Pass 1: the mean (the declaration's own mean of the same operand when it has one,
            // LayerNorm's mu: one sweep fewer); pass 2: the mean squared deviation from it.
            const Node *m = find_mean_like(spec_, n);
            Stat mu = m ? s_.reduce(*m) : mean(n);
            Stat ss = s_.sweep(n, {mu}, {[](mlir::OpBuilder &b, mlir::Location loc, mlir::Value v, mlir::ValueRange st) -> mlir::Value {
                                          mlir::Value d = mlir::arith::SubFOp::create(b, loc, v, st[0]);
                                          return mlir::arith::MulFOp::create(b, loc, d, d);
                                      }})[0];
            return s_.combine(n, {ss}, [cnt](mlir::OpBuilder &b, mlir::Location loc, mlir::ValueRange a) -> mlir::Value {
                return mlir::arith::DivFOp::create(b, loc, a[0], cnt);
            });
        }
        case VarianceAlgorithm::OnePass: {
            // E[x^2] - E[x]^2 in one sweep, clamped at 0: fast, and unstable for large means, as declared.
            std::vector<Stat> r =
                s_.sweep(n, {}, {identity(), [](mlir::OpBuilder &b, mlir::Location loc, mlir::Value v, mlir::ValueRange) -> mlir::Value {
                                     return mlir::arith::MulFOp::create(b, loc, v, v);
                                 }});
            return s_.combine(n, {r[0], r[1]}, [cnt](mlir::OpBuilder &b, mlir::Location loc, mlir::ValueRange a) -> mlir::Value {
                mlir::Value mu = mlir::arith::DivFOp::create(b, loc, a[0], cnt);
                mlir::Value v = mlir::arith::SubFOp::create(b, loc, mlir::arith::DivFOp::create(b, loc, a[1], cnt),
                                                            mlir::arith::MulFOp::create(b, loc, mu, mu));
                mlir::Value zero = mlir::arith::ConstantOp::create(b, loc, mlir::FloatAttr::get(v.getType(), 0.0));
                return mlir::arith::MaximumFOp::create(b, loc, v, zero);
            });
        }
        case VarianceAlgorithm::Welford: return s_.welford(n);
        }
        throw std::logic_error("mlir lowering: unknown variance algorithm");
    }

private:
    Strategy &s_;
    const NormSpec &spec_;

    static Term identity() {
        return [](mlir::OpBuilder &, mlir::Location, mlir::Value v, mlir::ValueRange) { return v; };
    }
};

}  // namespace normgen::mlirgen
