// normgen-cuda: the runner of the GPU pack (scripts/gpu-pack.sh), for a machine with an NVIDIA GPU.
// It reads the pack's manifest (manifest_cuda.json: the CUDA kernels of both backends) and runs
//   - Halide's CUDA kernels (host code linked in, PTX embedded; Halide's runtime loads libcuda at
//     run time) through run_kernel, and on device buffers for timing;
//   - the mlir-cuda kernels (cubins beside the manifest) through the CUDA launcher.
// `verify` puts every kernel through the float64 verifier on the sweep's shapes; `bench` times the
// device-pack cases (cases: the CPU grid's model shapes of the headline layers, forward and
// backward, f32 and bf16) with CUDA events beside a device-to-device copy of the same bytes.
// Without a CUDA device every command stops at the first thing that needs one with one line
// ("no CUDA device: ...") and exit 77, after the checks that need none (the manifest, its files,
// every kernel bound).
#include "bench/shape_grids.h"
#include "runtime/cuda_launcher.h"
#include "runtime/device.h"
#include "runtime/quantile.h"
#include "runtime/registry.h"
#include "runtime/run.h"
#include "runtime/storage.h"
#include "runtime/verify.h"

#include <HalideRuntimeCuda.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <unistd.h>

using namespace normgen;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr int kNoDevice = 77;  // CTest's skip code; scripts/gpu.sh --dry-run expects it here

struct Options {
    std::string cmd, manifest, layer, backend, json_out;
    bool quick = false;
    uint64_t seed = 0;
    int reps = 7;
};

// ---- the device ------------------------------------------------------------------------------------

CudaDriver *g_driver = nullptr;

// Halide's CUDA kernels run in the launcher's context (device 0's primary context), so device
// buffers allocated by the launcher can be handed to them.
int acquire_context(void *, void **ctx, bool) {
    if (!g_driver) return -1;
    *ctx = g_driver->context();
    return 0;
}
int release_context(void *) { return 0; }

std::unique_ptr<CudaDriver> open_device() {
    require_device(Device::Cuda);  // the one-line refusal; loads libcuda.so.1 for Halide's runtime too
    auto d = std::make_unique<CudaDriver>();
    g_driver = d.get();
    halide_set_cuda_acquire_context(&acquire_context);
    halide_set_cuda_release_context(&release_context);
    halide_reuse_device_allocations(nullptr, true);  // a Halide kernel's scratch is allocated once, not per call
    return d;
}

// ---- the pack ----------------------------------------------------------------------------------------

std::string manifest_path(const Options &o) {
    if (!o.manifest.empty()) return o.manifest;
    // The pack's layout: bin/normgen-cuda beside manifest_cuda.json's folder.
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0) {
        buf[n] = 0;
        fs::path p = fs::path(buf).parent_path().parent_path() / "manifest_cuda.json";
        if (fs::exists(p)) return p.string();
    }
    return default_manifest_path();
}

// Everything that needs no device: each CUDA kernel of the manifest bound (Halide: to the table;
// mlir-cuda: its cubin present), both backends present. Returns the kernels' folder.
std::string check_pack(const Registry &reg, const std::string &manifest, int &halide, int &mlir) {
    const std::string dir = fs::path(manifest).parent_path().string();
    halide = mlir = 0;
    for (const Registry::Kernel *k : reg.kernels()) {
        if (k->device != Device::Cuda) continue;
        if (k->backend == Backend::Halide) {
            if (!k->argv) throw UserError("kernel '" + k->function + "' is in the manifest but not linked into normgen-cuda");
            ++halide;
        } else {
            const fs::path image = fs::path(dir) / k->cuda.image;
            if (!fs::is_regular_file(image)) throw UserError("kernel '" + k->function + "': its image " + k->cuda.image + " is missing");
            ++mlir;
        }
    }
    if (halide == 0 && mlir == 0) throw UserError("the manifest " + manifest + " lists no CUDA kernels");
    return dir;
}

