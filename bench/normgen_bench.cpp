// normgen_bench: the generated normalization kernels (through the registry, as a program would
// select them) against the copy roofline measured in the same binary. See bench/README.md.
//
// Every kernel row reports
//   bytes_per_second  the floor traffic (inputs and parameters read once, outputs written once)
//                     per second (Google Benchmark's own counter, 1024-based in the console);
//   GBps              the same in 1e9 bytes/s;
//   copy_plain_GBps, copy_nt_GBps
//                     the copy roofline at the same byte count (bench/copy_roofline.h), medians,
//                     measured once per byte count before the kernel is timed;
//   copy_frac         GBps / max(copy_plain_GBps, copy_nt_GBps).
// Each case is checked against the float64 reference before it is timed (bench/kernel_case.h);
// a case that fails is reported as an error instead of a time.
#include "bench/copy_roofline.h"
#include "bench/kernel_case.h"
#include "bench/thread_pool.h"
#include "runtime/errors.h"
#include "runtime/kernel_table.h"
#include "runtime/registry.h"

#include <benchmark/benchmark.h>

#include <chrono>
#include <sys/resource.h>
#include <cstdio>
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

// ---- The shape grids ----------------------------------------------------------------------------

CaseSpec rows_d(const std::string &layer, DType t, int64_t rows, int64_t d, double min_time = 0.15) {
    CaseSpec c;
    c.layer = layer;
    c.dtype = t;
    c.sizes = {{"rows", rows}, {"d", d}};
    c.shape_label = std::to_string(rows) + "x" + std::to_string(d);
    c.min_time = min_time;
    return c;
}

// LayerNorm / RMSNorm over the feature axis: a 4096 x 4096 square (x + y = 128 MiB, inside this
// machine's 260 MiB L3), 32768 x 8192 (1 GiB per tensor: DRAM-bound), BERT-base tokens
// (4096 x 768), a LLaMA-7B prefill of 512 tokens (512 x 4096) and one long row (1 x 65536).
std::vector<CaseSpec> transformer_rows(const std::string &layer) {
    return {rows_d(layer, DType::F32, 4096, 4096), rows_d(layer, DType::F32, 32768, 8192, 0.4), rows_d(layer, DType::F32, 4096, 768),
            rows_d(layer, DType::F32, 512, 4096), rows_d(layer, DType::F32, 1, 65536), rows_d(layer, DType::BF16, 4096, 4096)};
}

// GroupNorm as in a Stable Diffusion UNet block (8 x 320 x 64 x 64, 32 groups), NCHW and NHWC.
CaseSpec group_norm(bool nhwc) {
    CaseSpec c;
    c.layer = nhwc ? "group_norm_nhwc" : "group_norm_nchw";
    c.sizes = {{"n", 8}, {"cg", 10}, {"h", 64}, {"w", 64}};
    c.shape_label = nhwc ? "8x64x64x320" : "8x320x64x64";
    return c;
}

// BatchNorm as in ResNet-50 (32 x 256 x 28 x 28): train (statistics over n, h, w: the whole
// tensor is checked) and eval.
CaseSpec batch_norm(bool train) {
    CaseSpec c;
    c.layer = train ? "batch_norm_train" : "batch_norm_eval";
    c.sizes = {{"n", 32}, {"c", 256}, {"h", 28}, {"w", 28}};
    c.shape_label = "32x256x28x28";
    c.full_reference = train;
    return c;
}

std::vector<CaseSpec> all_cases() {
    std::vector<CaseSpec> cs;
    for (const char *layer : {"layer_norm", "rms_norm"})
        for (const CaseSpec &c : transformer_rows(layer)) cs.push_back(c);
    cs.push_back(rows_d("dyt", DType::F32, 4096, 4096));
    cs.push_back(rows_d("fused_add_rms_norm", DType::F32, 4096, 4096));
    cs.push_back(group_norm(false));
    cs.push_back(group_norm(true));
    cs.push_back(batch_norm(true));
    cs.push_back(batch_norm(false));
    return cs;
}

// ---- One prepared case at a time ----------------------------------------------------------------

// Google Benchmark calls a benchmark function once per repetition (and more while it sizes the
// iteration count); the case is prepared on the first call and reused. Moving to another case frees
// the previous one, so the 1 GiB tensors are never held beside the next case's.
const KernelCase &acquire(const CaseSpec &spec) {
    static std::unique_ptr<KernelCase> current;
    if (!current || current->spec().name() != spec.name()) {
        current.reset();
        current = std::make_unique<KernelCase>(registry(), spec, kSeed);
        if (current->error().empty())
            std::fprintf(stderr, "[check] %s: %s (%s)\n", spec.name().c_str(), current->check_message().c_str(),
                         current->kernel()->function.c_str());
        else
            std::fprintf(stderr, "[check] %s: FAILED: %s\n", spec.name().c_str(), current->error().c_str());
    }
    return *current;
}

