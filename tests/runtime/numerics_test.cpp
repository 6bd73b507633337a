// The language's numerics and meaning on the float64 reference: rounding points (where and how the
// reference rounds, and what the verifier's sensitivity sees), indexed parameters (PolyNorm),
// WeightNorm (a normalized parameter), and the invariance table of any declaration (the seeds'
// table for BatchNorm, WeightNorm, LayerNorm and RMSNorm exactly; an answer for every catalog layer).
//
// The inputs are drawn from a seed printed with every failure; set NORMGEN_TEST_SEED to replay one.
#include "dsl/builder.h"
#include "dsl/checker.h"
#include "dsl/printer.h"
#include "runtime/errors.h"
#include "runtime/random_inputs.h"
#include "runtime/reference/interpreter.h"
#include "runtime/reference/invariants.h"
#include "runtime/storage.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

using namespace normgen;

namespace {

std::string catalog(const std::string &name) { return std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/" + name + ".norm"; }

uint64_t test_seed() {
    static const uint64_t seed = [] {
        if (const char *s = std::getenv("NORMGEN_TEST_SEED")) return (uint64_t)std::strtoull(s, nullptr, 10);
        return ((uint64_t)std::random_device{}() << 32) ^ std::random_device{}();
    }();
    return seed;
}

HostTensor tensor(std::vector<int64_t> shape, std::vector<double> data) { return HostTensor{std::move(shape), std::move(data)}; }

std::vector<double> normals(size_t n, uint64_t salt, double mean = 0) {
    std::mt19937_64 g(test_seed() ^ salt);
    std::vector<double> v(n);
    for (double &x : v) x = mean + std::normal_distribution<double>()(g) + 1e-3;  // never exactly 0
    return v;
}

}  // namespace

TEST_CASE("a rounding point rounds the float64 value to nearest even in its type, exactly there", "[reference][rounding]") {
    NormSpec s = load_norm_text("t.norm", R"(norm r(x: [d]) -> y, z {
  y = round(x / 3, to: bf16) * 3
  z = round(x / 3, to: x) * 3
  storage x, y, z: f32 | bf16 | f16
})");
    INFO("seed " << test_seed());
    std::vector<double> xs = normals(257, 1);
    TensorMap in{{"x", tensor({257}, xs)}};
    TensorMap def = evaluate_reference(s, in);                                 // x takes its default, f32
    TensorMap f16 = evaluate_reference(s, in, {}, {{{"x", DType::F16}}});      // as in the f16 kernel
    TensorMap off = evaluate_reference(s, in, {}, {{}, Rounding::Ignored});
    TensorMap up = evaluate_reference(s, in, {}, {{}, Rounding::UlpUp});
    int moved = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
        const double v = xs[i] / 3;
        CHECK(def["y"].data[i] == round_to(v, DType::BF16) * 3);
        CHECK(def["z"].data[i] == round_to(v, DType::F32) * 3);
        CHECK(f16["z"].data[i] == round_to(v, DType::F16) * 3);
        CHECK(off["y"].data[i] == v * 3);
        CHECK(up["y"].data[i] == (round_to(v, DType::BF16) + ulp_of(round_to(v, DType::BF16), DType::BF16)) * 3);
        moved += def["y"].data[i] != xs[i];
    }
    CHECK(moved > 200);  // the point is no identity: x / 3 * 3 would give x back
}

TEST_CASE("describe and the printer keep rounding points; the builder writes the same declaration", "[dsl][rounding]") {
    NormSpec text = load_norm_file(catalog("rms_norm_llama"));
    auto points = rounding_points(text);
    REQUIRE(points.size() == 1);
    CHECK(points[0]->name == "x");
    CHECK(print_expr(text, *points[0]) == "round(x * rsqrt(ms + eps), to: x)");
    CHECK(rounding_type(text, *points[0], {{"x", DType::BF16}}) == DType::BF16);
    CHECK(rounding_type(text, *points[0], {}) == DType::F32);

    NormBuilder b("rms_norm_llama");
    auto x = b.input("x", {"rows", "d"});
    auto w = b.param("weight", {"d"});
    auto eps = b.constant("eps", 1e-6);
    auto ms = b.let("ms", mean(x * x, {"d"}));
    b.output("y", w * round(x * rsqrt(ms + eps), "x"));
    b.accumulate(DType::F32);
    b.storage({"x", "y", "weight"}, {DType::F32, DType::BF16, DType::F16});
    NormSpec built = b.build();
    CHECK(print_norm(built).substr(print_norm(built).find('{')) == print_norm(text).substr(print_norm(text).find('{')));

    NormBuilder c("fixed");
    auto cx = c.input("x", {"d"});
    c.output("y", round(cx * 3, DType::F16));
    CHECK(print_expr(c.build(), *c.build().values[0].expr) == "round(x * 3, to: f16)");
}

