// normgen-cuda: the GPU side of the suite, for a machine with an NVIDIA GPU (sm_90). It reads the
// manifest the build wrote and runs the mlir-cuda kernels through the CUDA launcher
// (runtime/cuda_launcher.h): `verify` puts every one through the float64 verifier on its shape
// sweep, `bench` times LayerNorm and RMSNorm (and every catalog layer at one large shape) in GB/s.
// Without a GPU it says so and exits 77 (CTest's skip code for the `gpu` label).
//
//   normgen-cuda info
//   normgen-cuda verify [--quick] [--layer NAME] [--seed N]
//   normgen-cuda bench [--layer NAME]
#include "runtime/cuda_launcher.h"
#include "runtime/registry.h"
#include "runtime/storage.h"
#include "runtime/verify.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

using namespace normgen;

namespace {

constexpr int kSkip = 77;

std::map<std::string, std::vector<uint8_t>> device_tensors(const Registry::Kernel &k, const TensorMap &inputs, const AxisExtents &ext) {
    std::map<std::string, std::vector<uint8_t>> t;
    for (const KernelArg &a : k.args) {
        if (a.role != KernelArg::Output) {
            t[a.name] = encode(inputs.at(a.name).data, a.dtype);
        } else {
            int64_t n = 1;
            for (AxisId ax : a.buffer_axes) n *= ext.extent[ax];
            t[a.name].assign((size_t)n * dtype_size(a.dtype), 0xff);
        }
    }
    return t;
}

std::map<std::string, int64_t> extents_by_name(const NormSpec &spec, const AxisExtents &ext) {
    std::map<std::string, int64_t> m;
    for (size_t a = 0; a < spec.axes.size(); ++a)
        if (!spec.axes[a].is_split()) m[spec.axes[a].name] = ext.extent[a];
    return m;
}

int cmd_verify(CudaDriver &drv, const Registry &reg, const std::string &dir, bool quick, const std::string &layer, uint64_t seed) {
    int failed = 0, passed = 0;
    std::printf("%-28s %-5s %-5s %-44s %-14s %10s  %s\n", "layer", "dtype", "var", "shape", "worst output", "err/bound", "pass");
    for (const Registry::Kernel *k : reg.kernels()) {
        if (k->device != Device::Cuda || (!layer.empty() && k->layer != layer)) continue;
        CudaKernelRunner runner(drv, *k, dir);
        StorageMap storage;
        for (const KernelArg &a : k->args) storage[a.name] = a.dtype;
        for (const OutputInfo &o : k->spec->outputs)
            if (!storage.count(o.name)) storage[o.name] = DType::F32;  // not computed by a core kernel
        KernelFn fn = [&](const TensorMap &in, const Overrides &ov) {
            AxisExtents ext = bind_axes(*k->spec, in, ov);
            auto t = device_tensors(*k, in, ext);
            runner.run(t, extents_by_name(*k->spec, ext));
            TensorMap out;
            for (const KernelArg &a : k->args) {
                if (a.role != KernelArg::Output) continue;
                const OutputInfo *o = k->spec->find_output(a.name);
                HostTensor h;
                h.shape = physical_shape(*k->spec, o->dims, ext);
                h.data = decode(t[a.name].data(), t[a.name].size() / dtype_size(a.dtype), a.dtype);
                out[a.name] = std::move(h);
            }
            return out;
        };
        // A backward kernel: its inputs as `normgen verify --grad` draws them (the forward's inputs,
        // the saved statistics the float64 forward computes, upstream gradients N(0, 1)), judged
        // with the running error bound.
        std::shared_ptr<const NormSpec> forward = k->grad_of.empty() ? nullptr : reg.spec(k->grad_of);
        InputMaker make_inputs = forward ? backward_input_maker(*forward, *k->spec, storage) : InputMaker();
        std::vector<VerifyShape> shapes = verify_shapes(forward ? *forward : *k->spec);
        for (size_t i = 0; i < shapes.size(); i += quick ? 4 : 1) {
            uint64_t s = seed + (passed + failed) * 7919;
            CaseResult r = verify_case(*k->spec, storage, {fn}, shapes[i], s, make_inputs, forward != nullptr)[0];
            const OutputCheck *worst = nullptr;
            for (const OutputCheck &o : r.outputs)
                if (!worst || o.max_err > worst->max_err || !o.problem.empty()) worst = &o;
            std::printf("%-28s %-5s %-5s %-44s %-14s %10.3g  %s\n", k->layer.c_str(), dtype_name(k->dtype), variant_name(k->variant),
                        shapes[i].label.c_str(), worst ? worst->name.c_str() : "", worst ? worst->max_err : 0.0,
                        r.pass ? "ok" : ("FAIL " + (worst ? worst->problem : std::string()) + " (seed " + std::to_string(s) + ")").c_str());
            (r.pass ? passed : failed)++;
        }
    }
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

// GB/s of the core f32/bf16 kernels: LayerNorm and RMSNorm at 4096x4096 and 32768x8192, and
// every catalog layer at a shape of about 1 GiB of input.
int cmd_bench(CudaDriver &drv, const Registry &reg, const std::string &dir, const std::string &layer) {
    std::printf("%-28s %-5s %-24s %10s %10s %6s %6s\n", "layer", "dtype", "shape", "us", "GB/s", "regs", "spill");
    for (const Registry::Kernel *k : reg.kernels()) {
        if (k->device != Device::Cuda || k->variant != Variant::Core || (!layer.empty() && k->layer != layer)) continue;
        const NormSpec &spec = *k->spec;
        std::vector<std::map<std::string, int64_t>> shapes;
        bool rows_d = spec.find_axis("rows") >= 0 && spec.find_axis("d") >= 0;
        if (rows_d) {
            shapes.push_back({{"rows", 4096}, {"d", 4096}});
            shapes.push_back({{"rows", 32768}, {"d", 8192}});
        } else {
            std::map<std::string, int64_t> s;
            for (size_t a = 0; a < spec.axes.size(); ++a) {
                if (spec.axes[a].is_split()) continue;
                const std::string &n = spec.axes[a].name;
                s[n] = n == "n" ? 16 : n == "c" ? 320 : n == "g" ? 32 : n == "cg" ? 10 : n == "h" || n == "w" ? 128 : 64;
                if (spec.axes[a].fixed_extent) s[n] = *spec.axes[a].fixed_extent;
            }
            shapes.push_back(s);
        }
        CudaKernelRunner runner(drv, *k, dir);
        for (auto &sizes : shapes) {
            std::map<std::string, std::vector<uint8_t>> t;
            double bytes = 0;
            for (const KernelArg &a : k->args) {
                int64_t n = 1;
                for (const std::string &d : a.buffer_dims) n *= sizes.count(d) ? sizes[d] : 1;
                t[a.name].assign((size_t)n * dtype_size(a.dtype), 0);
                // Inputs: 1.0 in every format's upper bits pattern is fine for timing; use small values.
                if (a.role != KernelArg::Output) {
                    std::vector<double> v((size_t)n, 0.5);
                    t[a.name] = encode(v, a.dtype);
                }
                bytes += (double)n * dtype_size(a.dtype);
            }
            double ms = runner.time(t, sizes, 5, 10);
            std::string label;
            for (const auto &[n, v] : sizes) label += (label.empty() ? "" : " ") + n + "=" + std::to_string(v);
            std::printf("%-28s %-5s %-24s %10.1f %10.1f %6d %6d\n", k->layer.c_str(), dtype_name(k->dtype), label.c_str(), ms * 1e3,
                        bytes / (ms * 1e-3) / 1e9, k->cuda.registers, k->cuda.spill_stores + k->cuda.spill_loads);
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty() || args[0] == "-h" || args[0] == "--help") {
        std::printf("usage: normgen-cuda info | verify [--quick] [--layer NAME] [--seed N] | bench [--layer NAME]\n"
                    "Runs the generated mlir-cuda kernels (sm_90) on this machine's GPU; exit 77 when there is none.\n");
        return args.empty() ? 1 : 0;
    }
    std::string cmd = args[0], layer;
    bool quick = false;
    uint64_t seed = std::random_device{}();
    for (size_t i = 1; i < args.size(); ++i) {
        if (args[i] == "--quick") quick = true;
        else if (args[i] == "--layer" && i + 1 < args.size()) layer = args[++i];
        else if (args[i] == "--seed" && i + 1 < args.size()) seed = std::stoull(args[++i]);
        else {
            std::fprintf(stderr, "normgen-cuda: unknown option '%s'\n", args[i].c_str());
            return 1;
        }
    }
    try {
        std::string manifest = default_manifest_path();
        Registry reg = Registry::load(manifest, kKernelTable, kKernelTableSize);
        std::string dir = std::filesystem::path(manifest).parent_path().string();  // files are relative to the manifest
        int n = 0;
        for (const Registry::Kernel *k : reg.kernels()) n += k->device == Device::Cuda;
        if (n == 0) {
            std::fprintf(stderr, "normgen-cuda: the manifest %s lists no CUDA kernels (the build found no ptxas)\n", manifest.c_str());
            return kSkip;
        }
        CudaDriver drv;
        std::printf("normgen-cuda: %s, %d CUDA kernels in %s\n", drv.device_name().c_str(), n, manifest.c_str());
        if (cmd == "info") return 0;
        if (cmd == "verify") return cmd_verify(drv, reg, dir, quick, layer, seed);
        if (cmd == "bench") return cmd_bench(drv, reg, dir, layer);
        std::fprintf(stderr, "normgen-cuda: unknown command '%s'\n", cmd.c_str());
        return 1;
    } catch (const CudaUnavailable &e) {
        std::printf("normgen-cuda: skipped: %s\n", e.what());
        return kSkip;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "normgen-cuda: error: %s\n", e.what());
        return 1;
    }
}
