#include "codegen/mlir/backend.h"

#include "codegen/common/manifest.h"
#include "codegen/mlir/lower.h"
#include "codegen/mlir/pipeline.h"
#include "dsl/printer.h"
#include "runtime/errors.h"
#include "runtime/mlir_abi.h"
#include "runtime/storage.h"

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <sys/wait.h>

namespace normgen::mlirgen {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string function_name(const NormSpec &spec, DType dtype, const std::string &tag, bool full) {
    return spec.name + "__" + dtype_name(dtype) + "__" + tag + "__" + (full ? "full" : "core");
}

// Per split candidate (outermost first), the memref dim of each kernel argument along it, or -1.
struct Split {
    std::vector<AxisId> axes;
    std::vector<std::vector<int>> dims;
};

std::vector<std::vector<AxisId>> arg_atoms(const NormSpec &spec, bool full) {
    std::vector<std::vector<AxisId>> r;
    for (const TensorInfo &t : spec.tensors) r.push_back(spec.memory_atoms(t.dims));
    for (const OutputInfo &o : spec.outputs)
        if (!o.optional || full) r.push_back(spec.memory_atoms(o.dims));
    return r;
}

Split split_of(const NormSpec &spec, bool full) {
    Split s;
    auto atoms = arg_atoms(spec, full);
    for (AxisId a : split_candidates(spec, full)) {
        s.axes.push_back(a);
        std::vector<int> row;
        for (const auto &at : atoms) {
            auto it = std::find(at.begin(), at.end(), a);
            row.push_back(it == at.end() ? -1 : (int)(it - at.begin()));
        }
        s.dims.push_back(row);
    }
    return s;
}

void check_arg_count(const NormSpec &spec, bool full) {
    size_t n = arg_atoms(spec, full).size();
    if ((int)n > kMlirMaxArgs)
        throw UserError(spec.name + ": " + std::to_string(n) + " tensors; the MLIR CPU ABI takes at most " + std::to_string(kMlirMaxArgs));
}

class JitKernel : public VerifyKernel {
public:
    JitKernel(const NormSpec &spec, DType dtype) : spec_(spec), types_(kernel_types(spec, dtype)) {
        check_arg_count(spec, true);
        ctx_ = make_context();
        std::string fn = function_name(spec, dtype, "jit", true);
        auto module = lower_cpu(*ctx_, spec_, types_, true, fn);
        lower_cpu_to_llvm_dialect(*module);
        jit_ = std::make_unique<Jit>(*module, fn);
        split_ = split_of(spec_, true);
        for (const auto &row : split_.dims) flat_.insert(flat_.end(), row.begin(), row.end());
        info_.nargs = (int)arg_atoms(spec_, true).size();
        info_.ncandidates = (int)split_.dims.size();
        info_.split = flat_.empty() ? nullptr : flat_.data();
        info_.ciface = jit_->ciface();
    }

    StorageMap storage() const override { return StorageMap(types_.storage.begin(), types_.storage.end()); }

