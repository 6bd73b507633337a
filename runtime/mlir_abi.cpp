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
    int64_t size(int d) const { return words[3 + d]; }
    int64_t stride(int d) const { return words[3 + rank + d]; }
    const int64_t *sizes() const { return words + 3; }
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
    // Column partials (kMlirColumnPartial): tasks of chunks_per_task chunks each; per column output
    // c its argument, element count, and place in a task's scratch (task_bytes each): the chunk's
    // buffer at column_offset[c], the task's partial column_bytes[c] after it.
    int tasks = 0, chunks = 0, chunks_per_task = 1;
    int ncolumns = 0;
    int column_arg[kMlirMaxArgs] = {};
    int64_t column_elems[kMlirMaxArgs] = {};
    int64_t column_offset[kMlirMaxArgs] = {};  // into a task's scratch, in bytes: the buffer, then the partial
    int64_t column_bytes[kMlirMaxArgs] = {};   // each of the two, 64-byte aligned
    int64_t task_bytes = 0;
    uint8_t *scratch = nullptr;
};

// The descriptors of chunk `index` (the split axis cut to it).
void chunk_descriptors(const Job &job, int index, Descriptor *d) {
    const int n = job.info->nargs;
    for (int a = 0; a < n; ++a) d[a] = job.base[a];
    if (!job.dims) return;
    int64_t begin = index * job.chunk, len = std::min(job.chunk, job.extent - begin);
    for (int a = 0; a < n; ++a) {
        int dim = job.dims[a];
        if (dim < 0) continue;
        d[a].offset() += begin * d[a].stride(dim);
        d[a].size(dim) = len;
    }
}

void call(const Job &job, Descriptor *d) {
    void *ptrs[kMlirMaxArgs];
    for (int a = 0; a < job.info->nargs; ++a) ptrs[a] = d[a].words;
    invoke(job.info->ciface, job.info->nargs, ptrs);
}

int run_chunk(void *, int index, uint8_t *closure) {
    const Job &job = *reinterpret_cast<const Job *>(closure);
    Descriptor d[kMlirMaxArgs];
    chunk_descriptors(job, index, d);
    call(job, d);
    return 0;
}

template <class T>
void add_into(T *acc, const T *v, int64_t n) {
    for (int64_t i = 0; i < n; ++i) acc[i] += v[i];
}
void add_into(void *acc, const void *v, int64_t n, int elem_bytes) {
    if (elem_bytes == 8) add_into(static_cast<double *>(acc), static_cast<const double *>(v), n);
    else add_into(static_cast<float *>(acc), static_cast<const float *>(v), n);
}

// Task `t` of a call with column partials: its chunks in order; the first writes the column
// outputs straight into the task's partials, each later one into the task's buffer, added into them.
int run_task(void *, int t, uint8_t *closure) {
    const Job &job = *reinterpret_cast<const Job *>(closure);
    uint8_t *mine = job.scratch + t * job.task_bytes;
    const int first = t * job.chunks_per_task, last = std::min(job.chunks, first + job.chunks_per_task);
    Descriptor d[kMlirMaxArgs];
    for (int i = first; i < last; ++i) {
        chunk_descriptors(job, i, d);
        for (int c = 0; c < job.ncolumns; ++c) {
            const Descriptor &b = job.base[job.column_arg[c]];
            uint8_t *buf = mine + job.column_offset[c];
            describe(d[job.column_arg[c]], i == first ? buf + job.column_bytes[c] : buf, b.sizes(), b.rank, b.elem_bytes);
        }
        call(job, d);
        if (i == first) continue;
        for (int c = 0; c < job.ncolumns; ++c) {
            uint8_t *buf = mine + job.column_offset[c];
            add_into(buf + job.column_bytes[c], buf, job.column_elems[c], job.base[job.column_arg[c]].elem_bytes);
        }
    }
    return 0;
}

// Whether a column output can take partial sums: dense, f32 or f64.
bool partial_ok(const Descriptor &b) {
    if (b.elem_bytes != 4 && b.elem_bytes != 8) return false;
    int64_t stride = 1;
    for (int k = b.rank - 1; k >= 0; --k) {
        if (b.stride(k) != stride) return false;
        stride *= b.size(k);
    }
    return true;
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
    // A candidate with column partials only where they can be taken (partial_ok).
    const int threads = thread_count();
    int64_t best = 0;
    for (int c = 0; c < info.ncandidates; ++c) {
        const int *row = info.split + c * info.nargs;
        int64_t extent = -1;
        bool ok = true;
        for (int a = 0; a < info.nargs; ++a) {
            if (row[a] >= 0 && extent < 0) extent = job.base[a].size(row[a]);
            if (row[a] == kMlirColumnPartial) ok = ok && partial_ok(job.base[a]);
        }
        if (!ok) continue;
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
    for (int a = 0; a < info.nargs; ++a) {
        if (job.dims[a] != kMlirColumnPartial) continue;
        int64_t n = 1;
        for (int k = 0; k < job.base[a].rank; ++k) n *= job.base[a].size(k);
        job.column_arg[job.ncolumns] = a;
        job.column_elems[job.ncolumns] = n;
        job.column_offset[job.ncolumns] = job.task_bytes;
        job.column_bytes[job.ncolumns] = (n * job.base[a].elem_bytes + 63) / 64 * 64;
        job.task_bytes += 2 * job.column_bytes[job.ncolumns];
        ++job.ncolumns;
    }
    if (job.ncolumns == 0) return par_for(nullptr, run_chunk, 0, chunks, reinterpret_cast<uint8_t *>(&job));
    // A few tasks a thread (contiguous runs of chunks), each with its own partials.
    job.chunks = chunks;
    job.chunks_per_task = (chunks + 4 * threads - 1) / (4 * threads);
    job.tasks = (chunks + job.chunks_per_task - 1) / job.chunks_per_task;
    uint8_t *scratch = static_cast<uint8_t *>(std::aligned_alloc(64, (size_t)(job.tasks * job.task_bytes)));
    if (!scratch) return -1;
    job.scratch = scratch;
    int rc = par_for(nullptr, run_task, 0, job.tasks, reinterpret_cast<uint8_t *>(&job));
    if (rc == 0)
        for (int c = 0; c < job.ncolumns; ++c) {
            Descriptor &o = job.base[job.column_arg[c]];
            const int eb = o.elem_bytes;
            const int64_t n = job.column_elems[c];
            uint8_t *out = reinterpret_cast<uint8_t *>((intptr_t)o.words[1]) + o.offset() * eb;
            const int64_t at = job.column_offset[c] + job.column_bytes[c];  // the partial in a task's scratch
            std::copy(scratch + at, scratch + at + n * eb, out);
            for (int t = 1; t < job.tasks; ++t) add_into(out, scratch + t * job.task_bytes + at, n, eb);
        }
    std::free(scratch);
    return rc;
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