TEST_CASE("indexed parameters: PolyNorm against its formula, and an element of a two-axis parameter", "[reference][index]") {
    NormSpec s = load_norm_file(catalog("poly_norm"));
    INFO("seed " << test_seed());
    const int64_t rows = 3, d = 37;
    std::vector<double> x = normals((size_t)(rows * d), 2), w = {0.7, -1.3, 2.1}, bias = {0.25};
    TensorMap out = evaluate_reference(s, {{"x", tensor({rows, d}, x)}, {"weight", tensor({3}, w)}, {"bias", tensor({1}, bias)}});
    for (int64_t r = 0; r < rows; ++r) {
        double m1 = 0, m2 = 0, m3 = 0;
        for (int64_t i = 0; i < d; ++i) {
            double v = x[r * d + i];
            m1 += v * v / d;
            m2 += std::pow(v, 4) / d;
            m3 += std::pow(v, 6) / d;
        }
        for (int64_t i = 0; i < d; ++i) {
            double v = x[r * d + i];
            double want = w[0] * v * v * v / std::sqrt(m3 + 1e-6) + w[1] * v * v / std::sqrt(m2 + 1e-6) + w[2] * v / std::sqrt(m1 + 1e-6) + bias[0];
            CHECK(out["y"].data[r * d + i] == Approx(want).epsilon(1e-12));
        }
    }
    // The bound extents are checked: a weight of 4 elements for `axis k = 3` is refused.
    CHECK_THROWS_AS(evaluate_reference(s, {{"x", tensor({rows, d}, x)}, {"weight", tensor({4}, {1, 2, 3, 4})}, {"bias", tensor({1}, bias)}}),
                    UserError);

    // weight: [k, d], k = 2: weight[1] is the second row, a [d] vector.
    NormSpec t = load_norm_text("t.norm", "norm e(x: [r, d]) -> y {\n  param weight: [k, d]\n  axis k = 2\n  y = x * weight[1] - weight[0]\n}");
    TensorMap o = evaluate_reference(t, {{"x", tensor({2, 3}, {1, 2, 3, 4, 5, 6})}, {"weight", tensor({2, 3}, {10, 20, 30, 1, 2, 3})}});
    CHECK(o["y"].data == std::vector<double>{1 - 10, 4 - 20, 9 - 30, 4 - 10, 10 - 20, 18 - 30});
    CHECK(print_expr(t, *t.values[0].expr) == "x * weight[1] - weight[0]");
    NormBuilder b("e");
    auto bx = b.input("x", {"r", "d"});
    auto bw = b.param("weight", {"k", "d"});
    b.axis("k", 2);
    b.output("y", bx * bw[{1}] - bw[{0}]);
    CHECK(print_norm(b.build()) == print_norm(t));
}

TEST_CASE("WeightNorm: w = g * v / ||v|| over each row's inputs, with no activation input", "[reference][catalog]") {
    NormSpec s = load_norm_file(catalog("weight_norm"));
    CHECK(s.tensors.size() == 2);
    CHECK(s.tensors[0].role == TensorInfo::Param);
    INFO("seed " << test_seed());
    const int64_t o = 4, i = 9;
    std::vector<double> v = normals((size_t)(o * i), 3, 0.5), g = normals((size_t)o, 4);
    TensorMap out = evaluate_reference(s, {{"v", tensor({o, i}, v)}, {"g", tensor({o}, g)}});
    for (int64_t r = 0; r < o; ++r) {
        double n = 0;
        for (int64_t k = 0; k < i; ++k) n += v[r * i + k] * v[r * i + k];
        for (int64_t k = 0; k < i; ++k) CHECK(out["w"].data[r * i + k] == Approx(g[r] * v[r * i + k] / std::sqrt(n)).epsilon(1e-13));
    }
}

