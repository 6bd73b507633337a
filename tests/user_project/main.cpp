// A user's program: it links the kernels that normgen_add_kernels generated from this project's .norm
// files (the my_kernels library), loads the registry from their manifest, selects each layer's
// kernel for f32 and bf16 (and runs every other kernel this CPU can run), calls it through
// run_kernel on random inputs, and compares every output with the float64 reference.
//
// Bounds (the reference is evaluated on the inputs as stored):
//   f32 output:  |kernel - ref| <= 1e-5 * |ref| + 1e-6
//   bf16 output: |kernel - round_bf16(ref)| <= 2 bf16 ulps at ref + 1e-6
// (the 1e-6 absolute floor covers elements near zero, where f32 accumulation error can exceed the
// spacing of the storage type). Outputs are poisoned with NaN first, so an unwritten element fails.
//
// Prints one line per kernel; exits 1 on any mismatch (or error). The seed is printed;
// NORMGEN_TEST_SEED=N replays it. NORMGEN_EXAMPLE_CORRUPT=1 perturbs one element of every output
// after the kernel ran (the check of this check: the program must then fail).
#include "runtime/errors.h"
#include "runtime/kernel_table.h"
#include "runtime/random_inputs.h"
#include "runtime/reference/interpreter.h"
#include "runtime/registry.h"
#include "runtime/run.h"
#include "runtime/storage.h"
#include "runtime/verify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace normgen;

namespace {

struct Storage {
    std::vector<uint8_t> bytes;
    std::vector<int64_t> shape;
    DType dtype = DType::F32;
    TensorView view() { return TensorView{bytes.data(), dtype, shape, {}}; }
    HostTensor host() const { return HostTensor{shape, decode(bytes.data(), bytes.size() / dtype_size(dtype), dtype)}; }
};

struct Shape {
    int64_t rows, d;
};

bool env_flag(const char *name) {
    const char *v = std::getenv(name);
    return v && *v && std::string(v) != "0";
}

// Runs `k` on one shape; returns the number of bad elements and notes the worst error (in units
// of the bound) in `worst`.
int run_one(const Registry::Kernel &k, const Shape &shape, uint64_t seed, bool corrupt, double &worst, std::string &first_problem) {
    const NormSpec &spec = *k.spec;
    AxisExtents ext = choose_extents(spec, {{"rows", shape.rows}, {"d", shape.d}}, 4);
    TensorMap inputs = random_inputs(spec, ext, RandomInputOptions{0, seed});

    std::map<std::string, Storage> store;
    TensorMap stored;  // the inputs as the kernel sees them (rounded to their storage types)
    for (const KernelArg &a : k.args) {
        if (a.role == KernelArg::Output) continue;
        const HostTensor &h = inputs.at(a.name);
        Storage s{encode(h.data, a.dtype), h.shape, a.dtype};
        stored[a.name] = s.host();
        store[a.name] = std::move(s);
    }
    TensorMap ref = evaluate_reference(spec, stored, {}, {k.storage()});
    // A backward kernel's formulas cancel inside: its bound adds the running error bound.
    const TensorMap mags = k.grad_of.empty() ? TensorMap{} : evaluate_magnitudes(spec, stored, {}, {k.storage()});
    for (const KernelArg &a : k.args) {
        if (a.role != KernelArg::Output) continue;
        if (a.optional && !k.full()) continue;  // a core kernel takes no optional output
        const HostTensor &r = ref.at(a.name);
        store[a.name] = Storage{std::vector<uint8_t>((size_t)r.numel() * dtype_size(a.dtype), 0xff), r.shape, a.dtype};
    }

    std::map<std::string, TensorView> views;
    for (auto &[name, s] : store) views[name] = s.view();
    run_kernel(k, views);

    int bad = 0;
    for (const KernelArg &a : k.args) {
        if (a.role != KernelArg::Output || !store.count(a.name)) continue;
        Storage &out = store.at(a.name);
        if (corrupt && !out.bytes.empty()) {
            double v = decode(out.bytes.data(), 1, a.dtype)[0];
            std::vector<uint8_t> b = encode({v + 0.125 * std::max(1.0, std::fabs(v))}, a.dtype);
            std::memcpy(out.bytes.data(), b.data(), b.size());
        }
        // The spot-check bound of the kernel tests (runtime/verify.h): f32 1e-5 relative, bf16/f16
        // a couple of ulps of the correctly rounded reference; NaN (an unwritten element) fails.
        OutputCheck c = compare_output(a.name, out.host(), ref.at(a.name), a.dtype,
                                       mags.empty() ? spot_check_bound(spec) : spot_check_bound(spec, mags.at(a.name)));
        worst = std::max(worst, c.max_err);
        if (!c.pass) {
            if (bad == 0 && first_problem.empty())
                first_problem = mismatch_text(c) + " (rows=" + std::to_string(shape.rows) + " d=" + std::to_string(shape.d) + ")";
            bad += (int)std::max<int64_t>(c.failed, 1);
        }
    }
    return bad;
}

}  // namespace

