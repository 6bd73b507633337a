// Schedule records: defaults, JSON round trips, overrides, and refusals that name the knob.
#include "codegen/common/schedule_record.h"
#include "dsl/checker.h"
#include "runtime/errors.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

using namespace normgen;

namespace {

KernelPlan ln_plan() {
    static NormSpec spec = load_norm_file(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/layer_norm.norm");
    return make_plan(spec, DType::F32, Variant::Core);
}

void refused(ScheduleRecord r, const std::string &overrides, const std::string &message) {
    try {
        apply_schedule_overrides(r, overrides);
        FAIL("'" << overrides << "' was accepted");
    } catch (const UserError &e) {
        CHECK_THAT(e.what(), Catch::Contains(message));
    }
}

}  // namespace

TEST_CASE("choose_schedule gives today's defaults, per ISA", "[schedule]") {
    ScheduleRecord h = choose_schedule(ln_plan(), ScheduleKind::HalideCpu, Isa::Avx512);
    CHECK(h.get("vector_width") == 16);
    CHECK(h.get("row_accumulators") == 4);
    CHECK(h.get("sum_block") == 64);
    CHECK(h.get("welford_lanes") == 16);
    CHECK(h.get("welford_block") == 64);
    CHECK(h.get("min_task_elements") == 16384);
    CHECK(h.flag("row_in_cache"));
    CHECK(h.flag("fuse_inner_pair"));
    CHECK(choose_schedule(ln_plan(), ScheduleKind::HalideCpu, Isa::Avx2).get("vector_width") == 8);
    ScheduleRecord m = choose_schedule(ln_plan(), ScheduleKind::MlirCpu, Isa::Avx2);
    CHECK(m.get("sum_block") == 256);
    CHECK(m.get("chunk_bytes") == 512 * 1024);
    CHECK(choose_schedule(ln_plan(), ScheduleKind::MlirCuda, Isa::Sm90).get("block_threads") == 256);
    // Every knob of every kind has a value inside its own range.
    for (ScheduleKind k : {ScheduleKind::HalideCpu, ScheduleKind::MlirCpu, ScheduleKind::MlirCuda}) {
        ScheduleRecord r = choose_schedule(ln_plan(), k, Isa::Avx512);
        REQUIRE(r.values().size() == schedule_knobs(k).size());
        for (size_t i = 0; i < r.values().size(); ++i) {
            const KnobSpec &s = schedule_knobs(k)[i];
            CHECK(r.values()[i].second >= s.min);
            CHECK(r.values()[i].second <= s.max);
        }
    }
}

TEST_CASE("a record survives JSON, and its JSON says what it is", "[schedule]") {
    ScheduleRecord r = choose_schedule(ln_plan(), ScheduleKind::HalideCpu, Isa::Avx2);
    apply_schedule_overrides(r, "row_accumulators=2,row_in_cache=false");
    nlohmann::json j = r.to_json();
    CHECK(j["kind"] == "halide-cpu");
    CHECK(j["knobs"]["row_accumulators"] == 2);
    CHECK(j["knobs"]["row_in_cache"] == false);
    CHECK(ScheduleRecord::from_json(j, ScheduleKind::HalideCpu, "test") == r);
    CHECK(r.text().find("row_accumulators=2") != std::string::npos);
    // A record that names some knobs only: the others take their defaults, not placeholders.
    ScheduleRecord partial = ScheduleRecord::from_json({{"kind", "halide-cpu"}, {"knobs", {{"sum_block", 32}}}}, ScheduleKind::HalideCpu, "test");
    CHECK(partial.get("sum_block") == 32);
    CHECK(partial.get("row_accumulators") == 4);
    CHECK(partial.flag("row_in_cache"));
    CHECK(ScheduleRecord(ScheduleKind::MlirCpu) == choose_schedule(ln_plan(), ScheduleKind::MlirCpu, Isa::Avx2));
}

TEST_CASE("overrides: knob=value lists and JSON files; only the named knobs change", "[schedule]") {
    ScheduleRecord base = choose_schedule(ln_plan(), ScheduleKind::HalideCpu, Isa::Avx512);
    ScheduleRecord r = base;
    apply_schedule_overrides(r, "vector_width=8, ");
    CHECK(r.get("vector_width") == 8);
    CHECK(r.get("row_accumulators") == base.get("row_accumulators"));

    std::string path = (std::filesystem::temp_directory_path() / "normgen_schedule_test.json").string();
    std::ofstream(path) << R"({"kind": "halide-cpu", "knobs": {"sum_block": 32, "fuse_inner_pair": false}})";
    ScheduleRecord f = base;
    apply_schedule_overrides(f, path);
    CHECK(f.get("sum_block") == 32);
    CHECK_FALSE(f.flag("fuse_inner_pair"));
    CHECK(f.get("vector_width") == 16);
    std::ofstream(path) << R"({"min_task_elements": 4096})";  // a bare object of knobs
    ScheduleRecord g = base;
    apply_schedule_overrides(g, path);
    CHECK(g.get("min_task_elements") == 4096);
    std::remove(path.c_str());
}

TEST_CASE("an invalid record is refused, naming the knob", "[schedule]") {
    ScheduleRecord r = choose_schedule(ln_plan(), ScheduleKind::HalideCpu, Isa::Avx512);
    refused(r, "vectr_width=8", "has no knob 'vectr_width' (its knobs: vector_width, row_accumulators");
    refused(r, "vector_width=12", "knob 'vector_width' = 12 is not a power of two");
    refused(r, "vector_width=128", "knob 'vector_width' = 128 is out of range [4, 64]");
    refused(r, "row_accumulators=two", "knob 'row_accumulators' takes an integer, got 'two'");
    refused(r, "row_in_cache=maybe", "knob 'row_in_cache' takes true or false");
    refused(r, "row_accumulators", "'row_accumulators' is not knob=value");
    refused(r, "block_threads=128", "the halide-cpu schedule has no knob 'block_threads'");
    std::string path = (std::filesystem::temp_directory_path() / "normgen_schedule_bad.json").string();
    std::ofstream(path) << R"({"kind": "mlir-cuda", "knobs": {"block_threads": 128}})";
    refused(r, path, "a \"mlir-cuda\" schedule record, where a halide-cpu one is needed");
    std::ofstream(path) << R"({"knobs": [1, 2})";
    refused(r, path, "not valid JSON");
    std::remove(path.c_str());
    refused(r, "/no/such/schedule.json", "cannot read the file");
}
