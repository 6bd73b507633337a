// The CUDA launcher on a machine without a GPU (or with one): loading the driver either works or
// says plainly why not; the manifest's mlir-cuda kernels are described completely; asking for a
// missing driver names it.
#include "runtime/cuda_launcher.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

using namespace normgen;

namespace {

struct EnvGuard {
    std::string name, old;
    bool had;
    EnvGuard(const char *n, const char *v) : name(n), had(std::getenv(n) != nullptr) {
        if (had) old = std::getenv(n);
        setenv(n, v, 1);
    }
    ~EnvGuard() {
        if (had) setenv(name.c_str(), old.c_str(), 1);
        else unsetenv(name.c_str());
    }
};

}  // namespace

TEST_CASE("a missing CUDA driver is reported by name, not a crash", "[cuda]") {
    EnvGuard g("NORMGEN_CUDA_DRIVER", "/nonexistent/libcuda.so.1");
    try {
        CudaDriver d;
        FAIL("a driver loaded from a path that does not exist");
    } catch (const CudaUnavailable &e) {
        std::string m = e.what();
        CHECK(m.rfind("no CUDA device: cannot load the CUDA driver", 0) == 0);
        CHECK(m.find("/nonexistent/libcuda.so.1") != std::string::npos);
    }
}

TEST_CASE("the default driver either opens a device or says why not", "[cuda]") {
    try {
        CudaDriver d;
        CHECK(!d.device_name().empty());
        CHECK(d.error_text(100).find("CUDA_ERROR_NO_DEVICE") != std::string::npos);
    } catch (const CudaUnavailable &e) {
        WARN("no GPU here: " << e.what());
        CHECK(std::string(e.what()).size() > 10);
    }
}

TEST_CASE("every catalog layer has sm_90 kernels for every storage type, assembled without spills", "[cuda]") {
    Registry reg = Registry::load(default_manifest_path(), kKernelTable, kKernelTableSize);
    std::string dir = std::filesystem::path(default_manifest_path()).parent_path().string();  // files are relative to the manifest
    std::map<std::string, std::set<std::string>> dtypes;
    std::set<std::string> layers;
    for (const Registry::Kernel *k : reg.kernels()) {
        if (k->grad_of.empty()) layers.insert(k->layer);
        if (k->device != Device::Cuda || k->backend != Backend::Mlir) continue;  // (Halide's: tests/runtime/kernels/device_test.cpp)
        INFO(k->function);
        CHECK(std::filesystem::exists(dir + "/" + k->cuda.image));
        CHECK(std::filesystem::exists(dir + "/" + k->cuda.ptx));
        CHECK(k->cuda.registers > 0);
        CHECK(k->cuda.spill_stores == 0);
        CHECK(k->cuda.spill_loads == 0);
        CHECK(k->cuda.block_threads == 256);
        dtypes[k->layer].insert(dtype_name(k->dtype));
    }
    if (dtypes.empty()) {
        WARN("the build generated no mlir-cuda kernels (no ptxas found)");
        return;
    }
    for (const std::string &l : layers) {
        INFO(l);
        CHECK(dtypes[l] == std::set<std::string>{"f32", "bf16", "f16"});
    }
}

