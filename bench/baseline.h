// The implementations normgen's kernels are measured against, on the same tensors of the same case
// (bench/kernel_case.h): oneDNN (bench/baseline_onednn.cpp), PyTorch's ATen (baseline_torch.cpp) and
// a plain scalar two-pass C++ implementation (baseline_scalar.cpp). Each adapter knows the standard
// layers of the catalog by name and their tensors by the catalog's names (x, weight, bias, y, ...);
// for a layer it does not implement it says why instead.
//
// Before a baseline is timed its outputs are checked against the float64 reference exactly like
// the kernel's (KernelCase::check_baseline), so a misconfigured baseline cannot win or lose by
// computing something else.
#pragma once

#include "dsl/norm_spec.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace normgen::bench {

// The tensors of a prepared case, by the catalog's names. Layouts are the declaration's: row-major
// over the tensor's declared axes (x: [rows, d]; [n, c, h, w]; [n, h, w, c] for *_nhwc).
struct CaseTensors {
    std::string layer;
    DType dtype = DType::F32;                  // storage of the activations (x, y, residual, h)
    std::map<std::string, int64_t> extent;     // every axis by name; a split axis (c) too
    std::map<std::string, uint8_t *> data;     // every argument (inputs, params, outputs)
    int threads = 1;

    int64_t at(const std::string &axis) const;             // throws when the layer has no such axis
    uint8_t *ptr(const std::string &tensor) const;         // throws when the layer has no such tensor
    float *f32(const std::string &tensor) const { return reinterpret_cast<float *>(ptr(tensor)); }
    bool has(const std::string &tensor) const { return data.count(tensor) != 0; }
};

// Per-row mean and biased variance (float64 sums) of a row-major [rows, d] tensor in storage type t,
// or of the groups of an [n, hw, c] channels-last tensor (groups of c / groups channels, all hw
// positions): what a library's backward takes as the forward's saved statistics when the backward
// declaration recomputes them (computed once, outside the timing).
struct Moments {
    std::vector<double> mean, var;
};
Moments row_moments(const uint8_t *x, DType t, int64_t rows, int64_t d);
Moments channels_last_group_moments(const uint8_t *x, DType t, int64_t n, int64_t hw, int64_t c, int64_t groups);

class Baseline {
public:
    virtual ~Baseline() = default;
    // One call of the layer (what is timed).
    virtual void run() = 0;
    // After run(): makes the results visible in the case's output buffers, for the check (an
    // implementation that allocates its own outputs copies them; the others have nothing to do).
    virtual void publish() {}
    // The outputs run() + publish() write, by name (the rest keep normgen's checked values).
    virtual std::vector<std::string> writes() const = 0;
    // A note for the report, e.g. "parameters converted to bf16 once, outside the timing".
    virtual std::string note() const { return ""; }
};

// The implementations, by the name the benchmark rows and the report use.
//   "scalar": plain C++ two-pass loops (float64 sums), parallel over rows/groups on the same pool;
//   "onednn": oneDNN primitives (layer_normalization, batch_normalization);
//   "torch":  ATen CPU ops (native_layer_norm, native_group_norm, native_batch_norm, instance_norm)
//             and, for RMSNorm, DyT and the fused residual add, the eager op compositions model
//             code uses.
// Returns nullptr and sets *why_not when the implementation has nothing for the case.
std::unique_ptr<Baseline> make_baseline(const std::string &impl, const CaseTensors &t, std::string *why_not);

// The baseline implementations, in the order the benchmark runs them.
const std::vector<std::string> &baseline_names();

// Thread count for the vendor libraries (OpenMP in oneDNN and ATen), the same as Halide's pool.
void configure_vendor_threads(int n);

// Library versions for the benchmark's context ("oneDNN 2.6.3", "PyTorch 1.13.1").
std::string onednn_version();
std::string torch_version();

std::unique_ptr<Baseline> make_scalar_baseline(const CaseTensors &t, std::string *why_not);
std::unique_ptr<Baseline> make_onednn_baseline(const CaseTensors &t, std::string *why_not);
std::unique_ptr<Baseline> make_torch_baseline(const CaseTensors &t, std::string *why_not);

}  // namespace normgen::bench
