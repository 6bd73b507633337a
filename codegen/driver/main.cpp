// normgen: the command-line driver. Each subcommand is one step of the pipeline
//   .norm --parse--> AST --check--> NormSpec --(reference | backends)--> outputs
// Exit codes: 0 success, 1 user error (bad declaration, bad input), 2 internal error (a normgen bug).
#include "codegen/driver/catalog_table.h"
#include "codegen/driver/describe.h"
#include "codegen/driver/options.h"
#include "codegen/driver/report.h"
#include "codegen/driver/verify_cmd.h"
#include "codegen/halide/aot.h"
#include "codegen/halide/jit.h"
#include "dsl/checker.h"
#include "dsl/printer.h"
#include "runtime/errors.h"
#include "runtime/npy.h"
#include "runtime/reference/interpreter.h"

#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <cerrno>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace normgen;

namespace {

const char *kUsage = R"(normgen - declare a normalization layer once, get verified kernels for it.

usage: normgen <command> [options]

commands:
  check FILE...         Check .norm declarations; print located diagnostics.
                        Exit 0 when every file is valid, 1 otherwise.
  print FILE            Print the declaration in canonical form.
  describe FILE         Print the recorded facts: inputs, outputs, reduction stages and
                        their axes, eps placement, affine terms, precisions.
  catalog FILE...       One table row per declaration: reduction stages and axes, eps
                        placement, affine terms, outputs, and a float64 reference
                        evaluation on fresh random inputs (exit 1 if any row fails).
  verify FILE... [--backend halide|mlir] [--dtype f32,bf16,f16|all] [--target host,x86-64-avx2]
                 [--json] [--seed N] [--quick] [--failures]
                        (--quick: every fourth shape of the sweep; --failures: print
                        only the failing rows)
                        Compile the declaration (any .norm file) and check its kernels
                        against the float64 reference on a sweep of >= 20 shapes with
                        fresh random inputs (printed seed replays a run). Prints a table;
                        exit 0 only if every case passes. --backend mlir compiles the
                        declaration through the MLIR pipeline (linalg -> LLVM) for this
                        host (runs normgen-mlir, built beside normgen).
  explain FILE --backend mlir [--stage linalg|loops|llvm|gpu|nvvm|ptx] [--dtype f32|bf16|f16]
                        Print the declaration as each stage of the MLIR pipelines sees it
                        (default: every CPU stage): linalg (as lowered), loops (after
                        linalg -> loops; `vector` is accepted), llvm (optimized LLVM IR for
                        this host), gpu (the CUDA kernel in the gpu dialect), nvvm, ptx
                        (sm_90 PTX).
  compile FILE -o DIR [--backend halide] [--target host,x86-64-avx2] [--dtype f32,bf16,f16]
                        Generate the declaration's kernels ahead of time: for each type
                        and target a static library and header (C ABI, one halide_buffer_t
                        per tensor), the shared Halide runtime (halide_runtime.o), a
                        manifest.json and kernel_table.cpp for runtime/registry.h.
  run FILE --in NAME=FILE.npy... --out DIR [--backend reference|halide]
           [--dtype f32|bf16|f16] [--target host|x86-64-avx2] [--set NAME=VALUE...]
                        Evaluate the declaration on NumPy .npy inputs (every input and
                        parameter, by its declared name) and write each output as
                        DIR/NAME.npy (float64 holding the values as stored). With
                        --backend halide the kernel is compiled for the target and the
                        inputs are rounded to the storage type (--dtype) first. --set
                        overrides a declared const or fixes an axis extent (e.g. --set
                        eps=1e-6 --set g=4). Nothing is written unless every input is valid.
  report RESULTS.json -o DIR [--no-plots] [--print]
                        Turn normgen_bench's Google Benchmark JSON (--benchmark_out=FILE
                        --benchmark_out_format=json; scripts/bench.sh writes
                        build/bench.json) into DIR/report.md: per layer and case each
                        implementation's GB/s, % of the copy rooflines and the speedup
                        over the best vendor, a summary and every case normgen loses;
                        and DIR/LAYER.png plots (python3-matplotlib). Nothing is written
                        when the file is not valid. --print: the markdown to stdout too.

