#include "runtime/mlir_abi.h"

#include <HalideRuntime.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace normgen {

namespace {

// A descriptor as 64-bit words: allocated, aligned, offset, sizes[R], strides[R]. Fixed-size, so
// a call allocates nothing (a one-row LayerNorm takes about a microsecond: mallocs showed up).
constexpr int kMaxRank = 8;
struct Descriptor {
    int64_t words[3 + 2 * kMaxRank] = {};
    int rank = 0;
    int elem_bytes = 4;
    int64_t &offset() { return words[2]; }
    int64_t &size(int d) { return words[3 + d]; }
    int64_t &stride(int d) { return words[3 + rank + d]; }
};

// A dense tensor: `sizes` outermost first.
void describe(Descriptor &d, void *data, const int64_t *sizes, int rank, int elem_bytes) {
    if (rank > kMaxRank) std::abort();  // refused at generation time: tensors have few axes
    d.rank = rank;
    d.elem_bytes = elem_bytes;
    d.words[0] = d.words[1] = (int64_t)(intptr_t)data;
    d.words[2] = 0;
    int64_t stride = 1;
    for (int k = rank - 1; k >= 0; --k) {
        d.size(k) = sizes[k];
        d.stride(k) = stride;
        stride *= sizes[k];
    }
}

void invoke(void *fn, int n, void **d) {
    using P = void *;
    switch (n) {
    case 1: reinterpret_cast<void (*)(P)>(fn)(d[0]); return;
    case 2: reinterpret_cast<void (*)(P, P)>(fn)(d[0], d[1]); return;
    case 3: reinterpret_cast<void (*)(P, P, P)>(fn)(d[0], d[1], d[2]); return;
    case 4: reinterpret_cast<void (*)(P, P, P, P)>(fn)(d[0], d[1], d[2], d[3]); return;
    case 5: reinterpret_cast<void (*)(P, P, P, P, P)>(fn)(d[0], d[1], d[2], d[3], d[4]); return;
    case 6: reinterpret_cast<void (*)(P, P, P, P, P, P)>(fn)(d[0], d[1], d[2], d[3], d[4], d[5]); return;
    case 7: reinterpret_cast<void (*)(P, P, P, P, P, P, P)>(fn)(d[0], d[1], d[2], d[3], d[4], d[5], d[6]); return;
    case 8: reinterpret_cast<void (*)(P, P, P, P, P, P, P, P)>(fn)(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]); return;
    case 9: reinterpret_cast<void (*)(P, P, P, P, P, P, P, P, P)>(fn)(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8]); return;
    case 10: reinterpret_cast<void (*)(P, P, P, P, P, P, P, P, P, P)>(fn)(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9]); return;
    case 11: reinterpret_cast<void (*)(P, P, P, P, P, P, P, P, P, P, P)>(fn)(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10]); return;
    case 12: reinterpret_cast<void (*)(P, P, P, P, P, P, P, P, P, P, P, P)>(fn)(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11]); return;
    case 13: reinterpret_cast<void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P)>(fn)(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12]); return;
    case 14: reinterpret_cast<void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P)>(fn)(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12], d[13]); return;
    case 15: reinterpret_cast<void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P)>(fn)(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12], d[13], d[14]); return;
    case 16: reinterpret_cast<void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P)>(fn)(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12], d[13], d[14], d[15]); return;
    default: std::abort();  // refused at generation time (kMlirMaxArgs)
    }
}

struct Job {
    const MlirKernelInfo *info = nullptr;
    Descriptor base[kMlirMaxArgs];
    const int *dims = nullptr;  // the chosen candidate's row of info->split, or nullptr (one chunk)
    int64_t extent = 1, chunk = 1;
};

int run_chunk(void *, int index, uint8_t *closure) {
    const Job &job = *reinterpret_cast<const Job *>(closure);
    const int n = job.info->nargs;
    Descriptor d[kMlirMaxArgs];
    void *ptrs[kMlirMaxArgs];
    for (int a = 0; a < n; ++a) d[a] = job.base[a];
    if (job.dims) {
        int64_t begin = index * job.chunk, len = std::min(job.chunk, job.extent - begin);
        for (int a = 0; a < n; ++a) {
            int dim = job.dims[a];
            if (dim < 0) continue;
            d[a].offset() += begin * d[a].stride(dim);
            d[a].size(dim) = len;
        }
    }
    for (int a = 0; a < n; ++a) ptrs[a] = d[a].words;
    invoke(job.info->ciface, n, ptrs);
    return 0;
}

