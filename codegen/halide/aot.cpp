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
    json entries = json::array();
    const std::string archive = req.archive.empty() ? spec.name + ".a" : req.archive;
    std::vector<std::string> objects;
    Target first_target;
    std::set<Isa> seen_isa;
    for (const std::string &tname : req.targets) {
        Target t = parse_target(tname).with_feature(Target::NoRuntime).without_feature(Target::JIT);
        const Isa isa = isa_of(t);
        if (!seen_isa.insert(isa).second) continue;  // e.g. host == x86-64-avx2 on a machine without AVX-512
        if (objects.empty()) first_target = t;
        for (DType dtype : req.dtypes) {
            for (Variant variant : variants_of(spec)) {
                KernelPlan plan = make_plan(spec, dtype, variant);
                ScheduleRecord record = choose_schedule(plan, ScheduleKind::HalideCpu, isa, req.schedule_overrides);
                LoweredPipeline p = lower_to_halide(spec, plan, record);
                std::string text = schedule_cpu(p, spec, plan, record);
                std::string fn = kernel_function_name(spec.name, dtype, Backend::Halide, isa, variant);
                std::string prefix = (fs::path(req.out_dir) / fn).string();
                p.pipeline().compile_to({{OutputFileType::object, prefix + ".o"}, {OutputFileType::c_header, prefix + ".h"}}, p.arguments(), fn, t);
                objects.push_back(prefix + ".o");
                KernelEntryInfo info;
                info.backend = Backend::Halide;
                info.isa = isa;
                info.source = req.source;
                info.target = t.to_string();
                info.cpu_features = cpu_features(t);
                info.schedule = &record;
                info.schedule_text = text;
                info.grad_of = req.grad_of;
                info.library = archive;
                info.header = fn + ".h";
                entries.push_back(manifest_entry(spec, plan, info));
            }
        }
    }
    create_static_library(objects, first_target, (fs::path(req.out_dir) / archive).string());
    return entries;
}

void compile_halide_runtime(const std::string &object_path, const std::string &target) {
    // Generic x86-64: the runtime's code (thread pool, allocation, errors) needs no ISA extension.
    compile_standalone_runtime(object_path, target.empty() ? Target("x86-64-linux") : parse_target(target));
}

}  // namespace normgen::hl