options:
  -h, --help            Show this help (also: normgen <command> --help).
  --version             Show the version.

exit codes: 0 success, 1 user error, 2 internal error.

examples:
  normgen check dsl/catalog/*.norm
  normgen describe dsl/catalog/group_norm_nhwc.norm
  normgen run dsl/catalog/rms_norm.norm --in x=x.npy --in weight=w.npy --out out/
  normgen report build/bench.json -o build/report
)";

int cmd_report(const std::vector<std::string> &args) {
    ReportOptions o;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string &a = args[i];
        if (a == "-o" || a == "--out") {
            if (i + 1 >= args.size()) throw Usage(a + " needs a folder");
            o.out_dir = args[++i];
        } else if (a == "--no-plots") {
            o.plots = false;
        } else if (a == "--print") {
            o.print = true;
        } else if (!a.empty() && a[0] == '-') {
            throw Usage("report: unknown option '" + a + "'");
        } else if (o.input.empty()) {
            o.input = a;
        } else {
            throw Usage("report: one results file at a time (got '" + o.input + "' and '" + a + "')");
        }
    }
    if (o.input.empty()) throw Usage("report: give the benchmark's JSON file");
    if (o.out_dir.empty()) throw Usage("report: give -o DIR");
    return run_report(o);
}

// The Halide JIT as the verifier's kernel.
class HalideVerifyKernel : public VerifyKernel {
public:
    HalideVerifyKernel(const NormSpec &spec, DType dtype, const std::string &target)
        : k_(spec, dtype, hl::parse_target(target), hl::CpuSchedule{}, true) {}
    TensorMap run(const TensorMap &in, const Overrides &ov) const override { return k_.run(in, ov); }
    StorageMap storage() const override { return StorageMap(k_.types().storage.begin(), k_.types().storage.end()); }

private:
    hl::JitKernel k_;
};

// The MLIR backend lives in its own executable (MLIR and Halide each carry their own LLVM):
// normgen-mlir, installed beside this binary. Replaces this process with it.
[[noreturn]] void exec_mlir(const std::string &cmd, const std::vector<std::string> &rest) {
    std::error_code ec;
    fs::path self = fs::read_symlink("/proc/self/exe", ec);
    fs::path tool = ec ? fs::path("normgen-mlir") : self.parent_path() / "normgen-mlir";
    if (!fs::exists(tool))
        throw UserError("the MLIR backend is not in this build (no " + tool.filename().string() +
                        " beside normgen; configure with -DNORMGEN_WITH_MLIR=ON)");
    std::vector<std::string> args{tool.string(), cmd};
    args.insert(args.end(), rest.begin(), rest.end());
    std::vector<char *> argv;
    for (std::string &a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::cout.flush();
    execv(tool.c_str(), argv.data());
    throw UserError("cannot run " + tool.string() + ": " + std::strerror(errno));
}

int cmd_verify_any(const std::vector<std::string> &rest) {
    VerifyArgs v = parse_verify_args(rest);
    if (v.backend == "mlir") exec_mlir("verify", rest);
    return cmd_verify(v, [](const NormSpec &spec, DType dtype, const std::string &target) -> std::unique_ptr<VerifyKernel> {
        return std::make_unique<HalideVerifyKernel>(spec, dtype, target);
    });
}

int cmd_explain(const std::vector<std::string> &rest) {
    std::string backend;
    for (size_t i = 0; i + 1 < rest.size(); ++i)
        if (rest[i] == "--backend") backend = rest[i + 1];
    if (backend != "mlir") throw Usage("explain: give --backend mlir (the stages of the MLIR pipelines)");
    exec_mlir("explain", rest);
}

int cmd_check(const std::vector<std::string> &files) {
    if (files.empty()) throw Usage("check: give at least one .norm file");
    int bad = 0;
    for (const auto &f : files) {
        try {
            load_norm_file(f);
        } catch (const DiagnosticError &e) {
            std::cerr << e.render();
            ++bad;
        }
    }
    if (bad) std::cerr << bad << " of " << files.size() << " file" << (files.size() == 1 ? "" : "s") << " had errors\n";
    return bad ? 1 : 0;
}

std::pair<std::string, std::string> split_assignment(const std::string &arg, const char *flag) {
    size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size())
        throw Usage(std::string(flag) + " expects NAME=VALUE, got '" + arg + "'");
    return {arg.substr(0, eq), arg.substr(eq + 1)};
}

int cmd_run(const std::vector<std::string> &args) {
    std::string file, out_dir, backend = "reference", target = "host";
    DType dtype = DType::F32;
    std::vector<std::pair<std::string, std::string>> ins;
    Overrides overrides;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string &a = args[i];
        auto value = [&](const char *flag) -> std::string {
            if (i + 1 >= args.size()) throw Usage(std::string(flag) + " needs a value");
            return args[++i];
        };
        if (a == "--in") ins.push_back(split_assignment(value("--in"), "--in"));
        else if (a == "--out" || a == "-o") out_dir = value("--out");
        else if (a == "--backend") backend = value("--backend");
        else if (a == "--target") target = value("--target");
        else if (a == "--dtype") {
            std::vector<DType> d = parse_dtypes(value("--dtype"));
            if (d.size() != 1) throw Usage("run: --dtype takes one storage type");
            dtype = d[0];
        } else if (a == "--set") {
            auto [name, v] = split_assignment(value("--set"), "--set");
            char *end = nullptr;
            double d = std::strtod(v.c_str(), &end);
            if (!end || *end) throw Usage("--set " + name + ": '" + v + "' is not a number");
            overrides[name] = d;
        } else if (!a.empty() && a[0] == '-') throw Usage("run: unknown option '" + a + "'");
        else if (file.empty()) file = a;
        else throw Usage("run: one .norm file at a time (got '" + file + "' and '" + a + "')");
    }
    if (file.empty()) throw Usage("run: give a .norm file");
    if (out_dir.empty()) throw Usage("run: give --out DIR");
    if (backend != "reference" && backend != "halide")
        throw UserError("run: backend '" + backend + "' is not available in this build (available: reference, halide)");

    NormSpec spec = load_norm_file(file);
    TensorMap inputs;
    for (const auto &[name, path] : ins) {
        if (!spec.find_tensor(name)) {
            std::string known;
            for (const auto &t : spec.tensors) known += (known.empty() ? "" : ", ") + t.name;
            throw UserError("--in " + name + ": '" + spec.name + "' has no input or parameter named '" + name + "' (it has: " + known + ")");
        }
        if (inputs.count(name)) throw UserError("--in " + name + ": given twice");
        inputs[name] = read_npy(path);
    }
    // Evaluate everything before creating the output folder: a bad call writes nothing.
    TensorMap outputs;
    if (backend == "reference") {
        outputs = evaluate_reference(spec, inputs, overrides);
    } else {
        // Constants are compiled into the kernel; axis extents (e.g. the group count) are not.
        validate_overrides(spec, overrides);
        Overrides consts, axes;
        for (const auto &[name, v] : overrides) (spec.find_const(name) ? consts : axes)[name] = v;
        bind_axes(spec, inputs, axes);  // refuse a bad call before compiling
        hl::JitKernel k(spec, dtype, hl::parse_target(target), hl::CpuSchedule{}, true, consts);
        outputs = k.run(inputs, axes);  // inputs are rounded to the storage types on the way in
    }
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) throw UserError("--out " + out_dir + ": cannot create folder: " + ec.message());
    for (const OutputInfo &o : spec.outputs) {
        std::string path = (fs::path(out_dir) / (o.name + ".npy")).string();
        write_npy(path, outputs.at(o.name));
        std::cout << "wrote " << path << " " << shape_text(outputs.at(o.name).shape) << "\n";
    }
    return 0;
}

// normgen compile FILE --backend halide --target host|x86-64-avx2 --dtype bf16 -o DIR
// The user path: static libraries + headers for the chosen types and targets, the Halide runtime
// they share, a manifest, and the kernel table (runtime/kernel_table.h) to link with them.
int cmd_compile(const std::vector<std::string> &args) {
    std::string file, out_dir, backend = "halide";
    std::vector<DType> dtypes{DType::F32};
    std::vector<std::string> targets{"host"};
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string &a = args[i];
        auto value = [&](const char *flag) -> std::string {
            if (i + 1 >= args.size()) throw Usage(std::string(flag) + " needs a value");
            return args[++i];
        };
        if (a == "--out" || a == "-o") out_dir = value("-o");
        else if (a == "--backend") backend = value("--backend");
        else if (a == "--target") targets = split_list(value("--target"));
        else if (a == "--dtype") dtypes = parse_dtypes(value("--dtype"));
        else if (!a.empty() && a[0] == '-') throw Usage("compile: unknown option '" + a + "'");
        else if (file.empty()) file = a;
        else throw Usage("compile: one .norm file at a time (got '" + file + "' and '" + a + "')");
    }
    if (file.empty()) throw Usage("compile: give a .norm file");
    if (out_dir.empty()) throw Usage("compile: give -o DIR");
    if (backend != "halide") throw UserError("compile: backend '" + backend + "' is not available (available: halide)");
    if (targets.empty()) throw Usage("--target: give at least one target");
    for (const std::string &t : targets) hl::parse_target(t);  // refuse a bad target before writing
    NormSpec spec = load_norm_file(file);
    hl::AotRequest req{file, dtypes, targets, out_dir, {}};
    nlohmann::json entries = hl::compile_halide_kernels(spec, req);
    hl::compile_halide_runtime((fs::path(out_dir) / "halide_runtime.o").string());
    write_manifest(entries, (fs::path(out_dir) / "manifest.json").string());
    write_kernel_table(entries, (fs::path(out_dir) / "kernel_table.cpp").string());
    for (const auto &e : entries)
        std::cout << "wrote " << (fs::path(out_dir) / e["library"].get<std::string>()).string() << " and "
                  << e["header"].get<std::string>() << "  (" << e["schedule"].get<std::string>() << ")\n";
    std::cout << "wrote " << (fs::path(out_dir) / "halide_runtime.o").string() << ", manifest.json, kernel_table.cpp\n";
    return 0;
}

int dispatch(int argc, char **argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) {
        std::cerr << kUsage;
        return 1;
    }
    for (const auto &a : args)
        if (a == "-h" || a == "--help") {
            std::cout << kUsage;
            return 0;
        }
    std::string cmd = args[0];
    std::vector<std::string> rest(args.begin() + 1, args.end());
    if (cmd == "--version") {
        std::cout << "normgen 0.1.0\n";
        return 0;
    }
    if (cmd == "check") return cmd_check(rest);
    if (cmd == "print" || cmd == "describe") {
        if (rest.size() != 1) throw Usage(cmd + ": give exactly one .norm file");
        NormSpec spec = load_norm_file(rest[0]);
        std::cout << (cmd == "print" ? print_norm(spec) : describe_norm(spec));
        return 0;
    }
    if (cmd == "run") return cmd_run(rest);
    if (cmd == "verify") return cmd_verify_any(rest);
    if (cmd == "explain") return cmd_explain(rest);
    if (cmd == "compile") return cmd_compile(rest);
    if (cmd == "report") return cmd_report(rest);
    if (cmd == "catalog") {
        if (rest.empty()) throw Usage("catalog: give at least one .norm file");
        bool ok = true;
        std::cout << catalog_table(rest, ok);
        return ok ? 0 : 1;
    }
    throw Usage("unknown command '" + cmd + "'");
}

}  // namespace

int main(int argc, char **argv) {
    try {
        return dispatch(argc, argv);
    } catch (const Usage &e) {
        std::cerr << "normgen: " << e.what() << "\n(see normgen --help)\n";
        return 1;
    } catch (const DiagnosticError &e) {
        std::cerr << e.render();
        return 1;
    } catch (const UserError &e) {
        std::cerr << "normgen: error: " << e.what() << "\n";
        return 1;
    } catch (const std::exception &e) {
        std::cerr << "normgen: internal error: " << e.what() << "\n(this is a bug in normgen; please report it)\n";
        return 2;
    }
}
