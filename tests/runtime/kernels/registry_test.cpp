// The registry and dispatch with the real generated kernels (normgen_kernels and its manifest):
// every kernel of the manifest is linked; a selected kernel run through run_kernel reproduces the
// float64 reference; in-place state updates work; every refusal of run_kernel leaves the outputs
// untouched; a Halide runtime error comes back as an exception instead of aborting the process.
//
// The inputs are drawn from a seed printed with every failure; set NORMGEN_TEST_SEED to replay one.
#include "runtime/errors.h"
#include "kernel_test_util.h"
#include "runtime/kernel_table.h"
#include "runtime/random_inputs.h"
#include "runtime/reference/interpreter.h"
#include "runtime/registry.h"
#include "runtime/run.h"
#include "runtime/storage.h"
#include "runtime/verify.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace normgen;
using normgen::test::registry;
using normgen::test::test_seed;
using Shape = std::vector<int64_t>;

namespace {

constexpr uint8_t kSentinel = 0xff;  // all-ones bytes: NaN in every storage type

// Caller-owned storage of one tensor.
struct Storage {
    test::AlignedBytes bytes;  // 64-byte aligned, as a streaming-store kernel needs
    Shape shape;
    DType dtype = DType::F32;
    TensorView view() { return TensorView{bytes.data(), dtype, shape, {}}; }
    HostTensor host() const { return HostTensor{shape, decode(bytes.data(), bytes.size() / dtype_size(dtype), dtype)}; }
    bool untouched() const {
        return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == kSentinel; });
    }
};

// One call of a kernel: random inputs (stored in the kernel's types), poisoned outputs, and the
// float64 reference evaluated on the inputs as stored; for a backward kernel also the running
// error bound's scale of each output (its sums over the rows or the batch cancel).
struct Call {
    const Registry::Kernel &k;
    std::map<std::string, Storage> store;
    TensorMap ref, mags;

    Call(const Registry::Kernel &kernel, const std::map<std::string, int64_t> &sizes, uint64_t salt, bool all_outputs = false)
        : k(kernel) {
        const NormSpec &spec = *k.spec;
        AxisExtents ext = choose_extents(spec, sizes, 4);
        TensorMap inputs = random_inputs(spec, ext, RandomInputOptions{0, test_seed() ^ salt});
        TensorMap stored;
        for (const KernelArg &a : k.args) {
            if (a.role == KernelArg::Output) continue;
            const HostTensor &h = inputs.at(a.name);
            Storage s{test::aligned_bytes(encode(h.data, a.dtype)), h.shape, a.dtype};
            stored[a.name] = s.host();
            store[a.name] = std::move(s);
        }
        ref = evaluate_reference(spec, stored, {}, {k.storage()});
        if (!k.grad_of.empty()) mags = evaluate_magnitudes(spec, stored, {}, {k.storage()});
        for (const KernelArg &a : k.args) {
            if (a.role != KernelArg::Output || (a.optional && !all_outputs)) continue;
            const HostTensor &r = ref.at(a.name);
            store[a.name] = Storage{test::AlignedBytes((size_t)r.numel() * dtype_size(a.dtype), kSentinel), r.shape, a.dtype};
        }
    }

    std::map<std::string, TensorView> tensors() {
        std::map<std::string, TensorView> t;
        for (auto &[name, s] : store) t[name] = s.view();
        return t;
    }
};

// Every output element against the reference, with the spot-check bound (runtime/verify.h; a
// backward's widened by the running error bound, as tests/runtime/kernels/guard_test.cpp: BatchNorm
// training's d_weight, a sum of terms that cancel, came out 2.25e-5 off against 2.2e-5 on seed 17);
// never NaN. A failure names the first mismatching elements.
void check_outputs(Call &c) {
    for (const KernelArg &a : c.k.args) {
        if (a.role != KernelArg::Output || !c.store.count(a.name)) continue;
        OutputCheck r = compare_output(a.name, c.store.at(a.name).host(), c.ref.at(a.name), a.dtype, spot_check_bound(*c.k.spec, c.mags, a.name));
        if (!r.pass) FAIL_CHECK(c.k.function << " output " << mismatch_text(r) << " (seed " << test_seed() << ")");
    }
}

std::string user_error_of(const std::function<void()> &f) {
    try {
        f();
    } catch (const UserError &e) {
        return e.what();
    } catch (const std::exception &e) {
        return std::string("<not a UserError: ") + e.what() + ">";
    }
    return "<no UserError>";
}

}  // namespace

