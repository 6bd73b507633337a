// normgen-lab-gen: compiles one layer with the production schedule plus overrides of its record
// (codegen/common/schedule_record.h) into a static library with the same argument list as the
// catalog's kernel (same plan, same lowering, same target), so bench/lab/normgen_bench_lab runs it
// through the same harness as the registry's kernels. The lab has no schedule of its own: a lab
// variant is a set of knobs, and a knob the lab wants that the record lacks goes into the record.
//
//   normgen-lab-gen FILE.norm --dtype f32 --variant NAME --out DIR --fragment F.json
//                   [--schedule 'knob=value,...'] [--stmt FILE] [--asm FILE] [--llvm FILE.ll]
//
// --llvm writes LLVM assembly instead of the static library (for bench/lab/nontemporal_ll.py).
// The fragment is a one-entry manifest list in the format of runtime/registry.h; `normgen-gen merge`
// turns the fragments into the lab's manifest and kernel table. The function is
// lab__<variant>__<layer>__<dtype>.
#include "codegen/common/manifest.h"
#include "codegen/halide/aot.h"
#include "codegen/halide/jit.h"
#include "codegen/halide/lower.h"
#include "codegen/halide/schedule.h"
#include "codegen/tool/options.h"
#include "codegen/tool/tool_main.h"
#include "dsl/checker.h"
#include "runtime/errors.h"

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

using namespace normgen;
using nlohmann::json;

namespace {

int run(const std::vector<std::string> &a) {
    std::string file, variant, out, stmt, assembly, fragment, llvm, schedule;
    DType dtype = DType::F32;
    for (size_t i = 0; i < a.size(); ++i) {
        auto value = [&]() -> std::string {
            if (i + 1 >= a.size()) throw Usage(a[i] + " needs a value");
            return a[++i];
        };
        if (a[i] == "--dtype") {
            std::vector<DType> d = parse_dtypes(value());
            if (d.size() != 1) throw Usage("--dtype takes one type");
            dtype = d[0];
        } else if (a[i] == "--variant") variant = value();
        else if (a[i] == "--out") out = value();
        else if (a[i] == "--fragment") fragment = value();
        else if (a[i] == "--schedule") schedule = value();
        else if (a[i] == "--stmt") stmt = value();
        else if (a[i] == "--asm") assembly = value();
        else if (a[i] == "--llvm") llvm = value();
        else if (!a[i].empty() && a[i][0] == '-') throw Usage("unknown option " + a[i]);
        else file = a[i];
    }
    if (file.empty() || variant.empty() || out.empty() || fragment.empty()) throw Usage("FILE --variant NAME --out DIR --fragment F.json");
    // (checked before anything is compiled: Halide's own error for a missing folder names only a file)
    if (!std::filesystem::is_directory(out)) throw UserError("--out " + out + ": no such folder");
    // Halide writes --stmt, --asm and --llvm files without a word when their folder is missing
    // (the fragment is checked with them: before anything is compiled).
    for (const auto &[flag, path] : {std::pair{"--stmt", &stmt}, {"--asm", &assembly}, {"--llvm", &llvm}, {"--fragment", &fragment}}) {
        const std::filesystem::path dir = std::filesystem::path(*path).parent_path();
        if (!path->empty() && !dir.empty() && !std::filesystem::is_directory(dir))
            throw UserError(std::string(flag) + " " + *path + ": no such folder " + dir.string());
    }
    NormSpec spec = load_norm_file(file);
    Halide::Target t = hl::parse_target("host").with_feature(Halide::Target::NoRuntime).without_feature(Halide::Target::JIT);
    KernelPlan plan = make_plan(spec, dtype, Variant::Core);
    ScheduleRecord record = choose_schedule(plan, ScheduleKind::HalideCpu, hl::isa_of(t), schedule);
    hl::LoweredPipeline p = hl::lower_to_halide(spec, plan, record);
    std::string text = hl::schedule_cpu(p, spec, plan, record);
    std::string fn = "lab__" + variant + "__" + spec.name + "__" + dtype_name(dtype);
    Halide::Pipeline pipe = p.pipeline();
    if (llvm.empty()) pipe.compile_to_static_library(out + "/" + fn, p.arguments(), fn, t);
    else pipe.compile_to_llvm_assembly(llvm, p.arguments(), fn, t);  // the caller compiles it (bench/lab/nontemporal_ll.py)
    if (!stmt.empty()) pipe.compile_to_lowered_stmt(stmt, p.arguments(), Halide::StmtOutputFormat::Text, t);
    if (!assembly.empty()) pipe.compile_to_assembly(assembly, p.arguments(), fn, t);
    KernelEntryInfo info;
    info.backend = Backend::Halide;
    info.isa = hl::isa_of(t);
    info.source = file;
    info.target = t.to_string();
    info.cpu_features = hl::cpu_features(t);
    info.schedule = &record;
    info.schedule_text = "lab " + variant + (schedule.empty() ? " (production)" : " (" + schedule + ")") + ": " + text;
    info.library = fn + ".a";
    info.header = fn + ".h";
    json e = manifest_entry(spec, plan, info);
    e["function"] = fn;
    write_file_atomically(fragment, json::array({e}).dump(1) + "\n");
    std::cerr << "normgen-lab-gen: " << fn << ": " << record.text() << "\n";
    return 0;
}

}  // namespace

constexpr const char *kHelp = R"(normgen-lab-gen - compiles one layer with the production schedule plus record overrides for the lab.

usage:
  normgen-lab-gen FILE.norm --dtype f32 --variant NAME --out DIR --fragment F.json
                  [--schedule 'knob=value,...'] [--stmt FILE] [--asm FILE] [--llvm FILE.ll]

--llvm writes LLVM assembly instead of the static library. The function is lab__<variant>__<layer>__<dtype>.
)";

int main(int argc, char **argv) { return run_tool("normgen-lab-gen", argc, argv, hl::with_halide_errors(run), kHelp); }