bool wanted(const Options &o, const Registry::Kernel &k) {
    if (k.device != Device::Cuda) return false;
    if (!o.layer.empty() && k.layer != o.layer && k.layer != o.layer + "_grad") return false;
    if (o.backend == "halide" && k.backend != Backend::Halide) return false;
    if (o.backend == "mlir" && k.backend != Backend::Mlir) return false;
    return true;
}

const char *backend_word(const Registry::Kernel &k) { return k.backend == Backend::Halide ? "halide-cuda" : "mlir-cuda"; }

void write_json(const std::string &path, const json &j) {
    if (path.empty()) return;
    std::ofstream out(path);
    out << j.dump(1) << "\n";
    if (!out) throw UserError("cannot write " + path);
}

// ---- verify ------------------------------------------------------------------------------------------

int cmd_verify(const Options &o, const Registry &reg, const std::string &dir) {
    auto drv = open_device();
    std::printf("normgen-cuda verify: %s, the %s sweep\n", drv->device_name().c_str(), o.quick ? "quick" : "whole");
    std::printf("%-12s %-42s %7s %6s %12s  %s\n", "backend", "kernel", "shapes", "failed", "worst err/bd", "first failure");
    json results = json::array();
    int kernels = 0, failed_kernels = 0, cases = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const Registry::Kernel *k : reg.kernels()) {
        if (!wanted(o, *k)) continue;
        std::unique_ptr<CudaKernelRunner> runner;
        if (k->backend == Backend::Mlir) runner = std::make_unique<CudaKernelRunner>(*drv, *k, dir);
        KernelFn fn = [&](const TensorMap &in, const Overrides &ov) {
            return runner ? runner->run_f64(in, ov) : run_kernel_f64(*k, in, ov);
        };
        // A backward kernel: its inputs as `normgen verify --grad` draws them (the forward's inputs,
        // the saved statistics the float64 forward computes, upstream gradients N(0, 1)).
        std::shared_ptr<const NormSpec> forward = k->grad_of.empty() ? nullptr : reg.spec(k->grad_of);
        const StorageMap storage = k->storage();
        InputMaker make_inputs = forward ? backward_input_maker(*forward, *k->spec, storage) : InputMaker();
        std::vector<VerifyShape> shapes = verify_shapes(forward ? *forward : *k->spec);
        if (o.quick) shapes = quick_shapes(shapes);
        int failed = 0;
        double worst = 0;
        std::string first;
        json shape_rows = json::array();
        for (const VerifyShape &v : shapes) {
            const uint64_t s = o.seed + (uint64_t)cases * 7919;
            ++cases;
            CaseResult r;
            try {
                r = verify_case(*k->spec, storage, {fn}, v, s, make_inputs, forward != nullptr)[0];
            } catch (const std::exception &e) {
                r.pass = false;
                OutputCheck c;
                c.name = "(call)";
                c.pass = false;
                c.problem = e.what();
                r.outputs.push_back(c);
            }
            double ratio = 0;
            std::string why;
            for (const OutputCheck &c : r.outputs) {
                ratio = std::max(ratio, c.max_err);  // err / bound: <= 1 passes
                if (!c.pass && why.empty()) why = c.name + ": " + (c.problem.empty() ? mismatch_text(c) : c.problem);
            }
            worst = std::max(worst, ratio);
            if (!r.pass) {
                ++failed;
                if (first.empty()) first = v.label + ": " + why + " (seed " + std::to_string(s) + ")";
            }
            shape_rows.push_back({{"shape", v.label}, {"pass", r.pass}, {"err_over_bound", ratio}, {"seed", s}, {"problem", why}});
        }
        ++kernels;
        failed_kernels += failed > 0;
        std::printf("%-12s %-42s %7zu %6d %12.3g  %s\n", backend_word(*k), k->function.c_str(), shapes.size(), failed, worst,
                    first.c_str());
        std::fflush(stdout);
        results.push_back({{"function", k->function}, {"layer", k->layer}, {"backend", backend_word(*k)}, {"dtype", dtype_name(k->dtype)},
                           {"variant", variant_name(k->variant)}, {"pass", failed == 0}, {"shapes", shape_rows}});
        // After every kernel: a run cut short by its time limit keeps what it checked.
        write_json(o.json_out, {{"device", drv->device_name()}, {"sweep", o.quick ? "quick" : "whole"}, {"complete", false}, {"kernels", results}});
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%d kernels, %d cases in %.0f s: %d kernels passed, %d failed\n", kernels, cases, secs, kernels - failed_kernels,
                failed_kernels);
    write_json(o.json_out, {{"device", drv->device_name()}, {"sweep", o.quick ? "quick" : "whole"}, {"complete", true}, {"kernels", results}});
    return failed_kernels ? 1 : 0;
}

