// libFuzzer target: the .npy reader. Any bytes must give a HostTensor whose element count matches its
// shape, or a UserError naming the file; never a crash, an allocation the file cannot back, or a hang.
#include "runtime/errors.h"
#include "runtime/npy.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

using namespace normgen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const std::string path = "/tmp/normgen-fuzz-npy-" + std::to_string(getpid()) + ".npy";
    FILE *f = std::fopen(path.c_str(), "wb");
    if (!f) std::abort();
    if (size) std::fwrite(data, 1, size, f);
    std::fclose(f);
    try {
        HostTensor t = read_npy(path);
        int64_t n = 1;
        for (int64_t s : t.shape) n *= s;
        if ((size_t)n != t.data.size()) std::abort();
    } catch (const UserError &) {
    }
    return 0;
}
