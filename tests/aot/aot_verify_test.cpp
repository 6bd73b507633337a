// The shipped objects themselves: every generated kernel in the manifest (each layer x storage type
// x ISA this CPU runs x variant), called through the registry and run_kernel like a user program
// would, verified against the float64 reference on a spread of the verifier's shapes.
#include "codegen/common/tuning_db.h"
#include "runtime/mlir_abi.h"
#include "runtime/random_inputs.h"
#include "runtime/registry.h"
#include "runtime/run.h"
#include "runtime/storage.h"
#include "runtime/verify.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <string>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <set>

using namespace normgen;

namespace {

const Registry &registry() {
    static Registry r = Registry::load(NORMGEN_DEFAULT_MANIFEST, kKernelTable, kKernelTableSize);
    return r;
}

// Elements of a shape of the sweep (every atomic axis of the declaration).
int64_t shape_elements(const NormSpec &spec, const VerifyShape &s) {
    AxisExtents ext = choose_extents(spec, s.sizes, 1);
    int64_t n = 1;
    for (size_t a = 0; a < spec.axes.size(); ++a)
        if (!spec.axes[a].is_split()) n *= ext.extent[a];
    return n;
}

// Backward kernels here take the shapes of their forward's sweep up to 2^20 elements (the float64
// backward, its running error bound and the forward it draws inputs from cost about ten forward
// evaluations a shape; GroupNorm's 75-million-element shape alone took minutes). The whole sweep:
// scripts/verify-grad.sh.
constexpr int64_t kGradShapeElements = int64_t(1) << 20;

}  // namespace

TEST_CASE("every generated kernel verifies through the registry", "[aot][verify]") {
    // A fixed seed, so CI is deterministic. Seeds 14729043582683104526 (layer_norm_no_affine f32,
    // rows=3 d=2) and 20251129 (group_norm_nhwc f32, h=w=1 cg=2) used to fail here: the verifier's
    // sensitivity missed 2-element groups whose elements nearly cancel; it now also perturbs with
    // alternating signs (runtime/verify.cpp) and both pass.
    // NORMGEN_TEST_SEED=N runs another (fresh inputs), NORMGEN_TEST_SEED=random a random one.
    uint64_t seed = 1;
    if (const char *e = std::getenv("NORMGEN_TEST_SEED")) {
        std::random_device rd;
        seed = std::string(e) == "random" ? (((uint64_t)rd() << 32) | rd()) : std::strtoull(e, nullptr, 10);
    }
    INFO("seed " << seed << " (replay: NORMGEN_TEST_SEED=" << seed << ")");
    size_t checked = 0;
    for (const Registry::Kernel *k : registry().kernels()) {
        if (!k->runs_here()) continue;
        SECTION(k->function) {
            // A backward kernel: its forward's shapes, inputs consistent with the forward (saved
            // statistics from the float64 forward) and the running error bound (runtime/verify.h).
            const bool grad = !k->grad_of.empty();
            const std::shared_ptr<const NormSpec> forward = grad ? registry().spec(k->grad_of) : k->spec;
            REQUIRE(forward);
            std::vector<VerifyShape> shapes = verify_shapes(*forward);
            // A tuned kernel compiled for one innermost extent gets the sweep with that extent.
            if (k->requirement.fixed_extent > 0)
                for (VerifyShape &v : shapes)
                    if (v.sizes.count(k->requirement.fixed_axis)) v.sizes[k->requirement.fixed_axis] = k->requirement.fixed_extent;
            StorageMap storage;
            for (const KernelArg &a : k->args) storage[a.name] = a.dtype;
            const InputMaker inputs = grad ? backward_input_maker(*forward, *k->spec, storage) : InputMaker{};
            // A kernel with a requirement (streaming stores: outputs aligned, rows a multiple of the
            // vector) runs the calls it takes; the others (odd rows) go where a program's would,
            // to Registry::select_for's choice, which must not be this kernel and must pass too.
            int fallbacks = 0;
            KernelFn fn = [k, &fallbacks](const TensorMap &in, const Overrides &ov) {
                const AxisExtents ext = bind_axes(*k->spec, in, ov);
                if (k->refuses({}, ext).empty()) return run_kernel_f64(*k, in, ov);
                std::map<std::string, int64_t> sizes;
                for (size_t a = 0; a < k->spec->axes.size(); ++a)
                    if (!k->spec->axes[a].is_split() && !k->spec->axes[a].fixed_extent) sizes[k->spec->axes[a].name] = ext.extent[a];
                const Registry::Selection s = registry().select_for_sizes(k->layer, k->dtype, sizes, k->full());
                REQUIRE(s.kernel);
                REQUIRE(s.kernel != k);
                ++fallbacks;
                return run_kernel_f64(*s.kernel, in, ov);
            };
            auto verify = [&](const VerifyShape &shape, uint64_t shape_seed) {
                CaseResult c = verify_case(*k->spec, storage, {fn}, shape, shape_seed, inputs, grad).front();
                std::string detail;
                for (const OutputCheck &o : c.outputs)
                    detail += o.name + ": err/bound " + std::to_string(o.max_err) + " (err " + std::to_string(o.worst_abs) + ", bound " +
                              std::to_string(o.bound_abs) + ") " + o.problem + "\n";
                INFO(k->function << " " << shape.label << "\n" << detail);
                CHECK(c.pass);
            };
            // Every third shape (the JIT tests cover all of them with the same code generator).
            for (size_t i = 0; i < shapes.size(); i += 3) {
                if (grad && shape_elements(*forward, shapes[i]) > kGradShapeElements) continue;
                verify(shapes[i], seed + i);
            }
            // A kernel with a requirement also gets a shape it refuses for certain (its axis one
            // past its fixed extent, or one past its multiple), which must reach the fallback.
            if (k->requirement.any()) {
                const Registry::Kernel::Requirement &q = k->requirement;
                VerifyShape odd = shapes.front();
                const std::string axis = q.fixed_extent > 0 ? q.fixed_axis : q.axis;
                REQUIRE(odd.sizes.count(axis));
                odd.sizes[axis] = q.fixed_extent > 0 ? q.fixed_extent + 1 : q.multiple + 1;
                odd.label += " with " + axis + " = " + std::to_string(odd.sizes[axis]) + " (refused by the kernel)";
                const int before = fallbacks;
                verify(odd, seed + shapes.size());
                CHECK(fallbacks > before);
            }
        }
        ++checked;
    }
    CHECK(checked >= 2 * 18 * 3);  // every catalog layer and its backward in every storage type, at least one ISA
}

