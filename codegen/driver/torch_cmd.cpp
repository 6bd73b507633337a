// `normgen torch FILE.norm... -o DIR`: a PyTorch extension for the declarations. Writes a CMake
// project into DIR (the .norm files copied beside its CMakeLists.txt; normgen_add_kernels with GRAD
// ON, then normgen_add_torch_ops: cmake/NormgenTorch.cmake), configures and builds it, and leaves
// DIR/lib<name>.so for `normgen.torch.load(DIR)`.
#include "codegen/driver/torch_cmd.h"

#include "codegen/tool/options.h"

#include "dsl/checker.h"
#include "dsl/grad.h"
#include "runtime/errors.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#ifndef NORMGEN_SOURCE_ROOT
#define NORMGEN_SOURCE_ROOT ""
#endif

namespace normgen {

namespace fs = std::filesystem;

namespace {

bool identifier(const std::string &s) {
    if (s.empty() || !(std::isalpha((unsigned char)s[0]) || s[0] == '_')) return false;
    for (char c : s)
        if (!(std::isalnum((unsigned char)c) || c == '_')) return false;
    return true;
}

}  // namespace

const char *kTorchUsage = R"(usage: normgen torch FILE.norm... -o DIR [--name NAME] [--dtype f32,bf16,f16]
                    [--backend halide|mlir] [--normgen SRC] [--no-build]

Builds a PyTorch extension for the declarations: torch.ops.normgen.<layer> (forward, with the
declaration's constants as keyword arguments and saved=True for the statistics the backward reads)
and torch.ops.normgen.<layer>_backward (the kernels of `normgen grad`), for the given storage types
on this CPU. DIR receives a CMake project (CMakeLists.txt and a copy of each .norm file) and, once
built, lib<NAME>.so; from Python:

    import normgen.torch                    # <normgen>/python on PYTHONPATH
    lib = normgen.torch.load(DIR)
    norm = lib.<layer>(<sizes>)             # an nn.Module; its backward runs the generated backward

  --name NAME      the library (lib<NAME>.so; default: DIR's name)
  --dtype LIST     storage types (default f32,bf16)
  --backend B      halide (default) or mlir
  --normgen SRC    the normgen source tree the project builds against (default: this normgen's,
                   or $NORMGEN_SOURCE_DIR)
  --no-build       write the project only
Needs libtorch-dev (and python3-torch to use it; scripts/install-deps.sh) and CMake >= 3.28 (the
one in <normgen>/.venv is used when present). The first build compiles normgen's tools too.
)";

int cmd_torch(const std::vector<std::string> &args) {
    std::vector<std::string> files;
    std::string out, name, dtypes = "f32,bf16", backend = "halide", source;
    bool build = true;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string &a = args[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= args.size()) throw UserError("torch: " + a + " needs a value");
            return args[++i];
        };
        if (a == "-o") out = value();
        else if (a == "--name") name = value();
        else if (a == "--dtype") dtypes = value();
        else if (a == "--backend") backend = value();
        else if (a == "--normgen") source = value();
        else if (a == "--no-build") build = false;
        else if (a == "--help" || a == "-h") {
            std::cout << kTorchUsage;
            return 0;
        } else if (!a.empty() && a[0] == '-') throw UserError("torch: unknown option '" + a + "' (normgen torch --help)");
        else files.push_back(a);
    }
    if (files.empty()) throw UserError("torch: give at least one .norm file (normgen torch --help)");
    if (out.empty()) throw UserError("torch: give the output folder: -o DIR");
    if (backend != "halide" && backend != "mlir") throw UserError("torch: --backend takes halide or mlir, not '" + backend + "'");
    const std::vector<DType> dtype_list = parse_dtypes(dtypes);
    if (name.empty()) name = fs::path(out).lexically_normal().filename().string();
    if (name.empty()) name = fs::absolute(out).lexically_normal().parent_path().filename().string();
    if (!identifier(name)) throw UserError("torch: the library name '" + name + "' is not an identifier; give --name");
    if (source.empty() && std::getenv("NORMGEN_SOURCE_DIR")) source = std::getenv("NORMGEN_SOURCE_DIR");
    if (source.empty()) source = NORMGEN_SOURCE_ROOT;
    if (source.empty() || !fs::exists(fs::path(source) / "cmake" / "NormgenTorch.cmake"))
        throw UserError("torch: no normgen source tree at '" + source + "' (give --normgen SRC)");
    source = fs::absolute(source).lexically_normal().string();

