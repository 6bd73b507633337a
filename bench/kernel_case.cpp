#include "bench/kernel_case.h"

#include "bench/thread_pool.h"
#include "runtime/errors.h"
#include "runtime/half.h"
#include "runtime/random_inputs.h"
#include "runtime/reference/interpreter.h"
#include "runtime/run.h"
#include "runtime/storage.h"
#include "runtime/verify.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

namespace normgen::bench {

std::string CaseSpec::name() const {
    return layer + (grad ? "_grad" : "") + "/" + (model.empty() ? "" : model + "/") + dtype_name(dtype) + "/" + shape_label;
}

CaseSpec case_spec(const GridCase &g) {
    CaseSpec c;
    c.layer = g.layer;
    c.model = g.model;
    c.dtype = g.dtype;
    c.sizes = g.sizes;
    c.shape_label = g.shape;
    c.full_reference = g.full_reference;
    c.grad = g.grad;
    // Long enough for a stable median on a shared machine; DRAM cases take ~50-500 ms a call.
    c.min_time = g.dram ? 0.3 : 0.1;
    return c;
}

namespace {

// Bytes a process checking a case on its whole tensor holds for each byte of the case's own
// tensors: LayerNorm's backward at 4096 x 8192 (x, d_y, d_x: 384 MiB), with every implementation
// of the grid, peaked at 4.8 GB resident (GNU time), 11.9x on a Xeon, 12.5x on an AMD EPYC.
constexpr double kWholeCheckBytesPerByte = 12;
// The same where the reference is evaluated a slice of rows at a time (KernelCase::slice_rows_):
// the same case peaked at 2.05 GB, 5.3x (AMD EPYC; the float64 reference of d_x and its decoded
// output stay whole, the interpreter's inputs and temporaries are a slice's).
constexpr double kSlicedCheckBytesPerByte = 6;

// MemAvailable of /proc/meminfo in bytes (-1 where it cannot be read).
int64_t available_memory_bytes() {
    std::ifstream f("/proc/meminfo");
    // Line by line: some lines (HugePages_Total:) carry no unit.
    for (std::string line; std::getline(f, line);) {
        std::istringstream in(line);
        std::string key;
        int64_t kib = 0;
        if (in >> key >> kib && key == "MemAvailable:") return kib * 1024;
    }
    return -1;
}

uint64_t splitmix64(uint64_t &s) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Activations for the big tensors, generated in parallel straight into their storage type:
// approximately N(0, 1) (a sum of four uniforms, variance 1), never zero, mixed signs; positive
// for variance-like tensors (names containing "var"), as runtime/random_inputs does.
void fill_random(uint8_t *out, DType t, int64_t n, uint64_t seed, bool positive) {
    const int tasks = (int)std::max<int64_t>(1, std::min<int64_t>(256, n / 65536));
    parallel_for(tasks, [&](int task) {
        int64_t b = n * task / tasks, e = n * (task + 1) / tasks;
        uint64_t s = seed ^ (0x51ed2701u * (uint64_t)(task + 1));
        for (int64_t i = b; i < e; ++i) {
            uint64_t r = splitmix64(s);
            float u = 0;
            for (int k = 0; k < 4; ++k) u += (float)((r >> (16 * k)) & 0xffff) * (1.0f / 65536.0f);
            float v = (u - 2.0f) * 1.7320508f;
            if (std::fabs(v) < 1e-3f) v = v < 0 ? -0.75f : 0.75f;
            if (positive) v = std::fabs(v) + 0.1f;
            switch (t) {
            case DType::F32: reinterpret_cast<float *>(out)[i] = v; break;
            case DType::BF16: reinterpret_cast<uint16_t *>(out)[i] = float_to_bf16(v); break;
            case DType::F16: reinterpret_cast<uint16_t *>(out)[i] = float_to_half(v); break;
            case DType::F64: reinterpret_cast<double *>(out)[i] = v; break;
            }
        }
    });
}

void parallel_memset(uint8_t *p, int v, size_t bytes) {
    const int tasks = (int)std::max<size_t>(1, std::min<size_t>(256, bytes >> 20));
    parallel_for(tasks, [&](int t) {
        size_t b = bytes * t / tasks, e = bytes * (t + 1) / tasks;
        std::memset(p + b, v, e - b);
    });
}

// Elements that are NaN (the 0xff poison included): nothing may be left unwritten.
int64_t count_nan(const uint8_t *p, DType t, int64_t n) {
    std::atomic<int64_t> bad{0};
    const int tasks = (int)std::max<int64_t>(1, std::min<int64_t>(256, n >> 18));
    parallel_for(tasks, [&](int task) {
        int64_t b = n * task / tasks, e = n * (task + 1) / tasks, c = 0;
        if (t == DType::F32) {
            const uint32_t *q = reinterpret_cast<const uint32_t *>(p);
            for (int64_t i = b; i < e; ++i) c += (q[i] & 0x7fffffffu) > 0x7f800000u;
        } else if (t == DType::F64) {
            const double *q = reinterpret_cast<const double *>(p);
            for (int64_t i = b; i < e; ++i) c += std::isnan(q[i]);
        } else {
            const uint16_t *q = reinterpret_cast<const uint16_t *>(p);
            const uint16_t inf = t == DType::BF16 ? 0x7f80 : 0x7c00;
            for (int64_t i = b; i < e; ++i) c += (q[i] & 0x7fffu) > inf;
        }
        bad += c;
    });
    return bad.load();
}

bool spans_axis(const NormSpec &spec, const std::vector<AxisId> &dims, AxisId a) {
    for (AxisId d : dims) {
        if (d == a) return true;
        for (AxisId p : spec.axes[d].parts)
            if (p == a) return true;
    }
    return false;
}

std::string fmt(double v) {
    std::ostringstream o;
    o.precision(6);
    o << v;
    return o.str();
}

}  // namespace

KernelCase::KernelCase(const Registry &reg, const CaseSpec &spec, uint64_t seed) : spec_(spec) {
    const Registry::Kernel *k = nullptr;
    try {
        const std::string layer = spec_.grad ? spec_.layer + "_grad" : spec_.layer;
        Registry::Selection sel = reg.select_for_sizes(layer, spec_.dtype, spec_.sizes, false, true);  // the case's buffers are aligned
        k = sel.kernel && (!spec_.grad || sel.kernel->grad_of == spec_.layer) ? sel.kernel : nullptr;
        selection_ = sel.why;
    } catch (const std::exception &e) {
        error_ = std::string("dispatch failed: ") + e.what();
        return;
    }
    if (!k) {
        error_ = "no " + std::string(dtype_name(spec_.dtype)) + (spec_.grad ? " backward" : "") + " kernel for layer '" + spec_.layer +
                 "' runs on this CPU (registry " + reg.path() + (spec_.grad ? "; built with NORMGEN_GRAD_KERNELS?" : "") + ")";
        return;
    }
    kernel_ = *k;
    k_ = &kernel_;
    const Registry::Kernel *forward = spec_.grad ? reg.select(spec_.layer, spec_.dtype, true) : nullptr;
    if (spec_.grad && !forward) {
        error_ = "no forward kernel of '" + spec_.layer + "' writes its saved statistics here";
        return;
    }
    try {
        setup(seed, forward);
    } catch (const std::exception &e) {
        error_ = std::string("setup failed: ") + e.what();
    }
}

KernelCase::KernelCase(const Registry::Kernel &kernel, const CaseSpec &spec, uint64_t seed, const Registry::Kernel *forward)
    : spec_(spec), kernel_(kernel) {
    k_ = &kernel_;
    spec_.grad = !kernel.grad_of.empty();
    spec_.layer = spec_.grad ? kernel.grad_of : kernel.layer;
    spec_.dtype = kernel.dtype;
    try {
        setup(seed, forward);
    } catch (const std::exception &e) {
        error_ = std::string("setup failed: ") + e.what();
    }
}

std::string KernelCase::check_other(const Registry::Kernel &other) {
    if (!error_.empty()) return "the case itself failed: " + error_;
    if (other.args.size() != args_.size()) return "'" + other.function + "' has a different argument list";
    for (size_t i = 0; i < args_.size(); ++i) {
        const KernelArg &a = other.args[i], &b = *args_[i].arg;
        if (a.name != b.name || a.role != b.role || a.dtype != b.dtype || a.buffer_axes != b.buffer_axes)
            return "'" + other.function + "' argument " + std::to_string(i) + " differs from '" + k_->function + "'s";
    }
    for (const Arg &g : args_)
        if (g.arg->role == KernelArg::Output) parallel_memset(g.mem.data(), 0xff, (size_t)g.numel * dtype_size(g.arg->dtype));
    if (int rc = run_other(other.argv)) return "'" + other.function + "' failed with Halide error " + std::to_string(rc);
    OutputCheckSummary c = check_outputs(0x5eed);
    return c.pass ? "" : c.message;
}

CaseTensors KernelCase::tensors() const {
    CaseTensors t;
    t.layer = k_->layer;  // the backward's own name (layer_norm_grad) for a grad case
    t.dtype = spec_.dtype;
    t.threads = bench_threads();
    const NormSpec &spec = *k_->spec;
    for (size_t a = 0; a < spec.axes.size(); ++a) {
        int64_t e = 1;
        if (spec.axes[a].is_split())
            for (AxisId p : spec.axes[a].parts) e *= extents_.at(p);
        else
            e = extents_.at(a);
        t.extent[spec.axes[a].name] = e;
    }
    for (const Arg &g : args_) t.data[g.arg->name] = const_cast<uint8_t *>(g.mem.data());
    return t;
}

std::string KernelCase::check_baseline(Baseline &b, std::string *message) {
    if (!error_.empty()) return "the case itself failed: " + error_;
    for (const std::string &name : b.writes()) {
        const Arg *g = nullptr;
        for (const Arg &a : args_)
            if (a.arg->name == name && a.arg->role == KernelArg::Output) g = &a;
        if (!g) return "the baseline writes '" + name + "', which is not an output of '" + k_->function + "'";
        parallel_memset(const_cast<uint8_t *>(g->mem.data()), 0xff, (size_t)g->numel * dtype_size(g->arg->dtype));
    }
    try {
        b.run();
        b.publish();
    } catch (const std::exception &e) {
        std::string what = e.what();
        what = what.substr(0, what.find('\n'));  // ATen appends its stack trace
        return "it failed: " + what;
    }
    OutputCheckSummary c = check_outputs(0xba5e);
    if (message) *message = c.message;
    return c.pass ? "" : c.message;
}

void KernelCase::setup(uint64_t seed, const Registry::Kernel *forward) {
    const NormSpec &spec = *k_->spec;
    for (const auto &[name, n] : spec_.sizes) {
        AxisId a = spec.find_axis(name);
        if (a < 0 || spec.axes[a].is_split()) {
            error_ = "layer '" + spec.name + "' has no atomic axis '" + name + "'";
            return;
        }
    }
    AxisExtents ext = choose_extents(spec, spec_.sizes, 1);
    extents_ = ext.extent;

    // The outermost axis of the first input (rows, n): the axis the reference check samples.
    const std::vector<AxisId> &xdims = spec.tensors.at(0).dims;
    outer_axis_ = xdims.at(0);
    if (spec.axes[outer_axis_].is_split()) {
        error_ = "the outermost axis of '" + spec.tensors[0].name + "' is a split axis; the benchmark samples atomic axes only";
        return;
    }
    outer_extent_ = ext.extent[outer_axis_];

    // Parameters and small inputs (no outermost axis) from the project's own generator; big
    // tensors are filled in parallel below.
    AxisExtents small_ext = ext;
    small_ext.extent[outer_axis_] = 1;
    TensorMap small = random_inputs(spec, small_ext, RandomInputOptions{0, seed});

    args_.clear();
    bytes_ = 0;
    for (const KernelArg &a : k_->args) {
        if (a.role == KernelArg::Output && a.optional) continue;  // a core kernel has none; never asked for
        Arg g;
        g.arg = &a;
        const std::vector<AxisId> &dims = a.role == KernelArg::Output ? spec.find_output(a.name)->dims : spec.find_tensor(a.name)->dims;
        g.dims = &dims;
        g.shape = physical_shape(spec, dims, ext);
        g.numel = 1;
        for (int64_t s : g.shape) g.numel *= s;
        g.has_outer = spans_axis(spec, dims, outer_axis_);
        if (g.has_outer && dims.at(0) != outer_axis_) {
            error_ = "tensor '" + a.name + "' spans the outermost axis but not as its first dimension";
            return;
        }
        size_t nbytes = (size_t)g.numel * dtype_size(a.dtype);
        g.mem = HostBuffer(nbytes);
        bytes_ += nbytes;
        if (a.role == KernelArg::Output) {
            parallel_memset(g.mem.data(), 0xff, nbytes);  // first touch, and NaN poison
        } else if (g.has_outer) {
            fill_random(g.mem.data(), a.dtype, g.numel, seed ^ std::hash<std::string>()(a.name), a.name.find("var") != std::string::npos);
        } else {
            // In a bf16/f16 case the f32 parameters hold values of that type, so a library that
            // takes them in the activations' type computes the same layer.
            std::vector<double> v = small.at(a.name).data;
            if (spec_.dtype != DType::F32 && a.dtype == DType::F32)
                for (double &e : v) e = round_to(e, spec_.dtype);
            std::vector<uint8_t> b = encode(v, a.dtype);
            if (b.size() != nbytes) throw std::logic_error("parameter '" + a.name + "' has an unexpected size");
            std::memcpy(g.mem.data(), b.data(), nbytes);
        }
        args_.push_back(std::move(g));
    }

    choose_sample_axis();
    slice_rows_ = 0;
    if (sample_whole_ && spec_.reference_slice_elements > 0 && slices_add_up(spec, outer_axis_)) {
        int64_t per_index = 1;
        for (const Arg &g : args_)
            if (g.has_outer) per_index = std::max(per_index, g.numel / std::max<int64_t>(1, outer_extent_));
        slice_rows_ = std::clamp<int64_t>(spec_.reference_slice_elements / per_index, 1, outer_extent_);
        if (slice_rows_ >= outer_extent_) slice_rows_ = 0;  // one slice: the whole at once
    }
    // A case checked on the whole tensor at once holds the float64 reference of all of it (inputs,
    // temporaries, outputs), beside its own tensors and the baselines' (ATen's autograd): about
    // kWholeCheckBytesPerByte bytes for each byte of the case's tensors (above); evaluated a slice at
    // a time, kSlicedCheckBytesPerByte. On a 480 MiB-L3 Xeon the backward's DRAM-sized cases are
    // 1 GiB a tensor, which needed more than the machine's 24 GB at once: the kernel killed the
    // benchmark and its whole JSON with it. Such a case is refused, saying what it needs, when the
    // memory available cannot hold it.
    if (sample_whole_) {
        const double factor = slice_rows_ ? kSlicedCheckBytesPerByte : kWholeCheckBytesPerByte;
        const int64_t need = (int64_t)((double)bytes_ * factor), have = available_memory_bytes();
        if (have >= 0 && need - (int64_t)bytes_ > have) {
            const double gib = 1024.0 * 1024 * 1024;
            std::ostringstream m;
            m.precision(1);
            m << std::fixed << "skipped: checked on the whole tensor (its float64 reference and the baselines beside it), the case needs about "
              << (double)need / gib << " GiB of memory and " << (double)(have + (int64_t)bytes_) / gib << " GiB is available";
            error_ = m.str();
            args_.clear();
            return;
        }
    }
    if (spec_.grad) {
        if (!forward) throw std::logic_error("a backward case needs the full kernel of its forward layer");
        fill_saved_statistics(*forward, seed);
    }

    // The call exactly as run_kernel would make it: dims innermost first over the atomic axes.
    std::map<std::string, TensorView> views;
    for (const Arg &g : args_) views[g.arg->name] = TensorView{g.mem.data(), g.arg->dtype, g.shape, {}};
    check_kernel_call(*k_, views);  // throws UserError on any mismatch with the declaration
    dims_.assign(args_.size(), {});
    bufs_.assign(args_.size(), halide_buffer_t());
    argv_.assign(args_.size(), nullptr);
    for (size_t i = 0; i < args_.size(); ++i) {
        int32_t stride = 1;
        for (AxisId ax : args_[i].arg->buffer_axes) {
            int32_t extent = (int32_t)ext.extent[ax];
            dims_[i].push_back(halide_dimension_t(0, extent, stride));
            stride *= extent;
        }
        halide_buffer_t &b = bufs_[i];
        b.host = args_[i].mem.data();
        b.type = halide_type_of(args_[i].arg->dtype);
        b.dimensions = (int32_t)dims_[i].size();
        b.dim = dims_[i].empty() ? nullptr : dims_[i].data();
        argv_[i] = &b;
    }

    int rc = run();
    if (rc != 0) {
        error_ = "kernel '" + k_->function + "' failed with Halide error " + std::to_string(rc);
        return;
    }
    OutputCheckSummary c = check_outputs(seed);
    check_message_ = c.message;
    if (!c.pass) error_ = "output check failed: " + c.message;
}

// The saved statistics a backward kernel reads (mu, rstd: optional outputs of the forward) are what
// the forward's full kernel computes from this case's inputs and parameters, as in a training step;
// the forward's other tensors (its y, a bias the backward does not read) live in scratch buffers
// for the one call.
void KernelCase::fill_saved_statistics(const Registry::Kernel &forward_kernel, uint64_t seed) {
    const Registry::Kernel *fk = &forward_kernel;
    const std::shared_ptr<const NormSpec> forward = fk->spec;
    if (fk->layer != spec_.layer) throw std::logic_error("kernel '" + fk->function + "' is not of the forward layer '" + spec_.layer + "'");
    bool needed = false;
    for (const Arg &g : args_)
        if (g.arg->role != KernelArg::Output && forward->find_output(g.arg->name)) needed = true;
    if (!needed) return;
    std::map<std::string, int64_t> sizes;
    const NormSpec &bspec = *k_->spec;
    for (size_t a = 0; a < bspec.axes.size(); ++a)
        if (!bspec.axes[a].is_split()) sizes[bspec.axes[a].name] = extents_[a];
    const AxisExtents fext = choose_extents(*forward, sizes, 1);
    AxisExtents small_ext = fext;
    small_ext.extent[forward->tensors.at(0).dims.at(0)] = 1;
    const TensorMap small = random_inputs(*forward, small_ext, RandomInputOptions{0, seed ^ 0xf0});
    std::vector<HostBuffer> scratch;
    std::map<std::string, TensorView> views;
    for (const KernelArg &a : fk->args) {
        const std::vector<AxisId> &dims = a.role == KernelArg::Output ? forward->find_output(a.name)->dims : forward->find_tensor(a.name)->dims;
        const std::vector<int64_t> shape = physical_shape(*forward, dims, fext);
        int64_t numel = 1;
        for (int64_t s : shape) numel *= s;
        uint8_t *mem = nullptr;
        for (Arg &g : args_)
            if (g.arg->name == a.name && g.arg->dtype == a.dtype && g.shape == shape && (g.arg->role == KernelArg::Output) == false)
                mem = g.mem.data();
        if (!mem) {
            scratch.emplace_back((size_t)numel * dtype_size(a.dtype));
            mem = scratch.back().data();
            if (a.role != KernelArg::Output) {
                if (spans_axis(*forward, dims, forward->tensors.at(0).dims.at(0)))
                    fill_random(mem, a.dtype, numel, seed ^ std::hash<std::string>()(a.name), a.name.find("var") != std::string::npos);
                else {
                    std::vector<uint8_t> b = encode(small.at(a.name).data, a.dtype);
                    std::memcpy(mem, b.data(), std::min(b.size(), scratch.back().size()));
                }
            }
        }
        views[a.name] = TensorView{mem, a.dtype, shape, {}};
    }
    run_kernel(*fk, views);
}

void KernelCase::run_checked() const {
    std::map<std::string, TensorView> views;
    for (const Arg &g : args_) views[g.arg->name] = TensorView{g.mem.data(), g.arg->dtype, g.shape, {}};
    run_kernel(*k_, views);
}

void KernelCase::choose_sample_axis() {
    const NormSpec &spec = *k_->spec;
    sample_axis_ = outer_axis_;
    sample_extent_ = outer_extent_;
    sample_whole_ = spec_.full_reference;
    for (Arg &g : args_) g.sample_pos = g.has_outer ? 0 : -1;
    if (!spec_.full_reference || spec_.full_reference_elements <= 0 || args_.empty() || args_[0].numel <= spec_.full_reference_elements ||
        !k_->plan)
        return;
    // An axis no reduction reduces and every output has (the plan's split axes), atomic in every
    // tensor (so that it is one dimension of each); each of its indices is a layer of its own.
    for (AxisId a : k_->plan->split_axes) {
        if (a == outer_axis_ || spec.axes[a].is_split() || extents_.at((size_t)a) < 2) continue;
        std::vector<int> pos;
        bool atomic = true;
        for (const Arg &g : args_) {
            const std::vector<AxisId> &dims = *g.dims;
            for (AxisId d : dims) atomic = atomic && !spec.axes[d].is_split();
            const auto it = std::find(dims.begin(), dims.end(), a);
            pos.push_back(it == dims.end() ? -1 : (int)(it - dims.begin()));
            if (g.arg->role == KernelArg::Output && pos.back() < 0) atomic = false;
        }
        if (!atomic) continue;
        sample_axis_ = a;
        sample_extent_ = extents_.at((size_t)a);
        sample_whole_ = false;
        for (size_t i = 0; i < args_.size(); ++i) args_[i].sample_pos = pos[i];
        return;
    }
}

// The indices `idx` of the sampled axis of a tensor (all of a tensor without it), decoded.
HostTensor KernelCase::gather(const Arg &g, const std::vector<int64_t> &idx) const {
    HostTensor h;
    h.shape = g.shape;
    const size_t es = dtype_size(g.arg->dtype);
    if (g.sample_pos < 0) {
        h.data = decode(g.mem.data(), (size_t)g.numel, g.arg->dtype);
        return h;
    }
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < (int)g.shape.size(); ++i) {
        if (i < g.sample_pos) outer *= g.shape[(size_t)i];
        if (i > g.sample_pos) inner *= g.shape[(size_t)i];
    }
    const int64_t k = (int64_t)idx.size();
    h.shape[(size_t)g.sample_pos] = k;
    h.data.reserve((size_t)(outer * inner * k));
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t i : idx) {
            std::vector<double> d = decode(g.mem.data() + (size_t)((o * sample_extent_ + i) * inner) * es, (size_t)inner, g.arg->dtype);
            h.data.insert(h.data.end(), d.begin(), d.end());
        }
    return h;
}

