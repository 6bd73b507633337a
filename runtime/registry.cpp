#include "runtime/registry.h"

#include "dsl/checker.h"
#include "dsl/diagnostics.h"
#include "runtime/errors.h"
#include "runtime/manifest_schema.h"
#include "codegen/common/kernel_plan.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unordered_map>

namespace normgen {

using nlohmann::json;

const char *role_name(KernelArg::Role r) {
    switch (r) {
    case KernelArg::Input: return "input";
    case KernelArg::Param: return "param";
    case KernelArg::Output: return "output";
    }
    return "?";
}

// __builtin_cpu_supports takes a string literal, so each name the manifest may carry is spelled out.
bool cpu_supports(const std::string &f) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
#define NORMGEN_FEATURE(name) \
    if (f == name) return __builtin_cpu_supports(name) != 0;
    NORMGEN_FEATURE("sse2")
    NORMGEN_FEATURE("sse3")
    NORMGEN_FEATURE("ssse3")
    NORMGEN_FEATURE("sse4.1")
    NORMGEN_FEATURE("sse4.2")
    NORMGEN_FEATURE("popcnt")
    NORMGEN_FEATURE("avx")
    NORMGEN_FEATURE("avx2")
    NORMGEN_FEATURE("fma")
    NORMGEN_FEATURE("bmi")
    NORMGEN_FEATURE("bmi2")
    NORMGEN_FEATURE("avx512f")
    NORMGEN_FEATURE("avx512cd")
    NORMGEN_FEATURE("avx512bw")
    NORMGEN_FEATURE("avx512dq")
    NORMGEN_FEATURE("avx512vl")
    NORMGEN_FEATURE("avx512ifma")
    NORMGEN_FEATURE("avx512vbmi")
    NORMGEN_FEATURE("avx512vbmi2")
    NORMGEN_FEATURE("avx512vnni")
    NORMGEN_FEATURE("avx512bitalg")
    NORMGEN_FEATURE("avx512vpopcntdq")
    NORMGEN_FEATURE("avx512bf16")
#if !defined(__clang__) || __clang_major__ >= 16
    NORMGEN_FEATURE("avx512fp16")
#else
    // Clang before 16 has no such name (the fuzzing and sanitizer builds): CPUID leaf 7, EDX bit 23.
    if (f == "avx512fp16") {
        unsigned a = 7, b = 0, c = 0, d = 0;
        __asm__ __volatile__("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
        return ((d >> 23) & 1) && __builtin_cpu_supports("avx512f");
    }
#endif
#undef NORMGEN_FEATURE
    // F16C has no __builtin_cpu_supports name in GCC 12: CPUID leaf 1, ECX bit 29.
    if (f == "f16c") {
        unsigned a = 1, b = 0, c = 0, d = 0;
        __asm__ __volatile__("cpuid" : "+a"(a), "=b"(b), "=c"(c), "=d"(d) : "c"(0));
        return ((c >> 29) & 1) && __builtin_cpu_supports("avx");  // usable only where the OS enables AVX state
    }
#endif
    return false;
}

std::optional<Isa> cpu_isa() {
    auto all = [](std::initializer_list<const char *> fs) {
        for (const char *f : fs)
            if (!cpu_supports(f)) return false;
        return true;
    };
    if (all({"avx2", "fma", "f16c", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})) return Isa::Avx512;
    if (all({"avx2", "fma", "f16c"})) return Isa::Avx2;
    return std::nullopt;
}

std::string cpu_isa_name() {
    std::optional<Isa> i = cpu_isa();
    return i ? isa_name(*i) : "none";
}

std::string manifest_path_from_env(const std::string &compiled_in) {
    const char *env = std::getenv("NORMGEN_MANIFEST");
    if (env && *env) return env;
    return compiled_in;
}

const KernelArg *Registry::Kernel::find_arg(const std::string &name) const {
    for (const KernelArg &a : args)
        if (a.name == name) return &a;
    return nullptr;
}

StorageMap Registry::Kernel::storage() const {
    StorageMap m;
    for (const KernelArg &a : args) m[a.name] = a.dtype;
    return m;
}

bool Registry::Kernel::runs_here() const {
    if (device != Device::Cpu) return false;
    for (const std::string &f : cpu_features)
        if (!cpu_supports(f)) return false;
    return true;
}

namespace {

std::string join(const std::vector<std::string> &v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
    return s + "]";
}

// Reads one entry's fields, with errors that say which kernel and which field.
class EntryReader {
public:
    EntryReader(const std::string &path, const json &e, size_t index) : path_(path), e_(e), where_("kernel #" + std::to_string(index)) {
        if (!e.is_object()) fail("is not a JSON object");
    }
    void named(const std::string &function) { where_ = "kernel '" + function + "'"; }

