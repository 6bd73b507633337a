// normgen_bench: the generated normalization kernels (through the registry, as a program would
// select them) beside oneDNN, PyTorch (ATen), a plain scalar implementation and the rooflines, on
// the shapes of bench/shape_grids.h, all in one binary and one run. See bench/README.md.
//
// Rows are named CASE/IMPL, CASE = layer/model/dtype/shape (e.g. layer_norm/llama3-8b/f32/4096x4096),
// IMPL = scalar | onednn | torch | normgen | default | mlir | adams2019 | li2018 | mullapudi2016 (run in
// that order, on the same tensors): normgen is the kernel a program gets for the case's shapes
// (Registry::select_for: the tuned kernel of the shape class on this CPU, else the default),
// default the Halide kernel with the default schedule record, mlir the MLIR kernel with its
// default record, and the last three Halide's autoschedulers applied to the same algorithm with
// the case's shape as estimates (kernel libraries from `normgen autoschedule`, loaded with
// --normgen_extra=DIR; without it those rows are not registered). Every row reports
//   bytes_per_second  the floor traffic of the case (x read once, y written once, plus parameters
//                     and extra outputs; a backward case: x, the saved statistics and every d_<out>
//                     read once, d_x written once, plus the parameters and their gradients), per
//                     second; the same byte count for every implementation;
//   GBps              the same in 1e9 bytes/s;
//   copy_plain_GBps, copy_nt_GBps, read_GBps
//                     the rooflines at the same byte count, same thread count (bench/copy_roofline.h):
//                     copy with ordinary stores, copy with non-temporal stores, read-only sum;
//                     sampled before every repetition of every row of the case (interleaved with
//                     the implementations), medians of the case's samples so far;
//   limit_GBps, limit_p20_GBps, limit_p80_GBps, limit_reads_twice
//                     the layer's limit at this shape (codegen/common/tuning_keys.h, LayerLimit):
//                     the faster copy of its bytes (streaming stores past the cache, ordinary ones
//                     in it), or, when its statistics span more than the cache holds
//                     (limit_reads_twice = 1), a read-only sweep of x followed by that copy;
//                     median and spread of the case's interleaved samples;
//   layer_frac        GBps / limit_GBps;
//   copy_frac         GBps / max(copy_plain_GBps, copy_nt_GBps);
//   nt_frac           GBps / copy_nt_GBps: the fraction of the non-temporal-store copy (the floor
//                     for a kernel that writes its output once);
//   cpu_share         process CPU time / (wall time x threads), to see a busy machine;
// and the normgen row also
//   vs_vendor         GBps / the best vendor's (oneDNN, PyTorch) median GBps on the case, this run;
//   vs_scalar         GBps / the scalar baseline's;
//   vs_default        (normgen rows) GBps / the default row's.
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
#include "runtime/quantile.h"
#include "runtime/registry.h"

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <dlfcn.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
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
    std::unique_ptr<KernelCase> kernel;  // made with the kernel a program gets (Registry::select_for)
    struct Impl {
        std::unique_ptr<Baseline> baseline;
        std::string error;  // why it is not timed
    };
    std::map<std::string, Impl> impls;  // by implementation name, made on first use
    // Other kernels of the same layer and storage type on the case's tensors ("default", "mlir",
    // the autoschedulers), each checked on first use.
    struct Other {
        const Registry::Kernel *kernel = nullptr;
        std::string error;
        bool checked = false;
    };
    std::map<std::string, Other> others;
    // The layer's limit at this shape, and its samples (GB/s), taken before every timed repetition.
    LayerLimit limit;
    std::vector<double> nt, plain, read, layer;
};

// Kernel libraries given with --normgen_extra=DIR (the autoschedulers' kernels, one shape each).
struct Extra {
    void *handle = nullptr;
    std::unique_ptr<Registry> registry;
    const Registry::Kernel *kernel = nullptr;
    std::string impl;                      // row name: adams2019, li2018, mullapudi2016
    std::map<std::string, int64_t> sizes;  // the shape it was scheduled for
};
std::vector<Extra> &extras() {
    static std::vector<Extra> e;
    return e;
}