// ---- bench ---------------------------------------------------------------------------------------------

// The pack's timed cases: the CPU grid's model shapes (bench/shape_grids.h, not its DRAM cases,
// which are sized from a CPU's cache) of the headline layers, forward and backward, each in f32
// and bf16. --quick: LLaMA-3 8B LayerNorm and RMSNorm only.
std::vector<bench::GridCase> pack_cases(const Registry &reg, const Options &o) {
    static const std::set<std::string> layers = {"layer_norm", "rms_norm", "rms_norm_llama", "rms_norm_gemma", "fused_add_rms_norm", "dyt",
                                                 "group_norm_nchw", "group_norm_nhwc", "batch_norm_train", "batch_norm_eval"};
    std::vector<bench::GridCase> out;
    std::set<std::string> seen;
    auto add = [&](const std::vector<bench::GridCase> &grid) {
        for (bench::GridCase c : grid) {
            if (c.dram || !layers.count(c.layer) || (!o.layer.empty() && c.layer != o.layer)) continue;
            if (o.quick && (c.model != "llama3-8b" || (c.layer != "layer_norm" && c.layer != "rms_norm"))) continue;
            // The grid names the free axes only; the kernels take every atomic axis, a fixed one
            // (GroupNorm's g = 32) at its declared extent.
            if (const std::shared_ptr<const NormSpec> spec = reg.spec(c.layer))
                for (const Axis &ax : spec->axes)
                    if (!ax.is_split() && ax.fixed_extent && !c.sizes.count(ax.name)) c.sizes[ax.name] = *ax.fixed_extent;
            for (DType t : {DType::F32, DType::BF16}) {
                c.dtype = t;
                const std::string name = c.grad ? c.layer + "_grad" : c.layer;
                if (!reg.select_device(name, t, Device::Cuda) && !reg.select_device(name, t, Device::Cuda, false, Backend::Mlir)) continue;
                if (seen.insert(c.name()).second) out.push_back(c);
            }
        }
    };
    add(bench::model_grid());
    add(bench::backward_grid());
    return out;
}

json case_json(const bench::GridCase &c, double bytes) {
    return {{"name", c.name()}, {"layer", c.grad ? c.layer + "_grad" : c.layer}, {"forward_layer", c.layer}, {"grad", c.grad},
            {"model", c.model}, {"dtype", dtype_name(c.dtype)}, {"shape", c.shape}, {"sizes", c.sizes}, {"bytes", bytes}};
}

// Bytes of one argument at the case's sizes (atomic axes by name).
size_t arg_bytes(const KernelArg &a, const std::map<std::string, int64_t> &sizes) {
    size_t n = dtype_size(a.dtype);
    for (const std::string &d : a.buffer_dims) n *= (size_t)sizes.at(d);
    return n;
}

// Bytes a call moves at least: every argument read or written once.
double case_bytes(const Registry::Kernel &k, const std::map<std::string, int64_t> &sizes) {
    double b = 0;
    for (const KernelArg &a : k.args) b += (double)arg_bytes(a, sizes);
    return b;
}