    [[noreturn]] void fail(const std::string &what) const {
        throw UserError("manifest '" + path_ + "': " + where_ + ": " + what);
    }

    const json &field(const json &obj, const char *key, const std::string &ctx = "") const {
        auto it = obj.find(key);
        if (it == obj.end()) fail(ctx + "missing field '" + key + "'");
        return *it;
    }
    std::string str(const json &obj, const char *key, const std::string &ctx = "") const {
        const json &v = field(obj, key, ctx);
        if (!v.is_string()) fail(ctx + "field '" + key + "' is not a string");
        return v.get<std::string>();
    }
    bool boolean(const json &obj, const char *key, const std::string &ctx = "") const {
        const json &v = field(obj, key, ctx);
        if (!v.is_boolean()) fail(ctx + "field '" + key + "' is not true or false");
        return v.get<bool>();
    }
    std::vector<std::string> strings(const json &obj, const char *key, const std::string &ctx = "") const {
        const json &v = field(obj, key, ctx);
        if (!v.is_array()) fail(ctx + "field '" + key + "' is not an array");
        std::vector<std::string> out;
        for (const json &s : v) {
            if (!s.is_string()) fail(ctx + "field '" + key + "' holds a non-string");
            out.push_back(s.get<std::string>());
        }
        return out;
    }
    DType dtype(const json &obj, const char *key, const std::string &ctx = "") const {
        std::string s = str(obj, key, ctx);
        auto t = parse_dtype(s);
        if (!t || *t == DType::F64) fail(ctx + "field '" + key + "': unknown storage type '" + s + "' (expected f32, bf16 or f16)");
        return *t;
    }

