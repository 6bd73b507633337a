#include "runtime/run.h"

#include "runtime/device.h"
#include "runtime/errors.h"
#include "runtime/halide_errors.h"
#include "runtime/npy.h"
#include "runtime/shapes.h"
#include "runtime/storage.h"

#include <HalideRuntime.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <vector>

namespace normgen {

namespace {

std::string tensor_list(const NormSpec &spec) {
    std::string s = "inputs";
    bool first = true;
    for (const TensorInfo &t : spec.tensors) {
        s += (first ? " " : ", ") + t.name;
        first = false;
    }
    s += "; outputs";
    first = true;
    for (const OutputInfo &o : spec.outputs) {
        s += (first ? " " : ", ") + o.name + (o.optional ? "?" : "");
        first = false;
    }
    return s;
}

const char *role_word(const KernelArg &a) {
    return a.role == KernelArg::Input ? "input" : a.role == KernelArg::Param ? "parameter" : "output";
}

// Contiguous row-major strides (in elements) of `shape`.
std::vector<int64_t> dense_strides(const std::vector<int64_t> &shape) {
    std::vector<int64_t> s(shape.size());
    int64_t step = 1;
    for (size_t i = shape.size(); i-- > 0;) {
        s[i] = step;
        step *= shape[i];
    }
    return s;
}

// Whether `v` is laid out contiguous row-major (no strides given, or the dense ones; a stride along
// an axis of extent 1 does not matter).
bool is_dense(const TensorView &v) {
    if (v.strides.empty()) return true;
    if (v.strides.size() != v.shape.size()) return false;
    std::vector<int64_t> dense = dense_strides(v.shape);
    for (size_t i = 0; i < dense.size(); ++i)
        if (v.shape[i] != 1 && v.strides[i] != dense[i]) return false;
    return true;
}

// One argument of the call as it will be passed: the caller's view, or scratch for an optional
// output of a full kernel that the caller did not ask for. `strides`: per buffer dimension
// (innermost first, atomic axes), when the caller's view is strided and the kernel takes it.
struct Slot {
    const KernelArg *arg = nullptr;
    const TensorView *view = nullptr;
    void *data = nullptr;
    std::vector<int64_t> strides;
};

// The strides of a strided view along the kernel argument's buffer dimensions (innermost first,
// atomic axes): a split axis c = (g, cg) of stride s has cg at s and g at s * extent(cg).
std::vector<int64_t> buffer_strides(const NormSpec &spec, const KernelArg &a, const TensorView &v, const AxisExtents &ext) {
    std::vector<AxisId> dims;
    if (const TensorInfo *t = spec.find_tensor(a.name)) dims = t->dims;
    else dims = spec.find_output(a.name)->dims;
    std::map<AxisId, int64_t> by_atom;
    for (size_t i = 0; i < dims.size(); ++i) {
        const Axis &ax = spec.axes[dims[i]];
        int64_t s = v.strides[i];
        if (!ax.is_split()) {
            by_atom[dims[i]] = s;
            continue;
        }
        for (size_t p = ax.parts.size(); p-- > 0;) {
            by_atom[ax.parts[p]] = s;
            s *= ext.extent[ax.parts[p]];
        }
    }
    std::vector<int64_t> out;
    for (AxisId atom : a.buffer_axes) out.push_back(by_atom.at(atom));
    return out;
}

// How a call is cut along one axis so that every kernel call addresses fewer than 2^31 elements
// per tensor (halide_buffer_t extents and strides are 32-bit). No axis: one call.
struct Chunks {
    AxisId axis = -1;
    int64_t extent = 1;  // the axis' extent in the call
    int64_t step = 1;    // units of the axis per chunk (the last may be shorter)
};

struct Prepared {
    AxisExtents ext;
    std::vector<Slot> slots;  // one per kernel argument, in order
    std::vector<std::unique_ptr<uint8_t[]>> scratch;
    Chunks chunks;
};

constexpr int64_t kMaxKernelElements = INT32_MAX;

// Every atomic axis some reduction reduces or some count() counts.
std::set<AxisId> reduced_axes(const NormSpec &spec) {
    std::set<AxisId> out;
    std::vector<const Node *> todo;
    for (const ValueDef &v : spec.values) todo.push_back(v.expr.get());
    std::set<const Node *> seen;
    while (!todo.empty()) {
        const Node *n = todo.back();
        todo.pop_back();
        if (!n || !seen.insert(n).second) continue;
        if (n->kind == Node::Reduce || n->kind == Node::Count) out.insert(n->over.begin(), n->over.end());
        for (const NodePtr &a : n->args) todo.push_back(a.get());
    }
    return out;
}

// Elements of argument `a` in the call, and per unit of `axis` (its whole size when it lacks it).
int64_t arg_elements(const KernelArg &a, const AxisExtents &ext, AxisId skip = -1) {
    int64_t n = 1;
    for (AxisId ax : a.buffer_axes)
        if (ax != skip) n *= ext.extent[ax];
    return n;
}

// The chunks of a call whose largest tensor exceeds 2^31-1 elements: along the outermost axis of
// that tensor, when no reduction reduces it, every output has it and every tensor that has it has
// it outermost (so a chunk is a contiguous slice of each); else a UserError naming the axis.
Chunks plan_chunks(const Registry::Kernel &k, const AxisExtents &ext) {
    const NormSpec &spec = *k.spec;
    const KernelArg *big = nullptr;
    int64_t big_n = 0;
    for (const KernelArg &a : k.args)
        if (int64_t n = arg_elements(a, ext); n > big_n) big = &a, big_n = n;
    Chunks c;
    if (big_n <= kMaxKernelElements) return c;

    const std::string head = "tensor '" + big->name + "' has " + std::to_string(big_n) +
                             " elements, more than a kernel addresses in one call (2^31-1), and the call cannot be split";
    const AxisId axis = big->buffer_axes.back();  // outermost in memory
    const std::string an = "'" + spec.axes[axis].name + "'";
    if (reduced_axes(spec).count(axis))
        throw UserError(head + ": its outermost axis " + an + " is reduced by layer '" + spec.name +
                        "' (a chunk along it would change the statistics)");
    int64_t unit = 0;
    const KernelArg *unit_arg = nullptr;
    for (const KernelArg &a : k.args)
        if (int64_t n = arg_elements(a, ext, axis); !a.buffer_axes.empty() && a.buffer_axes.back() == axis && n > unit)
            unit = n, unit_arg = &a;
    if (unit > kMaxKernelElements)
        throw UserError(head + ": one unit of its outermost axis " + an + " holds " + std::to_string(unit) + " elements of '" +
                        unit_arg->name + "' (one row of more than 2^31-1 elements)");
    for (const KernelArg &a : k.args) {
        bool has = false;
        for (AxisId ax : a.buffer_axes) has |= ax == axis;
        if (!has && a.role == KernelArg::Output)
            throw UserError(head + ": output '" + a.name + "' does not have its outermost axis " + an);
        if (has && a.buffer_axes.back() != axis)
            throw UserError(head + ": axis " + an + " is not the outermost axis of '" + a.name + "'");
        if (!has && arg_elements(a, ext) > kMaxKernelElements)
            throw UserError(head + " along axis " + an + ": '" + a.name + "' does not have it and has " +
                            std::to_string(arg_elements(a, ext)) + " elements");
    }
    c.axis = axis;
    c.extent = ext.extent[axis];
    c.step = kMaxKernelElements / unit;
    return c;
}

struct Range {
    const std::string *name;
    uintptr_t begin, end;  // bytes [begin, end)
    bool overlaps(const Range &o) const { return begin < o.end && o.begin < end; }
};

Prepared prepare(const Registry::Kernel &k, const std::map<std::string, TensorView> &tensors, bool allocate_scratch, const Overrides &axes) {
    const NormSpec &spec = *k.spec;
    const std::string kname = "kernel '" + k.function + "'";

    // Names: every given tensor is an argument of this kernel.
    for (const auto &[name, view] : tensors) {
        if (k.find_arg(name)) continue;
        const OutputInfo *o = spec.find_output(name);
        if (o && o->optional)
            throw UserError("tensor '" + name + "' is an optional output, which the core " + kname +
                            " does not write; select a full kernel (Registry::select with need_optional_outputs = true)");
        throw UserError("unknown tensor '" + name + "': layer '" + spec.name + "' has " + tensor_list(spec));
    }

    // Presence, then per-tensor properties that need no shape binding.
    Prepared p;
    for (const KernelArg &a : k.args) {
        auto it = tensors.find(a.name);
        Slot s;
        s.arg = &a;
        if (it == tensors.end()) {
            if (!(a.role == KernelArg::Output && a.optional)) {
                std::vector<AxisId> dims;
                if (const TensorInfo *t = spec.find_tensor(a.name)) dims = t->dims;
                else dims = spec.find_output(a.name)->dims;
                throw UserError(std::string("missing ") + role_word(a) + " '" + a.name + "' of shape " + spec.axes_text(dims));
            }
            p.slots.push_back(s);  // scratch, allocated once the shape is known
            continue;
        }
        const TensorView &v = it->second;
        if (!v.data) throw UserError("tensor '" + a.name + "': data pointer is null");
        if (v.dtype != a.dtype)
            throw UserError("tensor '" + a.name + "': expected " + dtype_name(a.dtype) + ", got " + dtype_name(v.dtype) + " (" + kname + ")");
        for (int64_t n : v.shape)
            if (n < 1)
                throw UserError("tensor '" + a.name + "': shape " + shape_text(v.shape) + " has an extent below 1");
        if (!v.strides.empty() && v.strides.size() != v.shape.size())
            throw UserError("tensor '" + a.name + "': " + std::to_string(v.strides.size()) + " strides for shape " + shape_text(v.shape));
        if (!is_dense(v)) {
            // The MLIR CPU kernels take strided memrefs whose innermost stride is 1: an input or a
            // parameter with any outer strides (a head sliced out of a fused QKV projection, rows of
            // a larger tensor, a batch-major view of a sequence-major one). The Halide kernels and
            // every output are dense.
            const std::string head = "tensor '" + a.name + "': strides " + shape_text(v.strides) + " for shape " + shape_text(v.shape) +
                                     " are not contiguous row-major (expected " + shape_text(dense_strides(v.shape)) + ")";
            if (k.backend != Backend::Mlir)
                throw UserError(head + "; kernel '" + k.function + "' (Halide) takes contiguous row-major tensors, the MLIR kernels take strided inputs");
            if (a.role == KernelArg::Output) throw UserError(head + "; outputs are contiguous row-major");
            for (int64_t st : v.strides)
                if (st < 0 || st > INT32_MAX) throw UserError(head + "; strides must be in [0, 2^31)");
        }
        s.view = &v;
        s.data = v.data;
        p.slots.push_back(s);
    }

    // Shapes: the axes are bound from the inputs and parameters as the reference binds them; the
    // outputs must then have exactly their declared shapes.
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const Slot &s : p.slots)
        if (s.view && s.arg->role != KernelArg::Output) shapes[s.arg->name] = s.view->shape;
    p.ext = bind_axes(spec, shapes, axes);
    for (const KernelArg &a : k.args)
        for (AxisId ax : a.buffer_axes)
            if (p.ext.extent[ax] < 0)
                throw UserError("tensor '" + a.name + "': axis '" + spec.axes[ax].name + "' is not bound by any input");
    for (const Slot &s : p.slots) {
        if (!s.view || s.arg->role != KernelArg::Output) continue;
        const OutputInfo &o = *spec.find_output(s.arg->name);
        std::vector<int64_t> want = physical_shape(spec, o.dims, p.ext);
        const std::vector<int64_t> &got = s.view->shape;
        bool ok = got == want || (o.dims.empty() && s.view->numel() == 1);
        if (!ok)
            throw UserError("output '" + o.name + "': expected shape " + shape_text(want) + " " + spec.axes_text(o.dims) +
                            ", got " + shape_text(got));
    }