    // Every file must be a valid declaration with a backward, and the layer names distinct.
    std::set<std::string> layers;
    for (const std::string &f : files) {
        NormSpec spec = load_norm_file(f);  // throws a located diagnostic
        if (!layers.insert(spec.name).second) throw UserError("torch: two files declare layer '" + spec.name + "'");
        differentiate(spec);  // a located diagnostic when the layer cannot be differentiated
    }

    fs::create_directories(out);
    std::ostringstream cm;
    cm << "# Generated by `normgen torch`: the PyTorch operators of " << files.size() << " declaration(s).\n"
       << "#   cmake -S . -B build -G Ninja && cmake --build build   (CMake >= 3.28)\n"
       << "cmake_minimum_required(VERSION 3.28)\n"
       << "project(" << name << " LANGUAGES C CXX)\n"
       << "set(CMAKE_CXX_STANDARD 17)\n"
       << "set(NORMGEN_SOURCE_DIR \"" << source << "\" CACHE PATH \"The normgen source tree\")\n"
       << "set(NORMGEN_BUILD_TESTS OFF)\n"
       << "set(NORMGEN_WITH_HALIDE ON)\n"
       << "set(NORMGEN_WITH_MLIR " << (backend == "mlir" ? "ON" : "OFF") << ")\n"
       << "list(APPEND CMAKE_MODULE_PATH \"${NORMGEN_SOURCE_DIR}/cmake\")\n"
       << "add_subdirectory(\"${NORMGEN_SOURCE_DIR}\" normgen EXCLUDE_FROM_ALL)\n"
       << "include(NormgenAddKernels)\ninclude(NormgenTorch)\n"
       << "normgen_add_kernels(TARGET " << name << "_kernels\n  NORM";
    for (const std::string &f : files) {
        const fs::path dst = fs::path(out) / fs::path(f).filename();
        if (!fs::exists(dst) || !fs::equivalent(f, dst)) fs::copy_file(f, dst, fs::copy_options::overwrite_existing);
        cm << " " << fs::path(f).filename().string();
    }
    cm << "\n  DTYPES";
    for (DType t : dtype_list) cm << " " << dtype_name(t);
    cm << "\n  BACKENDS " << backend << "\n  GRAD ON)\n"
       << "normgen_add_torch_ops(TARGET " << name << " KERNELS " << name << "_kernels OUTPUT_DIRECTORY \"${CMAKE_CURRENT_SOURCE_DIR}\")\n";
    {
        std::ofstream f(fs::path(out) / "CMakeLists.txt");
        f << cm.str();
        if (!f) throw UserError("torch: cannot write " + (fs::path(out) / "CMakeLists.txt").string());
    }
    std::cerr << "torch: wrote " << (fs::path(out) / "CMakeLists.txt").string() << " (" << layers.size() << " layer(s), library lib" << name
              << ".so)\n";
    if (!build) return 0;

    std::string cmake = "cmake";
    if (fs::exists(fs::path(source) / ".venv" / "bin" / "cmake")) cmake = (fs::path(source) / ".venv" / "bin" / "cmake").string();
    const std::string bin = (fs::path(out) / "build").string();
    std::string gen = std::system("command -v ninja >/dev/null 2>&1") == 0 ? " -G Ninja" : "";
    std::cerr << "torch: configuring (" << cmake << ")...\n";
    std::string configure = shell_quote(cmake) + " -S " + shell_quote(out) + " -B " + shell_quote(bin) + gen + " -DCMAKE_BUILD_TYPE=Release > " +
                            shell_quote(bin + ".configure.log") + " 2>&1";
    fs::create_directories(bin);
    if (std::system(configure.c_str()) != 0)
        throw UserError("torch: configuring the project failed; see " + bin + ".configure.log");
    std::cerr << "torch: building lib" << name << ".so (the first build compiles normgen's tools; output follows)...\n";
    std::string make = shell_quote(cmake) + " --build " + shell_quote(bin) + " --target " + shell_quote(name) + " -j2";
    if (std::system(make.c_str()) != 0) throw UserError("torch: the build failed (above)");
    std::cerr << "torch: built " << (fs::path(out) / ("lib" + name + ".so")).string() << "; from Python: normgen.torch.load(\"" << out << "\")\n";
    return 0;
}

}  // namespace normgen
