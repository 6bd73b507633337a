#include "codegen/halide/aot.h"

#include "codegen/halide/jit.h"
#include "codegen/halide/schedule_gpu.h"
#include "codegen/common/manifest.h"
#include "codegen/common/ptxas.h"
#include "codegen/common/tuning_db.h"
#include "codegen/tool/subprocess.h"
#include "dsl/printer.h"
#include "runtime/errors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <set>

namespace normgen::hl {

using namespace Halide;
using nlohmann::json;

namespace {

// AVX512-BF16 (and VNNI): Halide's Sapphire Rapids level, and its Zen 4 level (AMD's Zen 4 and later).
bool has_avx512_bf16(const Target &t) { return t.has_feature(Target::AVX512_SapphireRapids) || t.has_feature(Target::AVX512_Zen4); }

}  // namespace

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
    if (has_avx512_bf16(t)) f.insert(f.end(), {"avx512bf16", "avx512vnni"});
    // Halide's zen4 level adds BITALG, VBMI2 and VPOPCNTDQ, which its code generator may use.
    need(Target::AVX512_Zen4, {"avx512bitalg", "avx512vbmi2", "avx512vpopcntdq"});
    return f;
}

// Halide warns, once per loop, that bf16 arithmetic is emulated when the target's Halide features
// lack AVX512-BF16 (its zen4 level has none), although the LLVM 22 step then converts natively
// (a tuning run printed 40 such lines a shape class). While such a kernel's bitcode is made, that
// warning is dropped; other warnings print as Halide prints them, and errors throw as they do.
class NativeBf16Reporter final : public CompileTimeErrorReporter {
public:
    NativeBf16Reporter() { set_custom_compile_time_error_reporter(this); }
    ~NativeBf16Reporter() override { set_custom_compile_time_error_reporter(nullptr); }
    void warning(const char *msg) override {
        if (!std::strstr(msg, "type operation is emulated")) std::cerr << msg << std::flush;
    }
    [[noreturn]] void error(const char *msg) override { throw CompileError(msg); }
};

void emit_object(Pipeline pipeline, const std::vector<Argument> &args, const KernelPlan &plan, const Target &target, const std::string &function,
                 const std::vector<std::string> &streaming_outputs, const std::string &streaming_tool, CompiledObject &c) {
    // A bf16 kernel for AVX512-BF16 (Sapphire Rapids, Zen 4 and later) takes the same LLVM 22 step
    // for vcvtneps2bf16 in place of Halide's emulated rounding (codegen/mlir/streaming.h).
    const bool native_bf16 = has_avx512_bf16(target) &&
                             std::any_of(plan.args.begin(), plan.args.end(), [](const PlanArg &a) { return a.dtype == DType::BF16; });
    const bool streaming = !streaming_outputs.empty();
    if (!streaming && !native_bf16) {
        pipeline.compile_to({{OutputFileType::object, c.object}, {OutputFileType::c_header, c.header}}, args, function, target);
        return;
    }
    // Halide's bitcode, changed and compiled with LLVM 22 by normgen-mlir.
    const std::string bitcode = std::filesystem::path(c.object).replace_extension(".bc").string();
    {
        std::optional<NativeBf16Reporter> quiet;
        if (native_bf16) quiet.emplace();
        pipeline.compile_to({{OutputFileType::bitcode, bitcode}, {OutputFileType::c_header, c.header}}, args, function, target);
    }
    std::string outputs;
    for (const std::string &o : streaming_outputs) outputs += (outputs.empty() ? "" : ",") + o;
    const std::string tool = streaming_tool.empty() ? sibling_tool("normgen-mlir") : streaming_tool;
    std::vector<std::string> cmd{tool, "streaming", bitcode, "-o", c.object};
    if (streaming) cmd.insert(cmd.end(), {"--buffers", outputs});
    if (native_bf16) cmd.push_back("--native-bf16");
    ProcessResult r = run_process(cmd);
    std::remove(bitcode.c_str());
    if (r.status == 127 && !streaming) {
        // Native conversion is an optimization: a build without the MLIR backend (no LLVM 22
        // step to run) gets Halide's own object, with the emulated conversions.
        pipeline.compile_to({{OutputFileType::object, c.object}}, args, function, target);
        c.text += "; bf16 conversions emulated (" + tool + " not found)";
        return;
    }
    if (r.status != 0)
        throw UserError(function + ": " + (streaming ? "streaming stores need" : "native bf16 conversion takes") +
                        " the MLIR backend's LLVM 22 step (" + tool + " streaming), which failed" +
                        (r.status == 127 ? " to start (configure with NORMGEN_WITH_MLIR=ON)" : "") + ":\n" + r.output);
    std::string said = r.output;
    while (!said.empty() && (said.back() == '\n' || said.back() == '\r')) said.pop_back();
    c.text += streaming ? "; streaming stores to " + outputs + " (" + said + ")" : "; LLVM 22 step (" + said + ")";
}

CompiledObject compile_halide_kernel(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &record, const Target &target,
                                     const std::string &function, const std::string &out_dir, const std::string &streaming_tool) {
    namespace fs = std::filesystem;
    LoweredPipeline p = lower_to_halide(spec, plan, record);
    CompiledObject c;
    c.text = schedule_cpu(p, spec, plan, record);
    const std::string prefix = (fs::path(out_dir) / function).string();
    c.object = prefix + ".o";
    c.header = prefix + ".h";
    const StreamingRequirement st = streaming_requirement(spec, plan, record);
    emit_object(p.pipeline(), p.arguments(), plan, target, function, st.alignment ? st.outputs : std::vector<std::string>{}, streaming_tool, c);
    return c;
}