    const json &entry() const { return e_; }

private:
    const std::string &path_;
    const json &e_;
    std::string where_;
};

// Checks the entry's args against the kernel ABI of its declaration's plan (codegen/common/
// kernel_plan.h): names, roles and order, declared dims, buffer dims, optional and updates flags,
// storage types the declaration allows.
void check_args(const EntryReader &r, const NormSpec &spec, Registry::Kernel &k) {
    k.plan = std::make_shared<const KernelPlan>(make_plan(spec, k.dtype, k.variant));
    const KernelPlan &plan = *k.plan;
    std::vector<std::string> want_names, got_names;
    for (const PlanArg &x : plan.args) want_names.push_back(x.name);
    for (const KernelArg &a : k.args) got_names.push_back(a.name);
    if (want_names != got_names)
        r.fail("its args " + join(got_names) + " do not match the " + variant_name(k.variant) + " kernel ABI of its declaration, " + join(want_names));

    for (size_t i = 0; i < plan.args.size(); ++i) {
        const PlanArg &x = plan.args[i];
        KernelArg &a = k.args[i];
        std::string ctx = "arg '" + a.name + "': ";
        if ((int)a.role != (int)x.role) r.fail(ctx + "role " + role_name(a.role) + ", but the declaration makes it an " + arg_role_name(x.role));
        std::vector<std::string> dims;
        for (AxisId d : x.dims) dims.push_back(spec.axes[d].name);
        if (a.dims != dims) r.fail(ctx + "dims " + join(a.dims) + ", but it is declared " + join(dims));
        std::vector<std::string> bdims;
        for (auto it = x.atoms.rbegin(); it != x.atoms.rend(); ++it) bdims.push_back(spec.axes[*it].name);
        if (a.buffer_dims != bdims)
            r.fail(ctx + "buffer_dims " + join(a.buffer_dims) + ", but its atomic axes innermost first are " + join(bdims));
        a.buffer_axes.assign(x.atoms.rbegin(), x.atoms.rend());
        if (a.optional != x.optional) r.fail(ctx + (a.optional ? "marked optional, but it is required" : "not marked optional, but it is optional"));
        if (a.updates != x.updates) r.fail(ctx + "updates '" + a.updates + "', but the declaration says '" + x.updates + "'");
        std::vector<DType> allowed = spec.storage_of(a.name);
        if (std::find(allowed.begin(), allowed.end(), a.dtype) == allowed.end())
            r.fail(ctx + "storage type " + dtype_name(a.dtype) + " is not one its declaration allows");
    }
}

}  // namespace

Registry Registry::load(const std::string &path, const KernelEntry *table, size_t n) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw UserError("cannot read the kernel manifest '" + path +
                        "' (set NORMGEN_MANIFEST to the generated/manifest.json of the build that made the kernels)");
    json doc;
    try {
        doc = json::parse(in);
    } catch (const json::exception &e) {
        throw UserError("manifest '" + path + "' is not valid JSON: " + e.what());
    }
    if (!doc.is_object() || !doc.contains("normgen_manifest"))
        throw UserError("manifest '" + path + "' is not a normgen manifest (no \"normgen_manifest\" field)");
    if (doc["normgen_manifest"] != 1)
        throw UserError("manifest '" + path + "': unsupported format version " + doc["normgen_manifest"].dump() + " (this runtime reads 1)");
    if (!doc.contains("kernels") || !doc["kernels"].is_array())
        throw UserError("manifest '" + path + "': \"kernels\" is missing or not an array");

    std::unordered_map<std::string, int (*)(void **)> entries;
    for (size_t i = 0; i < n; ++i)
        if (table[i].function) entries[table[i].function] = table[i].argv;

