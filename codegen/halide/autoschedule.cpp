#include "codegen/halide/autoschedule.h"

#include "codegen/halide/jit.h"
#include "codegen/halide/lower.h"
#include "runtime/errors.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <set>

namespace normgen::hl {

using namespace Halide;

const std::vector<std::string> &autoscheduler_names() {
    static const std::vector<std::string> names{"Adams2019", "Li2018", "Mullapudi2016"};
    return names;
}

namespace {

// The folder of libHalide.so in this process (the wheel's lib64/, where the plugins are).
std::string halide_library_dir() {
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void *>(&Halide::load_plugin), &info) || !info.dli_fname) return "";
    return std::filesystem::path(info.dli_fname).parent_path().string();
}

void load_autoscheduler(const std::string &name) {
    static std::mutex m;
    static std::set<std::string> loaded;
    std::lock_guard<std::mutex> lock(m);
    if (loaded.count(name)) return;
    std::string lower;
    for (char c : name) lower += (char)std::tolower((unsigned char)c);
    const std::string file = "libautoschedule_" + lower + ".so";
    const std::string dir = halide_library_dir();
    const std::string path = dir.empty() ? file : (std::filesystem::path(dir) / file).string();
    if (!std::filesystem::exists(path))
        throw std::runtime_error("the " + name + " autoscheduler is not beside libHalide (" + path + " is missing)");
    load_plugin(path);
    loaded.insert(name);
}

}  // namespace

CompiledObject compile_autoscheduled_kernel(const NormSpec &spec, const KernelPlan &plan, const std::string &autoscheduler,
                                            const std::vector<int64_t> &extents, int threads, int64_t llc_bytes, const Target &target,
                                            const std::string &function, const std::string &out_dir) {
    const auto &names = autoscheduler_names();
    if (std::find(names.begin(), names.end(), autoscheduler) == names.end())
        throw UserError("unknown autoscheduler '" + autoscheduler + "' (known: Adams2019, Li2018, Mullapudi2016)");
    load_autoscheduler(autoscheduler);
    // The algorithm alone: the default record only fixes the algorithm's own parameters (Welford's
    // lanes); no normgen schedule is applied.
    const ScheduleRecord record = choose_schedule(plan, ScheduleKind::HalideCpu, isa_of(target));
    LoweredPipeline p = lower_to_halide(spec, plan, record);
    auto estimate = [&](auto &&buffer, const std::vector<AxisId> &atoms) {
        Region r;
        for (auto it = atoms.rbegin(); it != atoms.rend(); ++it) r.push_back(Range(0, (int)extents.at((size_t)*it)));
        buffer.set_estimates(r);
    };
    for (size_t i = 0; i < p.inputs.size(); ++i) estimate(p.inputs[i], spec.memory_atoms(spec.tensors[i].dims));
    for (size_t i = 0; i < p.outputs.size(); ++i) estimate(p.outputs[i], spec.memory_atoms(spec.outputs[(size_t)p.output_index[i]].dims));
    std::map<std::string, std::string> params{{"parallelism", std::to_string(std::max(1, threads))}};
    if (autoscheduler == "Mullapudi2016") params["last_level_cache_size"] = std::to_string(std::max<int64_t>(llc_bytes, 1 << 20));
    Pipeline pipeline = p.pipeline();
    pipeline.apply_autoscheduler(target, AutoschedulerParams(autoscheduler, params));
    CompiledObject c;
    const std::string prefix = (std::filesystem::path(out_dir) / function).string();
    c.object = prefix + ".o";
    c.header = prefix + ".h";
    c.text = autoscheduler + " autoscheduler (parallelism " + std::to_string(threads) + "), estimates " + std::to_string(extents.size()) + " axes";
    // The same bf16 conversion as normgen's own kernels (native where the target has it), so the
    // baseline differs from them in its schedule only.
    emit_object(pipeline, p.arguments(), plan, target, function, {}, "", c);
    return c;
}

}  // namespace normgen::hl
