// normgen-gen: the build-time generator. CMake runs it once per .norm file (so touching one file
// regenerates only its kernels), once for the shared Halide runtime, and once to merge the
// per-file manifest fragments into the manifest and the kernel table.
//
//   normgen-gen compile FILE --dtype f32,bf16,f16 --target host,x86-64-avx2 --out DIR --fragment F.json
//                           [--archive NAME.a] [--source NAME] [--schedule KNOBS|FILE.json] [--grad]
//                           [--tuning DIR] [--streaming-tool normgen-mlir]
//   normgen-gen runtime --out FILE.o
//   normgen-gen merge --manifest manifest.json --table kernel_table.cpp [--device cuda] FRAGMENT.json...
#include "codegen/tool/options.h"
#include "codegen/tool/tool_main.h"
#include "codegen/halide/aot.h"
#include "codegen/halide/jit.h"
#include "dsl/checker.h"
#include "dsl/grad.h"

#include <fstream>
#include <iostream>

using namespace normgen;
using nlohmann::json;

namespace {

int run(const std::vector<std::string> &args) {
    if (args.empty()) throw Usage("give a command: compile, runtime or merge");
    const std::string cmd = args[0];
    GenerateArgs g = parse_generate_args(std::vector<std::string>(args.begin() + 1, args.end()),
                                         {"--target", "--streaming-tool", "--ptxas", "--gpu-schedule", "--device"});
    if (cmd == "compile") {
        if (g.files.size() != 1 || g.out.empty() || g.fragment.empty()) throw Usage("compile FILE --out DIR --fragment F.json");
        NormSpec spec = load_norm_file(g.files[0]);
        std::string grad_of;
        if (g.grad) {
            grad_of = spec.name;
            spec = differentiate(spec).spec;
        }
        for (const std::string &t : g.targets) hl::parse_target(t);  // a bad target is a user error, before any work
        check_schedule_overrides(ScheduleKind::HalideCpu, g.schedule);
        check_schedule_overrides(ScheduleKind::HalideGpu, g.gpu_schedule);
        hl::AotRequest req{g.source.empty() ? g.files[0] : g.source, g.dtypes, g.targets, g.out, g.archive, g.schedule, grad_of,
                           g.tuning, g.streaming_tool, g.ptxas, g.gpu_schedule};
        json entries = hl::compile_halide_kernels(spec, req);
        write_file_atomically(g.fragment, entries.dump(1) + "\n");
        std::cerr << "normgen-gen: " << spec.name << ": " << entries.size() << " kernels\n";
        return 0;
    }
    if (cmd == "runtime") {
        if (g.out.empty()) throw Usage("runtime --out FILE.o");
        hl::compile_halide_runtime(g.out, g.targets.empty() ? std::string() : g.targets[0]);
        return 0;
    }
    if (cmd == "merge") {
        if (g.manifest.empty() || g.table.empty()) throw Usage("merge --manifest M.json --table T.cpp FRAGMENTS...");
        merge_manifests(g.files, g.manifest, g.table, g.device);
        return 0;
    }
    throw Usage("unknown command " + cmd);
}

}  // namespace

constexpr const char *kHelp = R"(normgen-gen - the build-time Halide generator of normgen (CMake runs it; see README).

usage:
  normgen-gen compile FILE.norm --dtype f32,bf16,f16 --target host,x86-64-avx2 --out DIR --fragment F.json
                      [--archive NAME.a] [--source NAME] [--schedule KNOBS|FILE.json]
                      [--grad] [--tuning DIR] [--streaming-tool PATH] [--ptxas PATH] [--gpu-schedule KNOBS]
        Compile every kernel of one declaration (each storage type, target and variant) into DIR,
        one static library per file (--archive), and write its manifest entries to F.json.
        --grad: the kernels of its backward (`normgen grad FILE`) instead, layer <name>_grad.
        --tuning DIR: also one kernel per schedule the tuning database DIR chose for this
        declaration on a CPU of each target's ISA (`normgen tune`; stale records are ignored
        with a note). --streaming-tool PATH: normgen-mlir, which compiles the kernels whose
        schedule has streaming stores (default: the one beside this program).
        GPU targets: cuda (PTX for sm_86, run on sm_90: --ptxas PATH assembles it for sm_90 and
        records its register and spill report) and opencl (OpenCL C); their kernels take the
        halide-gpu schedule's defaults, --gpu-schedule overrides knobs of it.
  normgen-gen runtime --out FILE.o [--target x86-64-linux[-tsan|-cuda-opencl]]
        Compile the shared Halide runtime the kernels link against (-tsan: with ThreadSanitizer
        hooks, for a build with NORMGEN_SANITIZE=thread; -cuda-opencl: with the CUDA and OpenCL
        modules the GPU kernels call, which load their drivers at run time).
  normgen-gen merge --manifest manifest.json --table kernel_table.cpp [--device cuda] FRAGMENT.json...
        Merge manifest fragments into the manifest and the kernel table. --device cpu|cuda|opencl:
        only that device's kernels (the GPU pack's manifest_cuda.json, both backends).

Exit 0 on success, 1 on a user's mistake (a located diagnostic, a bad option), 2 on a bug.
)";

int main(int argc, char **argv) { return run_tool("normgen-gen", argc, argv, hl::with_halide_errors(run), kHelp); }
