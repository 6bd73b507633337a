// normgen_bench: the generated normalization kernels (through the registry, as a program would
// select them) beside oneDNN, PyTorch (ATen), a plain scalar implementation and the rooflines, on
// the shapes of bench/shape_grids.h, all in one binary and one run. See bench/README.md.
//
// Rows are named CASE/IMPL, CASE = layer/model/dtype/shape (e.g. layer_norm/llama3-8b/f32/4096x4096),
// IMPL = scalar | onednn | torch | normgen | mlir (run in that order, on the same tensors). Every row reports
//   bytes_per_second  the floor traffic of the case (x read once, y written once, plus parameters
//                     and extra outputs; a backward case: x, the saved statistics and every d_<out>
//                     read once, d_x written once, plus the parameters and their gradients), per
//                     second; the same byte count for every implementation;
//   GBps              the same in 1e9 bytes/s;
//   copy_plain_GBps, copy_nt_GBps, read_GBps
//                     the rooflines at the same byte count, same thread count (bench/copy_roofline.h):
//                     copy with ordinary stores, copy with non-temporal stores, read-only sum;
//   copy_frac         GBps / max(copy_plain_GBps, copy_nt_GBps);
//   nt_frac           GBps / copy_nt_GBps: the fraction of the non-temporal-store copy (the floor
//                     for a kernel that writes its output once);
//   cpu_share         process CPU time / (wall time x threads), to see a busy machine;
// and the normgen row also
//   vs_vendor         GBps / the best vendor's (oneDNN, PyTorch) median GBps on the case, this run;
//   vs_scalar         GBps / the scalar baseline's.
// Each implementation is checked against the float64 reference on the case's tensors before it is
// timed (bench/kernel_case.h); one that fails, or has nothing for the case, is reported as an error
// row with the reason (`normgen report` lists them).
//
// Grid: --normgen_grid=full (default: bench/shape_grids.h model_grid() then backward_grid()), forward
// (model_grid()), backward (backward_grid(): the backward kernels, `layer_grad/...` rows) or short
// (short_grid() + short_backward_grid(), the README's run command). Other arguments are Google Benchmark's (--benchmark_filter=..., ...).
#include "bench/baseline.h"
#include "bench/copy_roofline.h"
#include "bench/kernel_case.h"
#include "bench/shape_grids.h"
#include "bench/thread_pool.h"
#include "runtime/kernel_table.h"
#include "runtime/registry.h"

#include <benchmark/benchmark.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

using namespace normgen;
using namespace normgen::bench;