// Loads every DIR/*/manifest.json + kernel.so whose entry names a baseline ({"name", "sizes"}).
void load_extras(const std::string &dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
        std::fprintf(stderr, "normgen_bench: --normgen_extra=%s is not a folder\n", dir.c_str());
        std::exit(1);
    }
    for (const auto &d : fs::recursive_directory_iterator(dir)) {
        if (!d.is_directory()) continue;
        const fs::path m = d.path() / "manifest.json", lib = d.path() / "kernel.so";
        if (!fs::exists(m) || !fs::exists(lib)) continue;
        std::ifstream in(m);
        nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
        if (j.is_discarded() || !j.contains("kernels") || j["kernels"].empty() || !j["kernels"][0].contains("baseline")) continue;
        Extra x;
        x.handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!x.handle) {
            std::fprintf(stderr, "[extra] %s: %s\n", lib.c_str(), dlerror());
            continue;
        }
        using TableFn = const KernelEntry *(*)(size_t *);
        auto table = reinterpret_cast<TableFn>(dlsym(x.handle, "normgen_kernel_table"));
        if (!table) continue;
        size_t n = 0;
        const KernelEntry *entries = table(&n);
        try {
            x.registry = std::make_unique<Registry>(Registry::load(m.string(), entries, n));
        } catch (const std::exception &e) {
            std::fprintf(stderr, "[extra] %s: %s\n", m.c_str(), e.what());
            continue;
        }
        x.kernel = x.registry->kernels().at(0);
        x.impl = j["kernels"][0]["baseline"].value("name", "extra");
        x.sizes = j["kernels"][0]["baseline"].value("sizes", std::map<std::string, int64_t>{});
        extras().push_back(std::move(x));
    }
    std::fprintf(stderr, "[extra] %zu kernel libraries from %s\n", extras().size(), dir.c_str());
}

const Registry::Kernel *extra_for(const CaseSpec &spec, const std::string &impl) {
    const std::string layer = spec.grad ? spec.layer + "_grad" : spec.layer;
    for (const Extra &x : extras())
        if (x.impl == impl && x.kernel->layer == layer && x.kernel->dtype == spec.dtype && x.sizes == spec.sizes) return x.kernel;
    return nullptr;
}

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
        if (k.error().empty()) {
            std::fprintf(stderr, "[dispatch] %s: %s\n", spec.name().c_str(), k.selection().c_str());
            std::fprintf(stderr, "[check] %s/normgen: %s (%s)\n", spec.name().c_str(), k.check_message().c_str(), k.kernel()->function.c_str());
            const Registry::Kernel &kk = *k.kernel();
            std::vector<int64_t> ext(kk.spec->axes.size(), 1);
            const CaseTensors t = k.tensors();
            for (size_t a = 0; a < kk.spec->axes.size(); ++a) ext[a] = t.extent.at(kk.spec->axes[a].name);
            current->limit = layer_limit(*kk.spec, *kk.plan, ext, this_cpu());
            std::fprintf(stderr, "[limit] %s: %s\n", spec.name().c_str(),
                         (std::string(current->limit.reads_twice ? "a read of x + a streaming copy: " : "a streaming copy: ") + current->limit.why).c_str());
        } else {
            // A case refused for want of memory says "skipped: ..." itself; anything else failed.
            const bool skipped = k.error().rfind("skipped:", 0) == 0;
            std::fprintf(stderr, "[check] %s/normgen: %s%s\n", spec.name().c_str(), skipped ? "" : "FAILED: ", k.error().c_str());
        }
    }
    return *current;
}

