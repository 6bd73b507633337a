// normgen-lab-gen: compiles one layer with a lab schedule (bench/lab/lab_schedule.h) into a static
// library with the same argument list as the production kernel (same lowering, same target), so
// bench/lab/normgen_bench_lab runs it through the same harness as the registry's kernels.
//
//   normgen-lab-gen FILE.norm --dtype f32 --variant NAME --out DIR --fragment F.json [--task N] [--lanes N]
//                   [--production] [--stmt FILE] [--asm FILE] [--llvm FILE.ll]
//
// --llvm writes LLVM assembly instead of the static library (for bench/lab/nontemporal_ll.py).
//
// The fragment is a one-entry manifest list in the format of runtime/registry.h; `normgen-gen merge`
// turns the fragments into the lab's manifest and kernel table.
//
// --production uses normgen::hl::schedule_cpu itself (codegen/halide/schedule.cpp), for a control.
// The function is lab__<variant>__<layer>__<dtype>.
#include "bench/lab/lab_schedule.h"
#include "codegen/halide/aot.h"
#include "codegen/halide/jit.h"
#include "codegen/halide/lower.h"
#include "dsl/checker.h"
#include "dsl/printer.h"

#include <fstream>

#include <iostream>
#include <string>
#include <vector>

using namespace normgen;
using nlohmann::json;

int main(int argc, char **argv) {
    std::vector<std::string> a(argv + 1, argv + argc);
    std::string file, variant, out, stmt, assembly, fragment, llvm;
    DType dtype = DType::F32;
    bench::lab::LabSchedule s;
    bool production = false;
    try {
        for (size_t i = 0; i < a.size(); ++i) {
            auto value = [&]() -> std::string {
                if (i + 1 >= a.size()) throw std::runtime_error(a[i] + " needs a value");
                return a[++i];
            };
            if (a[i] == "--dtype") {
                auto d = parse_dtype(value());
                if (!d) throw std::runtime_error("bad --dtype");
                dtype = *d;
            } else if (a[i] == "--variant") variant = value();
            else if (a[i] == "--out") out = value();
            else if (a[i] == "--fragment") fragment = value();
            else if (a[i] == "--task") s.base.min_task_elements = std::stoi(value());
            else if (a[i] == "--lanes") s.reduce_lanes = std::stoi(value());
            else if (a[i] == "--production") production = true;
            else if (a[i] == "--stmt") stmt = value();
            else if (a[i] == "--asm") assembly = value();
            else if (a[i] == "--llvm") llvm = value();
            else if (!a[i].empty() && a[i][0] == '-') throw std::runtime_error("unknown option " + a[i]);
            else file = a[i];
        }
        if (file.empty() || variant.empty() || out.empty() || fragment.empty())
            throw std::runtime_error("usage: FILE --variant NAME --out DIR --fragment F.json");
        NormSpec spec = load_norm_file(file);
        hl::KernelTypes types = hl::kernel_types(spec, dtype);
        hl::LoweredPipeline p = hl::lower_to_halide(spec, types, false);
        Halide::Target t = hl::parse_target("host").with_feature(Halide::Target::NoRuntime).without_feature(Halide::Target::JIT);
        std::string desc = production ? hl::schedule_cpu(p, spec, t, s.base) : bench::lab::lab_schedule_cpu(p, spec, t, s);
        std::string fn = "lab__" + variant + "__" + spec.name + "__" + dtype_name(dtype);
        Halide::Pipeline pipe = p.pipeline();
        if (llvm.empty()) pipe.compile_to_static_library(out + "/" + fn, p.arguments(), fn, t);
        else pipe.compile_to_llvm_assembly(llvm, p.arguments(), fn, t);  // the caller compiles it (bench/lab/nontemporal_ll.py)
        if (!stmt.empty()) pipe.compile_to_lowered_stmt(stmt, p.arguments(), Halide::StmtOutputFormat::Text, t);
        if (!assembly.empty()) pipe.compile_to_assembly(assembly, p.arguments(), fn, t);
        json e;
        e["function"] = fn;
        e["layer"] = spec.name;
        e["source"] = file;
        e["norm"] = print_norm(spec);
        e["dtype"] = dtype_name(dtype);
        e["target"] = t.to_string();
        e["isa"] = hl::isa_tag(t);
        e["cpu_features"] = hl::cpu_features(t);
        e["variant"] = "core";
        e["schedule"] = (production ? "production: " : "lab " + variant + ": ") + desc;
        e["library"] = fn + ".a";
        e["header"] = fn + ".h";
        json args = json::array();
        for (const TensorInfo &ti : spec.tensors)
            args.push_back(manifest_arg(spec, ti.name, ti.role == TensorInfo::Param ? "param" : "input", types.storage.at(ti.name), ti.dims,
                                     false, ""));
        for (int oi : p.output_index) {
            const OutputInfo &o = spec.outputs[oi];
            args.push_back(manifest_arg(spec, o.name, "output", types.storage.at(o.name), o.dims, o.optional, o.updates));
        }
        e["args"] = args;
        std::ofstream(fragment) << json::array({e}).dump(1) << "\n";
        std::cerr << "normgen-lab-gen: " << fn << ": " << desc << "\n";
        return 0;
    } catch (const Halide::Error &e) {
        std::cerr << "normgen-lab-gen: Halide: " << e.what() << "\n";
    } catch (const std::exception &e) {
        std::cerr << "normgen-lab-gen: " << e.what() << "\n";
    }
    return 1;
}
