// libFuzzer target: the manifest reader (Registry::load). Any file must load (with no kernel bound:
// the table is empty) or be refused with a UserError naming the manifest; never a crash.
#include "runtime/errors.h"
#include "runtime/registry.h"
#include "scratch_file.h"

#include <HalideRuntime.h>

#include <cstdint>
#include <cstdlib>
#include <string>

using namespace normgen;

// The registry references the Halide runtime's error hook, which a program without kernels provides.
extern "C" halide_error_handler_t halide_set_error_handler(halide_error_handler_t) { return nullptr; }
extern "C" int halide_copy_to_host(void *, halide_buffer_t *) { return 0; }
extern "C" int halide_device_free(void *, halide_buffer_t *) { return 0; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const std::string &path = test::write_scratch(".json", data, size);
    try {
        Registry reg = Registry::load(path, nullptr, 0);
        for (const Registry::Kernel *k : reg.kernels()) (void)k->runs_here();
        (void)reg.select("layer_norm", DType::F32, false);
    } catch (const UserError &) {
    }
    return 0;
}
