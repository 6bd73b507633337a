#include "runtime/mlir_abi.h"

#include <HalideRuntime.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace normgen {

namespace {

// A descriptor as 64-bit words: allocated, aligned, offset, sizes[R], strides[R].
struct Descriptor {
    std::vector<int64_t> words;
    int rank = 0;
    int64_t &offset() { return words[2]; }
    int64_t &size(int d) { return words[3 + d]; }
    int64_t &stride(int d) { return words[3 + rank + d]; }
};

Descriptor describe(const MlirTensor &t) {
    Descriptor d;
    d.rank = (int)t.sizes.size();
    d.words.assign(3 + 2 * d.rank, 0);
    d.words[0] = d.words[1] = (int64_t)(intptr_t)t.data;
    int64_t stride = 1;
    for (int k = d.rank - 1; k >= 0; --k) {
        d.size(k) = t.sizes[k];
        d.stride(k) = stride;
        stride *= t.sizes[k];
    }
    return d;
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
    const MlirKernelInfo *info;
    std::vector<Descriptor> base;
    const int *dims;  // the chosen candidate's row of info->split, or nullptr (one chunk)
    int64_t extent = 1, chunk = 1;
};

int run_chunk(void *, int index, uint8_t *closure) {
    const Job &job = *reinterpret_cast<const Job *>(closure);
    std::vector<Descriptor> d = job.base;
    if (job.dims) {
        int64_t begin = index * job.chunk, len = std::min(job.chunk, job.extent - begin);
        for (int a = 0; a < job.info->nargs; ++a) {
            int dim = job.dims[a];
            if (dim < 0) continue;
            d[a].offset() += begin * d[a].stride(dim);
            d[a].size(dim) = len;
        }
    }
    std::vector<void *> ptrs(d.size());
    for (size_t a = 0; a < d.size(); ++a) ptrs[a] = d[a].words.data();
    invoke(job.info->ciface, (int)ptrs.size(), ptrs.data());
    return 0;
}

int thread_count() {
    if (const char *e = std::getenv("HL_NUM_THREADS"))
        if (int n = std::atoi(e); n > 0) return n;
    return std::max(1u, std::thread::hardware_concurrency());
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
    for (const MlirTensor &t : args) job.base.push_back(describe(t));
    // The first candidate long enough to give every thread a few chunks; else the longest one.
    const int threads = thread_count();
    int64_t best = 0;
    for (int c = 0; c < info.ncandidates; ++c) {
        const int *row = info.split + c * info.nargs;
        int64_t extent = -1;
        for (int a = 0; a < info.nargs && extent < 0; ++a)
            if (row[a] >= 0) extent = args[a].sizes[row[a]];
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
            int64_t n = args[a].elem_bytes;
            for (size_t k = 0; k < args[a].sizes.size(); ++k)
                if ((int)k != job.dims[a]) n *= args[a].sizes[k];
            unit += n;
        }
        job.chunk = std::max<int64_t>(1, kMlirChunkBytes / std::max<int64_t>(unit, 1));
        job.chunk = std::min(job.chunk, (job.extent + threads - 1) / threads);  // every thread gets work
        chunks = (int)((job.extent + job.chunk - 1) / job.chunk);
    } else {
        job.dims = nullptr;
    }
    if (chunks == 1) return run_chunk(nullptr, 0, reinterpret_cast<uint8_t *>(&job));
    return par_for(nullptr, run_chunk, 0, chunks, reinterpret_cast<uint8_t *>(&job));
}

int mlir_argv(const MlirKernelInfo &info, void **args, ParFor par_for) {
    std::vector<MlirTensor> t(info.nargs);
    for (int a = 0; a < info.nargs; ++a) {
        const halide_buffer_t *b = static_cast<const halide_buffer_t *>(args[a]);
        t[a].data = b->host;
        t[a].elem_bytes = (b->type.bits + 7) / 8;
        // halide_buffer_t dims are innermost first; the memref's outermost first.
        for (int k = b->dimensions - 1; k >= 0; --k) t[a].sizes.push_back(b->dim[k].extent);
    }
    return mlir_run(info, t, par_for);
}

}  // namespace normgen
