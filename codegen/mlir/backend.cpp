#include "codegen/mlir/backend.h"

#include "codegen/common/ptxas.h"
#include "codegen/mlir/emulate.h"
#include "runtime/registry.h"

#include "codegen/common/manifest.h"
#include "codegen/common/tuning_db.h"
#include "codegen/mlir/lower.h"
#include "codegen/mlir/pipeline.h"
#include "codegen/tool/options.h"
#include "dsl/printer.h"
#include "runtime/errors.h"
#include "runtime/mlir_abi.h"
#include "runtime/storage.h"

#include "llvm/Object/ArchiveWriter.h"
#include "llvm/Support/Error.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <set>
#include <sstream>
#include <sys/wait.h>

namespace normgen::mlirgen {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Per split axis of the plan (outermost first), the memref dim of each kernel argument along it, or
// -1; on the row axis of a plan with column sums, kMlirColumnPartial for the column outputs.
struct Split {
    std::vector<AxisId> axes;
    std::vector<std::vector<int>> dims;
};

// Whether any expression of the layer counts along `axis` (count(over: rows) would be a chunk's
// count in a chunk, not the call's).
bool counts_along(const NormSpec &spec, AxisId axis) {
    std::function<bool(const Node &)> walk = [&](const Node &n) {
        if (n.kind == Node::Count && std::count(n.over.begin(), n.over.end(), axis)) return true;
        return std::any_of(n.args.begin(), n.args.end(), [&](const NodePtr &a) { return walk(*a); });
    };
    return std::any_of(spec.values.begin(), spec.values.end(), [&](const auto &v) { return walk(*v.expr); });
}

Split split_of(const NormSpec &spec, const KernelPlan &plan) {
    Split s;
    auto add = [&](AxisId a, const std::set<int> &columns) {
        std::vector<int> row;
        for (const PlanArg &arg : plan.args) {
            auto it = std::find(arg.atoms.begin(), arg.atoms.end(), a);
            if (it != arg.atoms.end()) row.push_back((int)(it - arg.atoms.begin()));
            else row.push_back(arg.role == PlanArg::Output && columns.count(arg.output) ? kMlirColumnPartial : -1);
        }
        s.axes.push_back(a);
        s.dims.push_back(row);
    };
    for (AxisId a : plan.split_axes) add(a, {});
    // The rows of a backward whose parameter gradients sum over them (LayerNorm's d_weight): each
    // chunk sums its own rows, the runtime adds the chunks' sums (runtime/mlir_abi.h). Without
    // it the call was one serial chunk. Not where a chunk's sum would be stored less precisely than
    // it is accumulated (an f32 output of an f64-accumulating layer: each chunk's sum rounded to
    // f32 broke the f64 bound), nor where an expression counts along the rows.
    if (plan.column_sums.empty() || plan.layout != LayoutClass::Row || plan.row_axes != 1 || counts_along(spec, plan.main_order[0]))
        return s;
    for (const PlanArg *o : plan.outputs())
        if (std::count(plan.column_sums.begin(), plan.column_sums.end(), o->output) && spec.accumulate == DType::F64 && o->dtype != DType::F64)
            return s;
    add(plan.main_order[0], std::set<int>(plan.column_sums.begin(), plan.column_sums.end()));
    return s;
}

void check_arg_count(const NormSpec &spec, const KernelPlan &plan) {
    size_t n = plan.args.size();
    if ((int)n > kMlirMaxArgs)
        throw UserError(spec.name + ": " + std::to_string(n) + " tensors; the MLIR CPU ABI takes at most " + std::to_string(kMlirMaxArgs));
}

class JitKernel : public CompiledKernel {
public:
    JitKernel(const NormSpec &spec, DType dtype, const std::string &schedule_overrides, Variant variant)
        : spec_(spec), plan_(make_plan(spec, dtype, variant)), types_(plan_.types),
          record_(choose_schedule(plan_, ScheduleKind::MlirCpu, host_isa(), schedule_overrides)) {
        check_arg_count(spec, plan_);
        ctx_ = make_context();
        std::string fn = spec.name + "__jit";
        auto module = lower_cpu(*ctx_, spec_, plan_, record_, fn);
        const StreamingArgs streaming = lower_cpu_to_llvm_dialect(*module);
        jit_ = std::make_unique<Jit>(*module, fn, streaming);
        split_ = split_of(spec_, plan_);
        for (const auto &row : split_.dims) flat_.insert(flat_.end(), row.begin(), row.end());
        info_.nargs = (int)plan_.args.size();
        info_.ncandidates = (int)split_.dims.size();
        info_.split = flat_.empty() ? nullptr : flat_.data();
        info_.ciface = jit_->ciface();
        info_.chunk_bytes = record_.get("chunk_bytes");
    }