// A Halide CUDA kernel on device buffers (no copies): the launcher's allocations wrapped for Halide.
struct HalideOnDevice {
    std::vector<std::vector<halide_dimension_t>> dims;
    std::vector<halide_buffer_t> bufs;
    std::vector<void *> args;
    const Registry::Kernel *k = nullptr;

    HalideOnDevice(const Registry::Kernel &kernel, const std::vector<uint64_t> &ptrs, const std::map<std::string, int64_t> &sizes)
        : dims(kernel.args.size()), bufs(kernel.args.size()), args(kernel.args.size()), k(&kernel) {
        for (size_t i = 0; i < kernel.args.size(); ++i) {
            const KernelArg &a = kernel.args[i];
            int32_t stride = 1;
            for (const std::string &d : a.buffer_dims) {
                const int32_t e = (int32_t)sizes.at(d);
                dims[i].push_back(halide_dimension_t(0, e, stride));
                stride *= e;
            }
            halide_buffer_t &b = bufs[i];
            b = halide_buffer_t();
            b.type = halide_type_of(a.dtype);
            if (std::count(kernel.bits_storage.begin(), kernel.bits_storage.end(), a.dtype)) b.type = halide_type_t(halide_type_uint, 16, 1);
            b.dimensions = (int32_t)dims[i].size();
            b.dim = dims[i].empty() ? nullptr : dims[i].data();
            if (int rc = halide_cuda_wrap_device_ptr(nullptr, &b, ptrs[i])) throw std::runtime_error("halide_cuda_wrap_device_ptr failed: " + std::to_string(rc));
            args[i] = &b;
        }
    }
    ~HalideOnDevice() {
        for (halide_buffer_t &b : bufs) halide_cuda_detach_device_ptr(nullptr, &b);
    }
    void call() {
        if (int rc = k->argv(args.data())) throw std::runtime_error("kernel '" + k->function + "' failed (Halide error " + std::to_string(rc) + ")");
    }
};

// Median ms per call of `call` (reps timings of `launches` calls each, after a warm-up call).
double time_calls(CudaDriver &drv, const std::function<void()> &call, int reps) {
    call();
    drv.synchronize();
    // Enough calls per timing for about 2 ms of work (at least 3).
    const double one = drv.time_ms(call, 3);
    const int launches = (int)std::clamp(2.0 / std::max(one, 1e-4), 3.0, 200.0);
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) t.push_back(drv.time_ms(call, launches));
    return median(t);
}

