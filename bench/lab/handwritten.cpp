// Hand-written AVX-512 RMSNorm and LayerNorm (f32, rows x d, d a multiple of 16), with the
// generated kernels' argument list (halide_buffer_t's, runtime/registry.h) and Halide's thread
// pool, as ceilings for the schedule lab: what the same row-at-a-time algorithm reaches with
// non-temporal output stores and with a software prefetch of the next row inside the map loop.
// Lab use only; they are checked against the float64 reference like every other variant.
#include "bench/lab/handwritten.h"

#include <HalideRuntime.h>

#include <algorithm>
#include <cmath>
#include <immintrin.h>

namespace normgen::bench::lab {

namespace {

struct Rows {
    const float *x;
    const float *w;
    const float *b;  // nullptr for RMSNorm
    float *y;
    int d;
    int rows;
    int rows_per_task;
    bool nt, prefetch, layer_norm;
    bool pipelined = false;
    bool one_pass = false;
};

__attribute__((target("avx512f"))) inline float hsum(__m512 a, __m512 b, __m512 c, __m512 e) {
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, e)));
}

// One row: statistics (4 accumulators per pass), then the map. With `prefetch`, the map loop
// also prefetches the next row of x (one line per vector), so its DRAM reads overlap this row's
// stores instead of running alone in the next row's first statistics pass.
__attribute__((target("avx512f"))) void row(const Rows &r, int i) {
    const float *x = r.x + (size_t)i * r.d;
    float *y = r.y + (size_t)i * r.d;
    const float *next = r.x + (size_t)std::min(i + 1, r.rows - 1) * r.d;
    const int d = r.d;
    float mean = 0, scale;
    if (r.layer_norm) {
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        int k = 0;
        for (; k + 64 <= d; k += 64) {
            s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + k));
            s1 = _mm512_add_ps(s1, _mm512_loadu_ps(x + k + 16));
            s2 = _mm512_add_ps(s2, _mm512_loadu_ps(x + k + 32));
            s3 = _mm512_add_ps(s3, _mm512_loadu_ps(x + k + 48));
        }
        for (; k < d; k += 16) s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + k));
        mean = hsum(s0, s1, s2, s3) / d;
        const __m512 m = _mm512_set1_ps(mean);
        s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (k = 0; k + 64 <= d; k += 64) {
            __m512 a = _mm512_sub_ps(_mm512_loadu_ps(x + k), m), b = _mm512_sub_ps(_mm512_loadu_ps(x + k + 16), m),
                   c = _mm512_sub_ps(_mm512_loadu_ps(x + k + 32), m), e = _mm512_sub_ps(_mm512_loadu_ps(x + k + 48), m);
            s0 = _mm512_fmadd_ps(a, a, s0);
            s1 = _mm512_fmadd_ps(b, b, s1);
            s2 = _mm512_fmadd_ps(c, c, s2);
            s3 = _mm512_fmadd_ps(e, e, s3);
        }
        for (; k < d; k += 16) {
            __m512 a = _mm512_sub_ps(_mm512_loadu_ps(x + k), m);
            s0 = _mm512_fmadd_ps(a, a, s0);
        }
        scale = 1.0f / std::sqrt(hsum(s0, s1, s2, s3) / d + 1e-5f);
    } else {
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        int k = 0;
        for (; k + 64 <= d; k += 64) {
            __m512 a = _mm512_loadu_ps(x + k), b = _mm512_loadu_ps(x + k + 16), c = _mm512_loadu_ps(x + k + 32),
                   e = _mm512_loadu_ps(x + k + 48);
            s0 = _mm512_fmadd_ps(a, a, s0);
            s1 = _mm512_fmadd_ps(b, b, s1);
            s2 = _mm512_fmadd_ps(c, c, s2);
            s3 = _mm512_fmadd_ps(e, e, s3);
        }
        for (; k < d; k += 16) {
            __m512 a = _mm512_loadu_ps(x + k);
            s0 = _mm512_fmadd_ps(a, a, s0);
        }
        scale = 1.0f / std::sqrt(hsum(s0, s1, s2, s3) / d + 1e-6f);
    }
    const __m512 m = _mm512_set1_ps(mean), s = _mm512_set1_ps(scale);
    for (int k = 0; k < d; k += 16) {
        if (r.prefetch) _mm_prefetch((const char *)(next + k), _MM_HINT_T0);
        __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + k), m), s), _mm512_loadu_ps(r.w + k));
        if (r.b) v = _mm512_add_ps(v, _mm512_loadu_ps(r.b + k));
        if (r.nt) _mm512_stream_ps(y + k, v);
        else _mm512_storeu_ps(y + k, v);
    }
}

