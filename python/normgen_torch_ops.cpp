// The PyTorch operators of a kernel library: torch.ops.normgen.<layer> for every forward layer of
// the registry it is linked with, and torch.ops.normgen.<layer>_backward for every backward
// (`normgen grad`, the library built with GRAD ON). One boxed kernel serves them all: the schema
// is written from the declaration, the call is checked and run through the registry
// (runtime/run.h). torch.ops.normgen._layers_<library>() describes the library's layers as JSON for the Python side
// (python/normgen/torch.py: autograd, modules).
//
// Schemas. Forward: the declaration's inputs and parameters in declaration order (an input an
// output `updates` is annotated Tensor(a!): written in place), then keyword arguments: every
// `const` with its declared value and `saved` (also return the optional outputs, the statistics
// the backward reads). Returns Tensor[]: the outputs that update no input, in declaration order
// (optional ones only when saved=True). Backward: the backward declaration's inputs, same rules,
// returning its outputs (d_<name>). The kernel is the registry's for the first input's dtype
// (float32, bfloat16, float16) on this CPU.
//
// Strided tensors: any input or parameter may have any strides (a head sliced out of a fused QKV
// projection, a transpose, a parameter broadcast by expand()); the result is that of its contiguous
// copy. When every non-contiguous argument has a contiguous innermost axis (stride 1: a slice of
// heads or rows), the call goes to the layer's MLIR kernel, whose strided memrefs take the strides
// as they are (runtime/run.h), not to the tuned Halide kernel, whose buffers are declared dense (so
// that fused neighbouring axes are one contiguous range). Otherwise (a transpose, a broadcast
// innermost axis, no MLIR kernel) a non-contiguous argument is copied into a contiguous temporary
// before the call (Tensor::contiguous(): one extra read and write of that tensor). An input an
// output updates in place (BatchNorm's running statistics) is copied when strided, and its new
// values copied back after the call. bench/torch_ops_bench.py measures both routes. Outputs are
// fresh contiguous tensors, as PyTorch's norm operators return them.
//
// Errors, before anything is written: a tensor of another dtype than the kernel's (TypeError), on
// another device than the CPU (RuntimeError), of the wrong shape (RuntimeError, from the registry's
// checks, naming the tensor and the expected shape); a const given another value than the kernel
// was compiled with (ValueError: the constants are part of the kernel).
#include "runtime/aten_dtype.h"
#include "runtime/kernel_table.h"
#include "runtime/registry.h"
#include "runtime/run.h"
#include "runtime/shapes.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <set>
#include <sstream>
#include <string>

