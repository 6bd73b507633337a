// `normgen run`: evaluate a declaration on .npy inputs with the float64 reference or a backend's
// kernel, and write each output as a .npy. Backend-neutral: the executable that owns the backend
// passes its kernel factory (compiled_kernel.h); `reference` needs none.
#pragma once

#include "codegen/tool/compiled_kernel.h"

#include <string>
#include <vector>

namespace normgen {

struct RunArgs {
    std::string file, out_dir, backend = "reference", target = "host", schedule;
    Device device = Device::Cpu;  // --device cuda|opencl: the Halide GPU kernel on that device (target host-cuda / host-opencl)
    DType dtype = DType::F32;
    std::vector<std::pair<std::string, std::string>> ins;  // name, .npy path
    Overrides overrides;                                    // --set NAME=VALUE (consts and axes)
};
RunArgs parse_run_args(const std::vector<std::string> &args);

// `make` compiles the kernel for backends other than reference (nullptr: only reference runs).
// Nothing is written unless every input is valid and the evaluation succeeded.
int cmd_run(const RunArgs &r, const KernelFactory *make);

}  // namespace normgen