// Software-pipelined: the map of row i and the first statistics pass of row i + 1 share one loop,
// so every iteration reads DRAM (the next row) and writes DRAM (this row) at once, like the copy.
// RMSNorm: sum of squares of row i + 1. LayerNorm: sum of row i + 1 (its squared deviations are
// then a second pass over row i + 1, which is in L1/L2).
__attribute__((target("avx512f"))) void rows_pipelined(const Rows &r, int b, int e) {
    const int d = r.d;
    const float eps = r.layer_norm ? 1e-5f : 1e-6f;
    auto first_pass = [&](const float *x) {
        __m512 s0 = _mm512_setzero_ps(), s1 = s0;
        for (int k = 0; k < d; k += 32) {
            __m512 a = _mm512_loadu_ps(x + k), c = _mm512_loadu_ps(x + k + 16);
            if (r.layer_norm) s0 = _mm512_add_ps(s0, a), s1 = _mm512_add_ps(s1, c);
            else s0 = _mm512_fmadd_ps(a, a, s0), s1 = _mm512_fmadd_ps(c, c, s1);
        }
        return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    };
    auto stats = [&](const float *x, float first, float &mean, float &scale) {
        if (!r.layer_norm) {
            mean = 0;
            scale = 1.0f / std::sqrt(first / d + eps);
            return;
        }
        mean = first / d;
        const __m512 m = _mm512_set1_ps(mean);
        __m512 s0 = _mm512_setzero_ps(), s1 = s0;
        for (int k = 0; k < d; k += 32) {
            __m512 a = _mm512_sub_ps(_mm512_loadu_ps(x + k), m), c = _mm512_sub_ps(_mm512_loadu_ps(x + k + 16), m);
            s0 = _mm512_fmadd_ps(a, a, s0), s1 = _mm512_fmadd_ps(c, c, s1);
        }
        scale = 1.0f / std::sqrt(_mm512_reduce_add_ps(_mm512_add_ps(s0, s1)) / d + eps);
    };
    float first = first_pass(r.x + (size_t)b * d);
    for (int i = b; i < e; ++i) {
        const float *x = r.x + (size_t)i * d;
        float *y = r.y + (size_t)i * d;
        float mean, scale;
        stats(x, first, mean, scale);
        const __m512 m = _mm512_set1_ps(mean), s = _mm512_set1_ps(scale);
        const bool more = i + 1 < e;
        const float *nx = more ? x + d : x;  // the next row (re-reading this one on the last row)
        __m512 s0 = _mm512_setzero_ps(), s1 = s0;
        for (int k = 0; k < d; k += 32) {
            __m512 a = _mm512_loadu_ps(nx + k), c = _mm512_loadu_ps(nx + k + 16);
            if (r.layer_norm) s0 = _mm512_add_ps(s0, a), s1 = _mm512_add_ps(s1, c);
            else s0 = _mm512_fmadd_ps(a, a, s0), s1 = _mm512_fmadd_ps(c, c, s1);
            __m512 v0 = _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + k), m), s), _mm512_loadu_ps(r.w + k));
            __m512 v1 = _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + k + 16), m), s), _mm512_loadu_ps(r.w + k + 16));
            if (r.b) v0 = _mm512_add_ps(v0, _mm512_loadu_ps(r.b + k)), v1 = _mm512_add_ps(v1, _mm512_loadu_ps(r.b + k + 16));
            _mm512_stream_ps(y + k, v0);
            _mm512_stream_ps(y + k + 16, v1);
        }
        first = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    }
}

