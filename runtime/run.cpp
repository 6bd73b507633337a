#include "runtime/run.h"

#include "runtime/errors.h"
#include "runtime/halide_errors.h"
#include "runtime/npy.h"
#include "runtime/shapes.h"
#include "runtime/storage.h"

#include <HalideRuntime.h>

#include <climits>
#include <cstdint>
#include <memory>
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

// One argument of the call as it will be passed: the caller's view, or scratch for an optional
// output of a full kernel that the caller did not ask for.
struct Slot {
    const KernelArg *arg = nullptr;
    const TensorView *view = nullptr;
    void *data = nullptr;
};

struct Prepared {
    AxisExtents ext;
    std::vector<Slot> slots;  // one per kernel argument, in order
    std::vector<std::unique_ptr<uint8_t[]>> scratch;
};

struct Range {
    const std::string *name;
    uintptr_t begin, end;  // bytes [begin, end)
    bool overlaps(const Range &o) const { return begin < o.end && o.begin < end; }
};

Prepared prepare(const Registry::Kernel &k, const std::map<std::string, TensorView> &tensors, bool allocate_scratch) {
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
        if (!v.strides.empty()) {
            std::vector<int64_t> dense = dense_strides(v.shape);
            bool ok = v.strides.size() == v.shape.size();
            for (size_t i = 0; ok && i < dense.size(); ++i) ok = v.shape[i] == 1 || v.strides[i] == dense[i];
            if (!ok)
                throw UserError("tensor '" + a.name + "': strides " + shape_text(v.strides) + " for shape " + shape_text(v.shape) +
                                " are not contiguous row-major (expected " + shape_text(dense) +
                                "); the kernels require contiguous row-major tensors");
        }
        if (v.numel() > INT32_MAX)
            throw UserError("tensor '" + a.name + "' has " + std::to_string(v.numel()) +
                            " elements; a kernel addresses at most 2^31-1 elements per tensor");
        s.view = &v;
        s.data = v.data;
        p.slots.push_back(s);
    }

    // Shapes: the axes are bound from the inputs and parameters as the reference binds them; the
    // outputs must then have exactly their declared shapes.
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const Slot &s : p.slots)
        if (s.view && s.arg->role != KernelArg::Output) shapes[s.arg->name] = s.view->shape;
    p.ext = bind_axes(spec, shapes);
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

    // Memory: no output may overlap an input or another output, except an `updates` output that is
    // exactly the buffer of the input it updates.
    std::vector<Range> ins, outs;
    for (const Slot &s : p.slots) {
        if (!s.view) continue;
        uintptr_t b = (uintptr_t)s.view->data;
        Range r{&s.arg->name, b, b + (uintptr_t)s.view->numel() * dtype_size(s.view->dtype)};
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

void check_kernel_call(const Registry::Kernel &k, const std::map<std::string, TensorView> &tensors) {
    if (!k.spec) throw std::logic_error("check_kernel_call: kernel '" + k.function + "' has no declaration");
    prepare(k, tensors, false);
}

void run_kernel(const Registry::Kernel &k, const std::map<std::string, TensorView> &tensors) {
    if (!k.spec || !k.argv) throw std::logic_error("run_kernel: kernel '" + k.function + "' is not bound (load it with Registry::load)");
    Prepared p = prepare(k, tensors, true);

    // One halide_buffer_t per argument: dims innermost first over the atomic axes, dense strides.
    const size_t n = p.slots.size();
    std::vector<std::vector<halide_dimension_t>> dims(n);
    std::vector<halide_buffer_t> bufs(n);
    std::vector<void *> args(n);
    for (size_t i = 0; i < n; ++i) {
        const Slot &s = p.slots[i];
        int32_t stride = 1;
        for (AxisId ax : s.arg->buffer_axes) {
            int32_t extent = (int32_t)p.ext.extent[ax];
            dims[i].push_back(halide_dimension_t(0, extent, stride));
            stride *= extent;
        }
        halide_buffer_t &b = bufs[i];
        b = halide_buffer_t();
        b.device = 0;
        b.device_interface = nullptr;
        b.host = static_cast<uint8_t *>(s.data);
        b.flags = 0;
        b.type = halide_type_of(s.arg->dtype);
        b.dimensions = (int32_t)dims[i].size();
        b.dim = dims[i].empty() ? nullptr : dims[i].data();
        b.padding = nullptr;
        args[i] = &b;
    }

    install_halide_error_handler();
    take_halide_error();  // drop anything left from an earlier call
    int rc = k.argv(args.data());
    if (rc != 0) {
        std::string msg = take_halide_error();
        throw std::runtime_error("kernel '" + k.function + "' failed (Halide error " + std::to_string(rc) + ")" +
                                 (msg.empty() ? std::string() : ": " + msg));
    }
}

}  // namespace normgen
