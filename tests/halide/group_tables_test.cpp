// GroupNorm NHWC with vectors across the groups (the schedule record's group_vectors): the
// per-group values (the mean's shift, the mean, rsqrt(v + eps)) are read from per-channel tables
// (codegen/halide/lower.h), so the fused channel loop loads them densely instead of gathering.
// The tables hold the same values computed by the same operations, so the kernel's outputs are
// the default schedule's to a few f32 ulps (LLVM may contract a multiply-add into an FMA in one
// loop and not in the other: measured 2 ulps), and within the verifier's bound of the float64
// reference on data far from zero.
#include "codegen/halide/jit.h"
#include "dsl/checker.h"
#include "dsl/grad.h"
#include "runtime/random_inputs.h"
#include "runtime/reference/interpreter.h"
#include "runtime/verify.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace normgen;

namespace {
NormSpec catalog(const std::string &layer) { return load_norm_file(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/" + layer + ".norm"); }
}  // namespace

TEST_CASE("group_vectors reads per-group values from per-channel tables: the default's outputs to a few ulps", "[halide][schedule]") {
    const NormSpec gn = catalog("group_norm_nhwc");
    const Halide::Target host = hl::parse_target("host");
    const hl::JitKernel def(gn, DType::F32, host, Variant::Core);
    const hl::JitKernel tables(gn, DType::F32, host, Variant::Core, "group_vectors=1");
    CHECK(def.schedule_text().find("per-channel tables") == std::string::npos);
    CHECK(tables.schedule_text().find("per-channel tables") != std::string::npos);
    // Odd sizes: 7 channels a group (a masked vector at every group boundary of the fused loop),
    // 3 x 5 pixels, 3 samples; x = 1e4 + N(0, 1).
    const AxisExtents ext = choose_extents(gn, {{"n", 3}, {"h", 3}, {"w", 5}, {"cg", 7}}, 1);
    RandomInputOptions opts;
    opts.offset = 1e4;
    opts.seed = 20261202;
    TensorMap in = random_inputs(gn, ext, opts);
    for (auto &[name, t] : in)
        for (double &v : t.data) v = (double)(float)v;  // the kernel's f32 inputs, exactly
    const TensorMap a = def.run(in), b = tables.run(in);
    const HostTensor &ya = a.at("y"), &yb = b.at("y");
    REQUIRE(ya.numel() == 3 * 3 * 5 * 32 * 7);
    REQUIRE(yb.shape == ya.shape);
    int64_t far = 0, nan = 0;
    for (int64_t i = 0; i < ya.numel(); ++i) {
        const double a = ya.data[(size_t)i], b = yb.data[(size_t)i];
        far += !(std::abs(a - b) <= 4 * 0x1p-23 * std::max(1.0, std::abs(a)));
        nan += std::isnan(b);  // outputs are poisoned with NaN before the run
    }
    CHECK(nan == 0);
    CHECK(far == 0);
    const TensorMap ref = evaluate_reference(gn, in), mag = evaluate_magnitudes(gn, in);
    const OutputCheck c = compare_output("y", yb, ref.at("y"), DType::F32, spot_check_bound(gn, mag.at("y")));
    INFO(mismatch_text(c));
    CHECK(c.pass);
}

// sample_statistics: the same statistics, computed per sample inside the map's parallel loop
// instead of all samples first. The same operations in the same order, so the outputs are the
// default's exactly; with one sample and with odd sizes; alone and with group_vectors.
TEST_CASE("sample_statistics computes each sample's statistics inside its map: the default's outputs exactly", "[halide][schedule]") {
    const NormSpec gn = catalog("group_norm_nhwc");
    const Halide::Target host = hl::parse_target("host");
    const hl::JitKernel def(gn, DType::F32, host, Variant::Core);
    CHECK(def.schedule_text().find("statistics first") != std::string::npos);
    for (const std::string knobs : {"sample_statistics=1", "sample_statistics=1,group_vectors=1"}) {
        const hl::JitKernel per(gn, DType::F32, host, Variant::Core, knobs);
        INFO(knobs << ": " << per.schedule_text());
        CHECK(per.schedule_text().find("per n (parallel), its statistics, then its map") != std::string::npos);
        for (int64_t n : {1, 3}) {
            const AxisExtents ext = choose_extents(gn, {{"n", n}, {"h", 3}, {"w", 5}, {"cg", 7}}, 1);
            RandomInputOptions opts;
            opts.offset = 1e4;
            opts.seed = 20261204 + (uint64_t)n;
            TensorMap in = random_inputs(gn, ext, opts);
            for (auto &[name, t] : in)
                for (double &v : t.data) v = (double)(float)v;
            const TensorMap a = def.run(in), b = per.run(in);
            const HostTensor &ya = a.at("y"), &yb = b.at("y");
            REQUIRE(yb.numel() == n * 3 * 5 * 32 * 7);
            int64_t far = 0, nan = 0;
            for (int64_t i = 0; i < ya.numel(); ++i) {
                const double x = ya.data[(size_t)i], z = yb.data[(size_t)i];
                // group_vectors reads the tables (a few ulps, above); alone it is the same code.
                far += !(std::abs(x - z) <= (knobs.find("group") != std::string::npos ? 4 * 0x1p-23 * std::max(1.0, std::abs(x)) : 0.0));
                nan += std::isnan(z);
            }
            CHECK(nan == 0);
            CHECK(far == 0);
        }
    }
}

// ... and on the backward (d_weight, d_bias summed over the samples as per-sample partials in the
// map's loop), where it applies; a plan it does not fit (BatchNorm training's statistics span n)
// keeps the root schedule. (Their outputs are checked by `verify ... --grad --schedule
// sample_statistics=1`, tests/halide/CMakeLists.txt.)
TEST_CASE("sample_statistics on the backward: per-sample partials where the plan allows them", "[halide][schedule]") {
    const Halide::Target host = hl::parse_target("host");
    for (const char *layer : {"group_norm_nhwc", "group_norm_nchw"}) {
        const NormSpec grad = differentiate(catalog(layer)).spec;
        const hl::JitKernel k(grad, DType::F32, host, Variant::Core, "sample_statistics=1");
        INFO(layer << ": " << k.schedule_text());
        CHECK(k.schedule_text().find("per n (parallel), its statistics, then its map") != std::string::npos);
    }
    const NormSpec bn = differentiate(catalog("batch_norm_train")).spec;
    const hl::JitKernel k(bn, DType::F32, host, Variant::Core, "sample_statistics=1");
    CHECK(k.schedule_text().find("statistics first") != std::string::npos);
}

// block_variance: GroupNorm NHWC's mean and two-pass variance by blocks of one row of pixels
// (codegen/halide/lower.cpp, block_moments): a block's mean, then its squared deviations from it,
// the blocks combined by the exact identity. Within the verifier's bound of the float64
// reference, and near the default two-pass kernel, on data far from zero and on data whose
// first pixel (the one the mean's shift is taken from) is an outlier: a one-sweep sum of squares
// about the shift would lose ~3 digits there ((shift - mean)^2 / variance ~ 1000).
TEST_CASE("block_variance: two-pass accuracy by blocks, one read of the data for both statistics", "[halide][schedule]") {
    const NormSpec gn = catalog("group_norm_nhwc");
    const Halide::Target host = hl::parse_target("host");
    const hl::JitKernel def(gn, DType::F32, host, Variant::Core, "group_vectors=1");
    for (const std::string knobs : {"block_variance=1,group_vectors=1,sample_statistics=1", "block_variance=1,group_vectors=1"}) {
        const hl::JitKernel blocks(gn, DType::F32, host, Variant::Core, knobs);
        INFO(knobs << ": " << blocks.schedule_text());
        CHECK(blocks.schedule_text().find("two-pass variance by blocks of one h") != std::string::npos);
        for (const bool outlier : {false, true}) {
            INFO("outlier first pixel: " << outlier);
            // 2 samples, 32 x 31 pixels (rows of odd width), 5 channels a group; x = 1e4 + N(0, 1).
            const AxisExtents ext = choose_extents(gn, {{"n", 2}, {"h", 32}, {"w", 31}, {"cg", 5}}, 1);
            RandomInputOptions opts;
            opts.offset = 1e4;
            opts.seed = 20261205 + (uint64_t)outlier;
            TensorMap in = random_inputs(gn, ext, opts);
            HostTensor &x = in.at("x");
            const int64_t c = 32 * 5, sample = 32 * 31 * c;
            if (outlier)
                for (int64_t n = 0; n < 2; ++n)
                    for (int64_t k = 0; k < c; ++k) x.data[(size_t)(n * sample + k)] = 1e4 + 300;
            for (auto &[name, t] : in)
                for (double &v : t.data) v = (double)(float)v;
            const TensorMap a = def.run(in), b = blocks.run(in);
            const HostTensor &ya = a.at("y"), &yb = b.at("y");
            REQUIRE(yb.numel() == 2 * sample);
            const TensorMap ref = evaluate_reference(gn, in), mag = evaluate_magnitudes(gn, in);
            const OutputBound bound = spot_check_bound(gn, mag.at("y"));
            const OutputCheck cb = compare_output("y", yb, ref.at("y"), DType::F32, bound);
            const OutputCheck ca = compare_output("y", ya, ref.at("y"), DType::F32, bound);
            INFO(mismatch_text(cb) << " worst err / bound: blocks " << cb.max_err << ", default " << ca.max_err);
            CHECK(cb.pass);
            // As close as the default two-pass kernel. (Not to its ulps: at 1e4 an f32 mean is
            // 1e-3 coarse, so two exact two-pass kernels differ by far more than the ulps of y.)
            CHECK(cb.max_err <= 2 * ca.max_err + 0.01);
        }
    }
    // Without group_vectors the knob does nothing (the blocks need the per-channel tables).
    const hl::JitKernel alone(gn, DType::F32, host, Variant::Core, "block_variance=1");
    CHECK(alone.schedule_text().find("by blocks") == std::string::npos);
}