namespace {

constexpr uint64_t kSeed = 20250601;

const Registry &registry() {
    static const Registry reg = Registry::load(default_manifest_path(), kKernelTable, kKernelTableSize);
    return reg;
}

// ---- One prepared case (and its baselines) at a time ---------------------------------------------

struct Prepared {
    std::unique_ptr<KernelCase> kernel;
    struct Impl {
        std::unique_ptr<Baseline> baseline;
        std::string error;  // why it is not timed
    };
    std::map<std::string, Impl> impls;  // by implementation name, made on first use
    // The MLIR backend's kernel for the same layer and storage type, checked on first use.
    const Registry::Kernel *mlir = nullptr;
    std::string mlir_error;
    bool mlir_checked = false;
};

// Google Benchmark calls a benchmark function once per repetition (and more while it sizes the
// iteration count); the case is prepared on the first call and reused by all its rows. Moving to
// another case frees the previous one, so the big tensors are never held beside the next case's.
Prepared &acquire(const CaseSpec &spec) {
    static std::unique_ptr<Prepared> current;
    if (!current || current->kernel->spec().name() != spec.name()) {
        current.reset();
        current = std::make_unique<Prepared>();
        current->kernel = std::make_unique<KernelCase>(registry(), spec, kSeed);
        const KernelCase &k = *current->kernel;
        if (k.error().empty())
            std::fprintf(stderr, "[check] %s/normgen: %s (%s)\n", spec.name().c_str(), k.check_message().c_str(), k.kernel()->function.c_str());
        else
            std::fprintf(stderr, "[check] %s/normgen: FAILED: %s\n", spec.name().c_str(), k.error().c_str());
    }
    return *current;
}

Prepared::Impl &baseline(Prepared &p, const std::string &impl) {
    auto it = p.impls.find(impl);
    if (it != p.impls.end()) return it->second;
    Prepared::Impl &b = p.impls[impl];
    const std::string name = p.kernel->spec().name() + "/" + impl;
    if (!p.kernel->error().empty()) {
        b.error = "the case could not be prepared: " + p.kernel->error();
        return b;
    }
    b.baseline = make_baseline(impl, p.kernel->tensors(), &b.error);
    if (!b.baseline) {
        b.error = "unsupported: " + b.error;
        std::fprintf(stderr, "[check] %s: %s\n", name.c_str(), b.error.c_str());
        return b;
    }
    std::string message;
    std::string fail = p.kernel->check_baseline(*b.baseline, &message);
    if (!fail.empty()) {
        b.error = "wrong result: " + fail;
        b.baseline.reset();
        std::fprintf(stderr, "[check] %s: FAILED: %s\n", name.c_str(), fail.c_str());
    } else {
        std::fprintf(stderr, "[check] %s: %s\n", name.c_str(), message.c_str());
    }
    return b;
}

const CopyBandwidth &roofline(size_t bytes) {
    static std::set<size_t> printed;
    const CopyBandwidth &c = copy_bandwidth(bytes);
    if (printed.insert(c.bytes).second)
        std::fprintf(stderr, "[copy]  %zu bytes (%.1f MiB): plain %.2f GB/s, nt %.2f GB/s, read %.2f GB/s (medians of %d samples)\n", c.bytes,
                     c.bytes / 1048576.0, c.plain_bps / 1e9, c.nt_bps / 1e9, c.read_bps / 1e9, c.samples);
    return c;
}

// CPU seconds used by the whole process (all threads), to see contention on a shared machine.
double process_cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// GB/s of every repetition of every implementation, per case, for the ratio counters.
std::map<std::string, std::map<std::string, std::vector<double>>> &samples() {
    static std::map<std::string, std::map<std::string, std::vector<double>>> s;
    return s;
}

template <typename F>
void time_loop(benchmark::State &state, const std::string &case_name, const std::string &impl, size_t bytes, F &&call) {
    const CopyBandwidth &copy = roofline(bytes);
    const double cpu0 = process_cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) call();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double iters = (double)state.iterations(), bps = bytes * iters / seconds;
    state.SetBytesProcessed((int64_t)(bytes * iters));
    state.counters["GBps"] = bps / 1e9;
    state.counters["copy_plain_GBps"] = copy.plain_bps / 1e9;
    state.counters["copy_nt_GBps"] = copy.nt_bps / 1e9;
    state.counters["read_GBps"] = copy.read_bps / 1e9;
    state.counters["copy_frac"] = bps / copy.best_bps();
    state.counters["nt_frac"] = bps / copy.nt_bps;
    // CPU time of all our threads / (wall time x threads): 1 when every pool thread ran the whole
    // time; well below 1 when other processes took the cores (or threads sat idle).
    state.counters["cpu_share"] = (process_cpu_seconds() - cpu0) / (seconds * bench_threads());
    samples()[case_name][impl].push_back(bps / 1e9);
    if (impl == "normgen" || impl == "mlir") {
        auto &s = samples()[case_name];
        if (impl == "mlir" && s.count("normgen")) state.counters["vs_halide"] = bps / 1e9 / median(s["normgen"]);
        double vendor = 0;
        for (const char *v : {"onednn", "torch"})
            if (s.count(v)) vendor = std::max(vendor, median(s[v]));
        if (vendor > 0) state.counters["vs_vendor"] = bps / 1e9 / vendor;
        if (s.count("scalar")) state.counters["vs_scalar"] = bps / 1e9 / median(s["scalar"]);
    }
}

void BM_normgen(benchmark::State &state, const CaseSpec &spec) {
    Prepared &p = acquire(spec);
    const KernelCase &c = *p.kernel;
    if (!c.error().empty()) {
        state.SkipWithError(c.error().c_str());
        return;
    }
    int rc = 0;
    time_loop(state, spec.name(), "normgen", c.bytes_per_call(), [&] { rc |= c.run(); });
    if (rc) state.SkipWithError(("Halide error " + std::to_string(rc)).c_str());
    state.SetLabel(c.kernel()->function);
}

