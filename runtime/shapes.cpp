#include "runtime/shapes.h"

#include "runtime/errors.h"

#include <cmath>
#include <functional>

namespace normgen {

void validate_overrides(const NormSpec &spec, const Overrides &overrides) {
    for (const auto &[name, v] : overrides) {
        if (spec.find_const(name)) continue;
        AxisId a = spec.find_axis(name);
        if (a >= 0 && !spec.axes[a].is_split()) {
            if (v < 1 || v != std::floor(v)) throw UserError("--set " + name + ": an axis extent must be a positive integer");
            continue;
        }
        throw UserError("--set " + name + ": '" + spec.name + "' has no constant or axis named '" + name + "'");
    }
}

namespace {

// Binds the axes from the inputs' shapes. `check_tensor`, when given, runs on each present input
// before its shape is looked at (the TensorMap overload checks that the data fills the shape), so
// both overloads report the first problem in declaration order.
AxisExtents bind_axes_impl(const NormSpec &spec, const std::map<std::string, std::vector<int64_t>> &shapes,
                           const Overrides &overrides, const std::function<void(const TensorInfo &)> &check_tensor) {
    validate_overrides(spec, overrides);
    AxisExtents e;
    e.extent.assign(spec.axes.size(), -1);
    std::vector<std::string> bound_by(spec.axes.size());
    for (size_t a = 0; a < spec.axes.size(); ++a) {
        auto it = overrides.find(spec.axes[a].name);
        if (it != overrides.end()) e.extent[a] = (int64_t)it->second;
        else if (spec.axes[a].fixed_extent) e.extent[a] = *spec.axes[a].fixed_extent;
        if (e.extent[a] >= 0) bound_by[a] = "its fixed extent";
    }
    auto bind = [&](AxisId a, int64_t n, const TensorInfo &t) {
        if (e.extent[a] < 0) {
            e.extent[a] = n;
            bound_by[a] = "'" + t.name + "'";
        } else if (e.extent[a] != n) {
            throw UserError(std::string(t.role == TensorInfo::Param ? "parameter" : "input") + " '" + t.name + "': axis '" + spec.axes[a].name + "' has extent " + std::to_string(n) +
                            " but " + bound_by[a] + " gives it " + std::to_string(e.extent[a]));
        }
    };
    for (const TensorInfo &t : spec.tensors) {
        auto it = shapes.find(t.name);
        const char *role = t.role == TensorInfo::Param ? "parameter" : "input";
        if (it == shapes.end())
            throw UserError(std::string("missing ") + role + " '" + t.name + "' of shape " + spec.axes_text(t.dims));
        if (check_tensor) check_tensor(t);
        const std::vector<int64_t> &shape = it->second;
        if (t.dims.empty()) {
            int64_t numel = 1;
            for (int64_t n : shape) numel *= n;
            if (numel != 1)
                throw UserError(std::string(role) + " '" + t.name + "' is a scalar; expected one element, got shape " + shape_text(shape));
            continue;
        }
        if (shape.size() != t.dims.size())
            throw UserError(std::string(role) + " '" + t.name + "': expected rank " + std::to_string(t.dims.size()) + " " +
                            spec.axes_text(t.dims) + ", got shape " + shape_text(shape));
        for (size_t i = 0; i < t.dims.size(); ++i) {
            const Axis &ax = spec.axes[t.dims[i]];
            int64_t n = shape[i];
            if (n < 1)
                throw UserError(std::string(role) + " '" + t.name + "': axis '" + ax.name + "' has extent " + std::to_string(n) +
                                "; every extent must be at least 1");
            if (!ax.is_split()) { bind(t.dims[i], n, t); continue; }
            int64_t known = 1;
            AxisId unknown = -1;
            for (AxisId p : ax.parts) {
                if (e.extent[p] >= 0) known *= e.extent[p];
                else unknown = p;
            }
            if (unknown < 0) {
                if (known != n)
                    throw UserError(std::string(role) + " '" + t.name + "': split axis '" + ax.name + "' has extent " + std::to_string(n) +
                                    " but its parts multiply to " + std::to_string(known));
                continue;
            }
            if (n % known != 0)
                throw UserError(std::string(role) + " '" + t.name + "': axis '" + ax.name + "' has extent " + std::to_string(n) +
                                ", which is not divisible by " + std::to_string(known) + " (the fixed parts of its split)");
            bind(unknown, n / known, t);
        }
    }
    return e;
}

}  // namespace

AxisExtents bind_axes(const NormSpec &spec, const std::map<std::string, std::vector<int64_t>> &shapes, const Overrides &overrides) {
    return bind_axes_impl(spec, shapes, overrides, nullptr);
}

AxisExtents bind_axes(const NormSpec &spec, const TensorMap &inputs, const Overrides &overrides) {
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto &[name, h] : inputs) shapes[name] = h.shape;
    return bind_axes_impl(spec, shapes, overrides, [&](const TensorInfo &t) {
        const HostTensor &h = inputs.at(t.name);
        if ((int64_t)h.data.size() != h.numel())
            throw UserError(std::string(t.role == TensorInfo::Param ? "parameter" : "input") + " '" + t.name + "' holds " +
                            std::to_string(h.data.size()) + " values but its shape " + shape_text(h.shape) + " needs " +
                            std::to_string(h.numel()));
    });
}

std::vector<int64_t> physical_shape(const NormSpec &spec, const std::vector<AxisId> &dims, const AxisExtents &ext) {
    std::vector<int64_t> shape;
    for (AxisId d : dims) {
        int64_t n = 1;
        if (spec.axes[d].is_split()) for (AxisId p : spec.axes[d].parts) n *= ext.extent[p];
        else n = ext.extent[d];
        shape.push_back(n);
    }
    return shape;
}

}  // namespace normgen
