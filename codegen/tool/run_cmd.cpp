#include "codegen/tool/run_cmd.h"

#include "codegen/common/kernel_plan.h"
#include "codegen/tool/options.h"
#include "dsl/checker.h"
#include "runtime/device.h"
#include "runtime/errors.h"
#include "runtime/npy.h"

#include <cstdlib>
#include <filesystem>
#include <iostream>

namespace normgen {

namespace fs = std::filesystem;

namespace {

std::pair<std::string, std::string> split_assignment(const std::string &arg, const char *flag) {
    size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size())
        throw Usage(std::string(flag) + " expects NAME=VALUE, got '" + arg + "'");
    return {arg.substr(0, eq), arg.substr(eq + 1)};
}

}  // namespace

RunArgs parse_run_args(const std::vector<std::string> &args) {
    RunArgs r;
    bool backend_given = false, target_given = false;  // (--device picks both)
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string &a = args[i];
        auto value = [&](const char *flag) -> std::string {
            if (i + 1 >= args.size()) throw Usage(std::string(flag) + " needs a value");
            return args[++i];
        };
        if (a == "--in") r.ins.push_back(split_assignment(value("--in"), "--in"));
        else if (a == "--out" || a == "-o") r.out_dir = value("--out");
        else if (a == "--backend") r.backend = value("--backend"), backend_given = true;
        else if (a == "--target") r.target = value("--target"), target_given = true;
        else if (a == "--device") {
            const std::string d = value("--device");
            auto dev = parse_device(d);
            if (!dev) throw Usage("run: --device takes cpu, cuda or opencl, not '" + d + "'");
            r.device = *dev;
        }
        else if (a == "--dtype") {
            std::vector<DType> d = parse_dtypes(value("--dtype"));
            if (d.size() != 1) throw Usage("run: --dtype takes one storage type");
            r.dtype = d[0];
        } else if (a == "--set") {
            auto [name, v] = split_assignment(value("--set"), "--set");
            char *end = nullptr;
            double d = std::strtod(v.c_str(), &end);
            if (!end || *end) throw Usage("--set " + name + ": '" + v + "' is not a number");
            r.overrides[name] = d;
        } else if (a == "--schedule") r.schedule = value("--schedule");
        else if (!a.empty() && a[0] == '-') throw Usage("run: unknown option '" + a + "'");
        else if (r.file.empty()) r.file = a;
        else throw Usage("run: one .norm file at a time (got '" + r.file + "' and '" + a + "')");
    }
    if (r.device != Device::Cpu) {
        // A GPU: Halide's GPU schedule, compiled for that device (the mlir-cuda kernels run through
        // normgen-cuda on a machine with the GPU).
        if (backend_given && r.backend != "halide")
            throw Usage("run: --device " + std::string(device_name(r.device)) + " runs the halide backend's GPU kernel, not --backend " + r.backend);
        if (target_given) throw Usage("run: give --device or --target, not both (--device cuda is --target host-cuda)");
        r.backend = "halide";
        r.target = r.device == Device::Cuda ? "host-cuda" : "host-opencl";
    }
    if (r.file.empty()) throw Usage("run: give a .norm file");
    if (r.out_dir.empty()) throw Usage("run: give --out DIR");
    return r;
}

int cmd_run(const RunArgs &r, const KernelFactory *make) {
    NormSpec spec = load_norm_file(r.file);
    require_device(r.device);  // "no CUDA device: ...", before anything is compiled or written
    TensorMap inputs;
    for (const auto &[name, path] : r.ins) {
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
    if (r.backend == "reference") {
        outputs = evaluate_reference(spec, inputs, r.overrides, {kernel_types(spec, r.dtype).storage});
    } else {
        if (!make) throw UserError("run: backend '" + r.backend + "' is not available here");
        // Constants are compiled into the kernel; axis extents (e.g. the group count) are not.
        validate_overrides(spec, r.overrides);
        Overrides axes;
        NormSpec compiled = spec;
        for (const auto &[name, v] : r.overrides) {
            bool is_const = false;
            for (ConstInfo &c : compiled.consts)
                if (c.name == name) {
                    c.value = v;
                    is_const = true;
                }
            if (!is_const) axes[name] = v;
        }
        bind_axes(spec, inputs, axes);  // refuse a bad call before compiling
        std::unique_ptr<CompiledKernel> k = (*make)(compiled, r.dtype, r.target, r.schedule, variants_of(compiled).back());
        outputs = k->run(inputs, axes);  // inputs are rounded to the storage types on the way in
    }
    std::error_code ec;
    fs::create_directories(r.out_dir, ec);
    if (ec) throw UserError("--out " + r.out_dir + ": cannot create folder: " + ec.message());
    for (const OutputInfo &o : spec.outputs) {
        std::string path = (fs::path(r.out_dir) / (o.name + ".npy")).string();
        write_npy(path, outputs.at(o.name));
        std::cout << "wrote " << path << " " << shape_text(outputs.at(o.name).shape) << "\n";
    }
    return 0;
}


}  // namespace normgen
