// The copy roofline: the bandwidth a normalization kernel is judged against, measured in the same
// binary, on the same thread pool, at the same byte count as each kernel case.
//
// A copy of B bytes reads B/2 and writes B/2 (src -> dst, disjoint buffers). Two store flavours:
//   plain: ordinary vector stores. On x86 a store miss first reads the destination line (RFO), so
//          DRAM sees three streams (read src, read dst, write dst) for two useful ones.
//   nt:    non-temporal (streaming) stores (_mm512_stream_ps; _mm256_stream_ps without AVX-512):
//          no RFO, the true two-stream floor for outputs that do not fit in cache.
// For data that fits in the last-level cache (260 MiB here: a 4096 x 4096 f32 in + out is 128 MiB)
// plain stores can win, because streaming stores always go to DRAM. The kernel is judged against
// the faster of the two (DESIGN.md, Performance).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace normgen::bench {

// Read: no copy at all, a sum over the same byte count (the read-only reduction roofline: what a
// kernel that only reduced its input could reach).
enum class CopyKind { Plain, NonTemporal, Read };
const char *copy_kind_name(CopyKind k);  // "plain", "nt", "read"

// Which instruction set the copy loops use here: "avx512", "avx", or "scalar".
const char *copy_isa();

// Copies floats [0, n) of src to dst (for Read: sums both) on Halide's thread pool (bench/host_buffer.h), split into
// contiguous 64-byte aligned chunks. src and dst must be 64-byte aligned.
void parallel_copy(const float *src, float *dst, size_t n, CopyKind kind);

struct CopyBandwidth {
    size_t bytes = 0;        // bytes moved per copy (read + write)
    double plain_bps = 0;    // median bytes/s over the samples, ordinary stores
    double nt_bps = 0;       // median bytes/s, non-temporal stores
    double read_bps = 0;     // median bytes/s, read-only sum over the same bytes
    double plain_min_bps = 0, plain_max_bps = 0, nt_min_bps = 0, nt_max_bps = 0;
    int samples = 0;         // per flavour (the fewer of the two)
    double best_bps() const { return plain_bps > nt_bps ? plain_bps : nt_bps; }
    const char *best_kind() const { return plain_bps > nt_bps ? "plain" : "nt"; }
};

// The copy bandwidth at `bytes` (rounded down to a multiple of 128), measured on first request and
// cached for the rest of the run: per flavour two blocks of back-to-back samples (each sample ~2 ms
// of copies or one copy, whichever is longer; the first of a block discarded), median per flavour.
// Buffers come from a pool grown to the largest size asked for and first-touched when allocated.
const CopyBandwidth &copy_bandwidth(size_t bytes);

// One timed sample of a flavour at `bytes` (as copy_bandwidth counts them: a copy of B bytes reads
// B/2 and writes B/2; a read of B bytes reads B), on the pool's buffers: one untimed call to warm
// up, then back-to-back calls for at least `min_seconds` (at least one). Seconds per call. For
// measurements interleaved with kernels (normgen-measure, the benchmark's limit rows), where a
// cached median would hide the machine's drift.
double copy_sample_seconds(size_t bytes, CopyKind kind, double min_seconds);

// The pool's buffers for the Google Benchmark copy rows: src and dst of at least `bytes_each`.
void copy_buffers(size_t bytes_each, const float **src, float **dst);

// Frees the pool (between the big cases, so a 1 GiB copy pool does not sit beside the next case).
void release_copy_buffers();

}  // namespace normgen::bench