    StorageMap storage() const override { return StorageMap(types_.storage.begin(), types_.storage.end()); }
    std::string schedule_record() const override { return record_.to_json().dump(); }
    std::string schedule_text() const override { return "mlir-cpu JIT: linalg -> loops -> LLVM O3 for the host (" + record_.text() + ")"; }

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
        // The outputs start on a 64-byte boundary at every other call and one element past one at
        // the others, so that code which depends on their alignment (streaming stores, checked at
        // the kernel's entry) is verified on both of its paths.
        const bool misalign = (calls_++ % 2) == 1;
        std::vector<const OutputInfo *> outs;
        std::vector<size_t> at(spec_.tensors.size(), 0);
        for (const OutputInfo &o : spec_.outputs) {
            std::vector<int64_t> s = sizes_of(o.dims);
            int64_t n = 1;
            for (int64_t v : s) n *= v;
            const size_t esize = dtype_size(types_.storage.at(o.name));
            bytes.emplace_back((size_t)n * esize + 128, 0xff);  // NaN poison
            const size_t to64 = (64 - (uintptr_t)bytes.back().data() % 64) % 64;
            at.push_back(to64 + (misalign ? esize : 0));
            args.push_back({nullptr, s, (int)esize});
            outs.push_back(&o);
        }
        for (size_t i = 0; i < args.size(); ++i) args[i].data = bytes[i].data() + at[i];
        mlir_run(info_, args, serial_par_for);
        TensorMap result;
        for (size_t k = 0; k < outs.size(); ++k) {
            const OutputInfo &o = *outs[k];
            size_t i = spec_.tensors.size() + k;
            DType t = types_.storage.at(o.name);
            HostTensor h;
            h.shape = physical_shape(spec_, o.dims, ext);
            h.data = decode(bytes[i].data() + at[i], (bytes[i].size() - 128) / dtype_size(t), t);
            result[o.name] = std::move(h);
        }
        return result;
    }

private:
    NormSpec spec_;
    KernelPlan plan_;
    KernelTypes types_;
    ScheduleRecord record_;
    std::unique_ptr<mlir::MLIRContext> ctx_;
    std::unique_ptr<Jit> jit_;
    Split split_;
    std::vector<int> flat_;
    MlirKernelInfo info_;
    mutable std::atomic<uint64_t> calls_{0};
};

}  // namespace

std::unique_ptr<CompiledKernel> make_jit_kernel(const NormSpec &spec, DType dtype, const std::string &schedule_overrides,
                                                std::optional<Variant> variant) {
    return std::make_unique<JitKernel>(spec, dtype, schedule_overrides, variant.value_or(variants_of(spec).back()));
}

// One static library of object files (GNU format, deterministic, with a symbol table).
void write_archive(const std::vector<std::string> &objects, const std::string &path) {
    std::vector<llvm::NewArchiveMember> members;
    for (const std::string &o : objects) {
        auto m = llvm::NewArchiveMember::getFile(o, /*Deterministic=*/true);
        if (!m) throw std::runtime_error("cannot read " + o + " for " + path + ": " + llvm::toString(m.takeError()));
        members.push_back(std::move(*m));
    }
    if (llvm::Error e = llvm::writeArchive(path, members, llvm::SymtabWritingMode::NormalSymtab, llvm::object::Archive::K_GNU,
                                           /*Deterministic=*/true, /*Thin=*/false))
        throw std::runtime_error("cannot write " + path + ": " + llvm::toString(std::move(e)));
}