TensorMap KernelCase::gather_inputs(const std::vector<int64_t> &idx) const {
    TensorMap inputs;
    for (const Arg &g : args_)
        if (g.arg->role != KernelArg::Output) inputs[g.arg->name] = gather(g, idx);
    return inputs;
}

TensorMap KernelCase::whole_reference(bool magnitudes) const {
    const NormSpec &spec = *k_->spec;
    const ReferenceOptions options{k_->storage()};
    auto evaluate = [&](const TensorMap &inputs) {
        return magnitudes ? evaluate_magnitudes(spec, inputs, {}, options) : evaluate_reference(spec, inputs, {}, options);
    };
    std::vector<int64_t> idx;
    if (!slice_rows_) {
        for (int64_t i = 0; i < sample_extent_; ++i) idx.push_back(i);
        return evaluate(gather_inputs(idx));
    }
    // slice_rows_ indices of the outermost axis at a time (slices_add_up): an output spanning it
    // (its first dimension) takes each slice's rows in place, one lacking it their sum. The float64
    // inputs and temporaries of the interpreter are a slice's, not the whole tensor's.
    // The magnitude of a sum is its terms' magnitudes plus |the sum| (its own rounding): the
    // reference's pass keeps each summed output's slices' |sums| added up, and the magnitudes' pass
    // takes them out and the whole's |sum| (full_ref_) in, so the bound is the whole's.
    if (magnitudes && full_ref_.empty()) throw std::logic_error("the sliced magnitudes need the reference first");
    TensorMap whole;
    for (const Arg &g : args_) {
        if (g.arg->role != KernelArg::Output) continue;
        HostTensor &t = whole[g.arg->name];
        t.shape = g.shape;
        t.data.assign((size_t)g.numel, 0.0);
        if (!magnitudes && g.sample_pos < 0) slice_abs_sums_[g.arg->name].data.assign((size_t)g.numel, 0.0);
    }
    for (int64_t first = 0; first < sample_extent_; first += slice_rows_) {
        idx.clear();
        for (int64_t i = first; i < std::min(sample_extent_, first + slice_rows_); ++i) idx.push_back(i);
        const TensorMap part = evaluate(gather_inputs(idx));
        for (const Arg &g : args_) {
            if (g.arg->role != KernelArg::Output) continue;
            const std::vector<double> &p = part.at(g.arg->name).data;
            std::vector<double> &w = whole.at(g.arg->name).data;
            if (g.sample_pos < 0) {
                if (p.size() != w.size()) throw std::logic_error("reference slice of '" + g.arg->name + "' has an unexpected size");
                for (size_t i = 0; i < w.size(); ++i) w[i] += p[i];
                if (magnitudes) continue;
                std::vector<double> &abs_sum = slice_abs_sums_.at(g.arg->name).data;
                for (size_t i = 0; i < w.size(); ++i) abs_sum[i] += std::fabs(p[i]);
            } else {
                const size_t row = w.size() / (size_t)sample_extent_;
                if (p.size() != row * idx.size()) throw std::logic_error("reference slice of '" + g.arg->name + "' has an unexpected size");
                std::copy(p.begin(), p.end(), w.begin() + (std::ptrdiff_t)(row * (size_t)first));
            }
        }
    }
    if (magnitudes)
        for (const auto &[name, abs_sum] : slice_abs_sums_) {
            std::vector<double> &w = whole.at(name).data;
            const std::vector<double> &v = full_ref_.at(name).data;
            for (size_t i = 0; i < w.size(); ++i) w[i] += std::fabs(v[i]) - abs_sum.data[i];
        }
    return whole;
}