TEST_CASE("the build's manifest loads and every kernel in it is linked", "[kernels]") {
    INFO("manifest " << default_manifest_path());
    const Registry &reg = registry();
    size_t host = 0, gpu_host = 0;
    for (const Registry::Kernel *k : reg.kernels()) {
        CHECK(k->spec != nullptr);
        if (k->device == Device::Cuda && k->backend == Backend::Mlir) {  // listed for the CUDA launcher, never bound to the host table
            CHECK(k->argv == nullptr);
            CHECK(!k->runs_here());
            continue;
        }
        CHECK(k->argv != nullptr);  // CPU kernels, and Halide's GPU kernels (host code that launches them)
        if (k->device != Device::Cpu) {
            CHECK(!k->runs_here());  // select() never takes them; select_device() does
            ++gpu_host;
        }
        ++host;
    }
    CHECK(host == kKernelTableSize);
    CHECK(gpu_host >= 2 * 18 * 3 * 2);  // cuda and opencl, every catalog layer forward and backward, 3 storage types
    CHECK(reg.select("layer_norm", DType::F32, false) != nullptr);
}

TEST_CASE("select: avx2 kernels when asked for avx2, the CPU's best otherwise, nullptr for an unknown layer", "[kernels]") {
    const Registry &reg = registry();
    std::set<std::string> layers;
    for (const Registry::Kernel *k : reg.kernels()) layers.insert(k->layer);
    const std::optional<Isa> here = cpu_isa();
    for (const std::string &layer : layers) {
        INFO(layer);
        const Registry::Kernel *a = reg.select(layer, DType::F32, false, Isa::Avx2);
        if (cpu_supports("avx2")) {
            REQUIRE(a);
            CHECK(a->isa == Isa::Avx2);
            CHECK(a->variant == Variant::Core);
        }
        const Registry::Kernel *best = reg.select(layer, DType::F32, false);
        if (best && here == Isa::Avx512 && reg.select(layer, DType::F32, false, Isa::Avx512)) CHECK(best->isa == Isa::Avx512);
        const Registry::Kernel *full = reg.select(layer, DType::F32, true);
        if (full) {
            bool has_optional = false;
            for (const OutputInfo &o : full->spec->outputs) has_optional = has_optional || o.optional;
            CHECK(full->variant == (has_optional ? Variant::Full : Variant::Core));
        }
    }
    CHECK(reg.select("no_such_layer", DType::F32, false) == nullptr);
    CHECK(reg.select("no_such_layer", DType::F32, false, Isa::Avx2) == nullptr);
}

TEST_CASE("every forward layer has backward kernels in both backends and every storage type, found by select_grad", "[kernels][grad]") {
    const Registry &reg = registry();
    std::set<std::string> forward;
    for (const Registry::Kernel *k : reg.kernels())
        if (k->grad_of.empty() && k->device == Device::Cpu) forward.insert(k->layer);
    CHECK(forward.size() >= 18);
    for (const std::string &layer : forward) {
        INFO(layer);
        for (DType t : {DType::F32, DType::BF16, DType::F16})
            for (Backend b : {Backend::Halide, Backend::Mlir}) {
                if (!reg.select(layer, t, false, std::nullopt, b)) continue;  // no forward kernel of this type
                const Registry::Kernel *g = reg.select_grad(layer, t, std::nullopt, b);
                REQUIRE(g);
                CHECK(g->layer == layer + "_grad");
                CHECK(g->grad_of == layer);
                CHECK(g->spec->name == layer + "_grad");
                bool has_d = false;
                for (const KernelArg &a : g->args) has_d = has_d || (a.role == KernelArg::Output && a.name.rfind("d_", 0) == 0);
                CHECK(has_d);
            }
    }
    CHECK(reg.select_grad("no_such_layer", DType::F32) == nullptr);
    CHECK(reg.select_grad("layer_norm_grad", DType::F32) == nullptr);  // no backward of a backward
}

TEST_CASE("layer_norm f32 core through run_kernel matches the float64 reference", "[kernels]") {
    const Registry::Kernel *k = registry().select("layer_norm", DType::F32, false);
    REQUIRE(k);
    INFO(k->function << ", seed " << test_seed());
    for (auto [rows, d] : std::vector<std::pair<int64_t, int64_t>>{{5, 37}, {1, 1}, {3, 64}, {7, 1000}}) {
        INFO("rows " << rows << ", d " << d);
        Call c(*k, {{"rows", rows}, {"d", d}}, (uint64_t)(rows * 1000 + d));
        run_kernel(*k, c.tensors());
        check_outputs(c);
    }
    // Every ISA this CPU runs, not only the best.
    for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
        const Registry::Kernel *ki = registry().select("layer_norm", DType::F32, false, isa);
        if (!ki) continue;
        Call c(*ki, {{"rows", 4}, {"d", 33}}, 7);
        run_kernel(*ki, c.tensors());
        check_outputs(c);
    }
}