json compile_cpu_kernel(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &record, const std::string &function,
                        const std::string &out_dir, KernelEntryInfo info) {
    auto ctx = make_context();
    auto module = lower_cpu(*ctx, spec, plan, record, function);
    const StreamingArgs streaming = lower_cpu_to_llvm_dialect(*module);
    const StreamingResult marked = emit_host_object(*module, (fs::path(out_dir) / (function + ".o")).string(), streaming);
    Split split = split_of(spec, plan);
    info.schedule = &record;
    info.schedule_text = "linalg.generic per reduction and map -> scf loops -> LLVM O3 for the host (loop vectorizer, "
                         "reassociated sums); chunks along " +
                         (split.axes.empty() ? std::string("nothing (one call)") : "the first long enough of " + spec.axes_text(split.axes));
    if (streaming)
        info.schedule_text += "; streaming stores when the outputs are 64-byte aligned with rows (or h x w planes) of whole 64 bytes (" +
                              std::to_string(marked.marked) + " vector stores marked, checked at entry; other calls store as usual)";
    json e = manifest_entry(spec, plan, info);
    e["split"] = {{"axes", axis_names_json(spec, split.axes)}, {"dims", split.dims}};
    return e;
}

json compile_kernels(const NormSpec &spec, const AotRequest &req) {
    fs::create_directories(req.out_dir);
    // The tuning database's winners for this declaration (stale records are dropped with a note).
    std::vector<TuningRecord> best;
    if (!req.tuning_dir.empty()) {
        std::vector<std::string> notes;
        best = TuningDb(req.tuning_dir).best(spec.name, kernel_identity(spec), &notes);
        for (const std::string &n : notes) std::cerr << "normgen-mlir: note: " << n << "\n";
    }
    json entries = json::array();
    const std::string archive = req.archive.empty() ? spec.name + ".mlir.a" : req.archive;
    std::vector<std::string> objects;
    for (DType dtype : req.dtypes) {
        for (Variant variant : variants_of(spec)) {
            if (!req.variants.empty() && std::find(req.variants.begin(), req.variants.end(), variant_name(variant)) == req.variants.end()) continue;
            KernelPlan plan = make_plan(spec, dtype, variant);
            if (req.cpu) {
                check_arg_count(spec, plan);
                const Isa isa = host_isa();
                ScheduleRecord record = choose_schedule(plan, ScheduleKind::MlirCpu, isa, req.schedule_overrides);
                // The default kernel first, then one per distinct winning schedule (none under --schedule).
                const auto kernels = kernel_schedules(record, req.schedule_overrides.empty() ? best : std::vector<TuningRecord>{}, dtype_name(dtype),
                                                      variant_name(variant), "mlir", isa_name(isa), "tuning database " + req.tuning_dir);
                for (const auto &[rec, tuned] : kernels) {
                    KernelEntryInfo info;
                    info.backend = Backend::Mlir;
                    info.isa = isa;
                    info.source = req.source;
                    info.target = "mlir-cpu host";
                    info.cpu_features = host_cpu_features();
                    info.schedule = &rec;
                    info.grad_of = req.grad_of;
                    info.library = archive;
                    info.tuned = tuned;
                    if (&rec != &kernels[0].first) info.function_suffix = "__t" + schedule_tag(rec.to_json());
                    const std::string fn = entry_function_name(spec, plan, info);
                    json e = compile_cpu_kernel(spec, plan, rec, fn, req.out_dir, info);
                    objects.push_back((fs::path(req.out_dir) / (fn + ".o")).string());
                    entries.push_back(e);
                }
            }
            if (req.cuda && !req.grad_of.empty() && !plan.cuda_refusal.empty()) {
                // A backward the CUDA plan cannot take (a user's declaration whose statistics share no
                // row axis): the CPU kernels only, said once per declaration.
                if (dtype == req.dtypes.front() && variant == Variant::Core)
                    std::cerr << "normgen-mlir: " << spec.name << ": no mlir-cuda kernel: " << plan.cuda_refusal << "\n";
            } else if (req.cuda) {
                ScheduleRecord record = choose_schedule(plan, ScheduleKind::MlirCuda, Isa::Sm90, req.cuda_schedule_overrides);
                CudaPlan cplan = cuda_plan(spec, plan, record);
                std::string fn = kernel_function_name(spec.name, dtype, Backend::Mlir, Isa::Sm90, variant);
                auto ctx = make_context();
                auto module = lower_cuda(*ctx, spec, plan, cplan, fn);
                std::string ptx = cuda_ptx(*module, req.cuda_root);
                std::string ptx_path = (fs::path(req.out_dir) / (fn + ".ptx")).string();
                std::string cubin_path = (fs::path(req.out_dir) / (fn + ".cubin")).string();
                write_file_atomically(ptx_path, ptx);
                const json ptxas = assemble_ptx((fs::path(req.cuda_root) / "bin" / "ptxas").string(), ptx_path, cubin_path);
                json e = cuda_manifest_entry(spec, plan, cplan, record, fn, req.source, req.grad_of);
                e["ptxas"] = ptxas;
                entries.push_back(e);
            }
        }
    }
    if (req.cpu) write_archive(objects, (fs::path(req.out_dir) / archive).string());
    return entries;
}