namespace {

using normgen::DType;
using normgen::NormSpec;
using normgen::Registry;

const Registry &registry() {
    static const Registry reg = Registry::load(normgen::default_manifest_path(), normgen::kKernelTable, normgen::kKernelTableSize);
    return reg;
}

// A const as the schema's default: as written in the declaration (1e-5), as a float literal.
std::string const_text(const normgen::ConstInfo &c) {
    std::ostringstream o;
    o.precision(17);
    o << c.value;
    std::string s = c.spelling.empty() ? o.str() : c.spelling;
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
}

// One operator: a layer (forward, or backward of `grad_of`).
struct Op {
    std::string layer, op;
    bool backward = false;
    std::shared_ptr<const NormSpec> spec;
    mutable std::map<std::pair<DType, bool>, const Registry::Kernel *> kernels;  // select()'s choice, cached
    // Dispatch by shape (Registry::select_for) when the library has tuned kernels of this layer:
    // the choice per (dtype, variant, input shapes), cached (at most 256 shapes, then cleared).
    mutable std::map<std::tuple<DType, bool, std::vector<std::vector<int64_t>>>, const Registry::Kernel *> by_shape;
    mutable int tuned = -1;  // whether any kernel of the layer has tuned classes (-1: not looked yet)
};

std::map<std::string, Op> &ops() {
    static std::map<std::string, Op> m;
    return m;
}

std::string schema_of(const Op &o) {
    const NormSpec &s = *o.spec;
    std::string sig = o.op + "(";
    char alias = 'a';
    for (size_t i = 0; i < s.tensors.size(); ++i) {
        bool updated = false;
        for (const normgen::OutputInfo &out : s.outputs) updated = updated || out.updates == s.tensors[i].name;
        sig += (i ? ", " : "") + std::string(updated ? std::string("Tensor(") + alias++ + "!) " : "Tensor ") + s.tensors[i].name;
    }
    std::vector<std::string> keywords;
    for (const normgen::ConstInfo &c : s.consts) keywords.push_back("float " + c.name + "=" + const_text(c));
    if (!o.backward) keywords.push_back("bool saved=False");
    if (!keywords.empty()) sig += s.tensors.empty() ? "*" : ", *";
    for (const std::string &k : keywords) sig += ", " + k;
    return sig + ") -> Tensor[]";
}

DType dtype_of(const at::Tensor &t, const std::string &what) {
    switch (t.scalar_type()) {
    case at::kFloat: return DType::F32;
    case at::kBFloat16: return DType::BF16;
    case at::kHalf: return DType::F16;
    case at::kDouble: return DType::F64;
    default: TORCH_CHECK_TYPE(false, what, " has dtype ", t.scalar_type(), "; normgen kernels take float32, bfloat16 or float16");
    }
    return DType::F32;
}

// A checked call, ready to run: the kernel, the views of every argument, the new outputs, the
// contiguous copies of strided arguments (alive until the call is done) and, per input an output
// updates in place whose copy the kernel writes, the caller's tensor to copy the new values into.
struct Call {
    const Registry::Kernel *k = nullptr;
    std::map<std::string, normgen::TensorView> views;
    std::vector<at::Tensor> result;
    std::vector<at::Tensor> copies;
    std::vector<std::pair<at::Tensor, at::Tensor>> write_back;  // (caller's tensor, the copy written)
};

// `args`: the schema's arguments (tensors, consts, saved).
Call prepare(const Op &o, const std::vector<c10::IValue> &args) {
    const NormSpec &spec = *o.spec;
    const std::string who = "normgen::" + o.op;

    // The kernel: the first input's dtype, with or without the optional outputs.
    TORCH_CHECK(!spec.tensors.empty(), who, ": the layer has no input tensors");
    const bool saved = !o.backward && args.back().toBool();
    std::vector<at::Tensor> tensors;
    for (size_t i = 0; i < spec.tensors.size(); ++i) {
        const std::string what = who + ": tensor '" + spec.tensors[i].name + "'";
        TORCH_CHECK(args[i].isTensor() && args[i].toTensor().defined(), what, " is missing");
        tensors.push_back(args[i].toTensor());
    }
    const DType dtype = dtype_of(tensors[0], who + ": tensor '" + spec.tensors[0].name + "'");
    const Registry::Kernel *k = nullptr;
    {
        static std::mutex mu;  // calls may come from several threads
        std::lock_guard<std::mutex> lock(mu);
        const Registry::Kernel *&cached = o.kernels[{dtype, saved}];  // chosen once per dtype and variant
        if (!cached) cached = o.backward ? registry().select_grad(o.layer, dtype) : registry().select(o.layer, dtype, saved);
        k = cached;
    }
    TORCH_CHECK_TYPE(k, who, ": no ", normgen::dtype_name(dtype), " kernel for this CPU in ", registry().path(), " (the declaration allows ",
                     [&] {
                         std::string s;
                         for (DType t : spec.storage_of(spec.tensors[0].name)) s += (s.empty() ? "" : ", ") + std::string(normgen::dtype_name(t));
                         return s;
                     }(),
                     " for '", spec.tensors[0].name, "')");
    // The constants are compiled into the kernel.
    for (size_t c = 0; c < spec.consts.size(); ++c) {
        const double v = args[spec.tensors.size() + c].toDouble(), want = spec.consts[c].value;
        TORCH_CHECK_VALUE(v == want || std::fabs(v - want) <= 1e-12 * std::fabs(want), who, ": ", spec.consts[c].name, "=", v,
                          ", but the kernel is compiled with ", spec.consts[c].name, "=", const_text(spec.consts[c]),
                          " (a const is part of the declaration: declare a variant with the value you want)");
    }

    // Strided arguments whose innermost axis is contiguous go to the MLIR kernel as they are (its
    // memrefs are strided); any other non-contiguous argument is copied.
    auto updated = [&](const std::string &name) {
        for (const normgen::OutputInfo &out : spec.outputs)
            if (out.updates == name) return true;
        return false;
    };
    bool strided = false, passable = true;
    for (size_t i = 0; i < spec.tensors.size(); ++i) {
        const at::Tensor &t = tensors[i];
        if (t.is_contiguous() || updated(spec.tensors[i].name)) continue;
        strided = true;
        passable = passable && t.dim() > 0 && (t.stride(-1) == 1 || t.size(-1) == 1);
        for (int64_t s : t.strides()) passable = passable && s >= 0 && s <= INT32_MAX;
    }
    const Registry::Kernel *strided_kernel = nullptr;
    if (strided && passable)
        strided_kernel = o.backward ? registry().select_grad(o.layer, dtype, std::nullopt, normgen::Backend::Mlir)
                                    : registry().select(o.layer, dtype, saved, std::nullopt, normgen::Backend::Mlir);
    if (strided_kernel) k = strided_kernel;

    std::map<std::string, std::vector<int64_t>> shapes;
    std::map<std::string, normgen::TensorView> views;
    std::vector<at::Tensor> copies;
    std::vector<std::pair<at::Tensor, at::Tensor>> write_back;
    for (size_t i = 0; i < spec.tensors.size(); ++i) {
        const std::string &tn = spec.tensors[i].name;
        const normgen::KernelArg *a = nullptr;
        for (const normgen::KernelArg &ka : k->args)
            if (ka.name == tn) a = &ka;
        TORCH_CHECK(a, who, ": the kernel has no argument '", tn, "'");
        TORCH_CHECK(tensors[i].device().is_cpu(), who, ": tensor '", tn, "' is on ", tensors[i].device(), "; the kernels run on the CPU");
        TORCH_CHECK_TYPE(tensors[i].scalar_type() == normgen::aten_type(a->dtype), who, ": tensor '", tn, "' has dtype ", tensors[i].scalar_type(),
                         ", expected ", normgen::aten_type(a->dtype), " (the ", normgen::dtype_name(dtype), " kernel)");
        std::vector<int64_t> strides;
        if (!tensors[i].is_contiguous() && strided_kernel && !updated(tn)) {
            strides = tensors[i].strides().vec();
        } else if (!tensors[i].is_contiguous()) {
            // A contiguous copy (an updated input's new values are copied back after the call).
            at::Tensor dense = tensors[i].contiguous();
            if (updated(tn)) write_back.emplace_back(tensors[i], dense);
            copies.push_back(dense);
            tensors[i] = dense;
        }
        const at::Tensor &t = tensors[i];
        shapes[tn] = t.sizes().vec();
        views[tn] = normgen::TensorView{t.data_ptr(), a->dtype, t.sizes().vec(), strides};
    }
    normgen::AxisExtents ext;
    try {
        ext = normgen::bind_axes(spec, shapes);
    } catch (const std::exception &e) {
        TORCH_CHECK(false, who, ": ", e.what());
    }
    std::vector<at::Tensor> result;
    for (const normgen::KernelArg &a : k->args) {
        if (a.role != normgen::KernelArg::Output) continue;
        const normgen::OutputInfo *out = spec.find_output(a.name);
        if (!a.updates.empty()) {
            // Written in place into the input it updates.
            const at::Tensor &t = tensors[spec.find_tensor(a.updates) - spec.tensors.data()];
            TORCH_CHECK_TYPE(t.scalar_type() == normgen::aten_type(a.dtype), who, ": tensor '", a.updates, "' (updated in place by '", a.name,
                             "') has dtype ", t.scalar_type(), ", expected ", normgen::aten_type(a.dtype));
            views[a.name] = normgen::TensorView{t.data_ptr(), a.dtype, t.sizes().vec(), {}};
            continue;
        }
        at::Tensor t = at::empty(normgen::physical_shape(spec, out->dims, ext), at::TensorOptions().dtype(normgen::aten_type(a.dtype)));
        views[a.name] = normgen::TensorView{t.data_ptr(), a.dtype, t.sizes().vec(), {}};
        result.push_back(t);
    }
    // The kernel tuning chose for these shapes on this CPU (the default when none): the outputs
    // above have the same storage types in every kernel of the type and variant.
    {
        static std::mutex mu;
        std::lock_guard<std::mutex> lock(mu);
        const std::string layer = o.backward ? o.layer + "_grad" : o.layer;
        if (o.tuned < 0) {
            o.tuned = 0;
            for (const Registry::Kernel *x : registry().kernels())
                if (x->layer == layer && !x->tuned.empty()) o.tuned = 1;
        }
        if (o.tuned && !strided_kernel) {
            std::vector<std::vector<int64_t>> in_shapes;
            for (const at::Tensor &t : tensors) in_shapes.push_back(t.sizes().vec());
            auto key = std::make_tuple(dtype, saved, in_shapes);
            auto it = o.by_shape.find(key);
            const Registry::Kernel *chosen = it == o.by_shape.end() ? nullptr : it->second;
            if (!chosen || !chosen->refuses(views, ext).empty()) {
                try {
                    chosen = registry().select_for(layer, dtype, views, saved).kernel;
                } catch (const std::exception &e) {
                    TORCH_CHECK(false, who, ": ", e.what());
                }
                if (o.by_shape.size() >= 256) o.by_shape.clear();
                if (chosen) o.by_shape[key] = chosen;
            }
            if (chosen && (!o.backward || chosen->grad_of == o.layer)) k = chosen;
        }
    }
    // run_kernel checks the call before it writes
    return Call{k, std::move(views), std::move(result), std::move(copies), std::move(write_back)};
}

void run(const Op &o, const Call &c) {
    try {
        normgen::run_kernel(*c.k, c.views);
    } catch (const std::exception &e) {
        TORCH_CHECK(false, "normgen::", o.op, ": ", e.what());
    }
    for (const auto &[caller, written] : c.write_back) caller.copy_(written);
}

void run_op(const c10::OperatorHandle &handle, torch::jit::Stack *stack) {
    const c10::FunctionSchema &schema = handle.schema();
    const Op &o = ops().at(schema.name().substr(schema.name().find("::") + 2));
    const std::vector<c10::IValue> args = torch::jit::pop(*stack, schema.arguments().size());
    Call c = prepare(o, args);
    run(o, c);
    torch::jit::push(*stack, c10::IValue(c10::List<at::Tensor>(c.result)));
}

// _kernel_seconds_<library>(str op, Tensor[] tensors, bool saved, int reps) -> float: the median
// over 5 rounds of the mean seconds of `reps` calls of run_kernel alone (the C++ API, no
// dispatcher, no allocation) on one prepared call: the benchmark's measure of the binding's cost.
void kernel_seconds_op(const c10::OperatorHandle &, torch::jit::Stack *stack) {
    std::vector<c10::IValue> in = torch::jit::pop(*stack, 4);
    const std::string name = in[0].toStringRef();
    auto it = ops().find(name);
    TORCH_CHECK(it != ops().end(), "normgen: no operator '", name, "' in this library");
    const Op &o = it->second;
    std::vector<c10::IValue> args;
    for (const at::Tensor &t : in[1].toTensorVector()) args.emplace_back(t);
    TORCH_CHECK(args.size() == o.spec->tensors.size(), "normgen::", name, " takes ", o.spec->tensors.size(), " tensors");
    for (const normgen::ConstInfo &c : o.spec->consts) args.emplace_back(c.value);
    if (!o.backward) args.emplace_back(in[2].toBool());
    const int64_t reps = std::max<int64_t>(1, in[3].toInt());
    Call c = prepare(o, args);
    run(o, c);  // warm
    std::vector<double> rounds;
    for (int r = 0; r < 5; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < reps; ++i) run(o, c);
        rounds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / (double)reps);
    }
    std::sort(rounds.begin(), rounds.end());
    torch::jit::push(*stack, c10::IValue(rounds[2]));
}

