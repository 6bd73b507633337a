// The Halide GPU schedules (codegen/halide/schedule_gpu.h), executed on OpenCL through PoCL on this
// CPU: the halide-gpu record's defaults and refusals; every stage on the device (a stage left on
// the host is refused); a deliberately broken GPU kernel (a missing barrier, a dropped tail) fails
// the verifier, on a row schedule and a root schedule; and the f16/bf16-as-bits conversions the
// OpenCL kernels use on a device without a half type are exact.
#include "codegen/common/kernel_plan.h"
#include "codegen/common/schedule_record.h"
#include "codegen/halide/jit.h"
#include "codegen/halide/lower.h"
#include "codegen/halide/schedule_gpu.h"
#include "dsl/checker.h"
#include "runtime/errors.h"
#include "runtime/storage.h"
#include "runtime/verify.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace normgen;

namespace {

NormSpec catalog(const std::string &name) { return load_norm_file(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/" + name + ".norm"); }

std::string user_error(const std::function<void()> &f) {
    try {
        f();
    } catch (const UserError &e) {
        return e.what();
    }
    return "<no UserError>";
}

// Sets NORMGEN_GPU_FAULT for the scope (the kernels read it when they are compiled).
struct Fault {
    explicit Fault(const char *what) { setenv("NORMGEN_GPU_FAULT", what, 1); }
    ~Fault() { unsetenv("NORMGEN_GPU_FAULT"); }
};

// Runs the verifier's cases `shapes` (indices into verify_shapes) on the OpenCL kernel of `layer`;
// returns how many failed.
int failing_cases(const std::string &layer, Variant variant, const std::vector<size_t> &shapes) {
    const NormSpec spec = catalog(layer);
    hl::JitKernel k(spec, DType::F32, hl::parse_target("host-opencl"), variant);
    KernelFn fn = [&k](const TensorMap &in, const Overrides &ov) { return k.run(in, ov); };
    const std::vector<VerifyShape> all = verify_shapes(spec);
    int failed = 0;
    for (size_t i : shapes) failed += !verify_case(spec, k.storage(), {fn}, all.at(i), 1234 + i)[0].pass;
    return failed;
}

}  // namespace

TEST_CASE("halide-gpu: defaults from the plan, refusals naming the knob", "[halide][gpu]") {
    const NormSpec ln = catalog("layer_norm");
    const KernelPlan f32 = make_plan(ln, DType::F32, Variant::Core), bf16 = make_plan(ln, DType::BF16, Variant::Core);
    const ScheduleRecord a = choose_schedule(f32, ScheduleKind::HalideGpu, Isa::Avx2);
    CHECK(a.kind() == ScheduleKind::HalideGpu);
    CHECK(a.get("vector_width") == 4);  // 16 bytes of f32
    CHECK(a.get("block_threads") == 256);
    CHECK(choose_schedule(bf16, ScheduleKind::HalideGpu, Isa::Avx2).get("vector_width") == 8);
    CHECK(a.to_json()["kind"] == "halide-gpu");
    CHECK(ScheduleRecord::from_json(a.to_json(), ScheduleKind::HalideGpu, "test") == a);
    CHECK_THAT(user_error([&] { choose_schedule(f32, ScheduleKind::HalideGpu, Isa::Avx2, "rows_per_block=16"); }),
               Catch::Contains("knob 'rows_per_block' = 16 with block_threads = 256 leaves 16 threads a row"));
    CHECK_THAT(user_error([&] { choose_schedule(f32, ScheduleKind::HalideGpu, Isa::Avx2, "vector_width=8"); }),
               Catch::Contains("knob 'vector_width' = 8 makes 32-byte accesses"));
    CHECK_THAT(user_error([&] { choose_schedule(f32, ScheduleKind::HalideGpu, Isa::Avx2, "block_threads=100"); }),
               Catch::Contains("knob 'block_threads' = 100 is not a power of two"));
    CHECK_THAT(user_error([&] { choose_schedule(f32, ScheduleKind::HalideGpu, Isa::Avx2, "row_accumulators=2"); }),
               Catch::Contains("the halide-gpu schedule has no knob 'row_accumulators'"));
}

TEST_CASE("halide-gpu: a stage left on the host is refused", "[halide][gpu]") {
    using namespace Halide;
    ImageParam in(Float(32), 1, "in");
    Var i("i"), b("b"), t("t");
    Func host_stage("host_stage"), out("out");
    host_stage(i) = in(i) * 2.0f;
    out(i) = host_stage(i) + 1.0f;
    host_stage.compute_root();  // no GPU loops: it would run on the CPU
    out.gpu_tile(i, b, t, 64, TailStrategy::GuardWithIf);
    Pipeline p(out);
    hl::require_device_stages(p);
    std::string msg;
    try {
        p.compile_jit(hl::parse_target("host-opencl"));
    } catch (const std::exception &e) {
        msg = e.what();
    }
    CHECK_THAT(msg, Catch::Contains("the GPU schedule left stage(s) host_stage on the host"));
    // Scheduled on the device, it compiles.
    Func dev("dev"), out2("out2");
    dev(i) = in(i) * 2.0f;
    out2(i) = dev(i) + 1.0f;
    dev.compute_root().gpu_tile(i, b, t, 64, TailStrategy::GuardWithIf);
    out2.gpu_tile(i, b, t, 64, TailStrategy::GuardWithIf);
    Pipeline p2(out2);
    hl::require_device_stages(p2);
    CHECK_NOTHROW(p2.compile_jit(hl::parse_target("host-opencl")));
}

TEST_CASE("halide-gpu on OpenCL: the verifier passes the kernels and fails a broken one", "[halide][gpu][opencl]") {
    // Shapes: d = 17 (large mean), one row of 1000 (large mean), 130 (past a vector multiple).
    const std::vector<size_t> shapes{3, 12, 16};
    for (const auto &[layer, variant] : std::vector<std::pair<std::string, Variant>>{{"layer_norm", Variant::Core},      // row, in one block
                                                                                     {"batch_norm_train", Variant::Core}}) {  // root: launches
        INFO(layer);
        CHECK(failing_cases(layer, variant, shapes) == 0);
        {
            Fault f("barriers");  // every barrier between a block's threads removed
            CHECK(failing_cases(layer, variant, shapes) > 0);
        }
        {
            Fault f("tail");  // the last thread of every block does nothing
            CHECK(failing_cases(layer, variant, shapes) > 0);
        }
    }
    Fault f("nonsense");
    CHECK_THAT(user_error([] { hl::JitKernel(catalog("rms_norm"), DType::F32, hl::parse_target("host-opencl"), Variant::Core); }),
               Catch::Contains("NORMGEN_GPU_FAULT='nonsense': give barriers or tail"));
}

TEST_CASE("f16 and bf16 as bits: exact conversions", "[halide][gpu]") {
    using namespace Halide;
    // Every 16-bit pattern to f32, against the runtime's decoding.
    for (DType t : {DType::F16, DType::BF16}) {
        Buffer<uint16_t> bits(65536);
        for (int i = 0; i < 65536; ++i) bits(i) = (uint16_t)i;
        Var i("i");
        Func f("f");
        f(i) = t == DType::F16 ? hl::f16_bits_to_f32(bits(i)) : hl::bf16_bits_to_f32(bits(i));
        Buffer<float> out = f.realize({65536});
        std::vector<uint8_t> bytes(65536 * 2);
        std::memcpy(bytes.data(), bits.data(), bytes.size());
        const std::vector<double> want = decode(bytes.data(), 65536, t);
        int bad = 0;
        for (int k = 0; k < 65536; ++k)
            if (!(out(k) == (float)want[k] || (std::isnan(out(k)) && std::isnan(want[k])))) ++bad;
        INFO(dtype_name(t));
        CHECK(bad == 0);
    }
    // f32 to bits: every f16 value, the midpoints between neighbours (ties to even), random
    // floats over the whole range, overflow, subnormals, zeros, infinities and NaN.
    std::vector<float> xs;
    std::mt19937 rng(7);
    for (int k = 0; k < 200000; ++k) {
        uint32_t u = rng();
        float x;
        std::memcpy(&x, &u, 4);
        xs.push_back(x);
    }
    for (int k = 0; k < 0x7c00; ++k) {
        std::vector<uint8_t> b{(uint8_t)(k & 0xff), (uint8_t)(k >> 8), (uint8_t)((k + 1) & 0xff), (uint8_t)((k + 1) >> 8)};
        const std::vector<double> v = decode(b.data(), 2, DType::F16);
        xs.push_back((float)v[0]);
        xs.push_back((float)((v[0] + v[1]) / 2));  // a tie (exact in f32)
        xs.push_back(-(float)v[0]);
    }
    for (float x : {65504.0f, 65519.99f, 65520.0f, 1e6f, 5.9604645e-8f, 2.9802322e-8f, 2.98023259e-8f, 0.0f, -0.0f,
                    std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                    3.3895314e38f, 1.0039062f, 1.0117188f})
        xs.push_back(x);
    Buffer<float> in((int)xs.size());
    for (size_t k = 0; k < xs.size(); ++k) in((int)k) = xs[k];
    for (DType t : {DType::F16, DType::BF16}) {
        Var i("i");
        Func f("f");
        f(i) = t == DType::F16 ? hl::f32_to_f16_bits(in(i)) : hl::f32_to_bf16_bits(in(i));
        Buffer<uint16_t> out = f.realize({(int)xs.size()});
        int bad = 0;
        for (size_t k = 0; k < xs.size(); ++k) {
            const std::vector<uint8_t> want = encode({(double)xs[k]}, t);
            const uint16_t w = (uint16_t)(want[0] | (want[1] << 8)), g = out((int)k);
            const bool nan = std::isnan(xs[k]);
            const bool g_nan = (t == DType::F16 ? (g & 0x7c00) == 0x7c00 && (g & 0x3ff) : (g & 0x7f80) == 0x7f80 && (g & 0x7f));
            if (nan ? !g_nan : g != w) ++bad;
        }
        INFO(dtype_name(t));
        CHECK(bad == 0);
    }
}
