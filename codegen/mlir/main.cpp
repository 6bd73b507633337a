// normgen-mlir: the MLIR backend's executable (MLIR carries its own LLVM, so it never shares a
// process with Halide). The `normgen` driver runs it for `verify --backend mlir` and `explain`;
// the build runs it to generate the catalog's mlir-cpu objects and mlir-cuda PTX/cubins.
//
//   normgen-mlir verify FILE... [--dtype ...] [--quick] [--json] [--seed N] [--failures]
//   normgen-mlir explain FILE [--backend mlir] [--stage linalg|loops|vector|llvm|gpu|nvvm|ptx] [--dtype T]
//   normgen-mlir compile FILE --out DIR (--fragment F.json | --manifest M.json --table T.cpp) [--archive NAME.a]
//                        [--dtype ...] [--source NAME] [--schedule S] [--cuda-schedule S] [--no-cpu] [--cuda]
//   (--cuda-root DIR: the CUDA toolkit for libdevice and ptxas; default: the one found at configure time)
#include "codegen/common/manifest.h"
#include "codegen/tool/options.h"
#include "codegen/tool/run_cmd.h"
#include "codegen/tool/tool_main.h"
#include "codegen/tool/verify_cmd.h"
#include "codegen/mlir/backend.h"
#include "codegen/mlir/streaming.h"
#include "dsl/checker.h"
#include "dsl/grad.h"
#include "runtime/errors.h"

#include <algorithm>
#include <iostream>

#ifndef NORMGEN_CUDA_ROOT
#define NORMGEN_CUDA_ROOT ""
#endif

using namespace normgen;

namespace {

const char *kUsage = R"(normgen-mlir - the MLIR backend of normgen (usually run through `normgen`).

usage:
  normgen-mlir verify FILE... [--dtype f32,bf16,f16|all] [--quick] [--json] [--seed N] [--failures] [--grad]
                       [--target host|cuda-emulated] [--variant core|full]
        Lower each declaration through the CPU pipeline (linalg -> loops -> LLVM, this host),
        JIT it and check it against the float64 reference on the verifier's shape sweep.
        --grad: the backward of each declaration instead (as `normgen verify --grad`).
        --target cuda-emulated: the mlir-cuda kernel's gpu-dialect module run on this CPU, a
        fiber per GPU thread, barriers honoured, launched by the CUDA launcher (not the NVVM
        lowering, not GPU speed: scripts/gpu.sh on a GPU).
  normgen-mlir explain FILE [--stage linalg|loops|vector|llvm|gpu|nvvm|ptx] [--dtype f32|bf16|f16] [--locations]
                       [--schedule S]
        Print the stages of the pipelines (default: linalg, loops, llvm); --locations: each op's
        location, the file:line:col of the declaration's node it came from; --schedule: knobs
        over the default mlir-cpu record (knob=value,...).
  normgen-mlir compile FILE --out DIR (--fragment F.json | --manifest M.json --table T.cpp)
                       [--archive NAME.a] [--dtype LIST] [--source NAME] [--schedule S]
                       [--cuda-schedule S] [--no-cpu] [--cuda] [--grad] [--tuning DIR]
        (--grad: the kernels of the declaration's backward, `normgen grad FILE`; --tuning DIR:
        also one mlir-cpu kernel per schedule the tuning database DIR chose.)
        Write the mlir-cpu objects and their static library (NAME.a, default <layer>.mlir.a;
        and with --cuda the sm_90 PTX and ptxas cubins) of every storage type, and their
        manifest entries: as a fragment (F.json) or as a manifest with its kernel table.
        --schedule / --cuda-schedule: knob=value,... or a JSON file, over the default
        mlir-cpu / mlir-cuda schedule records.
  normgen-mlir run FILE --in NAME=FILE.npy... --out DIR [--dtype T] [--set NAME=VALUE...] [--schedule S]
        As `normgen run --backend mlir`: the mlir-cpu JIT kernel on .npy inputs.
  normgen-mlir verify FILE... [--schedule S]
        (as above; --schedule overrides the mlir-cpu record of every kernel)
  normgen-mlir streaming IN.bc -o OUT.o [--buffers y[,h...]] [--native-bf16]
        The Halide generator's LLVM 22 step: for the halide-cpu knob streaming_stores, mark the
        aligned vector stores of a Halide kernel's bitcode to the named output buffers
        non-temporal and put an sfence before the returns of the functions that have one; with
        --native-bf16, make Halide's emulated float -> bfloat16 roundings vcvtneps2bf16 in the
        functions built for AVX512-BF16; then compile with LLVM 22. Prints what it changed.
options:
  --cuda-root DIR   the CUDA toolkit (libdevice, ptxas)
)";

std::unique_ptr<CompiledKernel> mlir_factory(const NormSpec &spec, DType dtype, const std::string &target, const std::string &schedule,
                                             Variant variant) {
    if (target == "cuda-emulated") return mlirgen::make_emulated_cuda_kernel(spec, dtype, schedule, variant);
    return mlirgen::make_jit_kernel(spec, dtype, schedule, variant);
}

std::string cuda_root_from(std::vector<std::string> &args) {
    std::string root = NORMGEN_CUDA_ROOT;
    for (size_t i = 0; i + 1 < args.size(); ++i)
        if (args[i] == "--cuda-root") {
            root = args[i + 1];
            args.erase(args.begin() + i, args.begin() + i + 2);
            break;
        }
    return root;
}

