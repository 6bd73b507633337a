// normgen: the command-line driver. Each subcommand is one step of the pipeline
//   .norm --parse--> AST --check--> NormSpec --(reference | backends)--> outputs
// Exit codes: 0 success, 1 user error (bad declaration, bad input), 2 internal error (a normgen bug).
#include "codegen/common/kernel_plan.h"
#include "codegen/common/manifest.h"
#include "codegen/common/schedule_record.h"
#include "codegen/common/tuning_db.h"
#include "codegen/driver/catalog_table.h"
#include "codegen/driver/describe.h"
#include "codegen/driver/torch_cmd.h"
#include "codegen/driver/tune.h"
#include "runtime/reference/invariants.h"
#include "codegen/driver/report.h"
#include "codegen/halide/aot.h"
#include "codegen/halide/jit.h"
#include "codegen/tool/options.h"
#include "codegen/tool/run_cmd.h"
#include "codegen/tool/tool_main.h"
#include "codegen/tool/verify_cmd.h"
#include "dsl/checker.h"
#include "dsl/grad.h"
#include "dsl/printer.h"
#include "runtime/errors.h"
#include "runtime/npy.h"
#include "runtime/reference/interpreter.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <cerrno>
#include <filesystem>
#include <fstream>
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
  grad FILE [-o OUT.norm] [--recompute]
                        The backward layer, as a declaration: reverse-mode differentiation
                        of FILE. Inputs: the forward's inputs and parameters the gradients
                        read, its optional outputs (saved statistics such as mu, rstd) and
                        d_<out> for every output that is neither optional nor `updates`;
                        outputs: d_<name> for every input and parameter those depend on.
                        --recompute: recompute the statistics instead of reading saved ones.
                        Prints it (or writes OUT.norm); exit 1 if FILE cannot be
                        differentiated (located diagnostic).
  describe FILE [--plan [--json] [--dtype T]]
                        Print the recorded facts: inputs, outputs, reduction stages and
                        their axes, eps placement, affine terms, precisions, rounding
                        points. --plan: the kernel plan of each variant instead (argument
                        ABI, per stage the reduced and kept axes, main output, layout
                        class and why, split axes, CUDA blocks, the kernels), as text or
                        JSON.
  describe FILE... --invariants [--samples AXES] [--units AXES] [--transform TENSORS]
                   [--seed N] [--json]
                        Which of the six transformations of the LayerNorm paper's table
                        (weight-matrix re-scaling and re-centering, weight-vector
                        re-scaling, dataset re-scaling and re-centering, single-case
                        re-scaling) leave the layer's outputs unchanged, on its own axes:
                        its normalized tensor read as a = W x with sample axes (the
                        outermost), unit axes (those of its per-unit parameters) and
                        positions (the rest); --samples / --units override the roles.
                        Decided on the float64 reference with eps = 0 (random draws), with
                        a symbolic argument where the declaration makes it evident.
                        Several files: one table.
  catalog FILE...       One table row per declaration: reduction stages and axes, eps
                        placement, affine terms, outputs, and a float64 reference
                        evaluation on fresh random inputs (exit 1 if any row fails).
  verify FILE... [--backend halide|mlir] [--dtype f32,bf16,f16|all] [--target host,x86-64-avx2|host-opencl|cuda-emulated]
                 [--schedule KNOBS|FILE.json] [--json] [--seed N] [--quick] [--failures] [--grad]
                 [--variant core|full]
                        (--quick: 9 shapes of the sweep (widths 1, 17, 4097, 262144, one row,
                        20 000 short rows, 130, 8193, 7 groups of 7); --failures: print
                        only the failing rows; --grad: the backward layer `normgen grad`
                        derives, on the forward's shape sweep, its inputs drawn as the
                        forward's with the saved statistics the float64 forward computes
                        from them and upstream gradients N(0, 1))
                        Compile the declaration (any .norm file) and check its kernels
                        against the float64 reference on a sweep of >= 20 shapes with
                        fresh random inputs (printed seed replays a run). Prints a table;
                        exit 0 only if every case passes. --backend mlir compiles the
                        declaration through the MLIR pipeline (linalg -> LLVM) for this
                        host (runs normgen-mlir, built beside normgen). --schedule
                        overrides knobs of every kernel's schedule record
                        ('vector_width=8,row_accumulators=2' or a JSON record).
                        --target host-opencl: the Halide GPU schedule (halide-gpu record)
                        compiled for OpenCL and run on this machine's OpenCL device (PoCL on
                        the CPU: the GPU schedule's logic checked, not its speed).
                        --backend mlir --target cuda-emulated: the mlir-cuda kernel's
                        gpu-dialect module run on this CPU, one fiber per thread, barriers
                        honoured, launched as on a GPU (its logic, not its speed).
                        --variant core: the kernel without the optional outputs (default
                        full: with them).
  explain FILE --backend mlir [--stage linalg|loops|llvm|gpu|nvvm|ptx] [--dtype f32|bf16|f16] [--locations]
                 [--schedule KNOBS]
                        Print the declaration as each stage of the MLIR pipelines sees it
                        (default: every CPU stage): linalg (as lowered), loops (after
                        linalg -> loops; `vector` is accepted), llvm (optimized LLVM IR for
                        this host), gpu (the CUDA kernel in the gpu dialect), nvvm, ptx
                        (sm_90 PTX). --locations: beside each op, the file:line:col of the
                        declaration's node it came from. --schedule: knobs over the CPU
                        kernel's default mlir-cpu record (e.g. pipeline_elements=16384).
  compile FILE -o DIR [--backend halide|mlir] [--target host,x86-64-avx2] [--dtype f32,bf16,f16]
                 [--schedule KNOBS|FILE.json] [--archive NAME.a] [--grad] [--tuning DIR]
                        Generate the declaration's kernels ahead of time: for each type,
                        target and variant an object and header (C ABI, one
                        halide_buffer_t per tensor), all in one static library (NAME.a,
                        default <layer>.a; <layer>.mlir.a for mlir), the shared Halide
                        runtime (halide_runtime.o), a manifest.json (with each kernel's
                        schedule record) and kernel_table.cpp for runtime/registry.h.
                        --backend mlir: the MLIR CPU kernels for this host.
                        --grad: the kernels of the backward (`normgen grad FILE`), layer
                        <name>_grad, marked "grad_of" in the manifest (Registry::select_grad).
                        --tuning DIR: also one kernel per schedule the tuning database
                        DIR chose (`normgen tune`), which Registry::select_for picks by
                        the call's shape class and this CPU.
  merge --manifest M.json --table T.cpp MANIFEST.json...
                        Merge the manifests of several compiles into one manifest and one
                        kernel table (file paths made relative to M.json's folder; a
                        kernel listed twice is refused). normgen_add_kernels() runs it.
  torch FILE.norm... -o DIR [--name NAME] [--dtype f32,bf16] [--backend halide|mlir]
                        A PyTorch extension for the declarations: torch.ops.normgen.<layer>
                        and <layer>_backward, built into DIR/lib<NAME>.so (a CMake project:
                        normgen_add_kernels GRAD ON + normgen_add_torch_ops); from Python,
                        normgen.torch.load(DIR) gives autograd functions and nn.Modules.
                        (normgen torch --help)
  run FILE --in NAME=FILE.npy... --out DIR [--backend reference|halide|mlir]
           [--dtype f32|bf16|f16] [--target host|x86-64-avx2] [--set NAME=VALUE...]
           [--schedule KNOBS|FILE.json] [--device cpu|cuda|opencl]
                        Evaluate the declaration on NumPy .npy inputs (every input and
                        parameter, by its declared name) and write each output as
                        DIR/NAME.npy (float64 holding the values as stored). With
                        --backend halide or mlir the kernel is compiled for the target and
                        the inputs are rounded to the storage type (--dtype) first. --set
                        overrides a declared const or fixes an axis extent (e.g. --set
                        eps=1e-6 --set g=4). Nothing is written unless every input is valid.
                        --device cuda|opencl: the Halide GPU kernel (halide-gpu schedule) on
                        that device; without one, "no CUDA device: ..." and exit 1.
  tune FILE.norm... | --catalog [--backend halide,mlir] [--dtype ...] [--shapes grid|SIZES;...]
                    [--budget SECONDS] [--time MINUTES] [--db DIR] [--grad]
                        Search each declaration's schedules (both backends, the knobs of its
                        schedule records) for its shape classes on this machine: every
                        candidate verified against the float64 reference, then timed
                        interleaved with the defaults and the copy rooflines; the choices go
                        to the tuning database DIR (records/, best/<layer>.json), which
                        `compile --tuning DIR` builds into kernels that Registry::select_for
                        picks by shape. --catalog --time MINUTES: every catalog layer's
                        grid classes within that time, then what it found. (normgen tune --help)
  autoschedule FILE.norm... -o DIR [--shapes grid|SIZES;...] [--dtype ...] [--grad]
                        Halide's autoschedulers (Adams2019, Li2018, Mullapudi2016) on the
                        same algorithm, per shape, as kernel libraries in DIR for
                        normgen_bench --normgen_extra=DIR. (normgen autoschedule --help)
  describe FILE --shape SIZES [--dtype T] [--db DIR] [--grad]
                        Which schedule a call of that shape (rows=4096,d=4096) gets on
                        this CPU from the tuning database (default generated/tuning), and
                        why: the call's shape class and limit, the tuned choice for the
                        nearest class on the nearest CPU (or the default), its
                        measurement. A program's registry chooses among its built kernels
                        the same way (Registry::select_for, whose Selection::why says it).
  report RESULTS.json... -o DIR [--no-plots] [--print]
                        Turn normgen_bench's Google Benchmark JSON (--benchmark_out=FILE
                        --benchmark_out_format=json; scripts/bench.sh writes
                        build/bench.json) into DIR/report.md: per layer and case each
                        implementation's GB/s, % of the copy rooflines and the speedup
                        over the best vendor, a summary and every case normgen loses;
                        and DIR/LAYER.png plots (python3-matplotlib). Several files:
                        runs of the same grid, each case taken whole from the run whose
                        tuned row is its median (a noisy machine: run it three times).
                        Nothing is written when a file is not valid. --print: the
                        markdown to stdout too.

