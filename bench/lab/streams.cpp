// normgen_bench_streams: what the memory system of this machine gives a backward layer's traffic,
// measured with hand-written AVX-512 loops of that traffic and no normalization arithmetic, beside
// the copy and read-only rooflines of the same bytes (bench/copy_roofline.h), interleaved round by
// round so that a noisy neighbour hits every variant alike.
//
//   normgen_bench_streams [--shape ROWSxD] [--rounds N] [--min-sample-ms MS]
//
// A row backward (LayerNorm's, RMSNorm's, DyT's) reads two tensors of rows x d (x, d_y), writes
// one (d_x), and sums terms over the rows (d_weight, d_bias). Its variants here, f32, each on
// Halide's thread pool in tasks of whole rows (about 2^18 elements a task), non-temporal stores:
//   streams      d_x = x * d_y: the two reads and the write, nothing else (a triad);
//   streams+cols the same and, in the same loop, the column sums of x * d_y into the task's own
//                d-long accumulator (in L1 / L2): the fused loop a backward without row
//                statistics (DyT's) could run;
//   row+map+cols per row a row sum of x * d_y first (the row read from memory), then the map and
//                the column sums in one loop (the row from L1): the best loop a backward whose map
//                needs its row's sums (LayerNorm's, RMSNorm's) can run;
//   3 sweeps     per task (a block of rows): the rows' sums, then the map, then the column sums, each
//                a sweep over the block (the second and third from the cache): the loop nest of
//                normgen's Halide row schedule with column sums (codegen/halide/schedule.cpp).
// The bytes counted are the backward's floor (x, d_y read once, d_x written once); the column sums'
// per-task partials (a d-long row per task, 1/64 of a tensor at 4096 x 8192) are not counted.
#include "bench/copy_roofline.h"
#include "bench/host_buffer.h"
#include "bench/thread_pool.h"
#include "codegen/common/tuning_keys.h"
#include "runtime/quantile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <immintrin.h>
#include <string>
#include <vector>

using namespace normgen::bench;
using normgen::median;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

enum class Loop { Streams, StreamsCols, StreamsCols4, RowMapCols, ThreeSweeps };

struct Tensors {
    const float *x, *dy;
    float *dx;
    float *partials;  // tasks x d
    int64_t rows, d, rows_per_task;
};

// (The loops are AVX-512 functions in a file compiled for any x86-64: main checks the CPU first.)
#define NORMGEN_AVX512 __attribute__((target("avx512f,fma")))

