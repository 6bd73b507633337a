// Bad values, all the way through the generated kernels (README, "Bad input: what each call gets"):
// a NaN or an infinity stays in its row (the other rows are right; in an inf's row a kernel may give
// NaN where IEEE gives 0, the shift of its statistics meets inf - inf), an all-zero row of RMSNorm and
// ScaleNorm gives zeros (eps keeps the root finite), and subnormal inputs are not flushed to zero.
// Every kernel of those layers this CPU runs (both backends, every storage type, every ISA).
#include "kernel_test_util.h"
#include "runtime/kernel_table.h"
#include "runtime/random_inputs.h"
#include "runtime/reference/interpreter.h"
#include "runtime/registry.h"
#include "runtime/run.h"
#include "runtime/storage.h"
#include "runtime/verify.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

using namespace normgen;
using normgen::test::registry;
using normgen::test::test_seed;

namespace {

// Runs `k` on inputs drawn for rows x d, with row `bad` of x edited by `edit`; returns the outputs
// and the reference (on the inputs as stored). A call `k` does not take (a tuned kernel's
// requirement) runs where a program's would.
struct Result {
    TensorMap got, ref;
};

Result run_with(const Registry::Kernel &k, int64_t rows, int64_t d, const std::function<void(std::vector<double> &, int64_t)> &edit) {
    const NormSpec &spec = *k.spec;
    AxisExtents ext = choose_extents(spec, {{"rows", rows}, {"d", d}}, 1);
    TensorMap in = random_inputs(spec, ext, {0, 42});
    edit(in.at("x").data, d);
    std::map<std::string, test::AlignedBytes> mem;
    std::map<std::string, TensorView> views;
    TensorMap stored;
    for (const KernelArg &a : k.args) {
        if (a.role == KernelArg::Output) continue;
        mem[a.name] = test::aligned_bytes(encode(in.at(a.name).data, a.dtype));
        views[a.name] = TensorView{mem[a.name].data(), a.dtype, in.at(a.name).shape, {}};
        stored[a.name] = HostTensor{in.at(a.name).shape, decode(mem[a.name].data(), (size_t)in.at(a.name).numel(), a.dtype)};
    }
    Result r;
    r.ref = evaluate_reference(spec, stored, {}, {k.storage()});
    for (const KernelArg &a : k.args) {
        if (a.role != KernelArg::Output) continue;
        const HostTensor &h = r.ref.at(a.name);
        mem[a.name].assign((size_t)h.numel() * dtype_size(a.dtype), 0xff);
        views[a.name] = TensorView{mem[a.name].data(), a.dtype, h.shape, {}};
    }
    run_kernel(test::taking(k, views), views);
    for (const KernelArg &a : k.args)
        if (a.role == KernelArg::Output) r.got[a.name] = HostTensor{r.ref.at(a.name).shape, decode(mem[a.name].data(), mem[a.name].size() / dtype_size(a.dtype), a.dtype)};
    return r;
}

std::vector<const Registry::Kernel *> kernels_of(const std::string &layer) {
    std::vector<const Registry::Kernel *> r;
    for (const Registry::Kernel *k : registry().kernels())
        if (k->layer == layer && k->runs_here() && k->variant == Variant::Core) r.push_back(k);
    return r;
}

}  // namespace

