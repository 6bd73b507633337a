// The vectorizable f32 exp and tanh of the Halide lowering (codegen/halide/lower.h), JIT-compiled
// with a 16-wide vectorized schedule and swept against libm in float64.
#include "codegen/halide/lower.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace Halide;

namespace {

std::vector<float> sweep() {
    std::vector<float> v;
    for (int i = -40000; i <= 40000; ++i) v.push_back(i * 5e-4f);  // [-20, 20] densely
    for (float m = 1e-30f; m < 1.0f; m *= 1.7f) {                   // tiny magnitudes
        v.push_back(m);
        v.push_back(-m);
    }
    for (float b : {0.549f, 0.5499999f, 0.55f, 0.5500001f, 8.9412f, 8.999999f, 9.0f, 9.000001f, 30.0f, 44.0f, 80.0f, 88.0f,
                    88.72f, 88.73f, 100.0f, -87.0f, -103.0f, -104.5f, -200.0f})
        v.push_back(b);
    v.push_back(0.0f);
    v.push_back(std::numeric_limits<float>::infinity());
    v.push_back(-std::numeric_limits<float>::infinity());
    v.push_back(std::numeric_limits<float>::quiet_NaN());
    while (v.size() % 16) v.push_back(1.0f);
    return v;
}

std::vector<float> run(Expr (*fn)(Expr), const std::vector<float> &xs) {
    Buffer<float> in((int)xs.size()), out((int)xs.size());
    for (size_t i = 0; i < xs.size(); ++i) in((int)i) = xs[i];
    Var i("i");
    Func f("f");
    f(i) = fn(in(i));
    f.vectorize(i, 16);
    f.realize(out);
    return std::vector<float>(out.data(), out.data() + xs.size());
}

// Relative error in units of 2^-23 (one f32 ulp at 1), absolute below FLT_MIN-ish magnitudes.
double err_ulps(double got, double want) {
    if (std::isnan(want)) return std::isnan(got) ? 0 : 1e30;
    if (std::isinf(want)) return got == want ? 0 : 1e30;
    return std::fabs(got - want) / std::max(std::fabs(want), 1e-30) * 8388608.0;
}

}  // namespace

TEST_CASE("tanh_f32 is within 2.5 ulps (2^-23 relative) of tanh over the whole range, NaN and infinities included") {
    std::vector<float> xs = sweep();
    std::vector<float> ys = run(normgen::hl::tanh_f32, xs);
    double worst = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
        double e = err_ulps(ys[i], std::tanh((double)xs[i]));
        INFO("x = " << xs[i] << ": got " << ys[i] << ", want " << std::tanh((double)xs[i]));
        REQUIRE(e <= 2.5);
        worst = std::max(worst, e);
    }
    WARN("tanh_f32 worst error " << worst << " ulps");
    CHECK(ys.back() == Approx(0.7615942f));  // the padding, x = 1: the last vector was computed too
}

TEST_CASE("exp_f32 is within 3 ulps of exp where the result is a normal float") {
    std::vector<float> xs = sweep();
    std::vector<float> ys = run(normgen::hl::exp_f32, xs);
    for (size_t i = 0; i < xs.size(); ++i) {
        const double want = std::exp((double)xs[i]);
        INFO("x = " << xs[i] << ": got " << ys[i] << ", want " << want);
        if (want > std::numeric_limits<float>::max())
            REQUIRE(std::isinf(ys[i]));
        else if (want < std::numeric_limits<float>::min())
            REQUIRE(std::fabs(ys[i]) <= std::numeric_limits<float>::min());  // denormal range: absolute
        else
            REQUIRE(err_ulps(ys[i], want) <= 3.0);
    }
}