// The sum over a row of x * d_y.
NORMGEN_AVX512 float row_sum(const Tensors &t, int64_t r) {
    const float *x = t.x + r * t.d, *dy = t.dy + r * t.d;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    for (int64_t j = 0; j < t.d; j += 32) {
        s0 = _mm512_fmadd_ps(_mm512_load_ps(x + j), _mm512_load_ps(dy + j), s0);
        s1 = _mm512_fmadd_ps(_mm512_load_ps(x + j + 16), _mm512_load_ps(dy + j + 16), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

// A row's map: d_x = x * d_y, or with a row's sum c, x * c + d_y; with `acc`, the column sums of
// x * d_y added to it in the same loop.
NORMGEN_AVX512 void map_row(const Tensors &t, int64_t r, bool with_sum, float c, float *acc) {
    const float *x = t.x + r * t.d, *dy = t.dy + r * t.d;
    float *dx = t.dx + r * t.d;
    const __m512 vc = _mm512_set1_ps(c);
    for (int64_t j = 0; j < t.d; j += 16) {
        const __m512 a = _mm512_load_ps(x + j), b = _mm512_load_ps(dy + j);
        _mm512_stream_ps(dx + j, with_sum ? _mm512_fmadd_ps(a, vc, b) : _mm512_mul_ps(a, b));
        if (acc) _mm512_store_ps(acc + j, _mm512_fmadd_ps(a, b, _mm512_load_ps(acc + j)));
    }
}

// Four rows a pass (from row r): the accumulator loaded and stored once per four rows' terms.
NORMGEN_AVX512 void map_four_rows(const Tensors &t, int64_t r, float *acc) {
    const int64_t d = t.d;
    const float *x = t.x + r * d, *dy = t.dy + r * d;
    float *dx = t.dx + r * d;
    for (int64_t j = 0; j < d; j += 16) {
        __m512 s = _mm512_load_ps(acc + j);
        for (int k = 0; k < 4; ++k) {
            const __m512 a = _mm512_load_ps(x + k * d + j), b = _mm512_load_ps(dy + k * d + j);
            _mm512_stream_ps(dx + k * d + j, _mm512_mul_ps(a, b));
            s = _mm512_fmadd_ps(a, b, s);
        }
        _mm512_store_ps(acc + j, s);
    }
}

// The column sums of x * d_y over a row, as a sweep of their own.
NORMGEN_AVX512 void column_sums(const Tensors &t, int64_t r, float *acc) {
    const float *x = t.x + r * t.d, *dy = t.dy + r * t.d;
    for (int64_t j = 0; j < t.d; j += 16)
        _mm512_store_ps(acc + j, _mm512_fmadd_ps(_mm512_load_ps(x + j), _mm512_load_ps(dy + j), _mm512_load_ps(acc + j)));
}

NORMGEN_AVX512 void zero_row(float *acc, int64_t d) {
    for (int64_t j = 0; j < d; j += 16) _mm512_store_ps(acc + j, _mm512_setzero_ps());
}

// One task: rows [r0, r1). Column sums go to the task's accumulator (its row of `partials`).
void run_task(const Tensors &t, Loop loop, int task) {
    const int64_t d = t.d, r0 = task * t.rows_per_task, r1 = std::min(t.rows, r0 + t.rows_per_task);
    float *acc = t.partials + task * d;
    zero_row(acc, d);
    switch (loop) {
    case Loop::Streams:
    case Loop::StreamsCols:
        for (int64_t r = r0; r < r1; ++r) map_row(t, r, false, 0.f, loop == Loop::StreamsCols ? acc : nullptr);
        break;
    case Loop::StreamsCols4: {
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4) map_four_rows(t, r, acc);
        for (; r < r1; ++r) map_row(t, r, false, 0.f, acc);
        break;
    }
    case Loop::RowMapCols:
        for (int64_t r = r0; r < r1; ++r) map_row(t, r, true, row_sum(t, r), acc);
        break;
    case Loop::ThreeSweeps: {
        std::vector<float> sums((size_t)(r1 - r0));
        for (int64_t r = r0; r < r1; ++r) sums[(size_t)(r - r0)] = row_sum(t, r);
        for (int64_t r = r0; r < r1; ++r) map_row(t, r, true, sums[(size_t)(r - r0)], nullptr);
        for (int64_t r = r0; r < r1; ++r) column_sums(t, r, acc);
        break;
    }
    }
    _mm_sfence();
}

struct Variant {
    std::string name;
    std::function<void()> call;
    std::vector<double> seconds;
    int reps = 1;
};

}  // namespace

int main(int argc, char **argv) {
    int64_t rows = 4096, d = 8192;
    int rounds = 15;
    double min_sample = 0.06;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
        if (a == "--shape") {
            const std::string v = value();
            const size_t x = v.find('x');
            rows = x == std::string::npos ? 0 : std::atoll(v.substr(0, x).c_str());
            d = x == std::string::npos ? 0 : std::atoll(v.substr(x + 1).c_str());
        } else if (a == "--rounds") rounds = std::atoi(value().c_str());
        else if (a == "--min-sample-ms") min_sample = std::atof(value().c_str()) / 1e3;
        else {
            const bool help = a == "--help" || a == "-h";
            std::fprintf(help ? stdout : stderr,
                         "%susage: normgen_bench_streams [--shape ROWSxD] [--rounds N] [--min-sample-ms MS]\n"
                         "  (a backward layer's memory traffic in hand-written loops, beside the copy: bench/lab/streams.cpp)\n",
                         help ? "" : ("normgen_bench_streams: unknown option '" + a + "'\n").c_str());
            return help ? 0 : 1;
        }
    }
    if (rows < 1 || d < 32 || d % 32 || rounds < 1) {
        std::fprintf(stderr, "normgen_bench_streams: --shape needs rows >= 1 and d a positive multiple of 32, --rounds >= 1\n");
        return 1;
    }
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) {
        std::fprintf(stderr, "normgen_bench_streams: the loops are AVX-512; this CPU has none\n");
        return 77;  // (CTest's skip code: its smoke test skips on such a CPU)
    }
    const int threads = configure_threads();
    const size_t n = (size_t)(rows * d);
    Tensors t{};
    t.rows = rows;
    t.d = d;
    t.rows_per_task = std::max<int64_t>(1, (1 << 18) / d);
    const int tasks = (int)((rows + t.rows_per_task - 1) / t.rows_per_task);
    HostBuffer bx(n * sizeof(float)), bdy(n * sizeof(float)), bdx(n * sizeof(float)), bp((size_t)tasks * d * sizeof(float));
    float *x = (float *)bx.data(), *dy = (float *)bdy.data(), *dx = (float *)bdx.data(), *partials = (float *)bp.data();
    parallel_for(tasks, [&](int task) {
        for (size_t i = (size_t)task * t.rows_per_task * d; i < std::min(n, (size_t)(task + 1) * t.rows_per_task * d); ++i) {
            x[i] = 1.0f + 1e-3f * (float)(i % 1021);
            dy[i] = 0.5f - 1e-3f * (float)(i % 997);
            dx[i] = 0.f;
        }
    });
    t.x = x;
    t.dy = dy;
    t.dx = dx;
    t.partials = partials;
    const size_t bytes = 3 * n * sizeof(float);
    const float *src;
    float *dst;
    const size_t cb = bytes / 128 * 128;
    copy_buffers(cb / 2, &src, &dst);
    const size_t cn = cb / 2 / sizeof(float);
    std::vector<Variant> vs;
    vs.push_back({"copy_nt", [=] { parallel_copy(src, dst, cn, CopyKind::NonTemporal); }, {}, 1});
    vs.push_back({"read", [=] { parallel_copy(src, dst, cn, CopyKind::Read); }, {}, 1});
    const std::pair<const char *, Loop> loops[] = {
        {"streams", Loop::Streams}, {"streams+cols", Loop::StreamsCols}, {"streams+cols4", Loop::StreamsCols4}, {"row+map+cols", Loop::RowMapCols}, {"3 sweeps", Loop::ThreeSweeps}};
    for (const auto &[name, loop] : loops) {
        const Loop l = loop;
        vs.push_back({name, [&t, l, tasks] { parallel_for(tasks, [&](int task) { run_task(t, l, task); }); }, {}, 1});
    }
    std::printf("normgen_bench_streams: %s, %d threads (Halide pool), f32 %lld x %lld (x, d_y read, d_x written: %.1f MiB a call), "
                "tasks of %lld rows, %d rounds\n",
                normgen::this_cpu().text().c_str(), threads, (long long)rows, (long long)d, bytes / 1048576.0, (long long)t.rows_per_task, rounds);
    for (Variant &v : vs) {  // warm up and size the samples
        const double t0 = now_s();
        v.call();
        v.call();
        v.reps = std::max(1, (int)(min_sample / std::max(1e-7, (now_s() - t0) / 2)));
    }
    std::fflush(stdout);
    for (int r = 0; r < rounds; ++r) {
        std::fprintf(stderr, "\rround %d of %d", r + 1, rounds);
        for (size_t j = 0; j < vs.size(); ++j) {  // the order rotates each round
            Variant &v = vs[(j + (size_t)r) % vs.size()];
            const double t0 = now_s();
            for (int k = 0; k < v.reps; ++k) v.call();
            v.seconds.push_back((now_s() - t0) / v.reps);
        }
    }
    std::fprintf(stderr, "\n");
    const double copy = bytes / median(vs[0].seconds), read = bytes / median(vs[1].seconds);
    std::printf("  %-14s %10s %8s %8s %8s\n", "variant", "median ms", "GB/s", "/copy_nt", "/read");
    for (const Variant &v : vs) {
        const double bps = bytes / median(v.seconds);
        std::printf("  %-14s %10.3f %8.2f %8.3f %8.3f\n", v.name.c_str(), median(v.seconds) * 1e3, bps / 1e9, bps / copy, bps / read);
    }
    return 0;
}