int cmd_bench(const Options &o, const Registry &reg, const std::string &dir) {
    const std::vector<bench::GridCase> cases = pack_cases(reg, o);
    auto drv = open_device();
    const int sms = drv->attribute(16), l2 = drv->attribute(38);
    std::printf("normgen-cuda bench: %s (%d SMs, L2 %d MiB), %zu cases, CUDA events, medians of %d\n", drv->device_name().c_str(), sms,
                l2 >> 20, cases.size(), o.reps);
    std::printf("%-48s %-12s %10s %9s %8s %6s\n", "case", "impl", "us", "GB/s", "of copy", "regs");
    json rows = json::array();
    for (const bench::GridCase &c : cases) {
        const std::string name = c.grad ? c.layer + "_grad" : c.layer;
        const Registry::Kernel *ks[2] = {reg.select_device(name, c.dtype, Device::Cuda),
                                         reg.select_device(name, c.dtype, Device::Cuda, false, Backend::Mlir)};
        const Registry::Kernel *any = ks[0] ? ks[0] : ks[1];
        const double bytes = case_bytes(*any, c.sizes);
        // The limit: a device-to-device copy of the same bytes (half read, half written).
        double copy_gbps = 0;
        {
            const size_t half = (size_t)(bytes / 2) & ~(size_t)255;
            uint64_t src = drv->alloc(half), dst = drv->alloc(half);
            drv->fill(src, 0x3c, half);
            const double ms = time_calls(*drv, [&] { drv->copy(dst, src, half); }, o.reps);
            copy_gbps = 2.0 * half / (ms * 1e-3) / 1e9;
            drv->free(src);
            drv->free(dst);
        }
        json row = case_json(c, bytes);
        row["copy_GBps"] = copy_gbps;
        row["impls"] = json::object();
        for (const Registry::Kernel *k : ks) {
            if (!k) continue;
            const std::string impl = backend_word(*k);
            json m = {{"function", k->function}, {"registers", k->cuda.registers}, {"spills", k->cuda.spill_stores + k->cuda.spill_loads}};
            try {
                // Inputs: a constant (0x3c3c... : about 0.01 in f32 and bf16); its values do not
                // change the kernel's work. Outputs are written over.
                double ms = 0;
                if (k->backend == Backend::Halide) {
                    std::vector<uint64_t> ptrs;
                    for (const KernelArg &a : k->args) {
                        ptrs.push_back(drv->alloc(arg_bytes(a, c.sizes)));
                        drv->fill(ptrs.back(), 0x3c, arg_bytes(a, c.sizes));
                    }
                    {
                        HalideOnDevice h(*k, ptrs, c.sizes);
                        ms = time_calls(*drv, [&] { h.call(); }, o.reps);
                    }
                    for (uint64_t p : ptrs) drv->free(p);
                } else {
                    std::map<std::string, std::vector<uint8_t>> host;  // the launcher uploads its own copies
                    for (const KernelArg &a : k->args) host[a.name].assign(arg_bytes(a, c.sizes), 0x3c);
                    CudaKernelRunner runner(*drv, *k, dir);
                    ms = runner.time(host, c.sizes, o.reps, 20);
                }
                m["us"] = ms * 1e3;
                m["GBps"] = bytes / (ms * 1e-3) / 1e9;
                m["copy_frac"] = m["GBps"].get<double>() / copy_gbps;
                std::printf("%-48s %-12s %10.1f %9.1f %7.0f%% %6d\n", c.name().c_str(), impl.c_str(), ms * 1e3, m["GBps"].get<double>(),
                            100 * m["copy_frac"].get<double>(), k->cuda.registers);
            } catch (const std::exception &e) {
                m["error"] = e.what();
                std::printf("%-48s %-12s error: %s\n", c.name().c_str(), impl.c_str(), e.what());
            }
            std::fflush(stdout);
            row["impls"][impl] = m;
        }
        rows.push_back(row);
        write_json(o.json_out, {{"device", drv->device_name()}, {"sms", sms}, {"l2_bytes", l2}, {"complete", false}, {"cases", rows}});
    }
    write_json(o.json_out, {{"device", drv->device_name()}, {"sms", sms}, {"l2_bytes", l2}, {"complete", true}, {"cases", rows}});
    return 0;
}

// The cases alone (for bench/gpu/torch_bench.py): no device needed.
int cmd_cases(const Options &o, const Registry &reg) {
    json rows = json::array();
    for (const bench::GridCase &c : pack_cases(reg, o)) {
        const std::string name = c.grad ? c.layer + "_grad" : c.layer;
        const Registry::Kernel *k = reg.select_device(name, c.dtype, Device::Cuda);
        if (!k) k = reg.select_device(name, c.dtype, Device::Cuda, false, Backend::Mlir);
        rows.push_back(case_json(c, case_bytes(*k, c.sizes)));
    }
    if (o.json_out.empty()) std::printf("%s\n", rows.dump(1).c_str());
    write_json(o.json_out, {{"cases", rows}});
    std::fprintf(stderr, "normgen-cuda: %zu cases\n", rows.size());
    return 0;
}

constexpr const char *kHelp = R"(normgen-cuda - the GPU pack's runner: normgen's CUDA kernels (Halide and MLIR) on an NVIDIA GPU.

