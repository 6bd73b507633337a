#include "bench/copy_roofline.h"

#include "bench/host_buffer.h"
#include "bench/thread_pool.h"
#include "runtime/quantile.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <immintrin.h>
#include <map>
#include <vector>

namespace normgen::bench {

const char *copy_kind_name(CopyKind k) { return k == CopyKind::Plain ? "plain" : k == CopyKind::NonTemporal ? "nt" : "read"; }

namespace {

// Four vectors (256 bytes on AVX-512) per iteration: enough loads in flight to stream; the chunk
// boundaries are multiples of kAlignFloats, so only the tail of the last chunk needs the scalar loop.
__attribute__((target("avx512f"))) void copy_avx512(const float *s, float *d, size_t n, bool nt) {
    size_t i = 0;
    if (nt) {
        for (; i + 64 <= n; i += 64) {
            __m512 a = _mm512_load_ps(s + i), b = _mm512_load_ps(s + i + 16), c = _mm512_load_ps(s + i + 32),
                   e = _mm512_load_ps(s + i + 48);
            _mm512_stream_ps(d + i, a);
            _mm512_stream_ps(d + i + 16, b);
            _mm512_stream_ps(d + i + 32, c);
            _mm512_stream_ps(d + i + 48, e);
        }
        _mm_sfence();
    } else {
        for (; i + 64 <= n; i += 64) {
            __m512 a = _mm512_load_ps(s + i), b = _mm512_load_ps(s + i + 16), c = _mm512_load_ps(s + i + 32),
                   e = _mm512_load_ps(s + i + 48);
            _mm512_store_ps(d + i, a);
            _mm512_store_ps(d + i + 16, b);
            _mm512_store_ps(d + i + 32, c);
            _mm512_store_ps(d + i + 48, e);
        }
    }
    for (; i < n; ++i) d[i] = s[i];
}

__attribute__((target("avx"))) void copy_avx(const float *s, float *d, size_t n, bool nt) {
    size_t i = 0;
    if (nt) {
        for (; i + 32 <= n; i += 32) {
            __m256 a = _mm256_load_ps(s + i), b = _mm256_load_ps(s + i + 8), c = _mm256_load_ps(s + i + 16),
                   e = _mm256_load_ps(s + i + 24);
            _mm256_stream_ps(d + i, a);
            _mm256_stream_ps(d + i + 8, b);
            _mm256_stream_ps(d + i + 16, c);
            _mm256_stream_ps(d + i + 24, e);
        }
        _mm_sfence();
    } else {
        for (; i + 32 <= n; i += 32) {
            __m256 a = _mm256_load_ps(s + i), b = _mm256_load_ps(s + i + 8), c = _mm256_load_ps(s + i + 16),
                   e = _mm256_load_ps(s + i + 24);
            _mm256_store_ps(d + i, a);
            _mm256_store_ps(d + i + 8, b);
            _mm256_store_ps(d + i + 16, c);
            _mm256_store_ps(d + i + 24, e);
        }
    }
    for (; i < n; ++i) d[i] = s[i];
}

void copy_scalar(const float *s, float *d, size_t n, bool) { std::memcpy(d, s, n * sizeof(float)); }

// The read-only roofline: a sum over both buffers (the same byte count as a copy, all of it read),
// four accumulators so the adds do not limit it.
volatile float g_read_sink;

__attribute__((target("avx512f"))) void read_avx512(const float *a, const float *b, size_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_add_ps(s0, _mm512_load_ps(a + i));
        s1 = _mm512_add_ps(s1, _mm512_load_ps(a + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_load_ps(b + i));
        s3 = _mm512_add_ps(s3, _mm512_load_ps(b + i + 16));
    }
    alignas(64) float v[16];
    _mm512_store_ps(v, _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    float t = 0;
    for (float e : v) t += e;
    for (; i < n; ++i) t += a[i] + b[i];
    g_read_sink = t;
}

__attribute__((target("avx"))) void read_avx(const float *a, const float *b, size_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(a + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(a + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(b + i));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(b + i + 8));
    }
    alignas(32) float v[8];
    _mm256_store_ps(v, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    float t = 0;
    for (float e : v) t += e;
    for (; i < n; ++i) t += a[i] + b[i];
    g_read_sink = t;
}

void read_scalar(const float *a, const float *b, size_t n) {
    float t = 0;
    for (size_t i = 0; i < n; ++i) t += a[i] + b[i];
    g_read_sink = t;
}

using CopyFn = void (*)(const float *, float *, size_t, bool);

CopyFn pick_copy() {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return copy_avx512;
    if (__builtin_cpu_supports("avx")) return copy_avx;
    return copy_scalar;
}

const CopyFn kCopy = pick_copy();

using ReadFn = void (*)(const float *, const float *, size_t);
ReadFn pick_read() {
    if (kCopy == copy_avx512) return read_avx512;
    if (kCopy == copy_avx) return read_avx;
    return read_scalar;
}
const ReadFn kRead = pick_read();

constexpr size_t kAlignFloats = 1024;  // chunk boundaries every 4 KiB

struct Pool {
    HostBuffer src, dst;
};
Pool &pool() {
    static Pool p;
    return p;
}

// The pool follows the case: it grows to the case's bytes and shrinks again when a case needs less
// than a quarter of it (one case asks for its copy and for a read of x, half that), so a DRAM
// case's buffers (x + y of a 2.5 GiB tensor: 5 GB) are not held beside every later case's
// tensors for the rest of the run.
void ensure_pool(size_t bytes_each) {
    Pool &p = pool();
    if (p.src.size() >= bytes_each && p.src.size() / 4 <= bytes_each) return;
    p.src = HostBuffer();
    p.dst = HostBuffer();
    p.src = HostBuffer(bytes_each);
    p.dst = HostBuffer(bytes_each);
    // First touch, in parallel (the same threads then copy), with non-zero data.
    size_t n = bytes_each / sizeof(float);
    float *s = (float *)p.src.data(), *d = (float *)p.dst.data();
    const int tasks = 64;
    parallel_for(tasks, [&](int t) {
        size_t b = n * t / tasks, e = n * (t + 1) / tasks;
        for (size_t i = b; i < e; ++i) {
            s[i] = 1.0f + (float)(i & 1023);
            d[i] = 0.5f;
        }
    });
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

const char *copy_isa() {
    if (kCopy == copy_avx512) return "avx512";
    if (kCopy == copy_avx) return "avx";
    return "scalar";
}

void parallel_copy(const float *src, float *dst, size_t n, CopyKind kind) {
    // Several chunks per thread, so a thread slowed by a neighbour on this shared machine does not
    // hold the whole copy back (Halide's pool hands out tasks dynamically, as it does the kernels' rows).
    const bool nt = kind == CopyKind::NonTemporal, rd = kind == CopyKind::Read;
    auto body = [&](size_t b, size_t e) {
        if (rd)
            kRead(src + b, dst + b, e - b);
        else
            kCopy(src + b, dst + b, e - b, nt);
    };
    int threads = std::max(1, bench_threads());
    size_t chunk = std::max<size_t>(kAlignFloats * 16, (n / (size_t)(threads * 8) + kAlignFloats - 1) / kAlignFloats * kAlignFloats);
    int tasks = (int)((n + chunk - 1) / chunk);
    if (tasks <= 1) {
        body(0, n);
        return;
    }
    parallel_for(tasks, [&](int t) {
        size_t b = chunk * (size_t)t;
        body(b, std::min(n, b + chunk));
    });
}

const CopyBandwidth &copy_bandwidth(size_t bytes) {
    static std::map<size_t, CopyBandwidth> cache;
    bytes = bytes / 128 * 128;
    auto it = cache.find(bytes);
    if (it != cache.end()) return it->second;

    const size_t each = bytes / 2, n = each / sizeof(float);
    ensure_pool(each);
    const float *src = (const float *)pool().src.data();
    float *dst = (float *)pool().dst.data();

    // Repeat count per sample: enough back-to-back copies for ~2 ms.
    auto t0 = std::chrono::steady_clock::now();
    parallel_copy(src, dst, n, CopyKind::Plain);  // warm-up (caches, pool threads awake)
    double one = std::max(1e-7, seconds_since(t0));
    int reps = std::max(1, (int)(2e-3 / one));

    // Blocks of one flavour at a time, as a kernel runs back to back: a non-temporal store to a
    // line that a plain copy just left dirty in cache costs more than one to a line that is not
    // cached, so interleaving the flavours sample by sample would understate both. Two blocks per
    // flavour (plain, nt, plain, nt) spread them over the machine's drifting load; the first
    // sample of each block only warms up.
    std::vector<double> plain, nt, rd;
    const double block_seconds = std::max(0.08, 4 * one * reps);
    for (int round = 0; round < 2; ++round)
        for (CopyKind k : {CopyKind::Plain, CopyKind::NonTemporal, CopyKind::Read}) {
            std::vector<double> &out = k == CopyKind::Plain ? plain : k == CopyKind::NonTemporal ? nt : rd;
            double spent = 0;
            for (int i = 0; i == 0 || ((i < 5 || spent < block_seconds) && i < 60); ++i) {
                auto s0 = std::chrono::steady_clock::now();
                for (int r = 0; r < reps; ++r) parallel_copy(src, dst, n, k);
                double t = seconds_since(s0);
                spent += t;
                if (i > 0) out.push_back((double)bytes * reps / t);
            }
        }
    CopyBandwidth c;
    c.bytes = bytes;
    c.samples = (int)std::min(plain.size(), nt.size());
    c.plain_bps = median(plain);
    c.nt_bps = median(nt);
    c.read_bps = median(rd);
    c.plain_min_bps = *std::min_element(plain.begin(), plain.end());
    c.plain_max_bps = *std::max_element(plain.begin(), plain.end());
    c.nt_min_bps = *std::min_element(nt.begin(), nt.end());
    c.nt_max_bps = *std::max_element(nt.begin(), nt.end());
    return cache[bytes] = c;
}

double copy_sample_seconds(size_t bytes, CopyKind kind, double min_seconds) {
    // A copy of B bytes reads B/2 and writes B/2: B/8 floats each way; a read of B bytes sums src
    // and dst, B/8 floats each.
    const size_t n = std::max<size_t>(1, bytes / 8);
    ensure_pool(n * sizeof(float));
    const float *src = (const float *)pool().src.data();
    float *dst = (float *)pool().dst.data();
    // One call first: the sample itself when it takes min_seconds alone (past the caches nothing
    // of the previous flavour is left to disturb it), else a warm-up (the pool's threads awake).
    auto t0 = std::chrono::steady_clock::now();
    parallel_copy(src, dst, n, kind);
    double t = seconds_since(t0);
    if (t >= min_seconds) return t;
    int calls = 0;
    t0 = std::chrono::steady_clock::now();
    do {
        parallel_copy(src, dst, n, kind);
        ++calls;
        t = seconds_since(t0);
    } while (t < min_seconds);
    return t / calls;
}

void copy_buffers(size_t bytes_each, const float **src, float **dst) {
    ensure_pool(bytes_each);
    *src = (const float *)pool().src.data();
    *dst = (float *)pool().dst.data();
}

void release_copy_buffers() {
    pool().src = HostBuffer();
    pool().dst = HostBuffer();
}

}  // namespace normgen::bench