    Registry reg;
    reg.path_ = path;
    std::map<std::string, std::string> norm_of_layer;
    const json &list = doc["kernels"];
    for (size_t i = 0; i < list.size(); ++i) {
        EntryReader r(path, list[i], i);
        const json &e = list[i];
        auto k = std::make_unique<Kernel>();
        k->function = r.str(e, "function");
        r.named(k->function);
        if (reg.find(k->function)) r.fail("listed twice");
        k->layer = r.str(e, "layer");
        k->source = r.str(e, "source");
        k->norm = r.str(e, "norm");
        k->dtype = r.dtype(e, "dtype");
        k->target = r.str(e, "target");
        const std::string isa = r.str(e, "isa");
        k->cpu_features = r.strings(e, "cpu_features");
        const std::string variant = r.str(e, "variant");
        const std::string backend = e.contains("backend") ? r.str(e, "backend") : "halide";
        const std::string device = e.contains("device") ? r.str(e, "device") : "cpu";
        // The manifest's vocabulary (runtime/manifest_schema.h), read into its enums.
        if (auto b = parse_backend(backend)) k->backend = *b;
        else r.fail("backend '" + backend + "' (expected halide or mlir)");
        if (auto d = parse_device(device)) k->device = *d;
        else r.fail("device '" + device + "' (expected cpu, cuda or opencl)");
        if (auto v = parse_variant(variant)) k->variant = *v;
        else r.fail("variant '" + variant + "' (expected core or full)");
        if (auto i = parse_isa(isa)) k->isa = *i;
        else r.fail("isa '" + isa + "' (expected avx2, avx512 or sm_90)");
        if (device_of(k->isa) != k->device) r.fail("isa '" + isa + "' is not an isa of device '" + device + "'");
        // The schedule record (codegen/common/schedule_record.h) as JSON, and what it did in words.
        if (e.contains("schedule")) {
            if (!e["schedule"].is_object()) r.fail("field 'schedule' is not a schedule record (a JSON object)");
            k->schedule_record = e["schedule"].dump();
        }
        k->schedule = e.contains("schedule_text") ? r.str(e, "schedule_text") : "";
        k->library = e.contains("library") ? r.str(e, "library") : "";
        k->header = e.contains("header") ? r.str(e, "header") : "";
        k->grad_of = e.contains("grad_of") ? r.str(e, "grad_of") : "";
        if (e.contains("requires")) {  // what a call must give (Kernel::Requirement)
            const json &q = e["requires"];
            if (!q.is_object()) r.fail("field 'requires' is not an object");
            if (q.contains("alignment")) {
                const json &al = q["alignment"];
                if (!al.is_number_integer() || al.get<int>() < 1 || al.get<int>() > 4096) r.fail("requires: 'alignment' must be 1..4096 bytes");
                k->requirement.alignment = al.get<int>();
                k->requirement.outputs = r.strings(q, "outputs", "requires: ");
            }
            auto one_axis = [&](const char *key, std::string &axis, int64_t &value) {
                if (!q.contains(key)) return;
                const json &m = q[key];
                if (!m.is_object() || m.size() != 1 || !m.begin().value().is_number_integer() || m.begin().value().get<int64_t>() < 1)
                    r.fail(std::string("requires: '") + key + "' must be {\"axis\": N}");
                axis = m.begin().key();
                value = m.begin().value().get<int64_t>();
            };
            one_axis("multiple_of", k->requirement.axis, k->requirement.multiple);
            one_axis("extent", k->requirement.fixed_axis, k->requirement.fixed_extent);
        }
        k->tuned_only = e.contains("tuned_only") && r.boolean(e, "tuned_only");
        if (e.contains("tuned")) {  // the shape classes tuning chose this kernel for
            const json &t = e["tuned"];
            if (!t.is_array()) r.fail("field 'tuned' is not an array");
            for (const json &w : t) {
                try {
                    Kernel::Tuned x;
                    x.shape = ShapeClass::from_json(w.at("shape"));
                    x.cpu = CpuFingerprint::from_json(w.at("cpu"));
                    x.sizes = w.value("sizes", std::map<std::string, int64_t>{});
                    x.gbps = w.value("gbps", 0.0);
                    x.frac = w.value("frac", 0.0);
                    x.vs_fallback = w.value("vs_fallback", 0.0);
                    x.limit = w.value("limit", "");
                    k->tuned.push_back(std::move(x));
                } catch (const json::exception &ex) {
                    r.fail(std::string("a 'tuned' entry: ") + ex.what());
                } catch (const UserError &ex) {
                    r.fail(std::string("a 'tuned' entry: ") + ex.what());
                }
            }
        }
        const json &args = r.field(e, "args");
        if (!args.is_array()) r.fail("field 'args' is not an array");
        for (size_t j = 0; j < args.size(); ++j) {
            const json &a = args[j];
            std::string ctx = "arg #" + std::to_string(j) + ": ";
            if (!a.is_object()) r.fail(ctx + "is not a JSON object");
            KernelArg arg;
            arg.name = r.str(a, "name", ctx);
            ctx = "arg '" + arg.name + "': ";
            std::string role = r.str(a, "role", ctx);
            if (role == "input") arg.role = KernelArg::Input;
            else if (role == "param") arg.role = KernelArg::Param;
            else if (role == "output") arg.role = KernelArg::Output;
            else r.fail(ctx + "role '" + role + "' (expected input, param or output)");
            arg.dtype = r.dtype(a, "dtype", ctx);
            arg.dims = r.strings(a, "dims", ctx);
            arg.buffer_dims = r.strings(a, "buffer_dims", ctx);
            arg.optional = a.contains("optional") ? r.boolean(a, "optional", ctx) : false;
            arg.updates = a.contains("updates") ? r.str(a, "updates", ctx) : "";
            k->args.push_back(std::move(arg));
        }

        // The declaration, parsed once per layer.
        auto known = reg.specs_.find(k->layer);
        if (known == reg.specs_.end()) {
            std::shared_ptr<const NormSpec> spec;
            try {
                spec = std::make_shared<const NormSpec>(load_norm_text(k->source, k->norm));
            } catch (const DiagnosticError &d) {
                r.fail("its declaration does not check:\n" + d.render());
            } catch (const UserError &u) {
                r.fail(std::string("its declaration does not load: ") + u.what());
            }
            if (spec->name != k->layer) r.fail("layer '" + k->layer + "', but its declaration is named '" + spec->name + "'");
            known = reg.specs_.emplace(k->layer, spec).first;
            norm_of_layer[k->layer] = k->norm;
        } else if (norm_of_layer[k->layer] != k->norm) {
            r.fail("its declaration differs from that of another kernel of layer '" + k->layer + "'");
        }
        k->spec = known->second;
        check_args(r, *k->spec, *k);

        if (e.contains("bits_storage"))
            for (const std::string &t : r.strings(e, "bits_storage")) {
                auto d = parse_dtype(t);
                if (!d || (*d != DType::F16 && *d != DType::BF16)) r.fail("bits_storage: '" + t + "' is not f16 or bf16");
                k->bits_storage.push_back(*d);
            }
        if (k->backend == Backend::Halide && e.contains("ptxas")) {  // a Halide CUDA kernel's PTX, as ptxas saw it
            const json &p = e["ptxas"];
            k->cuda.ptx = e.value("ptx", "");
            k->cuda.registers = p.value("registers", 0);
            k->cuda.spill_stores = p.value("spill_stores", 0);
            k->cuda.spill_loads = p.value("spill_loads", 0);
        }
        if (k->device == Device::Cuda && k->backend == Backend::Mlir) {  // run by the CUDA launcher (runtime/cuda_launcher.h), not the table
            k->cuda.image = r.str(e, "cubin");
            k->cuda.ptx = r.str(e, "ptx");
            k->cuda.entry = r.str(e, "entry");
            k->cuda.block_threads = r.field(e, "block_threads").get<int>();
            k->cuda.grid_axes = r.strings(e, "grid_axes");
            k->cuda.extent_axes = r.strings(e, "extent_axes");
            if (e.contains("final_entry")) {  // the two-kernel form
                k->cuda.final_entry = r.str(e, "final_entry");
                k->cuda.row_axes = r.strings(e, "row_axes");
                if (k->cuda.row_axes.empty()) r.fail("row_axes must name at least one axis");
                k->cuda.column_blocks = r.field(e, "column_blocks").get<int>();
                if (k->cuda.column_blocks < 1) r.fail("column_blocks must be at least 1");
                const json &sc = r.field(e, "scratch");
                if (!sc.is_array()) r.fail("scratch must be an array");
                for (const json &x : sc) {
                    if (!x.is_object()) r.fail("every scratch entry must be an object");
                    Kernel::Cuda::Scratch s;
                    if (x.contains("statistic")) s.statistic = r.str(x, "statistic");
                    else s.output = r.str(x, "output");
                    s.axes = r.strings(x, "axes");
                    if (x.contains("dtype")) {
                        const std::string t = r.str(x, "dtype");
                        if (t == "f64") s.dtype = DType::F64;
                        else if (t != "f32") r.fail("scratch dtype must be f32 or f64, not '" + t + "'");
                    }
                    k->cuda.scratch.push_back(s);
                }
            }
            if (e.contains("ptxas")) {
                const json &p = e["ptxas"];
                k->cuda.registers = p.value("registers", 0);
                k->cuda.spill_stores = p.value("spill_stores", 0);
                k->cuda.spill_loads = p.value("spill_loads", 0);
            }
            reg.kernels_.push_back(std::move(k));
            continue;
        }
        auto fn = entries.find(k->function);
        if (fn == entries.end() || !fn->second)
            r.fail("function '" + k->function + "' is not in this program's kernel table (" + std::to_string(n) +
                   " entries); link the normgen_kernels library built with this manifest, or point NORMGEN_MANIFEST at its manifest");
        k->argv = fn->second;
        reg.kernels_.push_back(std::move(k));
    }
    return reg;
}