// Another kernel of the case's layer and type on its tensors, checked once (before it is timed).
Prepared::Other &other(Prepared &p, const CaseSpec &spec, const std::string &impl) {
    Prepared::Other &o = p.others[impl];
    if (o.checked) return o;
    o.checked = true;
    const KernelCase &c = *p.kernel;
    const std::string layer = spec.grad ? spec.layer + "_grad" : spec.layer;
    if (!c.error().empty()) {
        o.error = "the case could not be prepared: " + c.error();
    } else {
        if (impl == "default") o.kernel = registry().select(layer, spec.dtype, false, std::nullopt, Backend::Halide);
        else if (impl == "mlir") o.kernel = registry().select(layer, spec.dtype, false, std::nullopt, Backend::Mlir);
        else o.kernel = extra_for(spec, impl);
        if (!o.kernel)
            o.error = impl == "mlir" ? "unsupported: no mlir-cpu kernel for this layer and type in the manifest"
                                     : "unsupported: no " + impl + " kernel for this case (normgen autoschedule builds them; scripts/bench.sh)";
        else if (std::string fail = p.kernel->check_other(*o.kernel); !fail.empty())
            o.error = "wrong result: " + fail;
    }
    std::fprintf(stderr, "[check] %s/%s: %s\n", spec.name().c_str(), impl.c_str(), o.error.empty() ? "passed" : o.error.c_str());
    return o;
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

// GB/s of every repetition of every implementation, per case, for the ratio counters.
std::map<std::string, std::map<std::string, std::vector<double>>> &samples() {
    static std::map<std::string, std::map<std::string, std::vector<double>>> s;
    return s;
}

// One sample of each limit, just before a timed repetition: the copies of the case's bytes and,
// for a layer that reads x twice, a read-only sweep of x (bench/copy_roofline.h).
void sample_limits(Prepared &p, size_t bytes) {
    const double min_s = 0.01;
    const double t_nt = copy_sample_seconds(bytes, CopyKind::NonTemporal, min_s);
    const double t_plain = copy_sample_seconds(bytes, CopyKind::Plain, min_s);
    p.nt.push_back((double)bytes / t_nt / 1e9);
    p.plain.push_back((double)bytes / t_plain / 1e9);
    double t_read = 0;
    if (p.limit.reads_twice) {
        t_read = copy_sample_seconds((size_t)p.limit.reread_bytes, CopyKind::Read, min_s);
        p.read.push_back((double)p.limit.reread_bytes / t_read / 1e9);
    }
    p.layer.push_back((double)bytes / (std::min(t_nt, t_plain) + t_read) / 1e9);
}

template <typename F>
void time_loop(benchmark::State &state, Prepared &p, const std::string &case_name, const std::string &impl, size_t bytes, F &&call) {
    const CopyBandwidth &copy = roofline(bytes);
    sample_limits(p, bytes);
    const double cpu0 = process_cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) call();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double iters = (double)state.iterations(), bps = bytes * iters / seconds;
    state.SetBytesProcessed((int64_t)(bytes * iters));
    state.counters["GBps"] = bps / 1e9;
    // The case's interleaved samples so far (the first-use measurement of copy_bandwidth as well).
    const double nt = quantile(p.nt, 0.5), plain = quantile(p.plain, 0.5);
    state.counters["copy_plain_GBps"] = plain;
    state.counters["copy_nt_GBps"] = nt;
    state.counters["read_GBps"] = p.read.empty() ? copy.read_bps / 1e9 : quantile(p.read, 0.5);
    state.counters["copy_frac"] = bps / 1e9 / std::max(nt, plain);
    state.counters["nt_frac"] = bps / 1e9 / nt;
    const double limit = quantile(p.layer, 0.5);
    state.counters["limit_GBps"] = limit;
    state.counters["limit_p20_GBps"] = quantile(p.layer, 0.2);
    state.counters["limit_p80_GBps"] = quantile(p.layer, 0.8);
    state.counters["limit_reads_twice"] = p.limit.reads_twice ? 1 : 0;
    state.counters["layer_frac"] = bps / 1e9 / limit;
    // CPU time of all our threads / (wall time x threads): 1 when every pool thread ran the whole
    // time; well below 1 when other processes took the cores (or threads sat idle).
    state.counters["cpu_share"] = (process_cpu_seconds() - cpu0) / (seconds * bench_threads());
    samples()[case_name][impl].push_back(bps / 1e9);
    if (impl != "scalar" && impl != "onednn" && impl != "torch") {
        auto &s = samples()[case_name];
        if (impl == "mlir" && s.count("default")) state.counters["vs_halide"] = bps / 1e9 / median(s["default"]);
        if (impl == "normgen" && s.count("default")) state.counters["vs_default"] = bps / 1e9 / median(s["default"]);
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
    time_loop(state, p, spec.name(), "normgen", c.bytes_per_call(), [&] { rc |= c.run(); });
    if (rc) state.SkipWithError(("Halide error " + std::to_string(rc)).c_str());
    state.SetLabel(c.kernel()->function + (c.kernel()->tuned.empty() ? " (default)" : " (tuned)"));
}

// Another kernel on the case's tensors (the default Halide kernel, the MLIR kernel, an
// autoscheduler's), checked like the case's own before it is timed.
void BM_other(benchmark::State &state, const CaseSpec &spec, const std::string &impl) {
    Prepared &p = acquire(spec);
    KernelCase &c = *p.kernel;
    Prepared::Other &o = other(p, spec, impl);
    if (!o.error.empty()) {
        state.SkipWithError(o.error.c_str());
        return;
    }
    int rc = 0;
    time_loop(state, p, spec.name(), impl, c.bytes_per_call(), [&] { rc |= c.run_other(o.kernel->argv); });
    if (rc) state.SkipWithError((impl + " kernel error " + std::to_string(rc)).c_str());
    state.SetLabel(o.kernel->function);
}

void BM_baseline(benchmark::State &state, const CaseSpec &spec, const std::string &impl) {
    Prepared &p = acquire(spec);
    Prepared::Impl &b = baseline(p, impl);
    if (!b.baseline) {
        state.SkipWithError(b.error.c_str());
        return;
    }
    Baseline &run = *b.baseline;
    time_loop(state, p, spec.name(), impl, p.kernel->bytes_per_call(), [&] { run.run(); });
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
        std::vector<std::string> others{"default", "mlir"};
        if (!extras().empty()) others.insert(others.end(), {"adams2019", "li2018", "mullapudi2016"});
        for (const std::string &impl : others)
            set(benchmark::RegisterBenchmark((spec.name() + "/" + impl).c_str(), BM_other, spec, impl));
    }
}

}  // namespace

int main(int argc, char **argv) {
    std::string grid = "full", extra_dir;
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
        if (std::strncmp(argv[i], "--normgen_grid=", 15) == 0)
            grid = argv[i] + 15;
        else if (std::strncmp(argv[i], "--normgen_extra=", 16) == 0)
            extra_dir = argv[i] + 16;
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
    if (!extra_dir.empty()) load_extras(extra_dir);
    benchmark::AddCustomContext("threads", std::to_string(threads) + " for every implementation ($HL_NUM_THREADS overrides)");
    benchmark::AddCustomContext("cpu", this_cpu().text());
    benchmark::AddCustomContext("cpu_fingerprint", this_cpu().to_json().dump());
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
