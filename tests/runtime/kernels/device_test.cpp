// Halide's GPU kernels in the build's registry (generated/: every catalog layer, forward and
// backward, for CUDA and OpenCL): found by device, their CUDA PTX assembled for sm_90 at build
// time; the OpenCL ones run here through run_kernel on PoCL (this CPU's OpenCL device) against the
// float64 reference; a CUDA kernel on a machine without a CUDA device refuses in one line and
// writes nothing.
#include "kernel_test_util.h"
#include "runtime/device.h"
#include "runtime/errors.h"
#include "runtime/random_inputs.h"
#include "runtime/registry.h"
#include "runtime/run.h"
#include "runtime/storage.h"
#include "runtime/verify.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

using namespace normgen;
using normgen::test::registry;

namespace {

std::set<std::string> forward_layers() {
    std::set<std::string> s;
    for (const Registry::Kernel *k : registry().kernels())
        if (k->grad_of.empty() && k->device == Device::Cpu) s.insert(k->layer);
    return s;
}

// The quick sweep's shapes of at most 2^16 elements (the float64 reference stays quick).
std::vector<VerifyShape> small_shapes(const NormSpec &spec) {
    std::vector<VerifyShape> out;
    for (const VerifyShape &v : quick_shapes(verify_shapes(spec))) {
        AxisExtents ext = choose_extents(spec, v.sizes, 1);
        int64_t n = 1;
        for (size_t a = 0; a < spec.axes.size(); ++a)
            if (!spec.axes[a].is_split()) n *= ext.extent[a];
        if (n <= (1 << 16)) out.push_back(v);
    }
    return out;
}

}  // namespace

TEST_CASE("select_device finds Halide's CUDA and OpenCL kernels of every catalog layer, forward and backward", "[kernels][gpu]") {
    const std::set<std::string> layers = forward_layers();
    REQUIRE(layers.size() >= 18);
    const std::string dir = std::filesystem::path(registry().path()).parent_path().string();
    int with_ptxas = 0;
    for (const std::string &layer : layers)
        for (const std::string &name : {layer, layer + "_grad"})
            for (DType t : {DType::F32, DType::BF16, DType::F16}) {
                if (!registry().select(name, t, false)) continue;  // no CPU kernel of the type: none on a GPU either
                INFO(name << " " << dtype_name(t));
                const Registry::Kernel *c = registry().select_device(name, t, Device::Cuda);
                const Registry::Kernel *o = registry().select_device(name, t, Device::OpenCl);
                REQUIRE(c);
                REQUIRE(o);
                CHECK(c->backend == Backend::Halide);
                CHECK(c->isa == Isa::Sm90);
                CHECK(o->isa == Isa::OpenCl);
                CHECK(c->argv != nullptr);
                CHECK(!c->runs_here());
                CHECK(c->schedule_record.find("\"halide-gpu\"") != std::string::npos);
                // The PTX beside the manifest; with the CUDA toolkit, assembled for sm_90 by ptxas.
                REQUIRE(!c->cuda.ptx.empty());
                CHECK(std::filesystem::is_regular_file(std::filesystem::path(dir) / c->cuda.ptx));
                if (c->cuda.registers > 0) {
                    ++with_ptxas;
                    CHECK(c->cuda.spill_stores == 0);
                }
                // OpenCL without a half type: the 16-bit floats as bits.
                if (t != DType::F32) CHECK(std::count(o->bits_storage.begin(), o->bits_storage.end(), t) == 1);
            }
    INFO("kernels whose PTX ptxas assembled: " << with_ptxas);
    CHECK((with_ptxas == 0 || with_ptxas >= 18 * 2 * 3));
}

TEST_CASE("Halide's OpenCL kernels through run_kernel reproduce the float64 reference", "[kernels][gpu][opencl]") {
    REQUIRE(device_unavailable(Device::OpenCl) == "");  // PoCL (scripts/install-deps.sh)
    int cases = 0;
    for (const std::string &layer : forward_layers())
        for (bool grad : {false, true}) {
            // Every layer in f32 (forward and backward), LayerNorm and RMSNorm in every type.
            std::vector<DType> types{DType::F32};
            if (layer == "layer_norm" || layer == "rms_norm") types = {DType::F32, DType::BF16, DType::F16};
            for (DType t : types) {
                const Registry::Kernel *k = registry().select_device(grad ? layer + "_grad" : layer, t, Device::OpenCl);
                if (!k) continue;
                INFO(k->function);
                const std::shared_ptr<const NormSpec> forward = grad ? registry().spec(layer) : k->spec;
                const StorageMap storage = k->storage();
                const InputMaker inputs = grad ? backward_input_maker(*forward, *k->spec, storage) : InputMaker{};
                KernelFn fn = [k](const TensorMap &in, const Overrides &ov) { return run_kernel_f64(*k, in, ov); };
                for (const VerifyShape &v : small_shapes(*forward)) {
                    CaseResult r = verify_case(*k->spec, storage, {fn}, v, 99 + cases, inputs, grad)[0];
                    std::string why;
                    for (const OutputCheck &o : r.outputs)
                        if (!o.pass) why += o.name + ": " + (o.problem.empty() ? mismatch_text(o) : o.problem) + "\n";
                    INFO(v.label << "\n" << why);
                    CHECK(r.pass);
                    ++cases;
                }
            }
        }
    CHECK(cases >= 100);
}

TEST_CASE("without a CUDA device, a CUDA kernel refuses in one line and writes nothing", "[kernels][gpu]") {
    if (device_unavailable(Device::Cuda).empty()) {
        WARN("a CUDA device is here: nothing to refuse (normgen-cuda verifies the kernels on it)");
        return;
    }
    const Registry::Kernel *k = registry().select_device("rms_norm", DType::F32, Device::Cuda);
    REQUIRE(k);
    const int64_t rows = 3, d = 8;
    std::vector<float> x(rows * d, 1.5f), w(d, 1.0f);
    std::vector<uint8_t> y(rows * d * 4, 0xff);
    std::map<std::string, TensorView> t{{"x", TensorView{x.data(), DType::F32, {rows, d}, {}}},
                                        {"weight", TensorView{w.data(), DType::F32, {d}, {}}},
                                        {"y", TensorView{y.data(), DType::F32, {rows, d}, {}}}};
    std::string msg;
    try {
        run_kernel(*k, t);
    } catch (const DeviceUnavailable &e) {
        msg = e.what();
    }
    CHECK(msg.rfind("no CUDA device: ", 0) == 0);
    CHECK(msg.find('\n') == std::string::npos);
    bool untouched = true;
    for (uint8_t b : y) untouched = untouched && b == 0xff;
    CHECK(untouched);
}