std::vector<const Registry::Kernel *> Registry::kernels() const {
    std::vector<const Kernel *> out;
    for (const auto &k : kernels_) out.push_back(k.get());
    return out;
}

const Registry::Kernel *Registry::find(const std::string &function) const {
    for (const auto &k : kernels_)
        if (k->function == function) return k.get();
    return nullptr;
}

std::shared_ptr<const NormSpec> Registry::spec(const std::string &layer) const {
    auto it = specs_.find(layer);
    return it == specs_.end() ? nullptr : it->second;
}

const Registry::Kernel *Registry::select(const std::string &layer, DType dtype, bool need_optional_outputs, std::optional<Isa> isa,
                                         Backend backend) const {
    auto spec = this->spec(layer);
    if (!spec) return nullptr;
    // A layer without optional outputs has only a core kernel, and it writes every output.
    const Variant variant = need_optional_outputs && has_optional_outputs(*spec) ? Variant::Full : Variant::Core;
    auto rank = [](Isa i) { return i == Isa::Avx512 ? 2 : i == Isa::Avx2 ? 1 : 0; };
    const Kernel *best = nullptr;
    for (const auto &k : kernels_) {
        if (k->layer != layer || k->dtype != dtype || k->variant != variant || k->tuned_only) continue;
        if (isa && k->isa != *isa) continue;
        if (k->backend != backend) continue;
        if (!k->runs_here()) continue;
        if (!best || rank(k->isa) > rank(best->isa)) best = k.get();
    }
    return best;
}