    // A kernel with streaming stores or a fixed extent takes only the calls its requirement allows
    // (Kernel::refuses).
    if (std::string no = k.refuses(tensors, p.ext); !no.empty())
        throw UserError(kname + " cannot take this call: " + no + (k.requirement.alignment ? " (it has streaming stores)" : "") +
                        "; Registry::select_for gives such a call a kernel without that requirement");

    // Strided views: their strides along the buffer dimensions; the innermost one must be 1.
    for (Slot &s : p.slots) {
        if (!s.view || is_dense(*s.view)) continue;
        s.strides = buffer_strides(spec, *s.arg, *s.view, p.ext);
        if (!s.strides.empty() && s.strides[0] != 1 && p.ext.extent[s.arg->buffer_axes[0]] > 1)
            throw UserError("tensor '" + s.arg->name + "': strides " + shape_text(s.view->strides) + " for shape " + shape_text(s.view->shape) +
                            ": its innermost axis '" + spec.axes[s.arg->buffer_axes[0]].name + "' has stride " + std::to_string(s.strides[0]) +
                            "; the MLIR kernels take strided inputs whose innermost axis is contiguous (stride 1)");
    }

    // Memory: no output may overlap an input or another output, except an `updates` output that is
    // exactly the buffer of the input it updates. A strided view spans its first to its last element.
    std::vector<Range> ins, outs;
    for (const Slot &s : p.slots) {
        if (!s.view) continue;
        uintptr_t b = (uintptr_t)s.view->data;
        int64_t span = s.view->numel();
        if (!s.strides.empty()) {
            span = 1;
            for (size_t i = 0; i < s.view->shape.size(); ++i) span += (s.view->shape[i] - 1) * s.view->strides[i];
        }
        Range r{&s.arg->name, b, b + (uintptr_t)span * dtype_size(s.view->dtype)};
        (s.arg->role == KernelArg::Output ? outs : ins).push_back(r);
    }
    for (size_t i = 0; i < outs.size(); ++i) {
        const Range &o = outs[i];
        const KernelArg &oa = *k.find_arg(*o.name);
        for (const Range &in : ins) {
            if (!o.overlaps(in)) continue;
            if (!oa.updates.empty() && oa.updates == *in.name) {
                const TensorView &ov = tensors.at(*o.name), &iv = tensors.at(*in.name);
                if (ov.data == iv.data && ov.shape == iv.shape && ov.dtype == iv.dtype) continue;
                throw UserError("output '" + *o.name + "' overlaps input '" + *in.name +
                                "' without being exactly its buffer; an output declared `updates " + *in.name +
                                "` may share memory with it only as the same buffer (same data pointer and shape)");
            }
            throw UserError("output '" + *o.name + "' overlaps input '" + *in.name + "' in memory" +
                            (oa.updates.empty() ? std::string() : "; it may share memory only with '" + oa.updates + "', which it updates"));
        }
        for (size_t j = 0; j < i; ++j)
            if (o.overlaps(outs[j]))
                throw UserError("output '" + *o.name + "' overlaps output '" + *outs[j].name + "' in memory");
    }

