#include "codegen/driver/catalog_table.h"

#include "dsl/checker.h"
#include "runtime/random_inputs.h"
#include "runtime/reference/interpreter.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>

namespace normgen {
namespace {

std::string stages_text(const NormSpec &s) {
    if (s.stages.empty()) return "map only";
    std::string r;
    for (const AxisSet &axes : s.reduction_axes_per_stage()) r += (r.empty() ? "" : " → ") + s.axes_text(axes);
    return r;
}

std::string eps_text(const NormSpec &s) {
    std::string r;
    for (const EpsUse &e : s.eps_uses()) r += (r.empty() ? "" : ", ") + std::string(eps_placement_name(e.placement));
    return r.empty() ? "—" : r;
}

std::string affine_text(const NormSpec &s) {
    std::string r;
    for (const AffineTerm &t : s.affine_terms()) {
        std::string role = t.role.substr(0, t.role.find(" ("));
        if (t.role.rfind("offset scale", 0) == 0) role = t.role;
        r += (r.empty() ? "" : ", ") + t.param + " " + role;
    }
    return r.empty() ? "none" : r;
}

std::string outputs_text(const NormSpec &s) {
    std::string r;
    for (const OutputInfo &o : s.outputs) r += (r.empty() ? "" : ", ") + o.name + (o.optional ? "?" : "");
    return r;
}

}  // namespace

std::string catalog_table(const std::vector<std::string> &files, bool &ok) {
    std::ostringstream os;
    os << "| layer | reduction stages (axes) | eps | affine terms | outputs | accumulate | reference on random inputs |\n"
       << "|---|---|---|---|---|---|---|\n";
    ok = true;
    for (const std::string &f : files) {
        std::string name = std::filesystem::path(f).stem().string();
        try {
            NormSpec s = load_norm_file(f);
            // Small extents: 4-D layouts stay around a million elements.
            int64_t fallback = 0;
            for (const TensorInfo &t : s.tensors) fallback = std::max<int64_t>(fallback, (int64_t)t.dims.size());
            fallback = fallback >= 4 ? 12 : fallback == 3 ? 24 : 257;
            AxisExtents ext = choose_extents(s, {}, fallback);
            TensorMap in = random_inputs(s, ext, {100.0, 7});
            auto t0 = std::chrono::steady_clock::now();
            TensorMap out = evaluate_reference(s, in);
            double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            bool finite = true;
            int64_t elements = 0;
            for (const auto &[n, h] : out) {
                elements += h.numel();
                for (double v : h.data) finite = finite && std::isfinite(v);
            }
            ok = ok && finite;
            std::ostringstream ref;
            ref << (finite ? "finite" : "NOT FINITE") << ", " << elements << " values, " << std::fixed;
            ref.precision(1);
            ref << ms << " ms";
            os << "| " << s.name << " | " << stages_text(s) << " | " << eps_text(s) << " | " << affine_text(s) << " | "
               << outputs_text(s) << " | " << dtype_name(s.accumulate) << " | " << ref.str() << " |\n";
        } catch (const DiagnosticError &e) {
            ok = false;
            os << "| " << name << " | invalid: " << e.diagnostics().front().message << " | | | | | |\n";
        }
    }
    return os.str();
}

}  // namespace normgen