const Registry::Kernel *Registry::select_device(const std::string &layer, DType dtype, Device device, bool need_optional_outputs,
                                                Backend backend) const {
    auto spec = this->spec(layer);
    if (!spec) return nullptr;
    const Variant variant = need_optional_outputs && has_optional_outputs(*spec) ? Variant::Full : Variant::Core;
    for (const auto &k : kernels_)
        if (k->layer == layer && k->dtype == dtype && k->variant == variant && k->device == device && k->backend == backend && !k->tuned_only)
            return k.get();
    return nullptr;
}

const Registry::Kernel *Registry::select_grad(const std::string &layer, DType dtype, std::optional<Isa> isa, Backend backend) const {
    const Kernel *k = select(layer + "_grad", dtype, false, isa, backend);
    return k && k->grad_of == layer ? k : nullptr;
}

std::string Registry::Kernel::refuses(const std::map<std::string, TensorView> &tensors, const AxisExtents &ext) const {
    const Requirement &q = requirement;
    if (!q.any()) return "";
    if (q.fixed_extent > 0) {
        const AxisId fx = spec->find_axis(q.fixed_axis);
        if (fx >= 0 && ext.extent.at((size_t)fx) != q.fixed_extent)
            return "axis '" + q.fixed_axis + "' = " + std::to_string(ext.extent.at((size_t)fx)) + ", but the kernel is compiled for " +
                   std::to_string(q.fixed_extent) + " only";
    }
    const AxisId ax = q.axis.empty() ? -1 : spec->find_axis(q.axis);
    if (ax >= 0 && ext.extent.at((size_t)ax) % q.multiple != 0)
        return "axis '" + q.axis + "' = " + std::to_string(ext.extent.at((size_t)ax)) + " is not a multiple of " + std::to_string(q.multiple);
    for (const std::string &o : q.outputs) {
        auto it = tensors.find(o);
        if (it == tensors.end()) continue;  // scratch, allocated aligned by run_kernel
        if ((uintptr_t)it->second.data % (uintptr_t)q.alignment != 0)
            return "output '" + o + "' is not " + std::to_string(q.alignment) + "-byte aligned";
    }
    return "";
}