json cuda_manifest_entry(const NormSpec &spec, const KernelPlan &plan, const CudaPlan &cplan, const ScheduleRecord &record, const std::string &fn,
                         const std::string &source, const std::string &grad_of) {
    KernelEntryInfo info;
    info.backend = Backend::Mlir;
    info.isa = Isa::Sm90;
    info.source = source;
    info.target = "cuda sm_90 (PTX ISA 8.0)";
    info.schedule = &record;
    info.grad_of = grad_of;
    info.schedule_text = "one block of " + std::to_string(cplan.block_threads) + " threads per " + spec.axes_text(cplan.block_axes) +
                         "; per-thread partials + gpu.all_reduce";
    if (!cplan.column_outputs.empty()) {
        info.schedule_text = "two kernels: one block of " + std::to_string(cplan.block_threads) + " threads per block of rows " +
                             spec.axes_text(cplan.row_axes) + " (at most " + std::to_string(cplan.column_blocks) +
                             " blocks; per-row statistics by gpu.all_reduce";
        if (!cplan.statistics.empty()) info.schedule_text += ", those that keep more axes held per block in scratch";
        info.schedule_text += ", per-block partial sums of the column outputs), then a final reduce over the blocks";
    }
    info.library = fn + ".cubin";
    json e = manifest_entry(spec, plan, info);
    e["ptx"] = fn + ".ptx";
    e["cubin"] = fn + ".cubin";
    e["entry"] = fn;
    e["block_threads"] = cplan.block_threads;
    e["grid_axes"] = axis_names_json(spec, cplan.block_axes);
    e["extent_axes"] = axis_names_json(spec, cplan.extent_axes);
    if (!cplan.column_outputs.empty()) {
        // The two-kernel form (lower.h CudaPlan): the launcher allocates the partials, runs `entry`
        // on min(rows, column_blocks) blocks, then `final_entry`.
        e["final_entry"] = fn + "_final";
        e["row_axes"] = axis_names_json(spec, cplan.row_axes);
        e["column_blocks"] = cplan.column_blocks;
        json scratch = json::array();
        for (int o : cplan.column_outputs) {
            std::vector<AxisId> kept = spec.memory_atoms(spec.outputs[o].dims);
            scratch.push_back({{"output", spec.outputs[o].name}, {"axes", axis_names_json(spec, kept)}, {"dtype", dtype_name(spec.accumulate)}});
        }
        for (const CudaPlan::Statistic &st : cplan.statistics)  // after the partials, as the kernels take them
            scratch.push_back({{"statistic", st.name}, {"axes", axis_names_json(spec, st.axes)}, {"dtype", dtype_name(spec.accumulate)}});
        e["scratch"] = scratch;
    }
    return e;
}