nlohmann::json describe(const NormSpec &spec) {
    nlohmann::json j;
    j["name"] = spec.name;
    nlohmann::json tensors = nlohmann::json::array(), outputs = nlohmann::json::array(), consts = nlohmann::json::object(),
                   axes = nlohmann::json::object();
    for (const normgen::TensorInfo &t : spec.tensors) {
        nlohmann::json dims = nlohmann::json::array();
        for (normgen::AxisId a : t.dims) dims.push_back(spec.axes[a].name);
        // Whether its storage type is the call's (a storage group with more than one type) or fixed.
        const bool follows = spec.storage_of(t.name).size() > 1;
        tensors.push_back({{"name", t.name}, {"role", t.role == normgen::TensorInfo::Param ? "param" : "input"}, {"dims", dims},
                           {"follows_dtype", follows}});
    }
    for (const normgen::OutputInfo &o : spec.outputs) {
        nlohmann::json dims = nlohmann::json::array();
        for (normgen::AxisId a : o.dims) dims.push_back(spec.axes[a].name);
        outputs.push_back({{"name", o.name}, {"dims", dims}, {"optional", o.optional}, {"updates", o.updates}});
    }
    for (const normgen::ConstInfo &c : spec.consts) consts[c.name] = c.value;
    for (const normgen::Axis &a : spec.axes) {
        nlohmann::json parts = nlohmann::json::array();
        for (normgen::AxisId p : a.parts) parts.push_back(spec.axes[p].name);
        axes[a.name] = {{"parts", parts}, {"fixed", a.fixed_extent ? nlohmann::json(*a.fixed_extent) : nlohmann::json()}};
    }
    j["tensors"] = tensors;
    j["outputs"] = outputs;
    j["consts"] = consts;
    j["axes"] = axes;
    return j;
}

