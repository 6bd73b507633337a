// normgen-random-norms N SEED DIR: writes N random well-formed declarations, built with the C++
// builder (dsl/builder.h), to DIR/rnd_<seed>_<i>.norm: the input of the differential compiler
// fuzzer (scripts/fuzz.sh runs `normgen verify` on them through the Halide and MLIR CPU backends
// against the float64 reference). What a declaration draws: random_norm.cpp.
#include "random_norm.h"

#include "dsl/printer.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

using namespace normgen;
using normgen::test::random_norm;

int main(int argc, char **argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: normgen-random-norms N SEED DIR\n  writes N random declarations to DIR/rnd_<SEED>_<i>.norm\n");
        return 1;
    }
    const int n = std::atoi(argv[1]);
    const uint64_t seed = std::strtoull(argv[2], nullptr, 10);
    const std::string dir = argv[3];
    for (int i = 0; i < n; ++i) {
        const std::string name = "rnd_" + std::to_string(seed) + "_" + std::to_string(i);
        try {
            NormSpec s = random_norm(seed * 1000003ull + (uint64_t)i, name);
            std::ofstream(dir + "/" + name + ".norm") << "# normgen-random-norms " << n << " " << seed << " (declaration " << i << ")\n"
                                                    << print_norm(s);
        } catch (const std::exception &e) {
            std::fprintf(stderr, "normgen-random-norms: declaration %d of seed %llu does not check (a generator bug): %s\n", i,
                         (unsigned long long)seed, e.what());
            return 2;
        }
    }
    return 0;
}
