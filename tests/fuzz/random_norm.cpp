// Random well-formed declarations from the C++ builder (random_norm.h). Each declaration draws:
//   a layout: [rows, d], [n, s, d], [n, c, h, w] or GroupNorm's [n, c: (g, cg), h, w];
//   a first stage over a random non-empty proper subset of the axes: mean, var, mean of squares,
//     a max of |x|, or a sum over a count;
//   where eps sits: inside the root, outside it, or as a clamp;
//   affine terms over random axis subsets: weight, bias, Gemma's (1 + w), an indexed pair;
//   sometimes a second, dependent stage; sometimes an elementwise function; sometimes a rounding point;
//   the variance algorithm (two_pass or welford: a one-pass variance fails the verifier by design).
#include "random_norm.h"

#include "dsl/builder.h"

#include <random>

using namespace normgen;

namespace normgen::test {

namespace {

struct Gen {
    std::mt19937_64 rng;
    explicit Gen(uint64_t seed) : rng(seed) {}
    int pick(int n) { return (int)(rng() % (uint64_t)n); }
    bool coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }

    // A random non-empty proper subset of `axes` (any non-empty subset when `proper` is false).
    AxisList subset(const AxisList &axes, bool proper) {
        for (;;) {
            AxisList r;
            for (const auto &a : axes)
                if (coin(0.5)) r.push_back(a);
            if (!r.empty() && (!proper || r.size() < axes.size())) return r;
        }
    }
};

}  // namespace

NormSpec random_norm(uint64_t seed, const std::string &name) {
    Gen g(seed);
    NormBuilder b(name);
    AxisList atoms;  // atomic axes, declaration order
    BExpr x = 0;
    switch (g.pick(4)) {
    case 0: x = b.input("x", {"rows", "d"}); atoms = {"rows", "d"}; break;
    case 1: x = b.input("x", {"n", "s", "d"}); atoms = {"n", "s", "d"}; break;
    case 2: x = b.input("x", {"n", "c", "h", "w"}); atoms = {"n", "c", "h", "w"}; break;
    default:
        x = b.input("x", {"n", split("c", {"g", "cg"}), "h", "w"});
        b.axis("g", 2 + 2 * g.pick(2));
        atoms = {"n", "g", "cg", "h", "w"};
    }
    const auto eps = b.constant("eps", g.coin(0.5) ? 1e-5 : 1e-6);
    const AxisList r1 = g.subset(atoms, true);

    // The first stage and how it normalizes.
    BExpr normalized = 0;
    bool uses_var = false;
    switch (g.pick(5)) {
    case 0: {  // LayerNorm-like, eps inside or outside the root
        auto mu = b.let("mu", mean(x, r1));
        auto v = b.let("v", var(x, r1));
        uses_var = true;
        normalized = g.coin(0.7) ? (x - mu) * rsqrt(v + eps) : (x - mu) / (sqrt(v) + eps);
        break;
    }
    case 1: {  // RMSNorm-like
        auto ms = b.let("ms", mean(x * x, r1));
        normalized = x * rsqrt(ms + eps);
        break;
    }
    case 2: {  // ScaleNorm-like clamp
        auto n2 = b.let("n2", sqrt(sum(x * x, r1)));
        normalized = x / max(n2, eps);
        break;
    }
    case 3: {  // max-abs scaling
        auto m = b.let("m", max(abs(x), r1));
        normalized = x / (m + eps);
        break;
    }
    default: {  // a centered sum over a count
        auto mu = b.let("mu", sum(x, r1) / count(r1));
        auto ss = b.let("ss", mean((x - mu) * (x - mu), r1));
        normalized = (x - mu) * rsqrt(ss + eps);
    }
    }
    if (g.coin(0.15)) normalized = round(normalized, "x");
    BExpr y = b.let("h", normalized);

    // A second, dependent stage.
    if (g.coin(0.3)) {
        const AxisList r2 = g.subset(atoms, true);
        auto ms2 = b.let("ms2", mean(y * y, r2));
        y = y * rsqrt(ms2 + eps);
    }
    // Affine terms over random subsets of the axes other than the first.
    AxisList rest(atoms.begin() + 1, atoms.end());
    auto param_shape = [&]() {
        BShape s;
        if (g.coin(0.2)) return s;  // a scalar
        for (const auto &a : g.subset(rest, false)) s.push_back(a);
        return s;
    };
    switch (g.pick(4)) {
    case 0: break;
    case 1: y = y * b.param("weight", param_shape()); break;
    case 2: y = y * (1 + b.param("weight", param_shape())); break;
    default: y = y * b.param("weight", param_shape()) + b.param("bias", param_shape());
    }
    if (g.coin(0.15)) {
        auto mix = b.param("mix", {"k"});
        b.axis("k", 2);
        y = mix[{0}] * y + mix[{1}];
    }
    switch (g.pick(6)) {
    case 0: y = tanh(y); break;
    case 1: y = y * sigmoid(y); break;
    case 2: y = exp(-abs(y)); break;
    default: break;
    }
    b.output("y", y);
    if (g.coin(0.3)) b.mark_output("h", optional_output());
    b.accumulate(DType::F32);
    if (uses_var) b.variance(g.coin(0.5) ? VarianceAlgorithm::TwoPass : VarianceAlgorithm::Welford);
    b.storage({"x", "y"}, {DType::F32, DType::BF16, DType::F16});
    return b.build();
}


}  // namespace normgen::test
