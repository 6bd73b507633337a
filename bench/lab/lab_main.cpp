// normgen_bench_lab: A/B measurements of schedule variants (bench/lab/lab_schedule.h, and the
// production schedule compiled through LLVM assembly with non-temporal output stores,
// bench/lab/nontemporal_ll.py), interleaved
// so that a noisy neighbour on this shared machine hits every variant alike.
//
//   normgen_bench_lab [--layer layer_norm] [--shape 4096x4096] [--rounds 15] [--min-sample-ms 60]
//                     [--variant NAME]   (only that variant, plus the copies)
//
// For each layer and shape: one set of tensors (bench/kernel_case.h), every lab kernel of that
// layer checked against the float64 reference on it, then `rounds` rounds in which each kernel and
// both copies (plain, non-temporal; bench/copy_roofline.h) take one sample (back-to-back calls for
// at least --min-sample-ms). Prints the median per variant, its GB/s and its fraction of each copy.
#include "bench/copy_roofline.h"
#include "bench/kernel_case.h"
#include "bench/lab/handwritten.h"
#include "bench/thread_pool.h"
#include "runtime/kernel_table.h"
#include "runtime/quantile.h"
#include "runtime/registry.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <sys/resource.h>
#include <vector>

using namespace normgen;
using namespace normgen::bench;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double cpu_s() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct LabVariant {  // (not normgen::Variant, the kernel variant: core or full)
    std::string name;
    std::string schedule;
    std::function<void()> call;
    std::vector<double> seconds;  // per call, one per round
    std::vector<double> share;    // cpu share per round
    int reps = 1;
};

}  // namespace