TEST_CASE("every kernel this CPU runs takes its arguments as the manifest says (one small shape each)", "[kernels]") {
    // Not the verifier (normgen verify sweeps shapes and bounds the error properly): this checks the
    // calling convention of every kernel - argument order, buffer dims of split and multi-axis
    // tensors, storage types - by running it once against the reference. Full kernels get all
    // their outputs. Reduced-precision kernels: 2 ulps, or 4 for transcendental layers.
    uint64_t salt = 100;
    int ran = 0;
    for (const Registry::Kernel *k : registry().kernels()) {
        if (!k->runs_here()) continue;
        INFO(k->function << ", seed " << test_seed());
        std::map<std::string, int64_t> sizes;
        for (const Axis &ax : k->spec->axes)
            if (!ax.is_split() && !ax.fixed_extent) sizes[ax.name] = 3 + (int64_t)(sizes.size() % 3) * 2;  // 3, 5, 7, ...
        // A tuned kernel with a requirement gets the nearest sizes it takes (its own extent, its multiple).
        Call c(*k, test::fitted(*k, sizes), ++salt, true);
        REQUIRE(test::refusal(*k, c.tensors()) == "");
        run_kernel(*k, c.tensors());
        check_outputs(c);
        ++ran;
    }
    CHECK(ran > 0);
}

TEST_CASE("a full kernel writes the optional outputs too; reduced-precision kernels get their buffer types", "[kernels]") {
    const Registry::Kernel *k = registry().select("layer_norm", DType::F32, true);
    REQUIRE(k);
    CHECK(k->full());
    Call c(*k, {{"rows", 6}, {"d", 19}}, 11, true);
    REQUIRE(c.store.count("mu"));
    run_kernel(*k, c.tensors());
    check_outputs(c);

    for (DType t : {DType::BF16, DType::F16}) {
        const Registry::Kernel *kt = registry().select("layer_norm", t, false);
        if (!kt) continue;
        INFO(kt->function);
        Call ct(*kt, {{"rows", 3}, {"d", 40}}, 13);
        CHECK(ct.store.at("x").dtype == t);
        run_kernel(*kt, ct.tensors());
        check_outputs(ct);
    }
}

TEST_CASE("batch_norm_train updates its running statistics in place", "[kernels]") {
    const Registry::Kernel *k = registry().select("batch_norm_train", DType::F32, false);
    REQUIRE(k);
    Call c(*k, {{"n", 3}, {"c", 4}, {"h", 5}, {"w", 2}}, 17);
    auto t = c.tensors();

    SECTION("the same buffer as input and output") {
        t["running_mean_out"] = t["running_mean"];
        t["running_var_out"] = t["running_var"];
        run_kernel(*k, t);
        HostTensor rm = c.store.at("running_mean").host(), rv = c.store.at("running_var").host();
        const HostTensor &want_m = c.ref.at("running_mean_out"), &want_v = c.ref.at("running_var_out");
        for (size_t i = 0; i < want_m.data.size(); ++i) {
            CHECK(std::fabs(rm.data[i] - want_m.data[i]) <= 1e-5 * std::max(1.0, std::fabs(want_m.data[i])));
            CHECK(std::fabs(rv.data[i] - want_v.data[i]) <= 1e-5 * std::max(1.0, std::fabs(want_v.data[i])));
        }
        c.store.erase("running_mean_out");
        c.store.erase("running_var_out");
        check_outputs(c);  // y
    }
    SECTION("a partially overlapping alias is refused") {
        Storage both{test::AlignedBytes(5 * 4, kSentinel), {5}, DType::F32};
        std::memcpy(both.bytes.data(), c.store.at("running_mean").bytes.data(), 16);
        t["running_mean"] = TensorView{both.bytes.data(), DType::F32, {4}, {}};
        t["running_mean_out"] = TensorView{both.bytes.data() + 4, DType::F32, {4}, {}};
        CHECK_THAT(user_error_of([&] { run_kernel(*k, t); }),
                   Catch::Contains("output 'running_mean_out' overlaps input 'running_mean' without being exactly its buffer"));
        CHECK(std::all_of(both.bytes.begin() + 16, both.bytes.end(), [](uint8_t b) { return b == kSentinel; }));
        CHECK(c.store.at("y").untouched());
        CHECK(c.store.at("running_var_out").untouched());
    }
}

