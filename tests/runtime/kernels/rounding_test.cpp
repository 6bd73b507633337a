// Rounding points, bit for bit: the catalog's rms_norm_llama (normalize in f32, round to x's storage
// type, multiply by the weight in that type) and rms_norm_gemma (everything in f32, (1 + weight),
// one rounding at the store) against references written the same way in f32, on every generated
// kernel of both (Halide and MLIR, every ISA this CPU runs, f32 / bf16 / f16).
//
// A declared rounding order makes the result deterministic only where every operation before a
// rounding point is: the inputs are chosen so the one order-dependent operation, the sum of
// squares, is exact in f32 in any order (x = k / 8 with |k| <= 15, d a power of two: sum(x^2) is an
// integer multiple of 1/64 below 2^18, and the mean a shift of it). What follows is correctly
// rounded f32 arithmetic in the order written (rsqrt is 1 / sqrt in both backends), the rounding
// to nearest even, and the store. So no tolerance: the bits must match.
#include "kernel_test_util.h"
#include "runtime/kernel_table.h"
#include "runtime/registry.h"
#include "runtime/run.h"
#include "runtime/storage.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

using namespace normgen;
using normgen::test::registry;
using normgen::test::test_seed;

namespace {

// The value of `v` (an f32) rounded to nearest even in `t`, as an f32.
float to_storage(float v, DType t) { return (float)round_to((double)v, t); }

struct Problem {
    int64_t rows = 0, d = 0;
    std::vector<double> x;         // k / 8, |k| <= 15, never 0
    std::vector<double> w_llama;   // 1 + j / 64
    std::vector<double> w_gemma;   // j / 64: 1 + w_gemma == w_llama exactly
};

Problem make_problem(int64_t rows, int64_t d, uint64_t seed) {
    std::mt19937_64 rng(seed);
    Problem p{rows, d, {}, {}, {}};
    for (int64_t i = 0; i < rows * d; ++i) {
        int k = (int)(rng() % 30) - 15;
        p.x.push_back((k >= 0 ? k + 1 : k) / 8.0);
    }
    for (int64_t i = 0; i < d; ++i) {
        int j = (int)(rng() % 64) - 32;
        p.w_llama.push_back(1 + j / 64.0);
        p.w_gemma.push_back(j / 64.0);
    }
    return p;
}

// Hugging Face's LlamaRMSNorm, in f32: hidden.to(f32); variance = mean(hidden^2); hidden *= rsqrt(
// variance + eps); weight * hidden.to(input_dtype). And Gemma's: (x * rsqrt(ms + eps)) * (1 + w) in
// f32, one rounding. Both return the stored outputs (rounded to `t`).
std::vector<double> reference(const Problem &p, DType t, bool llama) {
    const float eps = (float)1e-6;
    std::vector<double> y;
    for (int64_t r = 0; r < p.rows; ++r) {
        float ss = 0;
        for (int64_t i = 0; i < p.d; ++i) {
            float v = (float)p.x[r * p.d + i];
            ss += v * v;
        }
        float rstd = 1.0f / std::sqrt(ss / (float)p.d + eps);
        for (int64_t i = 0; i < p.d; ++i) {
            float v = (float)p.x[r * p.d + i];
            float out = llama ? (float)p.w_llama[i] * to_storage(v * rstd, t) : v * rstd * (1.0f + (float)p.w_gemma[i]);
            y.push_back(round_to(out, t));
        }
    }
    return y;
}

std::vector<double> run(const Registry::Kernel &k, const Problem &p, const std::vector<double> &w) {
    test::AlignedBytes xb = test::aligned_bytes(encode(p.x, k.dtype)), wb = test::aligned_bytes(encode(w, k.dtype));
    test::AlignedBytes yb((size_t)(p.rows * p.d) * dtype_size(k.dtype), 0xff);  // NaN in every type
    const std::map<std::string, TensorView> t{{"x", TensorView{xb.data(), k.dtype, {p.rows, p.d}, {}}},
                                              {"weight", TensorView{wb.data(), k.dtype, {p.d}, {}}},
                                              {"y", TensorView{yb.data(), k.dtype, {p.rows, p.d}, {}}}};
    run_kernel(test::taking(k, t), t);  // a tuned kernel's odd shapes go where a program's would
    return decode(yb.data(), (size_t)(p.rows * p.d), k.dtype);
}

// Where two outputs differ: the count, and the worst distance in units of the storage type.
struct Difference {
    int64_t count = 0;
    int64_t first = -1;
    double max_ulps = 0;
};

Difference compare(const std::vector<double> &a, const std::vector<double> &b, DType t) {
    Difference d;
    for (size_t i = 0; i < a.size(); ++i) {
        if (a[i] == b[i]) continue;  // NaN (an unwritten element) never compares equal
        if (d.first < 0) d.first = (int64_t)i;
        ++d.count;
        double u = ulp_of(std::fmax(std::fabs(a[i]), std::fabs(b[i])), t);
        d.max_ulps = std::fmax(d.max_ulps, std::isfinite(a[i] - b[i]) ? std::fabs(a[i] - b[i]) / u : INFINITY);
    }
    return d;
}

}  // namespace

TEST_CASE("rms_norm_llama and rms_norm_gemma kernels match their f32 references bit for bit", "[kernels][rounding]") {
    int checked = 0;
    for (const Registry::Kernel *k : registry().kernels()) {
        if (!k->runs_here() || (k->layer != "rms_norm_llama" && k->layer != "rms_norm_gemma")) continue;
        const bool llama = k->layer == "rms_norm_llama";
        for (auto [rows, d] : std::vector<std::pair<int64_t, int64_t>>{{37, 1024}, {3, 4096}, {64, 16}, {1, 1}, {5, 2}}) {
            INFO(k->function << " (" << backend_name(k->backend) << "), rows " << rows << ", d " << d << ", seed " << test_seed());
            Problem p = make_problem(rows, d, test_seed() ^ (uint64_t)(rows * 7919 + d));
            std::vector<double> got = run(*k, p, llama ? p.w_llama : p.w_gemma);
            Difference diff = compare(got, reference(p, k->dtype, llama), k->dtype);
            INFO("first differing element " << diff.first << " of " << got.size());
            CHECK(diff.count == 0);
            ++checked;
        }
    }
    CHECK(checked >= 2 * 3 * 5 * 2);  // two layers, three types, five shapes, two backends at least
}

TEST_CASE("the two rounding orders differ where they should: in bf16 and f16, not in f32", "[kernels][rounding]") {
    // The same scale (weight = 1 + w): llama rounds x * rstd before the multiply, gemma after. In f32
    // the rounding point is the identity and the products are the same; in bf16 and f16 a share of
    // the elements lands one unit apart, never more.
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
        for (Backend b : {Backend::Halide, Backend::Mlir}) {
            const Registry::Kernel *l = registry().select("rms_norm_llama", t, false, std::nullopt, b);
            const Registry::Kernel *g = registry().select("rms_norm_gemma", t, false, std::nullopt, b);
            REQUIRE(l);
            REQUIRE(g);
            INFO(dtype_name(t) << " " << backend_name(b) << ", seed " << test_seed());
            Problem p = make_problem(64, 1024, test_seed() ^ 77);
            Difference diff = compare(run(*l, p, p.w_llama), run(*g, p, p.w_gemma), t);
            if (t == DType::F32) {
                CHECK(diff.count == 0);
            } else {
                CHECK(diff.count > 64 * 1024 / 100);  // measured: a few percent of the elements
                CHECK(diff.max_ulps <= 1.0);
            }
        }
    }
}