usage:
  normgen-cuda check  [--manifest M]
        The pack without a device: every CUDA kernel of the manifest bound (Halide's linked in,
        mlir-cuda's cubin present); then the device: exit 0 with one, 77 without.
  normgen-cuda verify [--quick] [--layer L] [--backend halide|mlir] [--seed N] [--json FILE]
        Every CUDA kernel against the float64 reference on its layer's shape sweep (--quick: the
        quick sweep: d = 1, 17, 4097, 262144, one row, short rows, GroupNorm's 49 channels in 7
        groups, inputs with a large mean). One line per kernel; exit 1 on any failure.
  normgen-cuda bench  [--quick] [--layer L] [--backend halide|mlir] [--reps N] [--json FILE]
        Times the pack's cases (the CPU grid's model shapes of LayerNorm, RMSNorm (plain, Llama,
        Gemma), fused add + RMSNorm, DyT, GroupNorm NCHW/NHWC, BatchNorm train/eval, forward and
        backward, f32 and bf16) with CUDA events on device buffers: median us per call, GB/s of
        the bytes every argument moves once, and the fraction of a device-to-device copy of the
        same bytes measured in the same run.
  normgen-cuda cases  [--quick] [--layer L] [--json FILE]
        The bench's cases (layer, storage type, sizes, bytes), for the torch benchmark; no device.

--manifest M: the pack's manifest_cuda.json (default: the one beside bin/, else the build's).
Without a CUDA device: "no CUDA device: ..." on one line and exit 77.
)";

Options parse(const std::vector<std::string> &args) {
    Options o;
    o.cmd = args[0];
    o.seed = std::random_device{}();
    for (size_t i = 1; i < args.size(); ++i) {
        const std::string &a = args[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= args.size()) throw UserError(a + " needs a value");
            return args[++i];
        };
        if (a == "--quick") o.quick = true;
        else if (a == "--layer") o.layer = value();
        else if (a == "--backend") {
            o.backend = value();
            if (o.backend != "halide" && o.backend != "mlir") throw UserError("--backend: give halide or mlir");
        } else if (a == "--manifest") o.manifest = value();
        else if (a == "--json") o.json_out = value();
        else if (a == "--seed") o.seed = std::stoull(value());
        else if (a == "--reps") o.reps = std::max(1, std::stoi(value()));
        else throw UserError("unknown option '" + a + "' (normgen-cuda --help)");
    }
    return o;
}

}  // namespace

int main(int argc, char **argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty() || args[0] == "-h" || args[0] == "--help") {
        std::fputs(kHelp, args.empty() ? stderr : stdout);
        return args.empty() ? 1 : 0;
    }
    try {
        const Options o = parse(args);
        if (o.cmd != "check" && o.cmd != "verify" && o.cmd != "bench" && o.cmd != "cases")
            throw UserError("unknown command '" + o.cmd + "' (normgen-cuda --help)");
        const std::string manifest = manifest_path(o);
        Registry reg = Registry::load(manifest, kKernelTable, kKernelTableSize);
        int halide = 0, mlir = 0;
        const std::string dir = check_pack(reg, manifest, halide, mlir);
        std::fprintf(stderr, "normgen-cuda: %d Halide and %d mlir-cuda kernels in %s\n", halide, mlir, manifest.c_str());
        if (o.cmd == "cases") return cmd_cases(o, reg);
        if (o.cmd == "check") {
            auto drv = open_device();
            std::printf("normgen-cuda: %s\n", drv->device_name().c_str());
            return 0;
        }
        if (o.cmd == "verify") return cmd_verify(o, reg, dir);
        return cmd_bench(o, reg, dir);
    } catch (const DeviceUnavailable &e) {
        std::fprintf(stderr, "normgen-cuda: %s\n", e.what());
        return kNoDevice;
    } catch (const CudaUnavailable &e) {
        std::fprintf(stderr, "normgen-cuda: %s\n", e.what());
        return kNoDevice;
    } catch (const UserError &e) {
        std::fprintf(stderr, "normgen-cuda: error: %s\n", e.what());
        return 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "normgen-cuda: error: %s\n", e.what());
        return 2;
    }
}