    p.chunks = plan_chunks(k, p.ext);
    if (p.chunks.axis >= 0)
        for (const Slot &s : p.slots)
            if (!s.strides.empty())
                throw UserError("tensor '" + s.arg->name + "': a strided tensor in a call of more than 2^31-1 elements per tensor (cut into "
                                "several kernel calls): pass it contiguous");

    if (allocate_scratch) {
        for (Slot &s : p.slots) {
            if (s.view) continue;
            int64_t n = 1;
            for (AxisId ax : s.arg->buffer_axes) n *= p.ext.extent[ax];
            p.scratch.emplace_back(new uint8_t[(size_t)n * dtype_size(s.arg->dtype)]);
            s.data = p.scratch.back().get();
        }
    }
    return p;
}

}  // namespace

halide_type_t halide_type_of(DType t) {
    switch (t) {
    case DType::F32: return halide_type_t(halide_type_float, 32, 1);
    case DType::F16: return halide_type_t(halide_type_float, 16, 1);
    case DType::BF16: return halide_type_t(halide_type_bfloat, 16, 1);
    case DType::F64: return halide_type_t(halide_type_float, 64, 1);
    }
    throw std::logic_error("halide_type_of: unknown dtype");
}

TensorMap run_kernel_f64(const Registry::Kernel &k, const TensorMap &inputs, const Overrides &axes) {
    const NormSpec &spec = *k.spec;
    const AxisExtents ext = bind_axes(spec, inputs, axes);
    struct Free {
        void operator()(uint8_t *p) const { std::free(p); }
    };
    std::map<std::string, std::unique_ptr<uint8_t, Free>> storage;
    std::map<std::string, TensorView> views;
    for (const KernelArg &a : k.args) {
        TensorView v;
        v.dtype = a.dtype;
        std::vector<uint8_t> bytes;
        if (a.role == KernelArg::Output) {
            v.shape = physical_shape(spec, spec.find_output(a.name)->dims, ext);
            bytes.assign((size_t)v.numel() * dtype_size(a.dtype), 0xff);  // NaN poison
        } else {
            auto it = inputs.find(a.name);
            if (it == inputs.end()) throw UserError("run_kernel_f64: missing input '" + a.name + "'");
            v.shape = it->second.shape;
            bytes = encode(it->second.data, a.dtype);
        }
        const size_t n = (bytes.size() + 63) / 64 * 64;
        uint8_t *mem = static_cast<uint8_t *>(std::aligned_alloc(64, std::max<size_t>(n, 64)));
        if (!mem) throw std::bad_alloc();
        std::memcpy(mem, bytes.data(), bytes.size());
        storage[a.name].reset(mem);
        v.data = mem;
        views[a.name] = v;
    }
    run_kernel(k, views, axes);
    TensorMap out;
    for (const KernelArg &a : k.args)
        if (a.role == KernelArg::Output) {
            HostTensor h;
            h.shape = views[a.name].shape;
            h.data = decode(storage[a.name].get(), (size_t)views[a.name].numel(), a.dtype);
            out[a.name] = h;
        }
    return out;
}