    TensorMap run(const TensorMap &inputs, const Overrides &axis_overrides) const override {
        AxisExtents ext = bind_axes(spec_, inputs, axis_overrides);
        std::vector<std::vector<uint8_t>> bytes;
        std::vector<MlirTensor> args;
        auto sizes_of = [&](const std::vector<AxisId> &dims) {
            std::vector<int64_t> s;
            for (AxisId a : spec_.memory_atoms(dims)) s.push_back(ext.extent[a]);
            return s;
        };
        for (const TensorInfo &t : spec_.tensors) {
            bytes.push_back(encode(inputs.at(t.name).data, types_.storage.at(t.name)));
            args.push_back({nullptr, sizes_of(t.dims), (int)dtype_size(types_.storage.at(t.name))});
        }
        std::vector<const OutputInfo *> outs;
        for (const OutputInfo &o : spec_.outputs) {
            std::vector<int64_t> s = sizes_of(o.dims);
            int64_t n = 1;
            for (int64_t v : s) n *= v;
            bytes.emplace_back((size_t)n * dtype_size(types_.storage.at(o.name)), 0xff);  // NaN poison
            args.push_back({nullptr, s, (int)dtype_size(types_.storage.at(o.name))});
            outs.push_back(&o);
        }
        for (size_t i = 0; i < args.size(); ++i) args[i].data = bytes[i].data();
        mlir_run(info_, args, serial_par_for);
        TensorMap result;
        for (size_t k = 0; k < outs.size(); ++k) {
            const OutputInfo &o = *outs[k];
            size_t i = spec_.tensors.size() + k;
            DType t = types_.storage.at(o.name);
            HostTensor h;
            h.shape = physical_shape(spec_, o.dims, ext);
            h.data = decode(bytes[i].data(), bytes[i].size() / dtype_size(t), t);
            result[o.name] = std::move(h);
        }
        return result;
    }

private:
    NormSpec spec_;
    KernelTypes types_;
    std::unique_ptr<mlir::MLIRContext> ctx_;
    std::unique_ptr<Jit> jit_;
    Split split_;
    std::vector<int> flat_;
    MlirKernelInfo info_;
};

std::string axis_names(const NormSpec &spec, const std::vector<AxisId> &axes) {
    std::string s;
    for (AxisId a : axes) s += (s.empty() ? "" : ", ") + spec.axes[a].name;
    return s;
}

json names(const NormSpec &spec, const std::vector<AxisId> &axes) {
    json j = json::array();
    for (AxisId a : axes) j.push_back(spec.axes[a].name);
    return j;
}

// Runs a command, returning its exit status and combined output.
int run_command(const std::string &cmd, std::string &output) {
    FILE *p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) return -1;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) output.append(buf.data(), n);
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string shell_quote(const std::string &s) {
    std::string r = "'";
    for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return r + "'";
}

// ptxas -v: "Used 24 registers, used 1 barriers, 1056 bytes smem" and "0 bytes stack frame, 0 bytes
// spill stores, 0 bytes spill loads".
json ptxas_stats(const std::string &log) {
    json j;
    std::smatch m;
    auto num = [&](const char *re, const char *key) {
        if (std::regex_search(log, m, std::regex(re))) j[key] = std::stoll(m[1]);
        else j[key] = 0;
    };
    num("Used ([0-9]+) registers", "registers");
    num("([0-9]+) bytes spill stores", "spill_stores");
    num("([0-9]+) bytes spill loads", "spill_loads");
    num("([0-9]+) bytes stack frame", "stack_frame");
    num("([0-9]+) bytes smem", "shared_bytes");
    return j;
}

json base_entry(const NormSpec &spec, const AotRequest &req, const std::string &fn, DType dtype, bool full, const KernelTypes &types) {
    json e;
    e["function"] = fn;
    e["layer"] = spec.name;
    e["source"] = req.source;
    e["norm"] = print_norm(spec);
    e["dtype"] = dtype_name(dtype);
    e["variant"] = full ? "full" : "core";
    e["backend"] = "mlir";
    e["args"] = manifest_args(spec, types, full);
    return e;
}

}  // namespace

std::unique_ptr<VerifyKernel> make_jit_kernel(const NormSpec &spec, DType dtype) { return std::make_unique<JitKernel>(spec, dtype); }