namespace {

// The mlir-cuda kernel of a plan on EmulatedGpu: its manifest entry as the build writes it, read
// back by the registry, launched by the CUDA launcher the device uses (CudaKernelRunner).
class EmulatedCudaKernel : public CompiledKernel {
public:
    EmulatedCudaKernel(const NormSpec &spec, DType dtype, const std::string &schedule_overrides, Variant variant) {
        const KernelPlan plan = make_plan(spec, dtype, variant);
        if (!plan.cuda_refusal.empty()) throw UserError(plan.cuda_refusal);
        const ScheduleRecord record = choose_schedule(plan, ScheduleKind::MlirCuda, Isa::Sm90, schedule_overrides);
        record_ = record.to_json().dump();
        const CudaPlan cplan = cuda_plan(spec, plan, record);
        const std::string fn = kernel_function_name(spec.name, dtype, Backend::Mlir, Isa::Sm90, variant);
        ctx_ = make_context();
        module_ = lower_cuda(*ctx_, spec, plan, cplan, fn);
        json entry = cuda_manifest_entry(spec, plan, cplan, record, fn, spec.name + ".norm", "");
        text_ = entry["schedule_text"].get<std::string>() + "; emulated on the CPU (the gpu dialect, a fiber per thread)";
        // The registry reads the entry as it reads the build's manifest.
        dir_ = fs::temp_directory_path() / ("normgen_emulated_" + std::to_string(::getpid()) + "_" + fn);
        fs::create_directories(dir_);
        const std::string manifest = (dir_ / "manifest.json").string();
        write_manifest(json::array({entry}), manifest);
        registry_ = std::make_unique<Registry>(Registry::load(manifest, nullptr, 0));
        gpu_ = std::make_unique<EmulatedGpu>(*module_);
        runner_ = std::make_unique<CudaKernelRunner>(*gpu_, *registry_->find(fn), dir_.string());
        storage_ = registry_->find(fn)->storage();
        for (const OutputInfo &o : spec.outputs)
            if (!storage_.count(o.name)) storage_[o.name] = DType::F32;
    }
    ~EmulatedCudaKernel() override {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    TensorMap run(const TensorMap &inputs, const Overrides &axes) const override { return runner_->run_f64(inputs, axes); }
    StorageMap storage() const override { return storage_; }
    std::string schedule_record() const override { return record_; }
    std::string schedule_text() const override { return text_; }

private:
    std::unique_ptr<mlir::MLIRContext> ctx_;
    mlir::OwningOpRef<mlir::ModuleOp> module_;
    fs::path dir_;
    std::unique_ptr<Registry> registry_;
    std::unique_ptr<EmulatedGpu> gpu_;
    std::unique_ptr<CudaKernelRunner> runner_;
    StorageMap storage_;
    std::string record_, text_;
};

}  // namespace

std::unique_ptr<CompiledKernel> make_emulated_cuda_kernel(const NormSpec &spec, DType dtype, const std::string &schedule_overrides,
                                                          Variant variant) {
    return std::make_unique<EmulatedCudaKernel>(spec, dtype, schedule_overrides, variant);
}

void explain(const NormSpec &spec, DType dtype, const std::string &stage, const std::string &cuda_root, bool locations, std::ostream &os,
             const std::string &schedule) {
    static const std::vector<std::string> cpu{"linalg", "loops", "llvm"}, gpu{"gpu", "nvvm", "ptx"};
    std::string want = stage == "vector" ? "loops" : stage;
    if (!want.empty() && std::find(cpu.begin(), cpu.end(), want) == cpu.end() && std::find(gpu.begin(), gpu.end(), want) == gpu.end())
        throw UserError("explain: unknown stage '" + stage + "' (linalg, loops, vector, llvm, gpu, nvvm, ptx)");
    KernelPlan plan = make_plan(spec, dtype, variants_of(spec).back());
    StageSink print{[&](const std::string &s, const std::string &text) {
                        if (!want.empty() && s != want) return;
                        os << "// ---- stage: " << s << " (" << spec.name << ", " << dtype_name(dtype) << ") ----\n" << text << "\n";
                    },
                    locations};
    auto ctx = make_context();
    if (want.empty() || std::find(cpu.begin(), cpu.end(), want) != cpu.end()) {
        std::string fn = kernel_function_name(spec.name, dtype, Backend::Mlir, host_isa(), plan.variant);
        auto module = lower_cpu(*ctx, spec, plan, choose_schedule(plan, ScheduleKind::MlirCpu, host_isa(), schedule), fn);
        const StreamingArgs streaming = lower_cpu_to_llvm_dialect(*module, print);
        if (want.empty() || want == "llvm") print("llvm", host_llvm_ir(*module, streaming));
        return;
    }
    std::string fn = kernel_function_name(spec.name, dtype, Backend::Mlir, Isa::Sm90, plan.variant);
    auto module = lower_cuda(*ctx, spec, plan, cuda_plan(spec, plan, choose_schedule(plan, ScheduleKind::MlirCuda, Isa::Sm90)), fn);
    cuda_ptx(*module, cuda_root, print);
}

}  // namespace normgen::mlirgen
