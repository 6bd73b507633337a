// normgen-gen: the build-time generator. CMake runs it once per .norm file (so touching one file
// regenerates only its kernels), once for the shared Halide runtime, and once to merge the
// per-file manifest fragments into the manifest and the kernel table.
//
//   normgen-gen compile FILE --dtype f32,bf16,f16 --target host,x86-64-avx2 --out DIR --fragment F.json [--source NAME]
//   normgen-gen runtime --out FILE.o
//   normgen-gen merge --manifest manifest.json --table kernel_table.cpp FRAGMENT.json...
#include "codegen/driver/options.h"
#include "codegen/halide/aot.h"
#include "dsl/checker.h"

#include <fstream>
#include <iostream>

using namespace normgen;
using nlohmann::json;

namespace {

int run(const std::vector<std::string> &args) {
    if (args.empty()) throw Usage("give a command: compile, runtime or merge");
    std::string cmd = args[0], out, fragment, manifest, table, source;
    std::vector<std::string> files;
    std::vector<DType> dtypes{DType::F32, DType::BF16, DType::F16};
    std::vector<std::string> targets{"host", "x86-64-avx2"};
    for (size_t i = 1; i < args.size(); ++i) {
        auto value = [&]() -> std::string {
            if (i + 1 >= args.size()) throw Usage(args[i] + " needs a value");
            return args[++i];
        };
        const std::string &a = args[i];
        if (a == "--out") out = value();
        else if (a == "--fragment") fragment = value();
        else if (a == "--manifest") manifest = value();
        else if (a == "--table") table = value();
        else if (a == "--source") source = value();
        else if (a == "--dtype") dtypes = parse_dtypes(value());
        else if (a == "--target") targets = split_list(value());
        else if (!a.empty() && a[0] == '-') throw Usage("unknown option " + a);
        else files.push_back(a);
    }
    if (cmd == "compile") {
        if (files.size() != 1 || out.empty() || fragment.empty()) throw Usage("compile FILE --out DIR --fragment F.json");
        NormSpec spec = load_norm_file(files[0]);
        hl::AotRequest req{source.empty() ? files[0] : source, dtypes, targets, out, {}};
        json entries = hl::compile_halide_kernels(spec, req);
        write_file_atomically(fragment, entries.dump(1) + "\n");
        std::cerr << "normgen-gen: " << spec.name << ": " << entries.size() << " kernels\n";
        return 0;
    }
    if (cmd == "runtime") {
        if (out.empty()) throw Usage("runtime --out FILE.o");
        hl::compile_halide_runtime(out);
        return 0;
    }
    if (cmd == "merge") {
        if (manifest.empty() || table.empty()) throw Usage("merge --manifest M.json --table T.cpp FRAGMENTS...");
        json all = json::array();
        for (const std::string &f : files) {
            std::ifstream in(f);
            if (!in) throw std::runtime_error("cannot read " + f);
            for (json &e : json::parse(in)) all.push_back(e);
        }
        write_manifest(all, manifest);
        write_kernel_table(all, table);
        return 0;
    }
    throw Usage("unknown command " + cmd);
}

}  // namespace

int main(int argc, char **argv) {
    try {
        return run(std::vector<std::string>(argv + 1, argv + argc));
    } catch (const Usage &e) {
        std::cerr << "normgen-gen: " << e.what() << "\n";
        return 1;
    } catch (const DiagnosticError &e) {
        std::cerr << e.render();
        return 1;
    } catch (const std::exception &e) {
        std::cerr << "normgen-gen: internal error: " << e.what() << "\n";
        return 2;
    }
}