int run(std::vector<std::string> args) {
    if (args.empty()) throw Usage("give a command: verify, run, explain or compile");
    for (const std::string &a : args)
        if (a == "-h" || a == "--help") {
            std::cout << kUsage;
            return 0;
        }
    std::string cmd = args[0];
    args.erase(args.begin());
    std::string cuda_root = cuda_root_from(args);
    if (cmd == "verify") {
        if (std::find(args.begin(), args.end(), "--backend") == args.end()) args.insert(args.end(), {"--backend", "mlir"});
        VerifyArgs v = parse_verify_args(args);
        if (v.backend != "mlir") throw Usage("verify: normgen-mlir verifies --backend mlir (for halide: normgen verify)");
        return cmd_verify(v, mlir_factory);
    }
    if (cmd == "run") {
        RunArgs r = parse_run_args(args);
        if (r.backend != "mlir" && r.backend != "reference") throw Usage("run: normgen-mlir runs --backend mlir (or reference)");
        if (r.target != "host") throw Usage("run: the mlir backend runs target 'host' (mlir-cpu) here, not '" + r.target + "'");
        KernelFactory make = mlir_factory;
        return cmd_run(r, &make);
    }
    if (cmd == "explain") {
        std::string file, stage, schedule;
        DType dtype = DType::F32;
        bool locations = false;
        for (size_t i = 0; i < args.size(); ++i) {
            auto value = [&]() -> std::string {
                if (i + 1 >= args.size()) throw Usage(args[i] + " needs a value");
                return args[++i];
            };
            if (args[i] == "--stage") stage = value();
            else if (args[i] == "--locations") locations = true;
            else if (args[i] == "--schedule") schedule = value();
            else if (args[i] == "--dtype") {
                std::vector<DType> d = parse_dtypes(value());
                if (d.size() != 1) throw Usage("explain: give one --dtype");
                dtype = d[0];
            } else if (args[i] == "--backend") {
                if (value() != "mlir") throw Usage("explain: only --backend mlir");
            } else if (!args[i].empty() && args[i][0] == '-') throw Usage("explain: unknown option '" + args[i] + "'");
            else if (file.empty()) file = args[i];
            else throw Usage("explain: one file at a time");
        }
        if (file.empty()) throw Usage("explain: give a .norm file");
        NormSpec spec = load_norm_file(file);
        mlirgen::explain(spec, dtype, stage, cuda_root, locations, std::cout, schedule);
        return 0;
    }
    if (cmd == "compile") {
        GenerateArgs g = parse_generate_args(args, {"--cuda-schedule", "--no-cpu", "--cuda"});
        if (g.files.size() != 1 || g.out.empty() || (g.fragment.empty() && (g.manifest.empty() || g.table.empty())))
            throw Usage("compile FILE --out DIR (--fragment F.json | --manifest M.json --table T.cpp)");
        if (g.cuda && cuda_root.empty()) throw Usage("compile --cuda: no CUDA toolkit (give --cuda-root DIR)");
        const std::string &file = g.files[0];
        NormSpec spec = load_norm_file(file);
        std::string grad_of;
        if (g.grad) {
            grad_of = spec.name;
            spec = differentiate(spec).spec;
        }
        check_schedule_overrides(ScheduleKind::MlirCpu, g.schedule);  // before anything is written
        check_schedule_overrides(ScheduleKind::MlirCuda, g.cuda_schedule);
        mlirgen::AotRequest req{g.source.empty() ? file : g.source, g.dtypes, g.out, g.archive, g.cpu, g.cuda, cuda_root, g.schedule, g.cuda_schedule, grad_of,
                                g.tuning, g.variants};
        nlohmann::json entries = mlirgen::compile_kernels(spec, req);
        if (!g.fragment.empty()) write_file_atomically(g.fragment, entries.dump(1) + "\n");
        if (!g.manifest.empty()) {
            write_manifest(entries, g.manifest);
            write_kernel_table(entries, g.table);
        }
        std::cerr << "normgen-mlir: " << spec.name << ": " << entries.size() << " kernels\n";
        return 0;
    }
    if (cmd == "streaming") {
        std::string in, out;
        std::vector<std::string> buffers;
        bool native_bf16 = false;
        for (size_t i = 0; i < args.size(); ++i) {
            auto value = [&]() -> std::string {
                if (i + 1 >= args.size()) throw Usage(args[i] + " needs a value");
                return args[++i];
            };
            if (args[i] == "-o") out = value();
            else if (args[i] == "--buffers") buffers = split_list(value());
            else if (args[i] == "--native-bf16") native_bf16 = true;
            else if (!args[i].empty() && args[i][0] == '-') throw Usage("streaming: unknown option '" + args[i] + "'");
            else if (in.empty()) in = args[i];
            else throw Usage("streaming: one bitcode file at a time");
        }
        if (in.empty() || out.empty() || (buffers.empty() && !native_bf16))
            throw Usage("streaming IN.bc -o OUT.o [--buffers y[,h...]] [--native-bf16] (at least one of the two)");
        mlirgen::StreamingResult r = mlirgen::compile_streaming_object(in, buffers, out, native_bf16);
        std::string said;
        if (!buffers.empty()) said = "marked " + std::to_string(r.marked) + " stores non-temporal in " + std::to_string(r.functions) + " functions";
        if (native_bf16) said += (said.empty() ? "" : "; ") + std::to_string(r.bf16) + " bf16 conversions native, " + std::to_string(r.contracted) + " float operations contractible";
        std::cout << said << "\n";
        return 0;
    }
    throw Usage("unknown command '" + cmd + "'");
}

}  // namespace

int main(int argc, char **argv) {
    return run_tool("normgen-mlir", argc, argv, [](const std::vector<std::string> &args) { return run(args); });
}
