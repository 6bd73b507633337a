// The last step of a blocked sum (codegen/halide/schedule.cpp, blocked_rfactor): the lanes of a
// row's partial sums added as a vector reduce (a tree of vector adds), not a serial loop of scalar
// adds through memory, wherever every lane holds a partial sum (the summed extent at least the
// lanes); LayerNorm's three row sums at 16384 x 768 f32 spent ~30 % of the kernel there.
// Correctness on every width, short rows included, is the verifier's (verify halide <layer>).
#include "codegen/common/kernel_plan.h"
#include "codegen/common/schedule_record.h"
#include "codegen/halide/jit.h"
#include "codegen/halide/lower.h"
#include "codegen/halide/schedule.h"
#include "dsl/checker.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <unistd.h>

using namespace normgen;

namespace {

NormSpec catalog(const std::string &layer) { return load_norm_file(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/" + layer + ".norm"); }

// The kernel's lowered statement (Halide's IR after vectorization) for the portable AVX2 target.
std::string lowered(const NormSpec &spec, const std::string &overrides) {
    const KernelPlan plan = make_plan(spec, DType::F32, Variant::Core);
    const ScheduleRecord rec = choose_schedule(plan, ScheduleKind::HalideCpu, Isa::Avx2, overrides);
    hl::LoweredPipeline p = hl::lower_to_halide(spec, plan, rec);
    hl::schedule_cpu(p, spec, plan, rec);
    const std::filesystem::path file = std::filesystem::temp_directory_path() / ("normgen_lane_sum_" + std::to_string(::getpid()) + ".stmt");
    p.pipeline().compile_to_lowered_stmt(file.string(), p.arguments(), Halide::StmtOutputFormat::Text, hl::parse_target("x86-64-avx2"));
    std::stringstream text;
    text << std::ifstream(file).rdbuf();
    std::filesystem::remove(file);
    return text.str();
}

int count(const std::string &text, const std::string &what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

}  // namespace

TEST_CASE("a row sum's lanes are added by a vector reduce where every lane holds a partial sum", "[halide][schedule]") {
    const NormSpec ln = catalog("layer_norm"), rms = catalog("rms_norm");
    // LayerNorm: its mean's shift (the first 64 elements), the shifted sum and the centred squares,
    // three row sums; RMSNorm: one.
    for (const std::string knobs : {"", "row_accumulators=1", "fixed_inner_extent=768"}) {
        INFO("layer_norm " << knobs);
        CHECK(count(lowered(ln, knobs), "vector_reduce_add") >= 3);
    }
    CHECK(count(lowered(rms, ""), "vector_reduce_add") >= 1);
    // A constant width shorter than the lanes: the serial loop stays (some lanes hold no partial sum).
    CHECK(count(lowered(rms, "fixed_inner_extent=4"), "vector_reduce_add") == 0);
}

// Independent means over the same row run in one sweep (schedule.cpp: compute_with), as
// independent sums did: PolyNorm's mean(x^2), mean(x^4), mean(x^6) were three sweeps of the row.
// A mean that reads another (SandwichNorm's mean(h^2), h made from mean(f^2)) keeps its own sweep.
TEST_CASE("a row's independent means share one sweep of the row", "[halide][schedule]") {
    auto sweeps = [](const std::string &stmt) {
        // The blocks of a mean's shifted sum, `for (red<N>_mean_sum[$k]_intm.s1[.fused].rib, ...`
        // (Halide suffixes $k or _k to a name made again in the same process; `_sums`: the Tuple
        // of a checked variance's mean, lower.cpp's checked_mean): one loop name per sweep, a
        // fused sweep named after its first mean's Func.
        std::set<std::string> names;
        const std::regex loop(R"(for \((red[0-9]+_mean_sums?(?:[_$][0-9]+)*_intm[^ ,]*\.rib),)");
        for (auto it = std::sregex_iterator(stmt.begin(), stmt.end(), loop); it != std::sregex_iterator(); ++it) names.insert((*it)[1]);
        return names.size();
    };
    for (const std::string knobs : {"", "row_accumulators=1", "fixed_inner_extent=4096"}) {
        INFO("poly_norm " << knobs);
        CHECK(sweeps(lowered(catalog("poly_norm"), knobs)) == 1);
    }
    CHECK(sweeps(lowered(catalog("sandwich_norm"), "")) == 2);
    CHECK(sweeps(lowered(catalog("layer_norm"), "checked_variance=0")) == 1);  // its mean; the variance is a var's sum
    CHECK(sweeps(lowered(catalog("layer_norm"), "")) == 1);  // its mean with the shifted squares (checked_variance)
    CHECK(sweeps(lowered(catalog("rms_norm"), "")) == 1);
}
