// One benchmark case: a generated kernel chosen through the registry, its tensors allocated once,
// filled with random non-zero inputs, its outputs written once (first touch) and checked against the
// float64 reference before any timing.
#pragma once

#include "bench/baseline.h"
#include "bench/host_buffer.h"
#include "bench/shape_grids.h"
#include "runtime/registry.h"
#include "runtime/shapes.h"

#include <HalideRuntime.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace normgen::bench {

// What to benchmark: a catalog layer, a storage type, the extent of each atomic axis by name.
struct CaseSpec {
    std::string layer;                     // catalog name, e.g. "layer_norm"
    std::string model;                     // the grid it comes from (bench/shape_grids.h), or ""
    DType dtype = DType::F32;
    std::map<std::string, int64_t> sizes;  // e.g. {{"rows", 4096}, {"d", 4096}}
    std::string shape_label;               // e.g. "4096x4096"
    // How the output is checked against the float64 reference:
    //   false: a sample of indices of the outermost axis (first, last, a few random ones), each
    //          evaluated on its own; valid when no statistic reduces over that axis (rows of LN/RMS,
    //          samples of GroupNorm, BatchNorm eval);
    //   true:  the whole tensor (BatchNorm train, whose statistics reduce over n).
    bool full_reference = false;
    // A full_reference case whose first tensor has more elements than this is checked on a
    // sample of an axis no statistic reduces over and every output spans (BatchNorm training: its
    // channels), each sampled index evaluated whole: the float64 reference of a DRAM-sized tensor
    // does not fit in memory (BatchNorm training 1024 x 256 x 56 x 56 in bf16 took normgen-measure
    // past 24 GB). 0: always the whole tensor.
    int64_t full_reference_elements = int64_t(1) << 25;
    // A case checked on the whole tensor whose outputs add up over slices of its outermost axis (a
    // backward's parameter gradients summed over rows or samples: slices_add_up) evaluates its
    // float64 reference on slices of about this many elements of its largest tensor, one after
    // another: the interpreter's float64 inputs and temporaries are a slice's. 0: all at once.
    int64_t reference_slice_elements = int64_t(1) << 22;
    // The backward kernel of `layer` (Registry::select_grad) instead of the forward: its saved
    // statistics (mu, rstd, ...) are what the forward kernel computes from the case's x, its
    // upstream gradients d_<out> random like x.
    bool grad = false;
    double min_time = 0.2;                 // Google Benchmark MinTime per repetition, seconds
    std::string name() const;              // "layer_norm/llama3-8b/f32/4096x4096" ("layer_norm/f32/4096x4096" without a
                                           // model, "layer_norm_grad/..." when grad)
};

// The case of a grid entry (bench/shape_grids.h); min_time 0.3 s for DRAM-sized cases, else 0.1 s.
CaseSpec case_spec(const GridCase &g);

struct OutputCheckSummary {
    bool pass = false;
    std::string message;  // the first failure, or what was checked
};

class KernelCase {
public:
    // Selects the kernel a program would get for these shapes (Registry::select_for_sizes: the
    // tuned kernel of the shape class on this CPU, else the default; the backward's for a grad
    // case), allocates and fills the tensors, validates the call (check_kernel_call), runs it once
    // and checks the outputs. Never throws: a failure is recorded in error().
    KernelCase(const Registry &reg, const CaseSpec &spec, uint64_t seed);
    // The same with a given kernel (e.g. a lab variant, bench/lab/, or a tuning candidate);
    // spec.layer and spec.dtype are taken from it. A backward kernel needs `forward`, the full
    // kernel of its forward layer, which computes the saved statistics it reads.
    KernelCase(const Registry::Kernel &kernel, const CaseSpec &spec, uint64_t seed, const Registry::Kernel *forward = nullptr);

    const std::string &error() const { return error_; }  // "" when the case is usable
    const Registry::Kernel *kernel() const { return k_; }
    const CaseSpec &spec() const { return spec_; }
    const std::string &selection() const { return selection_; }  // why the registry chose the kernel
    const std::string &check_message() const { return check_message_; }

    // Bytes one call moves at the floor: every input and parameter read once, every output
    // written once (the sizes of the tensors passed).
    size_t bytes_per_call() const { return bytes_; }