int main() {
    uint64_t seed;
    if (const char *s = std::getenv("NORMGEN_TEST_SEED")) seed = (uint64_t)std::strtoull(s, nullptr, 10);
    else seed = ((uint64_t)std::random_device{}() << 32) ^ std::random_device{}();
    const bool corrupt = env_flag("NORMGEN_EXAMPLE_CORRUPT");

    try {
        Registry reg = Registry::load(default_manifest_path(), kKernelTable, kKernelTableSize);
        std::printf("manifest %s: %zu kernels (table: %zu), this CPU: %s, seed %llu%s\n", reg.path().c_str(),
                    reg.kernels().size(), kKernelTableSize, cpu_isa_name().c_str(), (unsigned long long)seed,
                    corrupt ? " (NORMGEN_EXAMPLE_CORRUPT: outputs are perturbed)" : "");
        int failures = 0;
        if (reg.kernels().size() != kKernelTableSize) {
            std::printf("FAIL the manifest lists %zu kernels, the kernel table %zu\n", reg.kernels().size(), kKernelTableSize);
            ++failures;
        }

        // GRAD ON: every layer of the project has its backward, found by select_grad.
        for (const Registry::Kernel *k : reg.kernels()) {
            if (!k->grad_of.empty()) continue;
            const Registry::Kernel *g = reg.select_grad(k->layer, k->dtype, std::nullopt, k->backend);
            if (!g || g->grad_of != k->layer) {
                std::printf("FAIL no backward kernel of %s (%s, %s) through select_grad\n", k->layer.c_str(), dtype_name(k->dtype),
                            backend_name(k->backend));
                ++failures;
            }
        }

        // What the program would do: select the best kernel for each layer and storage type.
        std::set<std::string> layers;
        for (const Registry::Kernel *k : reg.kernels()) layers.insert(k->layer);
        std::set<const Registry::Kernel *> selected;
        for (const std::string &layer : layers)
            for (DType dtype : {DType::F32, DType::BF16})
                for (bool full : {false, true}) {
                    const Registry::Kernel *k = reg.select(layer, dtype, full);
                    if (!k) {
                        std::printf("FAIL no %s kernel for %s here\n", dtype_name(dtype), layer.c_str());
                        ++failures;
                    } else if (k->isa != cpu_isa()) {
                        std::printf("FAIL select(%s, %s) chose %s, not this CPU's %s kernel\n", layer.c_str(), dtype_name(dtype),
                                    k->function.c_str(), cpu_isa_name().c_str());
                        ++failures;
                    } else {
                        selected.insert(k);
                    }
                }

        // Every kernel this CPU can run (the selected ones and the narrower ISAs), on a few shapes.
        const std::vector<Shape> shapes{{1, 1}, {3, 17}, {8, 1000}, {2, 4097}};
        int ran = 0;
        for (const Registry::Kernel *k : reg.kernels()) {
            if (!k->runs_here()) {
                std::printf("skip %-40s (this CPU lacks a feature it needs)\n", k->function.c_str());
                continue;
            }
            int bad = 0;
            double worst = 0;
            std::string problem;
            for (size_t i = 0; i < shapes.size(); ++i) bad += run_one(*k, shapes[i], seed + 7919 * i, corrupt, worst, problem);
            ++ran;
            std::printf("%s %-40s %-8s worst error %.3f of the bound%s%s\n", bad ? "FAIL" : "ok  ", k->function.c_str(),
                        selected.count(k) ? "selected" : "", worst, bad ? ": " : "", problem.c_str());
            if (bad) ++failures;
        }
        if (ran == 0) {
            std::printf("FAIL no kernel runs on this CPU\n");
            ++failures;
        }
        std::printf("%s: %d kernels run, %d failed (seed %llu)\n", failures ? "FAILED" : "passed", ran, failures,
                    (unsigned long long)seed);
        return failures ? 1 : 0;
    } catch (const std::exception &e) {
        std::printf("FAIL %s\n", e.what());
        return 1;
    }
}