OutputCheckSummary KernelCase::check_outputs(uint64_t seed) const {
    const NormSpec &spec = *k_->spec;
    OutputCheckSummary r;

    // 1. Every element of every output was written and is not NaN.
    for (const Arg &g : args_) {
        if (g.arg->role != KernelArg::Output) continue;
        int64_t bad = count_nan(g.mem.data(), g.arg->dtype, g.numel);
        if (bad) {
            r.message = "output '" + g.arg->name + "': " + std::to_string(bad) + " of " + std::to_string(g.numel) +
                        " elements are NaN or were never written";
            return r;
        }
    }

    // 2. The float64 reference on a sample of the sampled axis (the outermost, or for a big
    //    full_reference case a split axis: choose_sample_axis), or on all of it.
    std::vector<int64_t> idx;
    const int64_t extent = sample_extent_;
    if (sample_whole_ || extent <= 6) {
        for (int64_t i = 0; i < extent; ++i) idx.push_back(i);
    } else {
        // Up to 9 indices, fewer when each is big (at most ~4M sampled elements, at least 3):
        // the first, the last, the middle, then random ones.
        const int64_t block = std::max<int64_t>(1, args_.at(0).numel / extent);
        const int64_t want = std::min<int64_t>(extent, std::clamp<int64_t>((int64_t(4) << 20) / block, 3, 9));
        std::set<int64_t> s{0, extent - 1, extent / 2};
        std::mt19937_64 rng(seed ^ 0xc0ffee);
        while ((int64_t)s.size() < want) s.insert((int64_t)(rng() % (uint64_t)extent));
        idx.assign(s.begin(), s.end());
    }
    const int64_t k = (int64_t)idx.size();
    for (const Arg &g : args_)
        if (g.arg->role == KernelArg::Output && g.sample_pos < 0 && k != extent) {
            r.message = "output '" + g.arg->name + "' does not span the sampled axis; the case needs full_reference";
            return r;
        }
    const bool full = k == extent && sample_axis_ == outer_axis_;
    TensorMap sampled_ref;
    if (full && full_ref_.empty()) full_ref_ = whole_reference(false);
    if (!full) sampled_ref = evaluate_reference(spec, gather_inputs(idx), {}, {k_->storage()});
    const TensorMap &ref = full ? full_ref_ : sampled_ref;

    // The spot-check bound (runtime/verify.h), as the kernel tests use; a backward output that
    // misses it is judged again with the running error bound of its own formula (cancellation).
    const OutputBound bound = spot_check_bound(spec);
    double worst = 0;
    std::string worst_where;
    int64_t checked = 0;
    for (const Arg &g : args_) {
        if (g.arg->role != KernelArg::Output) continue;
        const HostTensor got = gather(g, idx);
        OutputCheck c = compare_output(g.arg->name, got, ref.at(g.arg->name), g.arg->dtype, bound);
        if (!c.pass && spec_.grad) {
            TensorMap local_mags;
            if (full && full_mags_.empty()) full_mags_ = whole_reference(true);
            if (!full) local_mags = evaluate_magnitudes(spec, gather_inputs(idx), {}, {k_->storage()});
            const TensorMap &mags = full ? full_mags_ : local_mags;
            c = compare_output(g.arg->name, got, ref.at(g.arg->name), g.arg->dtype, spot_check_bound(spec, mags.at(g.arg->name)));
        }
        if (!c.pass) {
            r.message = "the sample's " + mismatch_text(c);
            return r;
        }
        if (c.max_err >= worst) {
            worst = c.max_err;
            worst_where = g.arg->name;
        }
        checked += (int64_t)ref.at(g.arg->name).data.size();
    }
    r.pass = true;
    std::ostringstream m;
    m << "checked " << checked << " output elements (" << (k == extent ? std::string("all") : std::to_string(k) + " of " +
                                                          std::to_string(extent)) << " " << spec.axes[sample_axis_].name
      << ") against the float64 reference";
    if (full && slice_rows_) m << " (evaluated " << slice_rows_ << " " << spec.axes[sample_axis_].name << " at a time)";
    m << ": worst error " << fmt(worst) << " of the bound (" << worst_where << ")";
    r.message = m.str();
    return r;
}

size_t case_bytes(const Registry &reg, const CaseSpec &cs) {
    const Registry::Kernel *k = cs.grad ? reg.select_grad(cs.layer, cs.dtype) : reg.select(cs.layer, cs.dtype, false);
    if (!k) return 0;
    const NormSpec &spec = *k->spec;
    AxisExtents ext = choose_extents(spec, cs.sizes, 1);
    size_t bytes = 0;
    for (const KernelArg &a : k->args) {
        if (a.role == KernelArg::Output && a.optional) continue;
        const std::vector<AxisId> &dims = a.role == KernelArg::Output ? spec.find_output(a.name)->dims : spec.find_tensor(a.name)->dims;
        int64_t n = 1;
        for (int64_t s : physical_shape(spec, dims, ext)) n *= s;
        bytes += (size_t)n * dtype_size(a.dtype);
    }
    return bytes;
}

}  // namespace normgen::bench