void check_kernel_call(const Registry::Kernel &k, const std::map<std::string, TensorView> &tensors, const Overrides &axes) {
    if (!k.spec) throw std::logic_error("check_kernel_call: kernel '" + k.function + "' has no declaration");
    prepare(k, tensors, false, axes);
}

void run_kernel(const Registry::Kernel &k, const std::map<std::string, TensorView> &tensors, const Overrides &axes) {
    if (!k.spec || !k.argv) throw std::logic_error("run_kernel: kernel '" + k.function + "' is not bound (load it with Registry::load)");
    Prepared p = prepare(k, tensors, true, axes);
    // A GPU kernel (Halide's host code launching its device code): the device must be here; the
    // buffers are the caller's host memory, copied to the device by the kernel and back below.
    const bool gpu = k.device != Device::Cpu;
    if (gpu) require_device(k.device);

    install_halide_error_handler();
    take_halide_error();  // drop anything left from an earlier call

    // One halide_buffer_t per argument: dims innermost first over the atomic axes, dense strides;
    // per chunk, the chunk axis (outermost where present) is cut to [begin, begin + len).
    const size_t n = p.slots.size();
    std::vector<std::vector<halide_dimension_t>> dims(n);
    std::vector<halide_buffer_t> bufs(n);
    std::vector<void *> args(n);
    const Chunks &c = p.chunks;
    for (int64_t begin = 0; begin < c.extent; begin += c.step) {
        const int64_t len = std::min(c.step, c.extent - begin);
        for (size_t i = 0; i < n; ++i) {
            const Slot &s = p.slots[i];
            dims[i].clear();
            int64_t stride = 1, offset = 0;
            for (size_t d = 0; d < s.arg->buffer_axes.size(); ++d) {
                const AxisId ax = s.arg->buffer_axes[d];
                int64_t extent = p.ext.extent[ax];
                if (!s.strides.empty()) stride = s.strides[d];  // (strided views are never chunked)
                if (ax == c.axis) {
                    offset = begin * stride;
                    extent = len;
                }
                dims[i].push_back(halide_dimension_t(0, (int32_t)extent, (int32_t)stride));
                stride *= extent;
            }
            halide_buffer_t &b = bufs[i];
            b = halide_buffer_t();
            b.device = 0;
            b.device_interface = nullptr;
            b.host = static_cast<uint8_t *>(s.data) + offset * (int64_t)dtype_size(s.arg->dtype);
            b.flags = 0;
            b.type = halide_type_of(s.arg->dtype);
            if (std::count(k.bits_storage.begin(), k.bits_storage.end(), s.arg->dtype)) b.type = halide_type_t(halide_type_uint, 16, 1);
            // On a GPU, inputs go to the device first; outputs are written there, then copied back.
            if (gpu && s.arg->role != KernelArg::Output) b.flags = halide_buffer_flag_host_dirty;
            b.dimensions = (int32_t)dims[i].size();
            b.dim = dims[i].empty() ? nullptr : dims[i].data();
            b.padding = nullptr;
            args[i] = &b;
        }
        int rc = k.argv(args.data());
        if (gpu) {
            for (size_t i = 0; i < n; ++i)
                if (rc == 0 && p.slots[i].arg->role == KernelArg::Output) rc = halide_copy_to_host(nullptr, &bufs[i]);
            for (size_t i = 0; i < n; ++i) halide_device_free(nullptr, &bufs[i]);
        }
        if (rc != 0) {
            std::string msg = take_halide_error();
            throw std::runtime_error("kernel '" + k.function + "' failed (Halide error " + std::to_string(rc) + ")" +
                                     (c.axis >= 0 ? " on rows [" + std::to_string(begin) + ", " + std::to_string(begin + len) +
                                                        ") of axis '" + k.spec->axes[c.axis].name + "'"
                                                  : std::string()) +
                                     (msg.empty() ? std::string() : ": " + msg));
        }
    }
}

}  // namespace normgen