// The MLIR CPU kernel (mlir-cpu, the same manifest and ABI) on the case's tensors, checked like
// the Halide kernel before it is timed.
void BM_mlir(benchmark::State &state, const CaseSpec &spec) {
    Prepared &p = acquire(spec);
    KernelCase &c = *p.kernel;
    if (!p.mlir_checked) {
        p.mlir_checked = true;
        if (!c.error().empty()) p.mlir_error = "the case could not be prepared: " + c.error();
        else if (!(p.mlir = spec.grad ? registry().select_grad(spec.layer, spec.dtype, std::nullopt, Backend::Mlir)
                                      : registry().select(spec.layer, spec.dtype, false, std::nullopt, Backend::Mlir)))
            p.mlir_error = "unsupported: no mlir-cpu kernel for this layer and type in the manifest";
        else if (std::string fail = c.check_other(*p.mlir); !fail.empty())
            p.mlir_error = "wrong result: " + fail;
        std::fprintf(stderr, "[check] %s/mlir: %s\n", spec.name().c_str(), p.mlir_error.empty() ? "passed" : p.mlir_error.c_str());
    }
    if (!p.mlir_error.empty()) {
        state.SkipWithError(p.mlir_error.c_str());
        return;
    }
    int rc = 0;
    time_loop(state, spec.name(), "mlir", c.bytes_per_call(), [&] { rc |= c.run_other(p.mlir->argv); });
    if (rc) state.SkipWithError(("MLIR kernel error " + std::to_string(rc)).c_str());
    state.SetLabel(p.mlir->function);
}

void BM_baseline(benchmark::State &state, const CaseSpec &spec, const std::string &impl) {
    Prepared &p = acquire(spec);
    Prepared::Impl &b = baseline(p, impl);
    if (!b.baseline) {
        state.SkipWithError(b.error.c_str());
        return;
    }
    Baseline &run = *b.baseline;
    time_loop(state, spec.name(), impl, p.kernel->bytes_per_call(), [&] { run.run(); });
    state.SetLabel(run.note());
}

void register_grid(const std::vector<GridCase> &grid) {
    for (const GridCase &g : grid) {
        const CaseSpec spec = case_spec(g);
        auto set = [&](benchmark::internal::Benchmark *b) {
            b->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(spec.min_time)->Repetitions(3)->ReportAggregatesOnly(true);
        };
        for (const std::string &impl : baseline_names())
            set(benchmark::RegisterBenchmark((spec.name() + "/" + impl).c_str(), BM_baseline, spec, impl));
        set(benchmark::RegisterBenchmark((spec.name() + "/normgen").c_str(), BM_normgen, spec));
        set(benchmark::RegisterBenchmark((spec.name() + "/mlir").c_str(), BM_mlir, spec));
    }
}

}  // namespace

int main(int argc, char **argv) {
    std::string grid = "full";
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
        if (std::strncmp(argv[i], "--normgen_grid=", 15) == 0)
            grid = argv[i] + 15;
        else
            argv[kept++] = argv[i];
    }
    argc = kept;
    std::vector<GridCase> cases;
    auto add = [&](const std::vector<GridCase> &g) { cases.insert(cases.end(), g.begin(), g.end()); };
    if (grid == "full" || grid == "forward") add(model_grid());
    if (grid == "full" || grid == "backward") add(backward_grid());
    if (grid == "short") {
        add(short_grid());
        add(short_backward_grid());
    }
    if (cases.empty()) {
        std::fprintf(stderr, "normgen_bench: --normgen_grid must be 'full', 'forward', 'backward' or 'short', not '%s'\n", grid.c_str());
        return 2;
    }
    const int threads = configure_threads();
    configure_vendor_threads(threads);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    try {
        registry();
    } catch (const std::exception &e) {
        std::fprintf(stderr, "normgen_bench: cannot load the kernel manifest: %s\n", e.what());
        return 1;
    }
    benchmark::AddCustomContext("threads", std::to_string(threads) + " for every implementation ($HL_NUM_THREADS overrides)");
    benchmark::AddCustomContext("grid", grid);
    benchmark::AddCustomContext("copy_isa", copy_isa());
    benchmark::AddCustomContext("kernel_isa", cpu_isa_name());
    benchmark::AddCustomContext("onednn", onednn_version());
    benchmark::AddCustomContext("torch", torch_version());
    benchmark::AddCustomContext("llc_bytes", std::to_string(last_level_cache_bytes()));
    register_grid(cases);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