json compile_halide_gpu_kernel(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &record, const Target &target,
                               KernelEntryInfo info, const std::string &out_dir, const std::string &ptxas, std::string &object) {
    namespace fs = std::filesystem;
    const bool cuda = target.has_feature(Target::CUDA);
    const HalfStorage half = half_storage_for(target);
    LoweredPipeline p = lower_to_halide(spec, plan, record, half);
    info.schedule = &record;
    info.schedule_text = schedule_gpu(p, spec, plan, record) + half_storage_text(half);
    const std::string fn = entry_function_name(spec, plan, info);
    const std::string prefix = (fs::path(out_dir) / fn).string(), device = fn + (cuda ? ".ptx" : ".cl");
    Pipeline pipeline = p.pipeline();
    require_device_stages(pipeline);
    object = prefix + ".o";
    pipeline.compile_to({{OutputFileType::object, object}, {OutputFileType::c_header, prefix + ".h"},
                         {OutputFileType::device_code, (fs::path(out_dir) / device).string()}},
                        p.arguments(), fn, target);
    info.header = fn + ".h";
    json e = manifest_entry(spec, plan, info);
    if (cuda) {
        e["ptx"] = device;
        if (!ptxas.empty()) e["ptxas"] = assemble_ptx(ptxas, (fs::path(out_dir) / device).string(), prefix + ".cubin");
    } else {
        e["opencl_source"] = device;
    }
    for (DType t : {DType::F16, DType::BF16})
        if (half.bits(t)) e["bits_storage"].push_back(dtype_name(t));
    return e;
}

json compile_halide_kernels(const NormSpec &spec, const AotRequest &req) {
    namespace fs = std::filesystem;
    fs::create_directories(req.out_dir);
    json entries = json::array();
    const std::string archive = req.archive.empty() ? spec.name + ".a" : req.archive;
    std::vector<std::string> objects;
    Target first_target;
    std::set<Isa> seen_isa;
    // The tuning database's winners for this declaration (stale records are dropped with a note).
    std::vector<TuningRecord> best;
    if (!req.tuning_dir.empty()) {
        std::vector<std::string> notes;
        best = TuningDb(req.tuning_dir).best(spec.name, kernel_identity(spec), &notes);
        for (const std::string &n : notes) std::cerr << "normgen: note: " << n << "\n";
    }
    std::vector<Target> gpu_targets;
    for (const std::string &tname : req.targets) {
        Target t = parse_target(tname).with_feature(Target::NoRuntime).without_feature(Target::JIT);
        if (is_gpu_target(t)) {
            gpu_targets.push_back(t);
            continue;
        }
        const Isa isa = isa_of(t);
        if (!seen_isa.insert(isa).second) continue;  // e.g. host == x86-64-avx2 on a machine without AVX-512
        if (objects.empty()) first_target = t;
        for (DType dtype : req.dtypes) {
            for (Variant variant : variants_of(spec)) {
                KernelPlan plan = make_plan(spec, dtype, variant);
                ScheduleRecord record = choose_schedule(plan, ScheduleKind::HalideCpu, isa, req.schedule_overrides);
                // The default kernel first, then one per distinct winning schedule (none under --schedule).
                const auto kernels = kernel_schedules(record, req.schedule_overrides.empty() ? best : std::vector<TuningRecord>{}, dtype_name(dtype),
                                                      variant_name(variant), "halide", isa_name(isa), "tuning database " + req.tuning_dir);
                for (const auto &[rec, tuned] : kernels) {
                    KernelEntryInfo info;
                    info.backend = Backend::Halide;
                    info.isa = isa;
                    info.source = req.source;
                    info.target = t.to_string();
                    info.cpu_features = cpu_features(t);
                    info.schedule = &rec;
                    info.grad_of = req.grad_of;
                    info.library = archive;
                    info.tuned = tuned;
                    if (&rec != &kernels[0].first) info.function_suffix = "__t" + schedule_tag(rec.to_json());
                    const std::string fn = entry_function_name(spec, plan, info);
                    CompiledObject c = compile_halide_kernel(spec, plan, rec, t, fn, req.out_dir, req.streaming_tool);
                    objects.push_back(c.object);
                    info.schedule_text = c.text;
                    info.header = fn + ".h";
                    entries.push_back(manifest_entry(spec, plan, info));
                }
            }
        }
    }
    for (const Target &t : gpu_targets) {
        if (objects.empty()) first_target = t;
        for (DType dtype : req.dtypes)
            for (Variant variant : variants_of(spec)) {
                KernelPlan plan = make_plan(spec, dtype, variant);
                const Isa isa = t.has_feature(Target::CUDA) ? Isa::Sm90 : Isa::OpenCl;
                ScheduleRecord record = choose_schedule(plan, ScheduleKind::HalideGpu, isa, req.gpu_schedule_overrides);
                KernelEntryInfo info;
                info.backend = Backend::Halide;
                info.isa = isa;
                info.source = req.source;
                info.target = t.to_string();
                info.grad_of = req.grad_of;
                info.library = archive;
                std::string object;
                entries.push_back(compile_halide_gpu_kernel(spec, plan, record, t, info, req.out_dir, req.ptxas, object));
                objects.push_back(object);
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