const CopyBandwidth &roofline(size_t bytes) {
    static std::set<size_t> printed;
    const CopyBandwidth &c = copy_bandwidth(bytes);
    if (printed.insert(c.bytes).second)
        std::fprintf(stderr, "[copy]  %zu bytes (%.1f MiB): plain %.2f GB/s [%.2f..%.2f], nt %.2f GB/s [%.2f..%.2f], %d samples each\n",
                     c.bytes, c.bytes / 1048576.0, c.plain_bps / 1e9, c.plain_min_bps / 1e9, c.plain_max_bps / 1e9, c.nt_bps / 1e9,
                     c.nt_min_bps / 1e9, c.nt_max_bps / 1e9, c.samples);
    return c;
}

// CPU seconds used by the whole process (all threads), to see contention on a shared machine.
double process_cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

void set_counters(benchmark::State &state, size_t bytes, double seconds, const CopyBandwidth &copy) {
    const double iters = (double)state.iterations();
    state.SetBytesProcessed((int64_t)(bytes * iters));
    const double bps = bytes * iters / seconds;
    state.counters["GBps"] = bps / 1e9;
    state.counters["copy_plain_GBps"] = copy.plain_bps / 1e9;
    state.counters["copy_nt_GBps"] = copy.nt_bps / 1e9;
    state.counters["copy_frac"] = bps / copy.best_bps();
}

void BM_kernel(benchmark::State &state, const CaseSpec &spec, bool through_run_kernel) {
    const KernelCase &c = acquire(spec);
    if (!c.error().empty()) {
        state.SkipWithError(c.error().c_str());
        return;
    }
    const CopyBandwidth &copy = roofline(c.bytes_per_call());
    // Our own clock around the loop (Google Benchmark's real time measures the same span), so the
    // ratio counters are plain numbers rather than rates.
    const double cpu0 = process_cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        if (through_run_kernel) {
            c.run_checked();
        } else if (int rc = c.run()) {
            state.SkipWithError(("Halide error " + std::to_string(rc)).c_str());
            break;
        }
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    set_counters(state, c.bytes_per_call(), seconds, copy);
    // CPU time of all our threads / (wall time x threads): 1 when every pool thread ran the whole
    // time; well below 1 when other processes took the cores (or threads sat idle).
    state.counters["cpu_share"] = (process_cpu_seconds() - cpu0) / (seconds * bench_threads());
    state.SetLabel(c.kernel()->function);
}

// The copy itself as a row (the same function the roofline samples), per byte count and flavour.
void BM_copy(benchmark::State &state, size_t bytes, CopyKind kind) {
    bytes = bytes / 128 * 128;
    const float *src;
    float *dst;
    copy_buffers(bytes / 2, &src, &dst);
    const size_t n = bytes / 2 / sizeof(float);
    parallel_copy(src, dst, n, kind);
    const double cpu0 = process_cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) parallel_copy(src, dst, n, kind);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.counters["cpu_share"] = (process_cpu_seconds() - cpu0) / (seconds * bench_threads());
    state.SetBytesProcessed((int64_t)(bytes * (double)state.iterations()));
    state.counters["GBps"] = bytes * (double)state.iterations() / seconds / 1e9;
}

void register_all() {
    std::vector<CaseSpec> cases = all_cases();
    // Copy rows first, one per distinct byte count, then the kernels.
    std::set<size_t> sizes;
    for (const CaseSpec &c : cases)
        if (size_t b = case_bytes(registry(), c)) sizes.insert(b / 128 * 128);
    for (size_t b : sizes)
        for (CopyKind k : {CopyKind::Plain, CopyKind::NonTemporal})
            benchmark::RegisterBenchmark(("copy/" + std::string(copy_kind_name(k)) + "/" + std::to_string(b)).c_str(), BM_copy, b, k)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond)
                ->MinTime(b > (size_t(1) << 30) ? 0.4 : 0.1)
                ->Repetitions(3)
                ->ReportAggregatesOnly(true);
    for (const CaseSpec &c : cases) {
        benchmark::RegisterBenchmark(c.name().c_str(), BM_kernel, c, false)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond)
            ->MinTime(c.min_time)
            ->Repetitions(3)
            ->ReportAggregatesOnly(true);
        // The dispatch overhead of run_kernel (checks and buffers per call) on the smallest case.
        if (c.layer == "layer_norm" && c.shape_label == "1x65536")
            benchmark::RegisterBenchmark((c.name() + "/run_kernel").c_str(), BM_kernel, c, true)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond)
                ->MinTime(c.min_time)
                ->Repetitions(3)
                ->ReportAggregatesOnly(true);
    }
}

}  // namespace

int main(int argc, char **argv) {
    const int threads = configure_threads();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    try {
        registry();
    } catch (const std::exception &e) {
        std::fprintf(stderr, "normgen_bench: cannot load the kernel manifest: %s\n", e.what());
        return 1;
    }
    benchmark::AddCustomContext("halide_threads", std::to_string(threads) + " (halide_set_num_threads; $HL_NUM_THREADS overrides)");
    benchmark::AddCustomContext("copy_isa", copy_isa());
    benchmark::AddCustomContext("kernel_isa", cpu_isa());
    benchmark::AddCustomContext("manifest", registry().path());
    register_all();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