Registry::Selection Registry::choose(const std::string &layer, DType dtype, const std::vector<int64_t> &extents, bool need_optional_outputs,
                                     const std::map<std::string, TensorView> *tensors, bool aligned) const {
    Selection sel;
    sel.kernel = select(layer, dtype, need_optional_outputs);
    if (!sel.kernel) {
        sel.why = "no " + std::string(dtype_name(dtype)) + " kernel of layer '" + layer + "' runs here";
        return sel;
    }
    const CpuFingerprint &cpu = this_cpu();
    sel.shape = shape_class(*sel.kernel->spec, *sel.kernel->plan, extents, cpu);
    struct Choice {
        const Kernel *k;
        const Kernel::Tuned *t;
        double score;
    };
    std::vector<Choice> choices;
    std::string refused;  // why the first near class's choice on another CPU was not taken
    for (const auto &k : kernels_) {
        if (k->layer != layer || k->dtype != dtype || k->variant != sel.kernel->variant || k->tuned.empty() || !k->runs_here()) continue;
        for (const Kernel::Tuned &t : k->tuned) {
            const double score = tuned_match_score(sel.shape, cpu, t.shape, t.cpu, t.vs_fallback);
            if (std::isfinite(score)) choices.push_back({k.get(), &t, score});
            else if (refused.empty() && shape_distance(sel.shape, t.shape) <= kNearShape)
                refused = "; " + t.cpu.text() + "'s choice for its class not taken: " + foreign_refusal(cpu, t.cpu, t.vs_fallback);
        }
    }
    std::stable_sort(choices.begin(), choices.end(), [](const Choice &a, const Choice &b) { return a.score < b.score; });
    std::string skipped;
    AxisExtents ext{extents};
    for (const Choice &c : choices) {
        std::string no;
        if (c.k->requirement.any()) {
            no = c.k->refuses(tensors ? *tensors : std::map<std::string, TensorView>{}, ext);  // no tensors: the shape alone
            if (no.empty() && !tensors && !aligned && c.k->requirement.alignment) no = "its outputs must be aligned (streaming stores)";
        }
        if (!no.empty()) {
            if (skipped.empty()) skipped = "; " + c.k->function + " skipped: " + no;
            continue;
        }
        char frac[64];
        std::snprintf(frac, sizeof frac, "%.1f GB/s = %.0f%% of %s", c.t->gbps, 100 * c.t->frac, c.t->limit.c_str());
        sel.kernel = c.k;
        sel.why = std::string("tuned: ") + backend_name(c.k->backend) + " kernel " + c.k->function + ", chosen for class " + c.t->shape.key() +
                  (c.t->shape.key() == sel.shape.key() ? "" : " (nearest to " + sel.shape.key() + ")") + " on " + c.t->cpu.text() + ": " + frac +
                  " there" + skipped;
        return sel;
    }
    sel.why = "default: " + sel.kernel->function + " (" +
              (choices.empty() ? "no tuned schedule for class " + sel.shape.key() + " on a CPU like this one" : "every tuned choice refused this call") +
              ")" + skipped + refused;
    return sel;
}

Registry::Selection Registry::select_for(const std::string &layer, DType dtype, const std::map<std::string, TensorView> &tensors,
                                         bool need_optional_outputs) const {
    auto s = spec(layer);
    if (!s) return Selection{nullptr, {}, "no layer '" + layer + "' in " + path_};
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto &[name, v] : tensors)
        if (s->find_tensor(name)) shapes[name] = v.shape;
    const AxisExtents ext = bind_axes(*s, shapes);  // a bad call is refused here, naming the tensor
    return choose(layer, dtype, ext.extent, need_optional_outputs, &tensors, false);
}

Registry::Selection Registry::select_for_sizes(const std::string &layer, DType dtype, const std::map<std::string, int64_t> &sizes,
                                               bool need_optional_outputs, bool aligned) const {
    auto s = spec(layer);
    if (!s) return Selection{nullptr, {}, "no layer '" + layer + "' in " + path_};
    return choose(layer, dtype, extents_from_sizes(*s, sizes), need_optional_outputs, nullptr, aligned);
}

Registry::Selection Registry::select_grad_for(const std::string &layer, DType dtype, const std::map<std::string, TensorView> &tensors) const {
    Selection s = select_for(layer + "_grad", dtype, tensors, false);
    if (s.kernel && s.kernel->grad_of != layer) s.kernel = nullptr;
    return s;
}

}  // namespace normgen
