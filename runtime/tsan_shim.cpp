// ThreadSanitizer builds only (NORMGEN_SANITIZE=thread): the Halide kernels and runtime are
// instrumented by Halide's own LLVM (its tsan target feature), which calls __tsan_memset and
// __tsan_memcpy; GCC 12's libtsan predates those entry points. They forward to the C library's
// functions, which libtsan intercepts and checks, so the accesses are still seen.
#include <cstddef>
#include <cstring>

extern "C" {
void *__tsan_memset(void *dst, int c, size_t n) { return std::memset(dst, c, n); }
void *__tsan_memcpy(void *dst, const void *src, size_t n) { return std::memcpy(dst, src, n); }
void *__tsan_memmove(void *dst, const void *src, size_t n) { return std::memmove(dst, src, n); }
}
