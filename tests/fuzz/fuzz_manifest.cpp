// libFuzzer target: the manifest reader (Registry::load). Any file must load (with no kernel bound:
// the table is empty) or be refused with a UserError naming the manifest; never a crash.
#include "runtime/errors.h"
#include "runtime/registry.h"

#include <HalideRuntime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

using namespace normgen;

// The registry references the Halide runtime's error hook, which a program without kernels provides.
extern "C" halide_error_handler_t halide_set_error_handler(halide_error_handler_t) { return nullptr; }
extern "C" int halide_copy_to_host(void *, halide_buffer_t *) { return 0; }
extern "C" int halide_device_free(void *, halide_buffer_t *) { return 0; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const std::string path = "/tmp/normgen-fuzz-manifest-" + std::to_string(getpid()) + ".json";
    FILE *f = std::fopen(path.c_str(), "wb");
    if (!f) std::abort();
    if (size) std::fwrite(data, 1, size, f);
    std::fclose(f);
    try {
        Registry reg = Registry::load(path, nullptr, 0);
        for (const Registry::Kernel *k : reg.kernels()) (void)k->runs_here();
        (void)reg.select("layer_norm", DType::F32, false);
    } catch (const UserError &) {
    }
    return 0;
}
