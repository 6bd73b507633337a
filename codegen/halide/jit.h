// Halide JIT: lower + schedule a declaration and run it in-process on host tensors. Used by
// `normgen verify` / `run` for declarations that have no generated (AOT) kernel, and by the tests.
#pragma once

#include "codegen/halide/lower.h"
#include "codegen/halide/schedule.h"
#include "codegen/tool/compiled_kernel.h"
#include "runtime/reference/interpreter.h"

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace normgen::hl {

// "host" (this CPU's features), "x86-64-avx2" (the portable AVX2 + FMA + F16C target), or any Halide
// target string: "cuda" and "opencl" are any x86-64 host with that GPU (the generated kernels'
// targets); "host-opencl" and "host-cuda" add a GPU (CUDA without a capability gets
// cuda_capability_86, the highest Halide 21 knows; its PTX assembles for sm_90; OpenCL gets
// cl_doubles for declarations that accumulate in f64). Never embeds a
// runtime twice: callers add no_runtime for AOT libraries themselves.
Halide::Target parse_target(const std::string &name);

// Whether a target compiles for a GPU (its kernels get the halide-gpu schedule).
bool is_gpu_target(const Halide::Target &t);

// The instruction set a CPU target compiles for: Avx512 when it has Halide's AVX512 feature.
Isa isa_of(const Halide::Target &t);

// f(), with a Halide::Error escaping it rethrown as std::runtime_error("Halide: " + its message):
// Halide's errors do not derive from std::exception, so a caller's catch (const std::exception &)
// (run_tool, the tuner rejecting one candidate) would not see them.
template <class F>
decltype(auto) halide_errors_as_exceptions(F &&f) {
    try {
        return f();
    } catch (const Halide::Error &e) {
        throw std::runtime_error(std::string("Halide: ") + e.what());
    }
}

// `command` under halide_errors_as_exceptions (run_tool would otherwise only know that something
// unknown escaped). For the tools that compile Halide pipelines (normgen, normgen-gen).
std::function<int(const std::vector<std::string> &)> with_halide_errors(std::function<int(const std::vector<std::string> &)> command);

class JitKernel : public CompiledKernel {
public:
    // The plan's default schedule for the target, with `schedule_overrides` applied ('knob=value,...'
    // or a JSON file; see schedule_record.h). The spec's consts are baked into the code (`normgen
    // run --set` compiles a copy with its values); compiled once, run many times.
    JitKernel(const NormSpec &spec, DType dtype, const Halide::Target &target, Variant variant,
              const std::string &schedule_overrides = "");
    ~JitKernel() override;
    // Inputs in float64 are rounded to the kernel's storage types; outputs are poisoned (NaN) before
    // the run and returned as float64. Axis overrides (e.g. g) apply here.
    TensorMap run(const TensorMap &inputs, const Overrides &axis_overrides = {}) const override;
    StorageMap storage() const override;
    std::string schedule_record() const override;
    std::string schedule_text() const override;
    const NormSpec &spec() const;
    const KernelTypes &types() const;
    const ScheduleRecord &schedule() const;

private:
    void build(const NormSpec &spec, DType dtype, const Halide::Target &target, Variant variant, const std::string &schedule_overrides);
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace normgen::hl
