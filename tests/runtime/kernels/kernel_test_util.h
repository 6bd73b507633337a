// Shared by the tests of the generated kernels: the build's registry (loaded once) and the seed of
// the random inputs (fresh per run, printed with failures; NORMGEN_TEST_SEED replays one).
#pragma once

#include "runtime/kernel_table.h"
#include "runtime/registry.h"

#include <cstdint>
#include <cstdlib>
#include <random>

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

}  // namespace normgen::test