TEST_CASE("run_kernel refuses bad calls before any output is written", "[kernels]") {
    const Registry::Kernel *k = registry().select("layer_norm", DType::F32, false);
    REQUIRE(k);
    Call c(*k, {{"rows", 3}, {"d", 5}}, 23);
    Storage other{test::AlignedBytes(64, 0x3f), {3, 5, 1}, DType::F32};
    Storage mu{test::AlignedBytes(12, kSentinel), {3}, DType::F32};

    struct Case {
        const char *what;
        std::function<void(std::map<std::string, TensorView> &)> edit;
        std::string text;
    };
    std::vector<Case> cases = {
        {"missing input", [](auto &t) { t.erase("x"); }, "missing input 'x' of shape [rows, d]"},
        {"missing parameter", [](auto &t) { t.erase("weight"); }, "missing parameter 'weight' of shape [d]"},
        {"missing output", [](auto &t) { t.erase("y"); }, "missing output 'y' of shape [rows, d]"},
        {"unknown name", [&](auto &t) { t["z"] = other.view(); }, "unknown tensor 'z'"},
        {"null data", [](auto &t) { t["bias"].data = nullptr; }, "tensor 'bias': data pointer is null"},
        {"wrong dtype", [](auto &t) { t["x"].dtype = DType::BF16; }, "tensor 'x': expected f32, got bf16"},
        {"wrong rank", [&](auto &t) { t["x"] = other.view(); }, "input 'x': expected rank 2 [rows, d], got shape [3, 5, 1]"},
        {"wrong shape", [](auto &t) { t["weight"].shape = {4}; }, "parameter 'weight': axis 'd' has extent 4 but 'x' gives it 5"},
        {"wrong output shape", [](auto &t) { t["y"].shape = {5, 3}; }, "output 'y': expected shape [3, 5]"},
        {"strides", [](auto &t) { t["x"].strides = {1, 3}; }, "are not contiguous row-major"},
        {"optional output on a core kernel", [&](auto &t) { t["mu"] = mu.view(); }, "select a full kernel"},
        {"output aliasing an input", [&](auto &t) { t["y"].data = t["x"].data; }, "output 'y' overlaps input 'x' in memory"},
    };
    for (const Case &cs : cases) {
        INFO(cs.what);
        auto t = c.tensors();
        cs.edit(t);
        CHECK_THAT(user_error_of([&] { run_kernel(*k, t); }), Catch::Contains(cs.text));
        CHECK(c.store.at("y").untouched());
        CHECK(mu.untouched());
    }

    SECTION("a split axis not divisible by its fixed part") {
        const Registry::Kernel *g = registry().select("group_norm_nchw", DType::F32, false);
        REQUIRE(g);
        Call cg(*g, {{"n", 1}, {"cg", 2}, {"h", 2}, {"w", 2}}, 29);  // c = 64
        auto t = cg.tensors();
        Storage x{test::AlignedBytes(65 * 4 * 4, 0x3f), {1, 65, 2, 2}, DType::F32};
        t["x"] = x.view();
        CHECK_THAT(user_error_of([&] { run_kernel(*g, t); }),
                   Catch::Contains("input 'x': axis 'c' has extent 65, which is not divisible by 32"));
        CHECK(cg.store.at("y").untouched());
    }
}

TEST_CASE("a Halide runtime error is an exception with Halide's message, not an abort", "[kernels]") {
    const Registry::Kernel *k = registry().select("layer_norm", DType::F32, false);
    REQUIRE(k);
    // A kernel record that lies about x's type: run_kernel passes an f16 buffer, the f32 kernel's
    // own argument checks refuse it.
    Registry::Kernel liar = *k;
    liar.args[0].dtype = DType::F16;
    Call c(*k, {{"rows", 2}, {"d", 8}}, 31);
    Storage x16{test::AlignedBytes(2 * 8 * 2, 0x3c), {2, 8}, DType::F16};
    auto t = c.tensors();
    t["x"] = x16.view();
    try {
        run_kernel(liar, t);
        FAIL("no exception");
    } catch (const UserError &e) {
        FAIL("a kernel failure is not a UserError: " << e.what());
    } catch (const std::runtime_error &e) {
        std::string m = e.what();
        INFO(m);
        CHECK_THAT(m, Catch::Contains("kernel '" + k->function + "' failed (Halide error"));
        CHECK_THAT(m, Catch::Contains("Input buffer x has type float32 but type of the buffer passed in is float16"));
    }
    CHECK(c.store.at("y").untouched());
    // The process is alive and the next call is clean.
    run_kernel(*k, c.tensors());
    check_outputs(c);
}