TEST_CASE("Halide and MLIR kernels of every catalog layer agree with each other and the reference", "[aot][verify][mlir]") {
    // Both backends' objects on the very same inputs, every other shape of the sweep: each within its
    // storage type's bound of the float64 reference, hence within twice that bound of each other.
    std::set<std::string> layers;
    for (const Registry::Kernel *k : registry().kernels()) layers.insert(k->layer);
    size_t pairs = 0;
    for (const std::string &layer : layers) {
        for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
            const Registry::Kernel *h = registry().select(layer, dtype, true, std::nullopt, Backend::Halide);
            const Registry::Kernel *m = registry().select(layer, dtype, true, std::nullopt, Backend::Mlir);
            if (!h) continue;
            INFO(layer << " " << dtype_name(dtype));
            REQUIRE(m);
            StorageMap storage;
            for (const KernelArg &a : h->args) storage[a.name] = a.dtype;
            KernelFn fh = [h](const TensorMap &in, const Overrides &ov) { return run_kernel_f64(*h, in, ov); };
            KernelFn fm = [m](const TensorMap &in, const Overrides &ov) { return run_kernel_f64(*m, in, ov); };
            const bool grad = !h->grad_of.empty();
            const std::shared_ptr<const NormSpec> forward = grad ? registry().spec(h->grad_of) : h->spec;
            REQUIRE(forward);
            const InputMaker inputs = grad ? backward_input_maker(*forward, *h->spec, storage) : InputMaker{};
            std::vector<VerifyShape> shapes = verify_shapes(*forward);
            for (size_t i = 1; i < shapes.size(); i += 2) {
                if (grad && shape_elements(*forward, shapes[i]) > kGradShapeElements) continue;
                std::vector<CaseResult> r = verify_case(*h->spec, storage, {fh, fm}, shapes[i], 1000 + i, inputs, grad);
                INFO(shapes[i].label);
                CHECK(r[0].pass);
                CHECK(r[1].pass);
            }
            ++pairs;
        }
    }
    CHECK(pairs >= 18 * 3);
}

