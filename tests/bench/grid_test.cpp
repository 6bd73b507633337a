// The benchmark's shape grids (bench/shape_grids.h) and baselines (bench/baseline.h): every case
// fits its catalog layer; on the grid's cache-sized cases the generated kernel and every baseline
// (scalar, oneDNN, PyTorch) pass the same reference check the benchmark runs before timing; and
// that check rejects a baseline that computes something else.
#include "bench/baseline.h"
#include "bench/kernel_case.h"
#include "bench/shape_grids.h"
#include "bench/thread_pool.h"
#include "dsl/checker.h"
#include "runtime/half.h"
#include "runtime/kernel_table.h"
#include "runtime/registry.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <set>

using namespace normgen;
using namespace normgen::bench;

namespace {

const Registry &registry() {
    static Registry r = Registry::load(NORMGEN_DEFAULT_MANIFEST, kKernelTable, kKernelTableSize);
    return r;
}

// Which vendor has which layer (bench/baseline_onednn.cpp says why not for the rest).
bool onednn_has(const std::string &layer) {
    static const std::set<std::string> has{"layer_norm", "layer_norm_weight_only", "batch_norm_train", "batch_norm_eval", "instance_norm"};
    return has.count(layer) != 0;
}

}  // namespace

TEST_CASE("every grid case names a catalog layer and exactly its free axes", "[bench]") {
    std::set<std::string> names, layers_with_dram, layers;
    for (const GridCase &g : model_grid()) {
        INFO(g.name());
        CHECK(names.insert(g.name()).second);
        NormSpec spec = load_norm_file(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/" + g.layer + ".norm");
        std::set<std::string> free;
        for (const Axis &a : spec.axes)
            if (!a.is_split() && !a.fixed_extent) free.insert(a.name);
        std::set<std::string> given;
        for (const auto &[axis, e] : g.sizes) {
            given.insert(axis);
            CHECK(e > 0);
        }
        CHECK(given == free);
        CHECK(g.dram == (g.elements() * 2 * (g.dtype == DType::F32 ? 4 : 2) >= 4 * last_level_cache_bytes()));  // from this machine's L3
        layers.insert(g.layer + "|f32");
        layers.insert(g.layer + "|bf16");
        if (g.dram) layers_with_dram.insert(g.layer + "|" + dtype_name(g.dtype));
    }
    CHECK(layers_with_dram == layers);  // one DRAM-sized case per layer and storage type (f32, bf16), at least
    // The short grid is drawn from the full one and has a DRAM-sized case of each row layer on any L3.
    std::set<std::string> short_dram;
    for (const GridCase &g : short_grid()) {
        CHECK(names.count(g.name()) == 1);
        if (g.dram) short_dram.insert(g.layer);
    }
    // (BatchNorm training's 32 x 256 x 56 x 56, 196 MiB in + out, is DRAM-sized too below a 49 MiB L3.)
    CHECK(short_dram.count("layer_norm") == 1);
    CHECK(short_dram.count("rms_norm") == 1);
}

TEST_CASE("on the grid's small cases the kernel and every baseline pass the reference check", "[bench]") {
    configure_threads();
    configure_vendor_threads(bench_threads());
    int checked = 0;
    for (const GridCase &g : model_grid()) {
        if (g.elements() > (int64_t(1) << 22)) continue;
        INFO(g.name());
        KernelCase kc(registry(), case_spec(g), 1234);
        REQUIRE(kc.error() == "");
        for (const std::string &impl : baseline_names()) {
            INFO(impl);
            std::string why;
            std::unique_ptr<Baseline> b = make_baseline(impl, kc.tensors(), &why);
            if (impl == "onednn" && !onednn_has(g.layer)) {
                CHECK(b == nullptr);
                CHECK(why.find("no ") != std::string::npos);
                continue;
            }
            REQUIRE(b != nullptr);
            CHECK(kc.check_baseline(*b) == "");
            ++checked;
        }
    }
    CHECK(checked >= 40);
}

TEST_CASE("the MLIR kernel's long sums pass the check: GroupNorm NHWC bf16 on one sample of SDXL's 128 x 128 x 320", "[bench]") {
    // The benchmark's own case (its inputs, seed and check) cut to one sample: 163840 elements a
    // group, 16384 pixels of 10 channels. Summed over the pixels in one serial chain, the MLIR
    // kernel's statistics left y up to 1.4e-5 off near zero, past the bf16 bound (275 elements of
    // the full SDXL case); reduced one axis at a time they pass.
    configure_threads();
    GridCase g;
    g.layer = "group_norm_nhwc";
    g.model = "sdxl-unet";
    g.dtype = DType::BF16;
    g.sizes = {{"n", 1}, {"h", 128}, {"w", 128}, {"cg", 10}};
    g.shape = "1x128x128x320";
    KernelCase kc(registry(), case_spec(g), 20250601);  // the benchmark's seed (normgen_bench.cpp)
    REQUIRE(kc.error() == "");
    const Registry::Kernel *mlir = registry().select("group_norm_nhwc", DType::BF16, false, std::nullopt, Backend::Mlir);
    if (!mlir) return;  // a build without the MLIR backend
    CHECK(kc.check_other(*mlir) == "");
}

namespace {

// A baseline that runs a real implementation, then spoils one element of its output `out` (n
// elements).
class Spoiled : public Baseline {
public:
    enum Kind { Scale, Unwritten, Nan };
    Spoiled(std::unique_ptr<Baseline> inner, const CaseTensors &t, Kind k, std::string out = "y", int64_t n = -1, float scale = 1.001f)
        : inner_(std::move(inner)), t_(t), k_(k), out_(std::move(out)), n_(n), scale_(scale) {}
    void run() override {
        inner_->run();
        inner_->publish();
        float *y = t_.f32(out_);
        const int64_t n = n_ >= 0 ? n_ : t_.at("rows") * t_.at("d");
        switch (k_) {
        case Scale: y[n / 2] *= scale_; break;
        case Unwritten: std::memset(&y[n - 1], 0xff, sizeof(float)); break;
        case Nan: y[0] = std::nanf(""); break;
        }
    }
    std::vector<std::string> writes() const override { return inner_->writes(); }

private:
    std::unique_ptr<Baseline> inner_;
    CaseTensors t_;
    Kind k_;
    std::string out_;
    int64_t n_;
    float scale_;
};

}  // namespace

TEST_CASE("the check rejects a baseline that is off by 1e-3 in one element, leaves one unwritten, or writes NaN", "[bench]") {
    configure_threads();
    CaseSpec c;
    c.layer = "layer_norm";
    c.dtype = DType::F32;
    c.sizes = {{"rows", 5}, {"d", 333}};  // <= 6 rows: every row is checked
    c.shape_label = "5x333";
    KernelCase kc(registry(), c, 99);
    REQUIRE(kc.error() == "");
    std::string why;
    REQUIRE(kc.check_baseline(*make_baseline("scalar", kc.tensors(), &why)) == "");
    for (Spoiled::Kind k : {Spoiled::Scale, Spoiled::Unwritten, Spoiled::Nan}) {
        Spoiled s(make_baseline("scalar", kc.tensors(), &why), kc.tensors(), k);
        CHECK(kc.check_baseline(s) != "");
    }
}

TEST_CASE("a big BatchNorm training case is checked on a sample of its channels, and the check still fails a spoiled output", "[bench]") {
    // The whole float64 reference of a DRAM-sized BatchNorm (statistics over n, h, w) does not fit
    // in memory; each channel is a layer of its own, so a few whole channels are checked.
    configure_threads();
    CaseSpec c;
    c.layer = "batch_norm_train";
    c.dtype = DType::F32;
    c.sizes = {{"n", 3}, {"c", 40}, {"h", 5}, {"w", 7}};
    c.shape_label = "3x40x5x7";
    c.full_reference = true;
    c.full_reference_elements = 1000;  // 4200 elements: past it
    KernelCase kc(registry(), c, 31);
    REQUIRE(kc.error() == "");
    INFO(kc.check_message());
    CHECK(kc.check_message().find("of 40 c)") != std::string::npos);
    const int64_t n = 3 * 40 * 5 * 7;
    int vendors = 0;
    for (const char *name : {"onednn", "torch"}) {
        std::string why;
        std::unique_ptr<Baseline> b = make_baseline(name, kc.tensors(), &why);
        if (!b) continue;
        ++vendors;
        CHECK(kc.check_baseline(*b) == "");
        // Element n / 2 is in channel 20, the middle one, always among those sampled.
        Spoiled s(make_baseline(name, kc.tensors(), &why), kc.tensors(), Spoiled::Scale, "y", n);
        CHECK(kc.check_baseline(s) != "");
    }
    CHECK(vendors >= 1);
    // Below the limit: every element against the whole reference.
    c.full_reference_elements = 0;
    KernelCase whole(registry(), c, 31);
    REQUIRE(whole.error() == "");
    CHECK(whole.check_message().find("(all n)") != std::string::npos);
}

// ---- The backward grid -----------------------------------------------------------------------

namespace {

// Which vendor has which backward (bench/baseline_onednn.cpp, baseline_torch.cpp say why not).
bool onednn_has_backward(const std::string &layer) {
    static const std::set<std::string> has{"layer_norm", "layer_norm_weight_only", "layer_norm_no_affine", "batch_norm_train", "instance_norm"};
    return has.count(layer) != 0;
}

// A backward case cut down for a unit test: at most 37 rows (odd) or 2 samples, the model's widths.
CaseSpec small_backward(const GridCase &g) {
    CaseSpec c = case_spec(g);
    for (auto &[axis, e] : c.sizes) {
        if (axis == "rows") e = std::min<int64_t>(e, 37);
        if (axis == "n") e = std::min<int64_t>(e, 2);
    }
    c.shape_label += "-small";
    return c;
}

}  // namespace

TEST_CASE("every backward case names a catalog layer with a DRAM case per headline layer sized from the L3", "[bench]") {
    std::set<std::string> names, dram;
    for (const GridCase &g : backward_grid()) {
        INFO(g.name());
        CHECK(g.grad);
        CHECK(g.full_reference);  // parameter gradients reduce over every row
        CHECK(g.name().find(g.layer + "_grad/") == 0);
        CHECK(names.insert(g.name()).second);
        NormSpec spec = load_norm_file(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/" + g.layer + ".norm");
        std::set<std::string> free, given;
        for (const Axis &a : spec.axes)
            if (!a.is_split() && !a.fixed_extent) free.insert(a.name);
        for (const auto &[axis, e] : g.sizes) given.insert(axis);
        CHECK(given == free);
        if (g.dram) {
            dram.insert(g.layer);
            CHECK(g.elements() * 12 >= 4 * last_level_cache_bytes());  // x + d_y + d_x in f32
        }
    }
    for (const char *l : {"layer_norm", "rms_norm", "dyt", "batch_norm_train", "group_norm_nchw", "group_norm_nhwc"}) CHECK(dram.count(l));
    for (const GridCase &g : short_backward_grid()) CHECK(names.count(g.name()) == 1);
    CHECK(last_level_cache_bytes() >= (int64_t(1) << 20));
}

TEST_CASE("on every backward case (cut down) both backends and every vendor backward pass the reference check", "[bench]") {
    configure_threads();
    configure_vendor_threads(bench_threads());
    int checked = 0;
    std::set<std::string> seen;
    for (const GridCase &g : backward_grid()) {
        if (!seen.insert(g.layer + "/" + dtype_name(g.dtype) + "/" + g.model.substr(0, 4)).second) continue;
        const CaseSpec c = small_backward(g);
        INFO(c.name());
        KernelCase kc(registry(), c, 4321);
        REQUIRE(kc.error() == "");
        CHECK(kc.kernel()->grad_of == g.layer);
        const Registry::Kernel *mlir = registry().select_grad(g.layer, g.dtype, std::nullopt, Backend::Mlir);
        REQUIRE(mlir != nullptr);
        CHECK(kc.check_other(*mlir) == "");
        for (const std::string &impl : baseline_names()) {
            INFO(impl);
            std::string why;
            std::unique_ptr<Baseline> b = make_baseline(impl, kc.tensors(), &why);
            if (impl == "scalar" || (impl == "onednn" && !onednn_has_backward(g.layer))) {
                CHECK(b == nullptr);
                CHECK(why.find(impl == "scalar" ? "forward only" : "no ") != std::string::npos);
                continue;
            }
            // oneDNN 2.6 has bf16 only where the CPU has AVX-512 (an AVX2 EPYC has none): it says so.
            if (!b && g.dtype == DType::BF16 && impl == "onednn" && why.find("has no bf16 implementation here") != std::string::npos) {
                WARN(why);
                continue;
            }
            REQUIRE(b != nullptr);
            const std::string fail = kc.check_baseline(*b);
            // ATen 1.13 keeps a bf16 LayerNorm's saved mean and rstd in bf16: its d_x may miss the bound.
            if (g.dtype == DType::BF16 && impl == "torch" && fail.find("d_x") != std::string::npos) continue;
            CHECK(fail == "");
            ++checked;
        }
    }
    CHECK(checked >= 14);
}

namespace {

// LayerNorm's f32 backward on `rows` rows of 333, checked on the whole tensor.
CaseSpec layer_norm_backward(int64_t rows) {
    CaseSpec c;
    c.layer = "layer_norm";
    c.grad = true;
    c.full_reference = true;
    c.dtype = DType::F32;
    c.sizes = {{"rows", rows}, {"d", 333}};
    c.shape_label = std::to_string(rows) + "x333";
    return c;
}

}  // namespace

TEST_CASE("the backward check rejects a vendor backward whose parameter gradient is off by 1e-3 in one element, unwritten or NaN", "[bench]") {
    configure_threads();
    configure_vendor_threads(bench_threads());
    KernelCase kc(registry(), layer_norm_backward(7), 77);
    REQUIRE(kc.error() == "");
    std::string why;
    for (const char *impl : {"onednn", "torch"}) {
        INFO(impl);
        REQUIRE(kc.check_baseline(*make_baseline(impl, kc.tensors(), &why)) == "");
        for (Spoiled::Kind k : {Spoiled::Scale, Spoiled::Unwritten, Spoiled::Nan}) {
            Spoiled s(make_baseline(impl, kc.tensors(), &why), kc.tensors(), k, "d_weight", 333);
            CHECK(kc.check_baseline(s) != "");
        }
    }
}

TEST_CASE("a backward case whose reference is evaluated a few rows at a time passes the kernels and vendors and fails a spoiled d_x or d_weight", "[bench]") {
    // The whole-tensor check of a DRAM-sized backward, evaluated on slices of its rows (the
    // parameter gradients summed over them): here 3 rows of 333 at a time over 37 rows, the last
    // slice one row; then the same case with the reference all at once, judged the same.
    configure_threads();
    configure_vendor_threads(bench_threads());
    CaseSpec c = layer_norm_backward(37);
    for (int64_t slice : {1000, 0}) {
        c.reference_slice_elements = slice;
        KernelCase kc(registry(), c, 78);
        REQUIRE(kc.error() == "");
        INFO(kc.check_message());
        CHECK((kc.check_message().find("(all rows) against the float64 reference (evaluated 3 rows at a time)") != std::string::npos) ==
              (slice != 0));
        const Registry::Kernel *mlir = registry().select_grad("layer_norm", DType::F32, std::nullopt, Backend::Mlir);
        REQUIRE(mlir != nullptr);
        CHECK(kc.check_other(*mlir) == "");
        int vendors = 0;
        for (const char *impl : {"onednn", "torch"}) {
            INFO(impl);
            std::string why;
            std::unique_ptr<Baseline> b = make_baseline(impl, kc.tensors(), &why);
            if (!b) continue;
            ++vendors;
            CHECK(kc.check_baseline(*b) == "");
            for (Spoiled::Kind k : {Spoiled::Scale, Spoiled::Unwritten, Spoiled::Nan}) {
                INFO("spoiled: " << (int)k);
                Spoiled w(make_baseline(impl, kc.tensors(), &why), kc.tensors(), k, "d_weight", 333);
                CHECK(kc.check_baseline(w) != "");
                // d_x's bound is widened by its terms' cancellation (about 1e-4 here, runtime/verify.h);
                // its middle element, 1.7e-3, doubled.
                Spoiled x(make_baseline(impl, kc.tensors(), &why), kc.tensors(), k, "d_x", 37 * 333, 2.f);
                CHECK(kc.check_baseline(x) != "");
            }
        }
        CHECK(vendors >= 1);
    }
}
