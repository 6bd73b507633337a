// Shared by the tests of the generated kernels: the build's registry (loaded once) and the seed of
// the random inputs (fresh per run, printed with failures; NORMGEN_TEST_SEED replays one).
#pragma once

#include "runtime/kernel_table.h"
#include "runtime/registry.h"
#include "runtime/shapes.h"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <new>
#include <random>
#include <stdexcept>
#include <string>

namespace normgen::test {

inline const Registry &registry() {
    static const Registry reg = Registry::load(default_manifest_path(), kKernelTable, kKernelTableSize);
    return reg;
}

inline uint64_t test_seed() {
    static const uint64_t seed = [] {
        if (const char *s = std::getenv("NORMGEN_TEST_SEED")) return (uint64_t)std::strtoull(s, nullptr, 10);
        return ((uint64_t)std::random_device{}() << 32) ^ std::random_device{}();
    }();
    return seed;
}

// Bytes on a 64-byte boundary: what a streaming-store kernel needs of its outputs (std::vector's
// own bytes are 16-byte aligned, so such a kernel would never take the call).
template <class T>
struct CacheLineAllocator {
    using value_type = T;
    CacheLineAllocator() = default;
    template <class U>
    CacheLineAllocator(const CacheLineAllocator<U> &) {}
    T *allocate(size_t n) { return static_cast<T *>(::operator new(n * sizeof(T), std::align_val_t(64))); }
    void deallocate(T *p, size_t) { ::operator delete(p, std::align_val_t(64)); }
    template <class U>
    bool operator==(const CacheLineAllocator<U> &) const { return true; }
    template <class U>
    bool operator!=(const CacheLineAllocator<U> &) const { return false; }
};
using AlignedBytes = std::vector<uint8_t, CacheLineAllocator<uint8_t>>;
inline AlignedBytes aligned_bytes(const std::vector<uint8_t> &v) { return AlignedBytes(v.begin(), v.end()); }

// A tuned kernel may be built for some calls only (Kernel::requirement: a fixed innermost extent;
// streaming stores' multiple of the vector and aligned outputs). fitted(): the sizes a test means
// for a kernel, moved to the nearest ones it takes (the fixed extent; the axis rounded up to the
// multiple), so the kernel itself runs; unchanged for a kernel without a requirement.
inline std::map<std::string, int64_t> fitted(const Registry::Kernel &k, std::map<std::string, int64_t> sizes) {
    const Registry::Kernel::Requirement &q = k.requirement;
    if (q.fixed_extent > 0 && sizes.count(q.fixed_axis)) sizes[q.fixed_axis] = q.fixed_extent;
    if (q.multiple > 1 && sizes.count(q.axis)) sizes[q.axis] = (sizes[q.axis] + q.multiple - 1) / q.multiple * q.multiple;
    return sizes;
}

// The kernel that runs a call as a program makes it: `k` when it takes the call, else (an output
// not aligned for k's streaming stores, an extent it is not built for) Registry::select_for's
// choice for the call, which is never k and always takes it.
// Why `k` refuses a call (Kernel::refuses), "" when it takes it.
inline std::string refusal(const Registry::Kernel &k, const std::map<std::string, TensorView> &tensors) {
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto &[name, v] : tensors) shapes[name] = v.shape;
    return k.refuses(tensors, bind_axes(*k.spec, shapes));
}
inline const Registry::Kernel &taking(const Registry::Kernel &k, const std::map<std::string, TensorView> &tensors) {
    if (refusal(k, tensors).empty()) return k;
    const Registry::Kernel *other = registry().select_for(k.layer, k.dtype, tensors, k.full()).kernel;
    if (!other || other == &k || !refusal(*other, tensors).empty())
        throw std::logic_error(k.function + " refuses a call and select_for has no other kernel that takes it");
    return *other;
}

}  // namespace normgen::test