// LayerNorm, software-pipelined with one-pass shifted statistics: while row i is mapped, row i + 1
// accumulates sum(x - k) and sum((x - k)^2) with k the mean of its first 64 elements (the shift
// codegen/halide/lower.cpp already uses for means), so var = E[(x-k)^2] - E[x-k]^2 loses only
// what |mean - k| costs. Every loop then reads DRAM and writes DRAM at once, like the copy.
__attribute__((target("avx512f"))) void rows_pipelined_one_pass(const Rows &r, int b, int e) {
    const int d = r.d;
    auto shift_of = [&](const float *x) {
        int m = std::min(d, 64);
        float s = 0;
        for (int k = 0; k < m; ++k) s += x[k];
        return s / m;
    };
    float k_next = shift_of(r.x + (size_t)b * d), sum = 0, sq = 0;
    {
        const float *x = r.x + (size_t)b * d;
        const __m512 kk = _mm512_set1_ps(k_next);
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, q0 = s0, q1 = s0;
        for (int k = 0; k < d; k += 32) {
            __m512 a = _mm512_sub_ps(_mm512_loadu_ps(x + k), kk), c = _mm512_sub_ps(_mm512_loadu_ps(x + k + 16), kk);
            s0 = _mm512_add_ps(s0, a), s1 = _mm512_add_ps(s1, c);
            q0 = _mm512_fmadd_ps(a, a, q0), q1 = _mm512_fmadd_ps(c, c, q1);
        }
        sum = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
        sq = _mm512_reduce_add_ps(_mm512_add_ps(q0, q1));
    }
    for (int i = b; i < e; ++i) {
        const float *x = r.x + (size_t)i * d;
        float *y = r.y + (size_t)i * d;
        float dm = sum / d, mean = k_next + dm, var = std::max(sq / d - dm * dm, 0.0f);
        const __m512 m = _mm512_set1_ps(mean), s = _mm512_set1_ps(1.0f / std::sqrt(var + 1e-5f));
        const bool more = i + 1 < e;
        const float *nx = more ? x + d : x;
        k_next = shift_of(nx);
        const __m512 kk = _mm512_set1_ps(k_next);
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, q0 = s0, q1 = s0;
        for (int k = 0; k < d; k += 32) {
            __m512 a = _mm512_sub_ps(_mm512_loadu_ps(nx + k), kk), c = _mm512_sub_ps(_mm512_loadu_ps(nx + k + 16), kk);
            s0 = _mm512_add_ps(s0, a), s1 = _mm512_add_ps(s1, c);
            q0 = _mm512_fmadd_ps(a, a, q0), q1 = _mm512_fmadd_ps(c, c, q1);
            __m512 v0 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + k), m), s), _mm512_loadu_ps(r.w + k),
                                        _mm512_loadu_ps(r.b + k));
            __m512 v1 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + k + 16), m), s), _mm512_loadu_ps(r.w + k + 16),
                                        _mm512_loadu_ps(r.b + k + 16));
            _mm512_stream_ps(y + k, v0);
            _mm512_stream_ps(y + k + 16, v1);
        }
        sum = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
        sq = _mm512_reduce_add_ps(_mm512_add_ps(q0, q1));
    }
}

int task(void *, int t, uint8_t *closure) {
    const Rows &r = *reinterpret_cast<const Rows *>(closure);
    int b = t * r.rows_per_task, e = std::min(r.rows, b + r.rows_per_task);
    if (r.pipelined && r.layer_norm && r.one_pass) rows_pipelined_one_pass(r, b, e);
    else if (r.pipelined) rows_pipelined(r, b, e);
    else
        for (int i = b; i < e; ++i) row(r, i);
    if (r.nt) _mm_sfence();
    return 0;
}

// args: x, weight, [bias,] y as in the manifest (inputs, params, outputs); dim 0 is d.
int run(void **args, bool layer_norm, bool nt, bool prefetch, bool pipelined = false, int task_elements = 16384, bool one_pass = false) {
    int k = 0;
    auto *x = (halide_buffer_t *)args[k++];
    auto *w = (halide_buffer_t *)args[k++];
    auto *b = layer_norm ? (halide_buffer_t *)args[k++] : nullptr;
    auto *y = (halide_buffer_t *)args[k++];
    Rows r{(const float *)x->host, (const float *)w->host, b ? (const float *)b->host : nullptr, (float *)y->host,
           x->dim[0].extent, x->dim[1].extent, 0, nt, prefetch, layer_norm};
    r.pipelined = pipelined;
    r.one_pass = one_pass;
    if (r.d % 32 || (nt && ((uintptr_t)r.y % 64))) return -1;  // the lab's shapes only
    r.rows_per_task = std::max(1, task_elements / r.d);  // 16384: the production schedule's task size
    int tasks = (r.rows + r.rows_per_task - 1) / r.rows_per_task;
    return halide_do_par_for(nullptr, task, 0, tasks, (uint8_t *)&r);
}

}  // namespace

int hand_rms_norm(void **a) { return run(a, false, false, false); }
int hand_rms_norm_nt(void **a) { return run(a, false, true, false); }
int hand_rms_norm_nt_prefetch(void **a) { return run(a, false, true, true); }
int hand_rms_norm_nt_pipelined(void **a) { return run(a, false, true, false, true, 1 << 18); }
int hand_layer_norm_nt_pipelined(void **a) { return run(a, true, true, false, true, 1 << 18); }
int hand_layer_norm_nt_pipelined_one_pass(void **a) { return run(a, true, true, false, true, 1 << 18, true); }
int hand_layer_norm(void **a) { return run(a, true, false, false); }
int hand_layer_norm_nt(void **a) { return run(a, true, true, false); }
int hand_layer_norm_nt_prefetch(void **a) { return run(a, true, true, true); }

}  // namespace normgen::bench::lab
