#include "codegen/halide/aot.h"

#include "codegen/halide/jit.h"
#include "dsl/printer.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <set>

namespace normgen::hl {

using namespace Halide;
using nlohmann::json;

std::string isa_tag(const Target &t) { return t.has_feature(Target::AVX512) ? "avx512" : "avx2"; }

std::vector<std::string> cpu_features(const Target &t) {
    std::vector<std::string> f;
    auto need = [&](Target::Feature feat, std::initializer_list<const char *> names) {
        if (t.has_feature(feat)) f.insert(f.end(), names.begin(), names.end());
    };
    need(Target::SSE41, {"sse4.1"});
    need(Target::AVX, {"avx"});
    need(Target::AVX2, {"avx2"});
    need(Target::FMA, {"fma"});
    need(Target::F16C, {"f16c"});
    need(Target::AVX512, {"avx512f", "avx512cd"});
    need(Target::AVX512_Skylake, {"avx512bw", "avx512dq", "avx512vl"});
    need(Target::AVX512_Cannonlake, {"avx512ifma", "avx512vbmi"});
    need(Target::AVX512_SapphireRapids, {"avx512bf16", "avx512vnni"});
    return f;
}

json manifest_arg(const NormSpec &spec, const std::string &name, const char *role, DType dtype, const std::vector<AxisId> &dims,
               bool optional, const std::string &updates) {
    json a;
    a["name"] = name;
    a["role"] = role;
    a["dtype"] = dtype_name(dtype);
    json d = json::array(), b = json::array();
    for (AxisId x : dims) d.push_back(spec.axes[x].name);
    std::vector<AxisId> atoms = spec.memory_atoms(dims);
    for (auto it = atoms.rbegin(); it != atoms.rend(); ++it) b.push_back(spec.axes[*it].name);
    a["dims"] = d;
    a["buffer_dims"] = b;
    a["optional"] = optional;
    a["updates"] = updates;
    return a;
}


json compile_halide_kernels(const NormSpec &spec, const AotRequest &req) {
    namespace fs = std::filesystem;
    fs::create_directories(req.out_dir);
    bool has_optional = false;
    for (const OutputInfo &o : spec.outputs) has_optional = has_optional || o.optional;
    std::string canonical = print_norm(spec);
    json entries = json::array();
    std::set<std::string> seen_isa;
    for (const std::string &tname : req.targets) {
        Target t = parse_target(tname).with_feature(Target::NoRuntime).without_feature(Target::JIT);
        std::string isa = isa_tag(t);
        if (!seen_isa.insert(isa).second) continue;  // e.g. host == x86-64-avx2 on a machine without AVX-512
        for (DType dtype : req.dtypes) {
            for (bool full : {false, true}) {
                if (full && !has_optional) continue;
                KernelTypes types = kernel_types(spec, dtype);
                LoweredPipeline p = lower_to_halide(spec, types, full);
                std::string schedule = schedule_cpu(p, spec, t, req.schedule);
                std::string fn = spec.name + "__" + dtype_name(dtype) + "__" + isa + "__" + (full ? "full" : "core");
                std::string prefix = (fs::path(req.out_dir) / fn).string();
                p.pipeline().compile_to_static_library(prefix, p.arguments(), fn, t);
                json e;
                e["function"] = fn;
                e["layer"] = spec.name;
                e["source"] = req.source;
                e["norm"] = canonical;
                e["dtype"] = dtype_name(dtype);
                e["target"] = t.to_string();
                e["isa"] = isa;
                e["cpu_features"] = cpu_features(t);
                e["variant"] = full ? "full" : "core";
                e["schedule"] = schedule;
                e["library"] = fn + ".a";
                e["header"] = fn + ".h";
                json args = json::array();
                for (const TensorInfo &ti : spec.tensors)
                    args.push_back(manifest_arg(spec, ti.name, ti.role == TensorInfo::Param ? "param" : "input", types.storage.at(ti.name),
                                             ti.dims, false, ""));
                for (int oi : p.output_index) {
                    const OutputInfo &o = spec.outputs[oi];
                    args.push_back(manifest_arg(spec, o.name, "output", types.storage.at(o.name), o.dims, o.optional, o.updates));
                }
                e["args"] = args;
                entries.push_back(e);
            }
        }
    }
    return entries;
}

void compile_halide_runtime(const std::string &object_path) {
    // Generic x86-64: the runtime's code (thread pool, allocation, errors) needs no ISA extension.
    compile_standalone_runtime(object_path, Target("x86-64-linux"));
}

}  // namespace normgen::hl

namespace normgen::hl {

namespace {

// Writes via a temporary file and a rename, so an interrupted build never leaves half a file.
void write_file(const std::string &path, const std::string &text) {
    std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary);
        out << text;
        if (!out) throw std::runtime_error("cannot write " + tmp);
    }
    std::filesystem::rename(tmp, path);
}

}  // namespace

void write_manifest(const json &entries, const std::string &path) {
    json m;
    m["normgen_manifest"] = 1;
    m["kernels"] = entries;
    write_file(path, m.dump(1) + "\n");
}

void write_kernel_table(const json &entries, const std::string &path) {
    std::ostringstream os;
    os << "// Auto-generated by normgen-gen from the kernel manifest. Do not edit!\n"
       << "#include \"runtime/kernel_table.h\"\n\n"
       << "extern \"C\" {\n";
    for (const json &e : entries) os << "int " << e["function"].get<std::string>() << "_argv(void **args);\n";
    os << "}\n\nnamespace normgen {\n\nconst KernelEntry kKernelTable[] = {\n";
    for (const json &e : entries) {
        std::string f = e["function"];
        os << "    {\"" << f << "\", &" << f << "_argv},\n";
    }
    if (entries.empty()) os << "    {nullptr, nullptr},\n";
    os << "};\nconst size_t kKernelTableSize = " << entries.size() << ";\n\n}  // namespace normgen\n";
    write_file(path, os.str());
}

}  // namespace normgen::hl