TEST_CASE("every choice of the committed tuning database reaches its kernel, and this CPU's choices are what select_for picks",
          "[aot][tuning]") {
    // The generators build one kernel per distinct schedule record; each entry of best/<layer>.json
    // (not stale, of a backend and ISA built here) must be listed in exactly one kernel's "tuned",
    // a kernel with that very schedule. A choice recorded before a knob existed spells the schedule
    // without it; two spellings of the default once lost the first one's classes to the Halide default.
    const TuningDb db(std::string(NORMGEN_SOURCE_DIR) + "/generated/tuning");
    size_t entries = 0;
    std::set<std::string> layers;
    for (const Registry::Kernel *k : registry().kernels()) layers.insert(k->layer);
    for (const std::string &layer : layers) {
        const std::shared_ptr<const NormSpec> spec = registry().spec(layer);
        REQUIRE(spec);
        for (const TuningRecord &e : db.best(layer, kernel_identity(*spec))) {
            std::vector<const Registry::Kernel *> built, holding;
            for (const Registry::Kernel *k : registry().kernels()) {
                if (k->layer != layer || dtype_name(k->dtype) != e.dtype || variant_name(k->variant) != e.variant ||
                    backend_name(k->backend) != e.backend || isa_name(k->isa) != e.isa || k->device != Device::Cpu)
                    continue;
                built.push_back(k);
                for (const Registry::Kernel::Tuned &t : k->tuned)
                    if (t.shape.key() == e.shape.key() && t.cpu.key() == e.cpu.key()) holding.push_back(k);
            }
            if (built.empty()) continue;  // e.g. MLIR's AVX2 kernels on an AVX-512 host
            ++entries;
            INFO(layer << " " << e.dtype << " " << e.backend << " " << e.isa << " " << e.shape.key() << " on " << e.cpu.text());
            REQUIRE(holding.size() == 1);
            const ScheduleKind kind = e.backend == "mlir" ? ScheduleKind::MlirCpu : ScheduleKind::HalideCpu;
            CHECK(ScheduleRecord::from_json(nlohmann::json::parse(holding[0]->schedule_record), kind, "manifest") ==
                  ScheduleRecord::from_json(e.schedule, kind, "database"));
            // This CPU's own choices: a program calling with the measured sizes gets that kernel.
            if (e.cpu.key() != this_cpu().key() || !holding[0]->runs_here()) continue;
            const Registry::Selection s = registry().select_for_sizes(layer, holding[0]->dtype, e.sizes, holding[0]->full());
            INFO(s.why);
            CHECK(s.kernel == holding[0]);
        }
    }
    CHECK(entries > 100);
}

TEST_CASE("MLIR CPU backward kernels whose parameter gradients sum over the rows are cut along the rows, those outputs as partials",
          "[aot][mlir][grad]") {
    // Without the cut such a kernel ran as one serial call (0.5-2 GB/s where Halide's took 30-45).
    std::ifstream in(NORMGEN_DEFAULT_MANIFEST);
    REQUIRE(in);
    const nlohmann::json m = nlohmann::json::parse(in);
    const std::set<std::string> layers{"layer_norm_grad", "rms_norm_grad", "dyt_grad", "fused_add_rms_norm_grad", "layer_norm_weight_only_grad"};
    std::set<std::string> seen;
    for (const nlohmann::json &e : m.at("kernels")) {
        if (e.value("backend", "") != "mlir" || e.value("device", "cpu") != "cpu" || !layers.count(e.value("layer", ""))) continue;
        INFO(e.at("function").get<std::string>());
        const nlohmann::json &axes = e.at("split").at("axes");
        auto at = std::find(axes.begin(), axes.end(), "rows");
        REQUIRE(at != axes.end());
        const nlohmann::json &dims = e.at("split").at("dims").at((size_t)(at - axes.begin()));
        const nlohmann::json &args = e.at("args");
        REQUIRE(dims.size() == args.size());
        int partials = 0;
        for (size_t a = 0; a < args.size(); ++a) {
            INFO(args[a].at("name").get<std::string>());
            const nlohmann::json &d = args[a].at("dims");
            const bool has_rows = std::find(d.begin(), d.end(), "rows") != d.end();
            if (has_rows) CHECK(dims[a].get<int>() == 0);  // cut along the rows
            else if (args[a].at("role") == "output") {
                CHECK(dims[a].get<int>() == kMlirColumnPartial);  // a sum over them: partials
                ++partials;
            } else {
                CHECK(dims[a].get<int>() == -1);  // a parameter, passed whole
            }
        }
        CHECK(partials >= 1);
        seen.insert(e.at("layer").get<std::string>());
    }
    CHECK(seen == layers);
}
