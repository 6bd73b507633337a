#include "codegen/tool/verify_cmd.h"

#include "codegen/common/kernel_plan.h"

#include "dsl/checker.h"
#include "dsl/grad.h"
#include "runtime/errors.h"
#include "runtime/verify.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <memory>
#include <unistd.h>
#include <iostream>
#include <random>
#include <sstream>

namespace normgen {

namespace {

struct Row {
    std::string layer, dtype, target, shape, worst_output;
    double ratio = 0, abs = 0, bound = 0;
    std::string problem;
    std::string mismatches;  // the first failing elements (index, got, want, bound) of a failing output
    bool pass = false;
    uint64_t seed = 0;
};

}  // namespace

int cmd_verify(const VerifyArgs &v, const KernelFactory &make) {
    std::random_device rd;
    uint64_t base_seed = v.seed ? v.seed : ((uint64_t)rd() << 32 | rd());
    std::vector<Row> rows;
    // Progress goes to stderr: a live line on a terminal, one line per kernel otherwise.
    const bool tty = isatty(2);
    for (const std::string &file : v.files) {
        // --grad: the backward declaration, on the forward's sweep with consistent inputs.
        const NormSpec forward = load_norm_file(file);
        const NormSpec spec = v.grad ? differentiate(forward).spec : forward;
        std::vector<VerifyShape> shapes = verify_shapes(forward);
        if (v.quick) shapes = quick_shapes(shapes);  // a spread of the sweep
        // The full variant (optional outputs too) unless --variant core; a layer without optional
        // outputs has only its core kernel.
        const Variant variant = v.variant == "core" ? Variant::Core : variants_of(spec).back();
        for (DType dtype : v.dtypes) {
            bool allowed = dtype == DType::F32;
            for (const StorageGroup &g : spec.storage)
                for (DType t : g.allowed) allowed = allowed || t == dtype;
            if (!allowed) {
                std::fprintf(stderr, "verify %s: skipping %s (no tensor of the layer may be stored as %s)\n", spec.name.c_str(),
                             dtype_name(dtype), dtype_name(dtype));
                continue;
            }
            // Compile one kernel per target; every shape's inputs and reference serve them all.
            std::vector<std::unique_ptr<CompiledKernel>> kernels;
            std::vector<KernelFn> fns;
            std::vector<std::string> kernel_targets;
            for (const std::string &target_name : v.targets) {
                std::fprintf(stderr, "verify %s %s %s: compiling%s", spec.name.c_str(), dtype_name(dtype), target_name.c_str(),
                             tty ? "...\r" : "\n");
                std::fflush(stderr);
                try {
                    kernels.push_back(make(spec, dtype, target_name, v.schedule, variant));
                } catch (const std::exception &e) {
                    // A kernel that does not compile is a failed row, not the end of the run.
                    Row r;
                    r.layer = spec.name;
                    r.dtype = dtype_name(dtype);
                    r.target = target_name;
                    r.shape = "(all)";
                    r.problem = std::string("does not compile: ") + e.what();
                    r.ratio = INFINITY;
                    rows.push_back(r);
                    std::fprintf(stderr, "verify %s %s %s: %s\n", spec.name.c_str(), dtype_name(dtype), target_name.c_str(), r.problem.c_str());
                    continue;
                }
                kernel_targets.push_back(target_name);
                const CompiledKernel *k = kernels.back().get();
                fns.push_back([k](const TensorMap &in, const Overrides &ov) { return k->run(in, ov); });
            }
            if (kernels.empty()) continue;
            StorageMap storage = kernels[0]->storage();
            int n = 0;
            for (const VerifyShape &s : shapes) {
                ++n;
                if (tty) {
                    std::fprintf(stderr, "\r\033[Kverify %s %s: shape %d/%zu", spec.name.c_str(), dtype_name(dtype), n, shapes.size());
                    std::fflush(stderr);
                }
                uint64_t seed = base_seed + rows.size() * 7919;
                std::vector<CaseResult> results =
                    verify_case(spec, storage, fns, s, seed, v.grad ? backward_input_maker(forward, spec, storage) : InputMaker{}, v.grad);
                for (size_t t = 0; t < results.size(); ++t) {
                    const CaseResult &c = results[t];
                    Row r;
                    r.layer = spec.name;
                    r.dtype = dtype_name(dtype);
                    r.target = kernel_targets[t];
                    r.shape = c.shape;  // the case as run (verify_case may cut the large mean)
                    r.pass = c.pass;
                    r.seed = seed;
                    for (const OutputCheck &o : c.outputs) {
                        if (!o.pass && r.mismatches.empty()) r.mismatches = mismatch_text(o);
                        if (r.worst_output.empty() || o.max_err > r.ratio || !o.problem.empty()) {
                            r.worst_output = o.name;
                            r.ratio = o.max_err;
                            r.abs = o.worst_abs;
                            r.bound = o.bound_abs;
                            if (!o.problem.empty()) r.problem = o.problem;
                        }
                    }
                    rows.push_back(r);
                }
            }
            if (tty) std::fprintf(stderr, "\r\033[K");
        }
    }
    int failed = 0;
    for (const Row &r : rows) failed += !r.pass;
    if (v.json) {
        nlohmann::json cases = nlohmann::json::array();
        for (const Row &r : rows)
            cases.push_back({{"layer", r.layer}, {"dtype", r.dtype}, {"target", r.target}, {"shape", r.shape}, {"output", r.worst_output},
                             {"err_over_bound", std::isfinite(r.ratio) ? r.ratio : 1e308}, {"abs_err", r.abs}, {"bound", r.bound},
                             {"seed", r.seed}, {"problem", r.problem}, {"mismatches", r.mismatches}, {"pass", r.pass}});
        nlohmann::json doc = {{"seed", base_seed}, {"cases", cases}, {"passed", rows.size() - failed}, {"failed", failed}};
        // Invalid UTF-8 in a message (a path, a compiler's output) is replaced, never fatal.
        std::cout << doc.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
        std::printf("%-28s %-5s %-12s %-44s %-16s %10s %10s %10s  %s\n", "layer", "dtype", "target", "shape", "worst output", "err/bound",
                    "max err", "bound", "pass");
        for (const Row &r : rows) {
            if (v.failures_only && r.pass) continue;
            std::printf("%-28s %-5s %-12s %-44s %-16s %10.3g %10.3g %10.3g  %s\n", r.layer.c_str(), r.dtype.c_str(), r.target.c_str(),
                        r.shape.c_str(), r.worst_output.c_str(), r.ratio, r.abs, r.bound,
                        r.pass ? "ok" : ("FAIL " + r.problem + " (seed " + std::to_string(r.seed) + ")" +
                                         (r.mismatches.empty() ? "" : ": " + r.mismatches)).c_str());
        }
        std::printf("%zu passed, %d failed\n", rows.size() - failed, failed);
    }
    return failed ? 1 : 0;
}

}  // namespace normgen
