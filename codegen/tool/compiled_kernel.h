// One kernel interface for the tools, whichever backend compiled it: `verify` and `run` see a
// kernel through this, and each backend supplies a factory (Halide's JIT in `normgen`, MLIR's in
// `normgen-mlir`; they never share a process).
#pragma once

#include "runtime/manifest_schema.h"
#include "runtime/reference/interpreter.h"
#include "runtime/verify.h"

#include <functional>
#include <memory>
#include <string>

namespace normgen {

class CompiledKernel {
public:
    virtual ~CompiledKernel() = default;
    // float64 inputs (rounded to the kernel's storage types on the way in) -> float64 outputs (the
    // values as stored), every output poisoned before the run so unwritten elements fail.
    virtual TensorMap run(const TensorMap &inputs, const Overrides &axis_overrides) const = 0;
    virtual StorageMap storage() const = 0;
    // The schedule record the kernel was compiled with (JSON), and what it did in words.
    virtual std::string schedule_record() const = 0;
    virtual std::string schedule_text() const = 0;
};

// Compiles the kernel of a declaration (its `variant`: core, or full with the optional outputs) for
// a storage type and a target under the given schedule overrides ('knob=value,...' or a JSON file;
// "" = the defaults), or throws with the reason. Constants are taken from `spec` (the caller
// applies --set to a copy).
using KernelFactory = std::function<std::unique_ptr<CompiledKernel>(const NormSpec &spec, DType dtype, const std::string &target,
                                                                    const std::string &schedule, Variant variant)>;

}  // namespace normgen