options:
  -h, --help            Show this help (also: normgen <command> --help).
  --version             Show the version.

exit codes: 0 success, 1 user error, 2 internal error.

examples:
  normgen check dsl/catalog/*.norm
  normgen describe dsl/catalog/group_norm_nhwc.norm --plan
  normgen verify my_variant.norm --schedule 'row_accumulators=2,sum_block=32'
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
        } else {
            o.inputs.push_back(a);
        }
    }
    if (o.inputs.empty()) throw Usage("report: give the benchmark's JSON file");
    if (o.out_dir.empty()) throw Usage("report: give -o DIR");
    return run_report(o);
}

// The Halide JIT as the tools' kernel (with the optional outputs).
std::unique_ptr<CompiledKernel> halide_factory(const NormSpec &spec, DType dtype, const std::string &target, const std::string &schedule,
                                               Variant variant) {
    return std::make_unique<hl::JitKernel>(spec, dtype, hl::parse_target(target), variant, schedule);
}

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
    return cmd_verify(v, halide_factory);
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

int cmd_run_any(const std::vector<std::string> &rest) {
    RunArgs r = parse_run_args(rest);
    if (r.backend == "mlir") exec_mlir("run", rest);
    if (r.backend != "reference" && r.backend != "halide")
        throw UserError("run: unknown backend '" + r.backend + "' (available: reference, halide, mlir)");
    KernelFactory halide = halide_factory;
    return cmd_run(r, &halide);
}

// normgen compile FILE --backend halide|mlir --target host|x86-64-avx2 --dtype bf16 -o DIR
// The user path: the kernels of the chosen types and targets (an object + header each, all in one
// static library), the Halide runtime they share, a manifest, and the kernel table
// (runtime/kernel_table.h) to link with them.
int cmd_compile(const std::vector<std::string> &args) {
    std::string file, out_dir, backend = "halide", schedule, archive, tuning;
    std::vector<DType> dtypes{DType::F32};
    std::vector<std::string> targets{"host"};
    bool targets_given = false, grad = false;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string &a = args[i];
        auto value = [&](const char *flag) -> std::string {
            if (i + 1 >= args.size()) throw Usage(std::string(flag) + " needs a value");
            return args[++i];
        };
        if (a == "--out" || a == "-o") out_dir = value("-o");
        else if (a == "--grad") grad = true;
        else if (a == "--backend") backend = value("--backend");
        else if (a == "--target") {
            targets = split_list(value("--target"));
            targets_given = true;
        } else if (a == "--dtype") dtypes = parse_dtypes(value("--dtype"));
        else if (a == "--schedule") schedule = value("--schedule");
        else if (a == "--archive") archive = value("--archive");
        else if (a == "--tuning") tuning = value("--tuning");
        else if (!a.empty() && a[0] == '-') throw Usage("compile: unknown option '" + a + "'");
        else if (file.empty()) file = a;
        else throw Usage("compile: one .norm file at a time (got '" + file + "' and '" + a + "')");
    }
    if (file.empty()) throw Usage("compile: give a .norm file");
    if (out_dir.empty()) throw Usage("compile: give -o DIR");
    if (backend != "halide" && backend != "mlir") throw Usage("compile: unknown backend '" + backend + "' (available: halide, mlir)");
    if (targets.empty()) throw Usage("--target: give at least one target");
    if (archive.find('/') != std::string::npos) throw Usage("--archive: a file name inside -o DIR, not a path");
    NormSpec spec = load_norm_file(file);  // a bad declaration is refused before anything is written
    std::string grad_of;
    if (grad) {
        grad_of = spec.name;
        spec = differentiate(spec).spec;  // so is one that cannot be differentiated
    }
    check_schedule_overrides(backend == "mlir" ? ScheduleKind::MlirCpu : ScheduleKind::HalideCpu, schedule);
    if (backend == "mlir") {
        if (targets_given && (targets.size() != 1 || targets[0] != "host"))
            throw Usage("compile: the mlir backend compiles for target 'host' (mlir-cpu)");
        // MLIR kernels run on Halide's thread pool: the runtime object comes from here, the kernels
        // from normgen-mlir (its own LLVM), which also writes the manifest and the table.
        fs::create_directories(out_dir);
        hl::compile_halide_runtime((fs::path(out_dir) / "halide_runtime.o").string());
        std::string dtype_list;
        for (DType d : dtypes) dtype_list += (dtype_list.empty() ? "" : ",") + std::string(dtype_name(d));
        std::vector<std::string> rest{file, "--out", out_dir, "--source", file, "--dtype", dtype_list,
                                      "--manifest", (fs::path(out_dir) / "manifest.json").string(),
                                      "--table", (fs::path(out_dir) / "kernel_table.cpp").string()};
        if (!archive.empty()) rest.insert(rest.end(), {"--archive", archive});
        if (!schedule.empty()) rest.insert(rest.end(), {"--schedule", schedule});
        if (!tuning.empty()) rest.insert(rest.end(), {"--tuning", tuning});
        if (grad) rest.push_back("--grad");
        exec_mlir("compile", rest);
    }
    for (const std::string &t : targets) hl::parse_target(t);  // refuse a bad target before writing
    hl::AotRequest req;
    req.source = file;
    req.dtypes = dtypes;
    req.targets = targets;
    req.out_dir = out_dir;
    req.archive = archive;
    req.schedule_overrides = schedule;
    req.grad_of = grad_of;
    req.tuning_dir = tuning;
    nlohmann::json entries = hl::compile_halide_kernels(spec, req);
    hl::compile_halide_runtime((fs::path(out_dir) / "halide_runtime.o").string());
    write_manifest(entries, (fs::path(out_dir) / "manifest.json").string());
    write_kernel_table(entries, (fs::path(out_dir) / "kernel_table.cpp").string());
    for (const auto &e : entries)
        std::cout << "wrote " << e["function"].get<std::string>() << " (" << e["header"].get<std::string>() << "): "
                  << e["schedule_text"].get<std::string>() << "\n";
    std::cout << "wrote " << (fs::path(out_dir) / (entries.empty() ? std::string("?") : entries[0]["library"].get<std::string>())).string()
              << ", halide_runtime.o, manifest.json, kernel_table.cpp\n";
    return 0;
}

// normgen describe FILE... --invariants [--samples AXES] [--units AXES] [--transform TENSORS] [--seed N] [--json]
int cmd_invariants(const std::vector<std::string> &files, const InvarianceOptions &opt, bool json) {
    if (files.size() > 1 && (!opt.sample_axes.empty() || !opt.unit_axes.empty() || !opt.transformed.empty()))
        throw Usage("describe --invariants: --samples, --units and --transform apply to one file at a time");
    std::vector<InvarianceReport> reports;
    for (const std::string &f : files) reports.push_back(invariance_table(load_norm_file(f), opt));
    if (json) {
        nlohmann::json all = nlohmann::json::array();
        for (const InvarianceReport &r : reports) {
            nlohmann::json rows = nlohmann::json::array();
            for (const InvarianceRow &row : r.rows)
                rows.push_back({{"transform", row.transform}, {"invariant", row.invariant}, {"action", row.action},
                                {"max_change", row.max_change}, {"argument", row.argument}});
            all.push_back({{"layer", r.layer}, {"normalized", r.normalized}, {"weight_layer", r.weight_layer},
                           {"samples", r.sample_axes}, {"units", r.unit_axes}, {"positions", r.position_axes},
                           {"transformed", r.transformed}, {"judged", r.judged}, {"eps_zeroed", r.zeroed}, {"rows", rows}});
        }
        std::cout << (files.size() == 1 ? all[0] : all).dump(1) << "\n";
        return 0;
    }
    if (files.size() == 1) {
        std::cout << invariance_text(reports[0]);
        return 0;
    }
    // Several files: one table, a row per layer (as in the README).
    std::cout << "| layer | samples / units / positions |";
    for (const std::string &t : invariance_transforms()) std::cout << " " << t << " |";
    std::cout << "\n|---|---|";
    for (size_t i = 0; i < invariance_transforms().size(); ++i) std::cout << "---|";
    std::cout << "\n";
    for (const InvarianceReport &r : reports) {
        auto list = [](const std::vector<std::string> &v) {
            std::string s;
            for (const auto &x : v) s += (s.empty() ? "" : ",") + x;
            return s.empty() ? std::string("-") : s;
        };
        std::cout << "| " << r.layer << " | "
                  << (r.weight_layer ? "weight " + r.normalized + ": units " + list(r.unit_axes)
                                     : list(r.sample_axes) + " / " + list(r.unit_axes) + " / " + list(r.position_axes))
                  << " |";
        for (const InvarianceRow &row : r.rows) std::cout << " " << (row.invariant ? (row.argument.empty() ? "yes" : "yes*") : "no") << " |";
        std::cout << "\n";
    }
    std::cout << "\nyes*: also shown symbolically; eps-like constants set to 0 (normgen describe FILE --invariants gives the details)\n";
    return 0;
}

// normgen describe FILE [--plan [--json] [--dtype T]] | FILE... --invariants [...]
int cmd_grad(const std::vector<std::string> &args) {
    std::string file, out;
    GradOptions opts;
    for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "-o") {
            if (i + 1 >= args.size()) throw Usage("grad: -o needs a file name");
            out = args[++i];
        } else if (args[i] == "--recompute") {
            opts.recompute = true;
        } else if (!args[i].empty() && args[i][0] == '-') {
            throw Usage("grad: unknown option '" + args[i] + "'");
        } else if (file.empty()) {
            file = args[i];
        } else {
            throw Usage("grad: give exactly one .norm file");
        }
    }
    if (file.empty()) throw Usage("grad: give a .norm file");
    GradResult g = differentiate(load_norm_file(file), opts);
    if (out.empty()) {
        std::cout << g.text;
        return 0;
    }
    write_file_atomically(out, g.text);
    std::cerr << "grad: wrote " << out << " (" << g.spec.name << ": " << g.gradients.size() << " gradients)\n";
    return 0;
}

// normgen describe FILE --shape SIZES [--dtype T] [--db DIR] [--grad]: which schedule a call of
// that shape gets on this CPU from the tuning database, and why (the registry's own choice,
// Registry::select_for, ranks the built kernels by the same score).
int cmd_describe_shape(const std::string &file, const std::string &shape, DType dtype, const std::string &db, bool grad) {
    NormSpec spec = load_norm_file(file);
    if (grad) spec = differentiate(spec).spec;
    const std::vector<int64_t> ext = extents_from_sizes(spec, parse_sizes(shape));
    const CpuFingerprint &cpu = this_cpu();
    const KernelPlan plan = make_plan(spec, dtype, Variant::Core);
    const ShapeClass cls = shape_class(spec, plan, ext, cpu);
    const LayerLimit limit = layer_limit(spec, plan, ext, cpu);
    std::cout << spec.name << " " << dtype_name(dtype) << " at " << sizes_text(spec, ext) << " on " << cpu.text() << "\n"
              << "  shape class: " << cls.key() << " (" << plan_bytes(spec, plan, ext) << " bytes a call)\n"
              << "  limit: " << (limit.reads_twice ? "a read of x + a copy" : "a copy") << " (" << limit.why << ")\n";
    std::vector<std::string> notes;
    const std::vector<TuningRecord> best = TuningDb(db).best(spec.name, kernel_identity(spec), &notes);
    for (const std::string &n : notes) std::cout << "  note: " << n << "\n";
    const TuningRecord *pick = nullptr;
    double score = 0;
    for (const TuningRecord &r : best) {
        if (r.dtype != dtype_name(dtype) || r.variant != "core") continue;
        const double s = tuned_match_score(cls, cpu, r.shape, r.cpu, r.result.vs_fallback);
        if (!std::isfinite(s) && shape_distance(cls, r.shape) <= kNearShape)
            if (std::string why = foreign_refusal(cpu, r.cpu, r.result.vs_fallback); !why.empty())
                std::cout << "  not taken: " << r.backend << " choice for " << r.shape.key() << " on " << r.cpu.text() << ": " << why << "\n";
        if (std::isfinite(s) && (!pick || s < score)) {
            pick = &r;
            score = s;
        }
    }
    const Isa isa = hl::isa_of(hl::parse_target("host"));
    if (!pick) {
        std::cout << "  schedule: the default (" << best.size() << " tuned entr" << (best.size() == 1 ? "y" : "ies") << " for " << spec.name
                  << " in " << db << ", none for this class on a CPU like this one)\n"
                  << "    " << choose_schedule(plan, ScheduleKind::HalideCpu, isa).to_json().dump() << "\n";
        return 0;
    }
    std::cout << "  schedule: tuned, " << pick->backend << " (chosen " << pick->when << " for class " << pick->shape.key()
              << (pick->shape.key() == cls.key() ? "" : ", the nearest") << " on " << pick->cpu.text() << ")\n"
              << "    " << pick->schedule.dump() << "\n";
    char line[256];
    std::snprintf(line, sizeof line, "    measured at %s: %.2f GB/s = %.0f%% of %s (%.1f GB/s, %.1f-%.1f), %.2fx the halide default\n",
                  [&] {
                      std::string t;
                      for (const auto &[k, v] : pick->sizes) t += (t.empty() ? "" : ",") + k + "=" + std::to_string(v);
                      return t;
                  }().c_str(),
                  pick->result.gbps, 100 * pick->result.frac, pick->result.limit.c_str(), pick->result.limit_gbps, pick->result.limit_p20_gbps,
                  pick->result.limit_p80_gbps, pick->result.vs_default);
    std::cout << line;
    const ScheduleKind kind = pick->backend == "mlir" ? ScheduleKind::MlirCpu : ScheduleKind::HalideCpu;
    const ScheduleRecord rec = ScheduleRecord::from_json(pick->schedule, kind, db);
    const StreamingRequirement st = streaming_requirement(spec, plan, rec);
    if (st.alignment)
        std::cout << "    streaming stores: a call whose " << st.outputs.front() << " is not " << st.alignment << "-byte aligned, or whose "
                  << st.inner_axis << " is not a multiple of " << st.multiple << ", gets the default kernel\n";
    return 0;
}

int cmd_describe(const std::vector<std::string> &args) {
    std::vector<std::string> files;
    bool plan = false, json = false, invariants = false, grad = false;
    std::string shape, db = "generated/tuning";
    DType dtype = DType::F32;
    InvarianceOptions inv;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string &a = args[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= args.size()) throw Usage(a + " needs a value");
            return args[++i];
        };
        if (a == "--plan") plan = true;
        else if (a == "--shape") shape = value();
        else if (a == "--db") db = value();
        else if (a == "--grad") grad = true;
        else if (a == "--json") json = true;
        else if (a == "--invariants") invariants = true;
        else if (a == "--samples") inv.sample_axes = split_list(value());
        else if (a == "--units") inv.unit_axes = split_list(value());
        else if (a == "--transform") inv.transformed = split_list(value());
        else if (a == "--seed") inv.seed = parse_seed(value());
        else if (a == "--dtype") {
            std::vector<DType> d = parse_dtypes(value());
            if (d.size() != 1) throw Usage("describe: --dtype takes one storage type");
            dtype = d[0];
        } else if (!a.empty() && a[0] == '-') throw Usage("describe: unknown option '" + a + "'");
        else files.push_back(a);
    }
    if (files.empty()) throw Usage("describe: give a .norm file");
    if (plan && invariants) throw Usage("describe: --plan or --invariants, not both");
    if (!invariants && (!inv.sample_axes.empty() || !inv.unit_axes.empty() || !inv.transformed.empty()))
        throw Usage("describe: --samples, --units and --transform go with --invariants");
    if (invariants) return cmd_invariants(files, inv, json);
    if (files.size() > 1) throw Usage("describe: one .norm file at a time (several only with --invariants)");
    const std::string &file = files[0];
    if (!shape.empty()) {
        if (plan || json) throw Usage("describe: --shape goes without --plan and --json");
        return cmd_describe_shape(file, shape, dtype, db, grad);
    }
    if (grad) throw Usage("describe: --grad goes with --shape");
    if (json && !plan) throw Usage("describe: --json goes with --plan or --invariants");
    NormSpec spec = load_norm_file(file);
    if (!plan) {
        std::cout << describe_norm(spec);
        return 0;
    }
    nlohmann::json plans = nlohmann::json::array();
    for (Variant v : variants_of(spec)) {
        KernelPlan p = make_plan(spec, dtype, v);
        if (json) plans.push_back(plan_json(spec, p));
        else std::cout << plan_text(spec, p);
    }
    if (json) std::cout << nlohmann::json{{"layer", spec.name}, {"source", file}, {"plans", plans}}.dump(1) << "\n";
    return 0;
}

// normgen merge --manifest M.json --table T.cpp MANIFEST.json...
int cmd_merge(const std::vector<std::string> &args) {
    std::string manifest, table;
    std::vector<std::string> inputs;
    for (size_t i = 0; i < args.size(); ++i) {
        auto value = [&]() -> std::string {
            if (i + 1 >= args.size()) throw Usage(args[i] + " needs a value");
            return args[++i];
        };
        if (args[i] == "--manifest") manifest = value();
        else if (args[i] == "--table") table = value();
        else if (!args[i].empty() && args[i][0] == '-') throw Usage("merge: unknown option '" + args[i] + "'");
        else inputs.push_back(args[i]);
    }
    if (manifest.empty() || table.empty() || inputs.empty()) throw Usage("merge: give --manifest M.json --table T.cpp and the manifests to merge");
    merge_manifests(inputs, manifest, table);
    return 0;
}

int dispatch(const std::vector<std::string> &args) {
    if (args.empty()) {
        std::cerr << kUsage;
        return 1;
    }
    for (const auto &a : args)
        if (a == "-h" || a == "--help") {
            std::cout << (args[0] == "torch" ? kTorchUsage : args[0] == "tune" ? kTuneUsage : args[0] == "autoschedule" ? kAutoscheduleUsage : kUsage);
            return 0;
        }
    std::string cmd = args[0];
    std::vector<std::string> rest(args.begin() + 1, args.end());
    if (cmd == "--version") {
        std::cout << "normgen 0.1.0\n";
        return 0;
    }
    if (cmd == "check") return cmd_check(rest);
    if (cmd == "print") {
        if (rest.size() != 1) throw Usage(cmd + ": give exactly one .norm file");
        std::cout << print_norm(load_norm_file(rest[0]));
        return 0;
    }
    if (cmd == "grad") return cmd_grad(rest);
    if (cmd == "torch") return cmd_torch(rest);
    if (cmd == "tune") {
        TuneOptions o = parse_tune_args(rest);
        if (!o.autoschedule_out.empty()) throw Usage("tune: -o is for `normgen autoschedule`; the tuner writes to --db DIR");
        return run_tune(o);
    }
    if (cmd == "autoschedule") {
        TuneOptions o = parse_tune_args(rest);
        if (o.autoschedule_out.empty()) throw Usage("autoschedule: give -o DIR");
        return run_tune(o);
    }
    if (cmd == "describe") return cmd_describe(rest);
    if (cmd == "merge") return cmd_merge(rest);
    if (cmd == "run") return cmd_run_any(rest);
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

int main(int argc, char **argv) { return run_tool("normgen", argc, argv, hl::with_halide_errors(dispatch)); }