TEST_CASE("the invariance table of the seeds: BatchNorm, WeightNorm, LayerNorm, RMSNorm exactly", "[invariants]") {
    // Layer Normalization (Ba et al. 2016), table 1, and the RMSNorm paper's row. Columns:
    // weight-matrix re-scaling, weight-matrix re-centering, weight-vector re-scaling, dataset
    // re-scaling, dataset re-centering, single-case re-scaling.
    const std::map<std::string, std::vector<bool>> seed_table = {
        {"batch_norm_train", {true, false, true, true, true, false}},
        {"weight_norm", {true, false, true, false, false, false}},
        {"layer_norm", {true, true, false, true, false, true}},
        {"rms_norm", {true, false, false, true, false, true}},
    };
    for (const auto &[layer, want] : seed_table) {
        INFO(layer << ", seed " << test_seed());
        InvarianceOptions opt;
        opt.seed = test_seed();
        InvarianceReport r = invariance_table(load_norm_file(catalog(layer)), opt);
        INFO(invariance_text(r));
        REQUIRE(r.rows.size() == 6);
        for (size_t k = 0; k < 6; ++k) {
            CHECK(r.rows[k].transform == invariance_transforms()[k]);
            CHECK(r.rows[k].invariant == want[k]);
            // Every invariance of these four is evident from the declaration; every "no" moved by far more than the tolerance.
            if (want[k]) CHECK_FALSE(r.rows[k].argument.empty());
            else CHECK(r.rows[k].max_change > 1e-3);
        }
    }
}

TEST_CASE("every catalog layer gets an invariance table, the metamorphic test can fail, and roles can be overridden", "[invariants]") {
    InvarianceOptions opt;
    opt.seed = test_seed();
    INFO("seed " << test_seed());
    for (const auto &e : std::filesystem::directory_iterator(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog")) {
        if (e.path().extension() != ".norm") continue;
        INFO(e.path().filename().string());
        InvarianceReport r = invariance_table(load_norm_file(e.path().string()), opt);  // a contradiction throws
        CHECK(r.rows.size() == 6);
        CHECK_FALSE(r.judged.empty());
        CHECK_FALSE(invariance_text(r).empty());
    }
    // The same LayerNorm with eps = 1 kept out of the zeroing (a literal, not a named constant):
    // the re-scalings are no longer exact, and the table says so.
    InvarianceReport lit = invariance_table(load_norm_text("t.norm", R"(norm ln(x: [rows, d]) -> y {
  mu = mean(x, over: d)
  v = var(x, over: d)
  y = (x - mu) * rsqrt(v + 1)
})"), opt);
    CHECK_FALSE(lit.rows[0].invariant);
    CHECK(lit.rows[1].invariant);  // re-centering survives any eps
    // Roles: InstanceNorm read with units [c] (its statistics keep c) is invariant to a scale per
    // channel; told that its units are [h, w], it is not.
    NormSpec in = load_norm_file(catalog("instance_norm"));
    CHECK(invariance_table(in, opt).rows[2].invariant);
    InvarianceOptions hw = opt;
    hw.unit_axes = {"h", "w"};
    CHECK_FALSE(invariance_table(in, hw).rows[2].invariant);
    InvarianceOptions bad = opt;
    bad.unit_axes = {"q"};
    CHECK_THROWS_AS(invariance_table(in, bad), UserError);
}

TEST_CASE("eps = 0 on an all-zero row is NaN in the reference (0 * 1 / sqrt(0)); eps > 0 gives zeros", "[reference][bad-input]") {
    NormSpec s = load_norm_file(catalog("rms_norm"));
    TensorMap in{{"x", tensor({2, 3}, {0, 0, 0, 1, 2, 3})}, {"weight", tensor({3}, {1, 1, 1})}};
    TensorMap with_eps = evaluate_reference(s, in);
    TensorMap no_eps = evaluate_reference(s, in, {{"eps", 0}});
    for (int i = 0; i < 3; ++i) {
        CHECK(with_eps["y"].data[i] == 0);
        CHECK(std::isnan(no_eps["y"].data[i]));
        CHECK(std::isfinite(no_eps["y"].data[3 + i]));
    }
}
