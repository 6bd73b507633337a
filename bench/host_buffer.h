// Huge-page-aligned host memory for the benchmarks: the kernels' tensors and the copy roofline's buffers
// come from the same allocator, so both see the same alignment, the same page size and the same
// first-touch state.
#pragma once

#include <cstddef>
#include <cstdint>

namespace normgen::bench {

// Anonymous mmap, 2 MiB aligned, with MADV_HUGEPAGE (transparent huge pages are "madvise" on
// Debian): a 1 GiB tensor then costs ~512 TLB entries instead of 262144, for kernels and copies
// alike. The memory is not touched here; callers write it once before timing (first touch), so no
// page fault is ever timed.
class HostBuffer {
public:
    HostBuffer() = default;
    explicit HostBuffer(size_t bytes);
    ~HostBuffer();
    HostBuffer(HostBuffer &&o) noexcept;
    HostBuffer &operator=(HostBuffer &&o) noexcept;
    HostBuffer(const HostBuffer &) = delete;
    HostBuffer &operator=(const HostBuffer &) = delete;

    uint8_t *data() const { return data_; }
    size_t size() const { return bytes_; }

private:
    uint8_t *data_ = nullptr;
    size_t bytes_ = 0;
    size_t mapped_ = 0;
    void *base_ = nullptr;  // the mapping's start (data_ is its 2 MiB aligned window)
};

}  // namespace normgen::bench
