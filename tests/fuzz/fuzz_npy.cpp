// libFuzzer target: the .npy reader. Any bytes must give a HostTensor whose element count matches its
// shape, or a UserError naming the file; never a crash, an allocation the file cannot back, or a hang.
#include "runtime/errors.h"
#include "runtime/npy.h"
#include "scratch_file.h"

#include <cstdint>
#include <cstdlib>
#include <string>

using namespace normgen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const std::string &path = test::write_scratch(".npy", data, size);
    try {
        HostTensor t = read_npy(path);
        int64_t n = 1;
        for (int64_t s : t.shape) n *= s;
        if ((size_t)n != t.data.size()) std::abort();
    } catch (const UserError &) {
    }
    return 0;
}
