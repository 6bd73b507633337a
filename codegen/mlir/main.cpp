// normgen-mlir: the MLIR backend's executable (MLIR carries its own LLVM, so it never shares a
// process with Halide). The `normgen` driver runs it for `verify --backend mlir` and `explain`;
// the build runs it to generate the catalog's mlir-cpu objects and mlir-cuda PTX/cubins.
//
//   normgen-mlir verify FILE... [--dtype ...] [--quick] [--json] [--seed N] [--failures]
//   normgen-mlir explain FILE [--backend mlir] [--stage linalg|loops|vector|llvm|gpu|nvvm|ptx] [--dtype T]
//   normgen-mlir compile FILE --out DIR --fragment F.json [--dtype ...] [--source NAME] [--no-cpu] [--cuda]
//   (--cuda-root DIR: the CUDA toolkit for libdevice and ptxas; default: the one found at configure time)
#include "codegen/common/manifest.h"
#include "codegen/driver/options.h"
#include "codegen/driver/verify_cmd.h"
#include "codegen/mlir/backend.h"
#include "dsl/checker.h"
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
  normgen-mlir verify FILE... [--dtype f32,bf16,f16|all] [--quick] [--json] [--seed N] [--failures]
        Lower each declaration through the CPU pipeline (linalg -> loops -> LLVM, this host),
        JIT it and check it against the float64 reference on the verifier's shape sweep.
  normgen-mlir explain FILE [--stage linalg|loops|vector|llvm|gpu|nvvm|ptx] [--dtype f32|bf16|f16]
        Print the stages of the pipelines (default: linalg, loops, llvm).
  normgen-mlir compile FILE --out DIR --fragment F.json [--dtype LIST] [--source NAME] [--no-cpu] [--cuda]
        Write the mlir-cpu objects (and with --cuda the sm_90 PTX and ptxas cubins) of every
        storage type and their manifest entries (F.json).
options:
  --cuda-root DIR   the CUDA toolkit (libdevice, ptxas)
)";

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
    if (args.empty()) throw Usage("give a command: verify, explain or compile");
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
        return cmd_verify(v, [](const NormSpec &spec, DType dtype, const std::string &) { return mlirgen::make_jit_kernel(spec, dtype); });
    }
    if (cmd == "explain") {
        std::string file, stage;
        DType dtype = DType::F32;
        for (size_t i = 0; i < args.size(); ++i) {
            auto value = [&]() -> std::string {
                if (i + 1 >= args.size()) throw Usage(args[i] + " needs a value");
                return args[++i];
            };
            if (args[i] == "--stage") stage = value();
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
        mlirgen::explain(spec, dtype, stage, cuda_root, std::cout);
        return 0;
    }
    if (cmd == "compile") {
        std::string file, out, fragment, source;
        std::vector<DType> dtypes{DType::F32, DType::BF16, DType::F16};
        bool cpu = true, cuda = false;
        for (size_t i = 0; i < args.size(); ++i) {
            auto value = [&]() -> std::string {
                if (i + 1 >= args.size()) throw Usage(args[i] + " needs a value");
                return args[++i];
            };
            const std::string &a = args[i];
            if (a == "--out") out = value();
            else if (a == "--fragment") fragment = value();
            else if (a == "--source") source = value();
            else if (a == "--dtype") dtypes = parse_dtypes(value());
            else if (a == "--no-cpu") cpu = false;
            else if (a == "--cuda") cuda = true;
            else if (!a.empty() && a[0] == '-') throw Usage("compile: unknown option '" + a + "'");
            else file = a;
        }
        if (file.empty() || out.empty() || fragment.empty()) throw Usage("compile FILE --out DIR --fragment F.json");
        if (cuda && cuda_root.empty()) throw Usage("compile --cuda: no CUDA toolkit (give --cuda-root DIR)");
        NormSpec spec = load_norm_file(file);
        mlirgen::AotRequest req{source.empty() ? file : source, dtypes, out, cpu, cuda, cuda_root};
        nlohmann::json entries = mlirgen::compile_kernels(spec, req);
        write_file_atomically(fragment, entries.dump(1) + "\n");
        std::cerr << "normgen-mlir: " << spec.name << ": " << entries.size() << " kernels\n";
        return 0;
    }
    throw Usage("unknown command '" + cmd + "'");
}

}  // namespace

int main(int argc, char **argv) {
    try {
        return run(std::vector<std::string>(argv + 1, argv + argc));
    } catch (const Usage &e) {
        std::cerr << "normgen-mlir: " << e.what() << "\n(see normgen-mlir --help)\n";
        return 1;
    } catch (const DiagnosticError &e) {
        std::cerr << e.render();
        return 1;
    } catch (const UserError &e) {
        std::cerr << "normgen-mlir: error: " << e.what() << "\n";
        return 1;
    } catch (const std::exception &e) {
        std::cerr << "normgen-mlir: internal error: " << e.what() << "\n";
        return 2;
    }
}