json compile_kernels(const NormSpec &spec, const AotRequest &req) {
    fs::create_directories(req.out_dir);
    json entries = json::array();
    const bool has_optional = has_optional_outputs(spec);
    for (DType dtype : req.dtypes) {
        KernelTypes types = kernel_types(spec, dtype);
        for (bool full : {false, true}) {
            if (full && !has_optional) continue;
            if (req.cpu) {
                check_arg_count(spec, full);
                std::string isa = host_isa();
                std::string fn = function_name(spec, dtype, "mlir_" + isa, full);
                auto ctx = make_context();
                auto module = lower_cpu(*ctx, spec, types, full, fn);
                lower_cpu_to_llvm_dialect(*module);
                emit_host_object(*module, (fs::path(req.out_dir) / (fn + ".o")).string());
                Split split = split_of(spec, full);
                json e = base_entry(spec, req, fn, dtype, full, types);
                e["device"] = "cpu";
                e["target"] = "mlir-cpu host";
                e["isa"] = isa;
                e["cpu_features"] = host_cpu_features();
                e["schedule"] = "linalg.generic per reduction and map -> scf loops -> LLVM O3 for the host (loop vectorizer, "
                                "reassociated sums); chunks along " +
                                (split.axes.empty() ? std::string("nothing (one call)") : "the first long enough of [" + axis_names(spec, split.axes) + "]");
                e["library"] = fn + ".o";
                e["header"] = "";
                e["split"] = {{"axes", names(spec, split.axes)}, {"dims", split.dims}};
                entries.push_back(e);
            }
            if (req.cuda) {
                CudaPlan plan = plan_cuda(spec);
                std::string fn = function_name(spec, dtype, "mlir_sm90", full);
                auto ctx = make_context();
                auto module = lower_cuda(*ctx, spec, types, full, fn, plan);
                std::string ptx = cuda_ptx(*module, req.cuda_root);
                std::string ptx_path = (fs::path(req.out_dir) / (fn + ".ptx")).string();
                std::string cubin_path = (fs::path(req.out_dir) / (fn + ".cubin")).string();
                write_file_atomically(ptx_path, ptx);
                std::string ptxas = (fs::path(req.cuda_root) / "bin" / "ptxas").string();
                std::string log;
                int rc = run_command(shell_quote(ptxas) + " -arch=sm_90 -v " + shell_quote(ptx_path) + " -o " + shell_quote(cubin_path + ".tmp"), log);
                if (rc != 0) throw std::runtime_error("ptxas rejected " + ptx_path + " (exit " + std::to_string(rc) + "):\n" + log);
                fs::rename(cubin_path + ".tmp", cubin_path);
                json e = base_entry(spec, req, fn, dtype, full, types);
                e["device"] = "cuda";
                e["target"] = "cuda sm_90 (PTX ISA 8.0)";
                e["isa"] = "sm_90";
                e["cpu_features"] = json::array();
                e["schedule"] = "one block of " + std::to_string(plan.block_threads) + " threads per [" + axis_names(spec, plan.block_axes) +
                                "]; per-thread partials + gpu.all_reduce";
                e["library"] = fn + ".cubin";
                e["header"] = "";
                e["ptx"] = fn + ".ptx";
                e["cubin"] = fn + ".cubin";
                e["entry"] = fn;
                e["block_threads"] = plan.block_threads;
                e["grid_axes"] = names(spec, plan.block_axes);
                e["extent_axes"] = names(spec, plan.extent_axes);
                e["ptxas"] = ptxas_stats(log);
                entries.push_back(e);
            }
        }
    }
    return entries;
}

void explain(const NormSpec &spec, DType dtype, const std::string &stage, const std::string &cuda_root, std::ostream &os) {
    static const std::vector<std::string> cpu{"linalg", "loops", "llvm"}, gpu{"gpu", "nvvm", "ptx"};
    std::string want = stage == "vector" ? "loops" : stage;
    if (!want.empty() && std::find(cpu.begin(), cpu.end(), want) == cpu.end() && std::find(gpu.begin(), gpu.end(), want) == gpu.end())
        throw UserError("explain: unknown stage '" + stage + "' (linalg, loops, vector, llvm, gpu, nvvm, ptx)");
    KernelTypes types = kernel_types(spec, dtype);
    bool full = has_optional_outputs(spec);
    auto print = [&](const std::string &s, const std::string &text) {
        if (!want.empty() && s != want) return;
        os << "// ---- stage: " << s << " (" << spec.name << ", " << dtype_name(dtype) << ") ----\n" << text << "\n";
    };
    auto ctx = make_context();
    if (want.empty() || std::find(cpu.begin(), cpu.end(), want) != cpu.end()) {
        std::string fn = function_name(spec, dtype, "mlir_" + host_isa(), full);
        auto module = lower_cpu(*ctx, spec, types, full, fn);
        lower_cpu_to_llvm_dialect(*module, print);
        if (want.empty() || want == "llvm") print("llvm", host_llvm_ir(*module));
        return;
    }
    std::string fn = function_name(spec, dtype, "mlir_sm90", full);
    auto module = lower_cuda(*ctx, spec, types, full, fn, plan_cuda(spec));
    cuda_ptx(*module, cuda_root, print);
}

}  // namespace normgen::mlirgen
