// write_scratch(suffix, data, size): the fuzzer input as a file for a reader that takes a path (the
// .npy reader, the manifest reader). One file per process, under $TMPDIR (else /tmp), rewritten for
// each input and removed when the fuzzer exits (libFuzzer ends with exit(): static destructors run).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace normgen::test {

// The path, created on the first call (one suffix a process); removed by the static's destructor.
struct ScratchFile {
    std::string path;
    explicit ScratchFile(const char *suffix) {
        const char *dir = std::getenv("TMPDIR");
        path = std::string(dir && *dir ? dir : "/tmp") + "/normgen-fuzz-" + std::to_string(getpid()) + suffix;
    }
    ~ScratchFile() { std::remove(path.c_str()); }
};

inline const std::string &write_scratch(const char *suffix, const uint8_t *data, size_t size) {
    static const ScratchFile scratch(suffix);
    const std::string &path = scratch.path;
    FILE *f = std::fopen(path.c_str(), "wb");
    if (!f) std::abort();
    if (size) std::fwrite(data, 1, size, f);
    std::fclose(f);
    return path;
}

}  // namespace normgen::test