// Halide's pool size: $HL_NUM_THREADS, else the core count. Read once (hardware_concurrency reads
// sysfs: too slow for every call).
int thread_count() {
    static const int n = [] {
        if (const char *e = std::getenv("HL_NUM_THREADS"))
            if (int v = std::atoi(e); v > 0) return v;
        return (int)std::max(1u, std::thread::hardware_concurrency());
    }();
    return n;
}

int run_job(Job &job, ParFor par_for) {
    const MlirKernelInfo &info = *job.info;
    // The first candidate long enough to give every thread a few chunks; else the longest one.
    const int threads = thread_count();
    int64_t best = 0;
    for (int c = 0; c < info.ncandidates; ++c) {
        const int *row = info.split + c * info.nargs;
        int64_t extent = -1;
        for (int a = 0; a < info.nargs && extent < 0; ++a)
            if (row[a] >= 0) extent = job.base[a].size(row[a]);
        if (extent > best) {
            best = extent;
            job.dims = row;
            job.extent = extent;
        }
        if (extent >= 4 * threads) break;
    }
    int chunks = 1;
    if (job.dims && job.extent > 1) {
        // Bytes per unit of the split axis, over the tensors that have it.
        int64_t unit = 0;
        for (int a = 0; a < info.nargs; ++a) {
            if (job.dims[a] < 0) continue;
            int64_t n = job.base[a].elem_bytes;
            for (int k = 0; k < job.base[a].rank; ++k)
                if (k != job.dims[a]) n *= job.base[a].size(k);
            unit += n;
        }
        job.chunk = std::max<int64_t>(1, info.chunk_bytes / std::max<int64_t>(unit, 1));
        job.chunk = std::min(job.chunk, (job.extent + threads - 1) / threads);  // every thread gets work
        chunks = (int)((job.extent + job.chunk - 1) / job.chunk);
    } else {
        job.dims = nullptr;
    }
    if (chunks == 1) return run_chunk(nullptr, 0, reinterpret_cast<uint8_t *>(&job));
    return par_for(nullptr, run_chunk, 0, chunks, reinterpret_cast<uint8_t *>(&job));
}

}  // namespace

int serial_par_for(void *uc, int (*task)(void *, int, uint8_t *), int min, int size, uint8_t *closure) {
    for (int i = min; i < min + size; ++i)
        if (int rc = task(uc, i, closure)) return rc;
    return 0;
}

int mlir_run(const MlirKernelInfo &info, const std::vector<MlirTensor> &args, ParFor par_for) {
    Job job;
    job.info = &info;
    for (int a = 0; a < info.nargs; ++a) describe(job.base[a], args[a].data, args[a].sizes.data(), (int)args[a].sizes.size(), args[a].elem_bytes);
    return run_job(job, par_for);
}

int mlir_argv(const MlirKernelInfo &info, void **args, ParFor par_for) {
    Job job;
    job.info = &info;
    for (int a = 0; a < info.nargs; ++a) {
        const halide_buffer_t *b = static_cast<const halide_buffer_t *>(args[a]);
        // halide_buffer_t dims are innermost first; the memref's outermost first. The strides are
        // the buffer's (dense, or an input's strides as run_kernel passes them).
        int64_t sizes[kMaxRank];
        for (int k = 0; k < b->dimensions && k < kMaxRank; ++k) sizes[b->dimensions - 1 - k] = b->dim[k].extent;
        describe(job.base[a], b->host, sizes, b->dimensions, (b->type.bits + 7) / 8);
        for (int k = 0; k < b->dimensions && k < kMaxRank; ++k) job.base[a].stride(b->dimensions - 1 - k) = b->dim[k].stride;
    }
    return run_job(job, par_for);
}

}  // namespace normgen