int main(int argc, char **argv) {
    std::vector<std::string> layers{"layer_norm", "layer_norm_2pass", "layer_norm_welford", "rms_norm", "scale_shift"};
    std::vector<std::pair<int64_t, int64_t>> shapes{{4096, 4096}, {32768, 8192}};
    std::string only;  // run only the variants whose name contains this (and the copies)
    int rounds = 15;
    double min_sample = 0.06;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
        if (a == "--layer") layers = {value()};
        else if (a == "--shape") {
            std::string v = value();
            size_t x = v.find('x');
            shapes = {{std::stoll(v.substr(0, x)), std::stoll(v.substr(x + 1))}};
        } else if (a == "--rounds") rounds = std::stoi(value());
        else if (a == "--min-sample-ms") min_sample = std::stod(value()) / 1e3;
        else if (a == "--variant") only = value();
        else {
            std::fprintf(stderr, "usage: normgen_bench_lab [--layer L] [--shape RxD] [--rounds N] [--min-sample-ms MS] [--variant NAME]\n");
            return 1;
        }
    }
    const int threads = configure_threads();
    Registry reg = Registry::load(default_manifest_path(), kKernelTable, kKernelTableSize);
    std::printf("normgen_bench_lab: %d threads (Halide pool), copy isa %s, manifest %s\n", threads, copy_isa(), reg.path().c_str());

    for (const std::string &layer : layers) {
        std::vector<const Registry::Kernel *> ks;
        for (const Registry::Kernel *k : reg.kernels())
            if (k->layer == layer && k->runs_here()) ks.push_back(k);
        if (ks.empty()) continue;
        // The production schedule first: the case is built (and checked) with it.
        std::stable_partition(ks.begin(), ks.end(), [](const Registry::Kernel *k) { return k->function.find("__production__") != std::string::npos; });
        for (auto [rows, d] : shapes) {
            CaseSpec cs;
            cs.sizes = {{"rows", rows}, {"d", d}};
            cs.shape_label = std::to_string(rows) + "x" + std::to_string(d);
            KernelCase kc(*ks[0], cs, 20250601);
            if (!kc.error().empty()) {
                std::printf("%s %s: %s\n", layer.c_str(), cs.shape_label.c_str(), kc.error().c_str());
                continue;
            }
            const size_t bytes = kc.bytes_per_call();
            std::vector<LabVariant> vs;
            for (const Registry::Kernel *k : ks) {
                std::string why = k == ks[0] ? "" : kc.check_other(*k);
                std::string name = k->function.substr(5, k->function.find("__", 5) - 5);
                if (!only.empty() && name != only) continue;
                if (!why.empty()) {
                    std::printf("  %-14s FAILED the reference check: %s\n", name.c_str(), why.c_str());
                    continue;
                }
                auto fn = k->argv;
                vs.push_back({name, k->schedule, [&kc, fn] { kc.run_other(fn); }, {}, {}});
            }
            // The hand-written ceilings (bench/lab/handwritten.h), same argument list as the layer.
            struct Hand {
                const char *layer, *name;
                int (*fn)(void **);
            };
            static const Hand hands[] = {
                {"rms_norm", "hand", lab::hand_rms_norm},
                {"rms_norm", "hand_nt", lab::hand_rms_norm_nt},
                {"rms_norm", "hand_nt_pf", lab::hand_rms_norm_nt_prefetch},
                {"rms_norm", "hand_nt_pipe", lab::hand_rms_norm_nt_pipelined},
                {"layer_norm", "hand", lab::hand_layer_norm},
                {"layer_norm", "hand_nt", lab::hand_layer_norm_nt},
                {"layer_norm", "hand_nt_pf", lab::hand_layer_norm_nt_prefetch},
                {"layer_norm", "hand_nt_pipe", lab::hand_layer_norm_nt_pipelined},
                {"layer_norm", "hand_nt_pipe1", lab::hand_layer_norm_nt_pipelined_one_pass},
            };
            for (const Hand &h : hands) {
                if (layer != h.layer || (!only.empty() && only != h.name)) continue;
                Registry::Kernel k = *ks[0];
                k.function = std::string("lab__") + h.name + "__" + layer;
                k.argv = h.fn;
                std::string why = kc.check_other(k);
                if (!why.empty()) {
                    std::printf("  %-14s FAILED the reference check: %s\n", h.name, why.c_str());
                    continue;
                }
                auto fn = h.fn;
                vs.push_back({h.name, "hand-written AVX-512 (bench/lab/handwritten.cpp)", [&kc, fn] { kc.run_other(fn); }, {}, {}});
            }
            const float *src;
            float *dst;
            const size_t cb = bytes / 128 * 128;
            copy_buffers(cb / 2, &src, &dst);
            const size_t n = cb / 2 / sizeof(float);
            vs.push_back({"copy_plain", "parallel copy, ordinary stores", [=] { parallel_copy(src, dst, n, CopyKind::Plain); }, {}, {}});
            vs.push_back({"copy_nt", "parallel copy, non-temporal stores", [=] { parallel_copy(src, dst, n, CopyKind::NonTemporal); }, {}, {}});
            // Warm up and size the samples.
            for (LabVariant &v : vs) {
                double t0 = now_s();
                v.call();
                v.call();
                v.reps = std::max(1, (int)(min_sample / std::max(1e-7, (now_s() - t0) / 2)));
            }
            for (int r = 0; r < rounds; ++r) {
                // Rotate the order each round so no variant always follows the same one.
                for (size_t j = 0; j < vs.size(); ++j) {
                    LabVariant &v = vs[(j + r) % vs.size()];
                    double c0 = cpu_s(), t0 = now_s();
                    for (int k = 0; k < v.reps; ++k) v.call();
                    double t = now_s() - t0;
                    v.seconds.push_back(t / v.reps);
                    v.share.push_back((cpu_s() - c0) / (t * threads));
                }
            }
            double plain = 0, nt = 0;
            for (LabVariant &v : vs) {
                if (v.name == "copy_plain") plain = bytes / median(v.seconds);
                if (v.name == "copy_nt") nt = bytes / median(v.seconds);
            }
            std::printf("\n%s f32 %s: %.1f MiB moved per call, %d rounds\n", layer.c_str(), cs.shape_label.c_str(), bytes / 1048576.0, rounds);
            std::printf("  %-14s %10s %8s %8s %8s %8s %8s %6s  %s\n", "variant", "median ms", "min ms", "max ms", "GB/s", "/plain", "/nt",
                        "cpu", "schedule");
            for (LabVariant &v : vs) {
                double m = median(v.seconds), bps = bytes / m;
                std::printf("  %-14s %10.3f %8.3f %8.3f %8.2f %8.3f %8.3f %6.2f  %s\n", v.name.c_str(), m * 1e3,
                            *std::min_element(v.seconds.begin(), v.seconds.end()) * 1e3,
                            *std::max_element(v.seconds.begin(), v.seconds.end()) * 1e3, bps / 1e9, bps / plain, bps / nt,
                            median(v.share), v.schedule.c_str());
            }
            std::fflush(stdout);
        }
    }
    return 0;
}
