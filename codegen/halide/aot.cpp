#include "codegen/halide/aot.h"

#include "codegen/halide/jit.h"
#include "codegen/common/manifest.h"
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

json compile_halide_kernels(const NormSpec &spec, const AotRequest &req) {
    namespace fs = std::filesystem;
    fs::create_directories(req.out_dir);
    const bool has_optional = has_optional_outputs(spec);
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
                e["backend"] = "halide";
                e["device"] = "cpu";
                e["args"] = manifest_args(spec, types, full);
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