std::string layers_json() {
    nlohmann::json layers = nlohmann::json::object();
    for (const auto &[name, o] : ops()) {
        if (o.backward) continue;
        nlohmann::json l = describe(*o.spec);
        l["op"] = o.op;
        std::set<std::string> dtypes;
        for (const Registry::Kernel *k : registry().kernels())
            if (k->layer == o.layer && k->device == normgen::Device::Cpu && k->runs_here()) dtypes.insert(normgen::dtype_name(k->dtype));
        l["dtypes"] = dtypes;
        auto g = ops().find(o.layer + "_backward");
        if (g != ops().end()) {
            nlohmann::json b = describe(*g->second.spec);
            b["op"] = g->second.op;
            l["backward"] = b;
        }
        layers[o.layer] = l;
    }
    return layers.dump();
}

void layers_op(const c10::OperatorHandle &, torch::jit::Stack *stack) { torch::jit::push(*stack, c10::IValue(layers_json())); }

}  // namespace

#ifndef NORMGEN_TORCH_LIBRARY
#define NORMGEN_TORCH_LIBRARY "normgen_torch"
#endif

// A fragment: several libraries (the catalog's, a project's) may add to torch.ops.normgen in one
// process; an operator another library already registered keeps that library's.
TORCH_LIBRARY_FRAGMENT(normgen, m) {
    const Registry &reg = registry();
    for (const Registry::Kernel *k : reg.kernels()) {
        if (k->device != normgen::Device::Cpu) continue;
        Op o;
        o.backward = !k->grad_of.empty();
        o.layer = o.backward ? k->grad_of : k->layer;
        o.op = o.backward ? k->grad_of + "_backward" : k->layer;
        o.spec = k->spec;
        if (ops().count(o.op) || c10::Dispatcher::singleton().findSchema({"normgen::" + o.op, ""})) continue;
        ops()[o.op] = o;
        m.def(schema_of(o).c_str(), torch::CppFunction::makeFromBoxedFunction<&run_op>());
    }
    // This library's layers, for the Python side: normgen::_layers_<library>() (lib<library>.so).
    m.def((std::string("_layers_") + NORMGEN_TORCH_LIBRARY + "() -> str").c_str(), torch::CppFunction::makeFromBoxedFunction<&layers_op>());
    m.def((std::string("_kernel_seconds_") + NORMGEN_TORCH_LIBRARY + "(str op, Tensor[] tensors, bool saved, int reps) -> float").c_str(),
          torch::CppFunction::makeFromBoxedFunction<&kernel_seconds_op>());
}