TEST_CASE("a NaN or an infinity in one row stays in that row; the other rows are right", "[kernels][bad-input]") {
    for (const std::string layer : {"layer_norm", "rms_norm", "scale_norm"}) {
        for (const Registry::Kernel *k : kernels_of(layer)) {
            for (double bad : {NAN, INFINITY}) {
                // d = 37, or the nearest a tuned kernel takes (a fixed extent, a multiple of its vector).
                const int64_t rows = 5, d = test::fitted(*k, {{"rows", rows}, {"d", 37}}).at("d");
                INFO(k->function << " (" << backend_name(k->backend) << "), d = " << d << ", x[2][5] = " << bad);
                Result r = run_with(*k, rows, d, [&](std::vector<double> &x, int64_t dd) { x[2 * dd + 5] = bad; });
                const std::vector<double> &y = r.got.at("y").data;
                for (int64_t row = 0; row < rows; ++row) {
                    HostTensor got{{1, d}, std::vector<double>(y.begin() + row * d, y.begin() + (row + 1) * d)};
                    HostTensor want{{1, d}, std::vector<double>(r.ref.at("y").data.begin() + row * d, r.ref.at("y").data.begin() + (row + 1) * d)};
                    // A NaN poisons its whole row. An inf: the reference follows IEEE (LayerNorm's row is
                    // NaN, inf - inf; RMSNorm's and ScaleNorm's finite elements are x * 0 = 0, the inf
                    // itself NaN); the kernels may give NaN where IEEE gives 0 (their statistics shift
                    // the data, and inf - inf is NaN: README, "Bad input"), never another number.
                    if (row == 2 && std::isnan(bad))
                        for (int64_t i = 0; i < d; ++i) CHECK(std::isnan(got.data[i]));
                    if (row == 2 && std::isinf(bad)) {
                        for (int64_t i = 0; i < d; ++i)
                            if (!std::isnan(got.data[i])) CHECK(got.data[i] == round_to(want.data[i], k->dtype));
                        continue;
                    }
                    OutputCheck c = compare_output("y", got, want, k->dtype, spot_check_bound(*k->spec));
                    if (!c.pass) FAIL_CHECK("row " << row << ": " << mismatch_text(c));
                }
            }
        }
    }
}

TEST_CASE("an all-zero row of RMSNorm and ScaleNorm gives zeros, not NaN", "[kernels][bad-input]") {
    for (const std::string layer : {"rms_norm", "scale_norm"}) {
        for (const Registry::Kernel *k : kernels_of(layer)) {
            const int64_t d = test::fitted(*k, {{"rows", 3}, {"d", 100}}).at("d");
            INFO(k->function << " (" << backend_name(k->backend) << "), d = " << d);
            Result r = run_with(*k, 3, d, [](std::vector<double> &x, int64_t dd) {
                for (int64_t i = 0; i < dd; ++i) x[1 * dd + i] = 0;
            });
            for (int64_t i = d; i < 2 * d; ++i) CHECK(r.got.at("y").data[i] == 0);
            OutputCheck c = compare_output("y", r.got.at("y"), r.ref.at("y"), k->dtype, spot_check_bound(*k->spec));
            if (!c.pass) FAIL_CHECK(mismatch_text(c));
        }
    }
}

TEST_CASE("subnormal inputs are not flushed to zero", "[kernels][bad-input]") {
    // RMSNorm of a row of f32 subnormals: x^2 underflows (in f32 and, to eps's scale, in float64),
    // so y = x * rsqrt(eps) = 1000 x: a normal number a kernel that flushed x to zero would lose.
    for (const Registry::Kernel *k : kernels_of("rms_norm")) {
        if (k->dtype != DType::F32) continue;  // bf16 and f16 have their own subnormal ranges
        const int64_t d = test::fitted(*k, {{"rows", 2}, {"d", 64}}).at("d");
        INFO(k->function << " (" << backend_name(k->backend) << "), d = " << d);
        Result r = run_with(*k, 2, d, [](std::vector<double> &x, int64_t dd) {
            for (int64_t i = 0; i < dd; ++i) x[i] = (i % 2 ? 1 : -1) * std::ldexp(1.0 + i, -140);  // below 2^-126
        });
        const HostTensor &y = r.got.at("y"), &want = r.ref.at("y");
        for (int64_t i = 0; i < d; ++i) {
            CHECK(y.data[i] != 0);
            CHECK(std::fabs(y.data[i] - want.data[i]) <= 1e-5 * std::fabs(want.data[i]));
        }
    }
}
