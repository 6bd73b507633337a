// LayerNorm's two-pass variance, checked (the schedule record's checked_variance, the default;
// codegen/halide/lower.cpp, checked_mean): the mean's sweep also sums (x - k)^2, k the mean's
// shift, and the variance is S2 / n - (S1 / n)^2 wherever the shift lies within half a standard
// deviation of the mean; on a row where it does not, the second pass over the row (the squared
// deviations from the mean) runs as in the plain two-pass kernel and gives the variance.
// Checked here on both kinds of rows in one tensor: rows of 1e4 + N(0, 1) (the one-pass estimate)
// and rows whose first 64 elements sit 100 above the rest (the shift ~98 from the mean, the
// standard deviation ~12: the second pass), each within the verifier's bound of the float64
// reference, the second kind the plain two-pass kernel's values (the one-pass formula there was
// 15-50 ulps off them: the check is what keeps this test passing).
#include "codegen/halide/jit.h"
#include "dsl/checker.h"
#include "runtime/random_inputs.h"
#include "runtime/reference/interpreter.h"
#include "runtime/verify.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace normgen;

namespace {
NormSpec catalog(const std::string &layer) { return load_norm_file(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/" + layer + ".norm"); }
}  // namespace

TEST_CASE("checked_variance: one sweep for both statistics where the shift is near the mean, the second pass where it is not",
          "[halide][schedule]") {
    const NormSpec ln = catalog("layer_norm");
    // This CPU's kernel and the portable AVX2 one (another vector width, other masks).
    const std::string target_name = GENERATE(as<std::string>{}, "host", "x86-64-avx2");
    INFO("target " << target_name);
    const Halide::Target target = hl::parse_target(target_name);
    // (The core kernel: the one with the saved mu, rstd computes its statistics first, apart.)
    const hl::JitKernel plain(ln, DType::F32, target, Variant::Core, "checked_variance=0");
    const hl::JitKernel checked(ln, DType::F32, target, Variant::Core, "checked_variance=1");
    CHECK(plain.schedule_text().find("shifted sums") == std::string::npos);
    CHECK(checked.schedule_text().find("shifted sums") != std::string::npos);

    const int64_t rows = 6, d = 4099;  // an odd width: a masked tail in every sweep
    RandomInputOptions opts;
    opts.offset = 1e4;
    opts.seed = 20261207;
    TensorMap in = random_inputs(ln, choose_extents(ln, {{"rows", rows}, {"d", d}}, 1), opts);
    HostTensor &x = in.at("x");
    for (int64_t r = 3; r < rows; ++r)
        for (int64_t i = 0; i < 64; ++i) x.data[(size_t)(r * d + i)] += 100;
    for (auto &[name, t] : in)
        for (double &v : t.data) v = (double)(float)v;  // the kernel's f32 inputs, exactly

    // The data do what the test says: the shift (the mean of a row's first 64 elements) is within
    // half a standard deviation of the mean on the first three rows, far outside it on the others.
    for (int64_t r = 0; r < rows; ++r) {
        double k = 0, mean = 0, var = 0;
        for (int64_t i = 0; i < 64; ++i) k += x.data[(size_t)(r * d + i)] / 64;
        for (int64_t i = 0; i < d; ++i) mean += x.data[(size_t)(r * d + i)] / (double)d;
        for (int64_t i = 0; i < d; ++i) var += std::pow(x.data[(size_t)(r * d + i)] - mean, 2) / (double)d;
        INFO("row " << r << ": (mean - shift)^2 / var = " << (mean - k) * (mean - k) / var);
        CHECK(((mean - k) * (mean - k) * 4 <= var) == (r < 3));
    }

    const TensorMap a = plain.run(in), b = checked.run(in);
    const TensorMap ref = evaluate_reference(ln, in), mag = evaluate_magnitudes(ln, in);
    const HostTensor &ya = a.at("y"), &yb = b.at("y");
    REQUIRE(yb.numel() == rows * d);
    int64_t nan = 0;
    for (double v : yb.data) nan += std::isnan(v);  // outputs are poisoned with NaN before the run
    CHECK(nan == 0);
    const OutputCheck c = compare_output("y", yb, ref.at("y"), DType::F32, spot_check_bound(ln, mag, "y"));
    INFO(mismatch_text(c));
    CHECK(c.pass);
    // The rows with the far shift took the second pass: the plain kernel's outputs (the same
    // statistics from the same sums in the same order; 4 ulps for a multiply-add LLVM may
    // contract in one kernel only). The others took the one-pass estimate: outputs that differ
    // from the plain kernel's in some row.
    int one_pass_rows = 0;
    for (int64_t r = 0; r < rows; ++r) {
        double far = 0;  // the largest difference of the row, in ulps of the output
        for (int64_t i = 0; i < d; ++i) {
            const double u = ya.data[(size_t)(r * d + i)], v = yb.data[(size_t)(r * d + i)];
            far = std::max(far, std::abs(u - v) / (0x1p-23 * std::max(1.0, std::abs(u))));
        }
        INFO("row " << r << ": " << far << " ulps from the plain kernel");
        if (r >= 3) CHECK(far <= 4);
        else one_pass_rows += far > 0;
    }
    CHECK(one_pass_rows > 0);
}
