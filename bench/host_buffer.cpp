#include "bench/host_buffer.h"

#include <new>
#include <sys/mman.h>
#include <utility>

namespace normgen::bench {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
}

HostBuffer::HostBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    // Over-map by one huge page and use a 2 MiB aligned window of it.
    mapped_ = (bytes + kHugePage - 1) / kHugePage * kHugePage + kHugePage;
    void *p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    base_ = p;
    uintptr_t base = (uintptr_t)p, aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
    data_ = (uint8_t *)aligned;
    madvise(data_, mapped_ - (aligned - base), MADV_HUGEPAGE);
}

HostBuffer::~HostBuffer() {
    if (base_) munmap(base_, mapped_);
}

HostBuffer::HostBuffer(HostBuffer &&o) noexcept { *this = std::move(o); }

HostBuffer &HostBuffer::operator=(HostBuffer &&o) noexcept {
    if (this != &o) {
        if (base_) munmap(base_, mapped_);
        data_ = std::exchange(o.data_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
        mapped_ = std::exchange(o.mapped_, 0);
        base_ = std::exchange(o.base_, nullptr);
    }
    return *this;
}

}  // namespace normgen::bench