TEST_CASE("every backward has sm_90 kernels: the two-kernel form names its partials, its held statistics and both entries", "[cuda][grad]") {
    Registry reg = Registry::load(default_manifest_path(), kKernelTable, kKernelTableSize);
    const std::string dir = std::filesystem::path(default_manifest_path()).parent_path().string();
    std::set<std::string> grads, cuda, two_kernel;
    std::map<std::string, std::set<std::string>> held;
    std::map<std::string, std::vector<std::string>> rows;
    for (const Registry::Kernel *k : reg.kernels()) {
        if (k->grad_of.empty()) continue;
        grads.insert(k->layer);
        if (k->device != Device::Cuda || k->backend != Backend::Mlir) continue;
        INFO(k->function);
        cuda.insert(k->layer);
        if (k->cuda.final_entry.empty()) continue;
        two_kernel.insert(k->layer);
        CHECK(k->cuda.final_entry == k->cuda.entry + "_final");
        CHECK(k->cuda.grid_axes.empty());  // the grid is the block count, an argument
        CHECK(k->cuda.column_blocks >= 1);
        REQUIRE(!k->cuda.row_axes.empty());
        for (const std::string &ax : k->cuda.row_axes) CHECK(k->spec->find_axis(ax) >= 0);
        REQUIRE(!k->cuda.scratch.empty());
        bool partials_first = true, seen_statistic = false;
        for (const auto &sc : k->cuda.scratch) {
            INFO(sc.output << sc.statistic);
            CHECK(sc.output.empty() != sc.statistic.empty());
            if (sc.statistic.empty()) {
                partials_first = partials_first && !seen_statistic;
                bool output = false;
                for (const KernelArg &a : k->args) output = output || (a.name == sc.output && a.role == KernelArg::Output);
                CHECK(output);
            } else {
                seen_statistic = true;
                CHECK(!sc.axes.empty());  // a statistic is held only for the axes beyond the rows
                for (const std::string &ax : sc.axes)
                    CHECK(std::find(k->cuda.row_axes.begin(), k->cuda.row_axes.end(), ax) == k->cuda.row_axes.end());
                held[k->layer].insert(sc.statistic);
            }
            CHECK(sc.dtype == DType::F32);  // the catalog accumulates in f32
        }
        CHECK(partials_first);  // the kernels take the partials, then the statistics
        rows[k->layer] = k->cuda.row_axes;
        std::ifstream ptx(dir + "/" + k->cuda.ptx);
        std::string text((std::istreambuf_iterator<char>(ptx)), std::istreambuf_iterator<char>());
        CHECK(text.find(".entry " + k->cuda.entry + "(") != std::string::npos);
        CHECK(text.find(".entry " + k->cuda.final_entry + "(") != std::string::npos);
    }
    if (cuda.empty()) {
        WARN("the build generated no mlir-cuda kernels (no ptxas found)");
        return;
    }
    CHECK(grads.size() >= 20);
    std::set<std::string> missing;
    for (const std::string &l : grads)
        if (!cuda.count(l)) missing.insert(l);
    CHECK(missing.empty());
    for (const char *l : {"layer_norm_grad", "rms_norm_grad", "dyt_grad", "fused_add_rms_norm_grad", "group_norm_nchw_grad", "group_norm_nhwc_grad",
                          "qk_norm_grad"})
        CHECK(two_kernel.count(l));
    // GroupNorm: a row is one group of one sample; its sums over h, w per channel (NCHW's t2, of
    // (x - mu) d_y, and t3, of d_y, which d_bias sums over n too) are held per block. QKNorm: a row is one head of one token, d_weight sums over all three.
    CHECK(rows["group_norm_nchw_grad"] == std::vector<std::string>{"n", "g"});
    CHECK(rows["group_norm_nhwc_grad"] == std::vector<std::string>{"n", "g"});
    CHECK(held["group_norm_nchw_grad"] == std::set<std::string>{"t2", "t3"});
    CHECK(rows["qk_norm_grad"] == std::vector<std::string>{"b", "t", "heads"});
    CHECK(held["qk_norm_grad"].empty());
    CHECK(held["layer_norm_grad"].empty());
    CHECK(!two_kernel.count("batch_norm_train_grad"));  // a block per channel: its statistics are per block already
}

TEST_CASE("a CUDA kernel is never selected for the CPU", "[cuda]") {
    Registry reg = Registry::load(default_manifest_path(), kKernelTable, kKernelTableSize);
    for (const Registry::Kernel *k : reg.kernels()) {
        if (k->device != Device::Cuda) continue;
        const Registry::Kernel *s = reg.select(k->layer, k->dtype, k->full(), std::nullopt, Backend::Mlir);
        if (s) CHECK(s->device == Device::Cpu);
    }
}