    // One call through the kernel's _argv entry point with halide_buffer_t's built once (the same
    // ABI run_kernel builds per call; see runtime/run.cpp). Returns the Halide error code.
    int run() const { return k_->argv(const_cast<void **>(argv_.data())); }

    // The same call through normgen::run_kernel (checks + buffer construction per call), to
    // measure the dispatch overhead.
    void run_checked() const;

    // Another kernel with the same argument list (names, roles, storage types; e.g. the same layer
    // under another schedule) on this case's tensors: the outputs are poisoned, `other` runs once
    // and is checked like the case's own kernel. Returns "" when it passes, else why not.
    std::string check_other(const Registry::Kernel &other);
    int run_other(int (*argv_fn)(void **)) const { return argv_fn(const_cast<void **>(argv_.data())); }

    // The case's tensors by name, for the baselines (bench/baseline.h).
    CaseTensors tensors() const;

    // A baseline on this case's tensors: the outputs it writes are poisoned, it runs once, publishes,
    // and every output is checked like the kernel's (outputs it does not write keep the kernel's
    // checked values). Returns "" when it passes (with the check's summary in *message), else why not.
    std::string check_baseline(Baseline &b, std::string *message = nullptr);

private:
    void setup(uint64_t seed, const Registry::Kernel *forward);
    void fill_saved_statistics(const Registry::Kernel &forward, uint64_t seed);
    void choose_sample_axis();
    OutputCheckSummary check_outputs(uint64_t seed) const;
    struct Arg;
    HostTensor gather(const Arg &g, const std::vector<int64_t> &idx) const;
    TensorMap gather_inputs(const std::vector<int64_t> &idx) const;
    // The float64 reference (or the running error bound's scales) of every index of the sampled
    // axis, evaluated slice_rows_ indices at a time where that is not 0.
    TensorMap whole_reference(bool magnitudes) const;

    CaseSpec spec_;
    Registry::Kernel kernel_;               // a copy: the case outlives no registry
    const Registry::Kernel *k_ = nullptr;   // &kernel_ once selected
    std::string error_, check_message_, selection_;
    size_t bytes_ = 0;

    struct Arg {
        const KernelArg *arg = nullptr;
        const std::vector<AxisId> *dims = nullptr;  // the declaration's axes of the tensor
        std::vector<int64_t> shape;  // declared shape
        int64_t numel = 0;
        HostBuffer mem;
        bool has_outer = false;      // the tensor spans the outermost axis (else: same in every slice)
        int sample_pos = -1;         // the dimension of the sampled axis (sample_axis_), -1 when it lacks it
    };
    std::vector<Arg> args_;
    int outer_axis_ = -1;
    int64_t outer_extent_ = 0;
    // The axis the reference check samples: the outermost, or for a big full_reference case
    // another split axis (CaseSpec::full_reference_elements).
    int sample_axis_ = -1;
    int64_t sample_extent_ = 0;
    bool sample_whole_ = false;  // every index of the sampled axis (full_reference, not cut)
    // A whole-tensor check whose outputs add up over slices of the outermost axis
    // (slices_add_up: a backward's parameter gradients) evaluates its reference this many indices
    // at a time (about 4M elements of its largest tensor); 0: all at once.
    int64_t slice_rows_ = 0;
    std::vector<int64_t> extents_;   // per atomic axis
    std::vector<std::vector<halide_dimension_t>> dims_;
    std::vector<halide_buffer_t> bufs_;
    std::vector<void *> argv_;
    // The float64 reference of a full_reference case, computed once (the inputs never change), and
    // the running error bound's scales (evaluate_magnitudes), computed only when an output misses
    // the plain spot-check bound (a backward's terms can cancel: runtime/verify.h).
    mutable TensorMap full_ref_, full_mags_;
    // A sliced reference's outputs lacking the sliced axis: the sum of their slices' |values|
    // (whole_reference), which the magnitudes' pass trades for the whole's |value|.
    mutable TensorMap slice_abs_sums_;
};

// bytes_per_call() of the case without allocating anything (0 when no kernel fits).
size_t case_bytes(const Registry &reg, const CaseSpec &spec);

}  // namespace normgen::bench
