// `normgen tune`, `normgen autoschedule`, `normgen describe --shape` and normgen-measure, run as a
// user would, with tiny budgets: a run writes verified, complete records and an index; bad options
// and bad declarations are refused with nothing written; a wrong candidate fails verification.
#include "normgen_cli.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using nlohmann::json;
using normgen::testing::Result;
using normgen::testing::normgen_cli;
using normgen::testing::tool_cli;

namespace {

fs::path fresh_dir(const std::string &what) {
    static std::mt19937_64 rng(std::random_device{}());
    return fs::temp_directory_path() / ("normgen-" + what + "-" + std::to_string(rng()));
}

std::string catalog(const std::string &layer) { return std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/" + layer + ".norm"; }

std::vector<json> read_lines(const fs::path &p) {
    std::vector<json> out;
    std::ifstream in(p);
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) out.push_back(json::parse(line));
    return out;
}

// One tiny tuning run shared by the tests below (a few seconds of budget, both backends).
struct TinyRun {
    fs::path db = fresh_dir("tune-db"), cache = fresh_dir("tune-cache");
    Result r;
    TinyRun() {
        // Another build's (or declaration's) candidates, which the run must remove, not reuse.
        fs::create_directories(cache / "rms_norm" / "0123456789abcdef-objects4" / "f32");
        r = normgen_cli("tune " + catalog("rms_norm") + " --shapes 'rows=64,d=256' --budget 6 --rounds 2 --no-autoschedulers --db " + db.string() +
                        " --cache " + cache.string());
    }
    ~TinyRun() {
        fs::remove_all(db);
        fs::remove_all(cache);
    }
};
const TinyRun &tiny() {
    static TinyRun t;
    return t;
}

}  // namespace

TEST_CASE("tune: a tiny run writes verified records, one choice, and the index", "[cli][tune]") {
    const TinyRun &t = tiny();
    INFO(t.r.out);
    REQUIRE(t.r.code == 0);
    CHECK(t.r.out.find("rms_norm f32 [f32|rows=2^6,d=256|m16|l2]: chose") != std::string::npos);
    // One file per storage type and CPU under the layer's folder: one f32 file from this machine.
    std::vector<fs::path> shards;
    for (const fs::directory_entry &e : fs::directory_iterator(t.db / "records" / "rms_norm")) shards.push_back(e.path());
    REQUIRE(shards.size() == 1);
    CHECK(shards[0].filename().string().rfind("f32-", 0) == 0);
    CHECK(shards[0].extension() == ".jsonl");
    const std::vector<json> recs = read_lines(shards[0]);
    REQUIRE(recs.size() >= 3);  // both defaults in the first batch, then the last batch
    int chosen_in_last = 0;
    std::set<std::string> backends;
    for (const json &r : recs) {
        CHECK(r["schema"] == 1);
        CHECK(r["identity"]["layer"] == "rms_norm");
        CHECK(r["identity"]["decl_hash"].get<std::string>().size() == 16);
        CHECK(r["shape"]["key"] == "f32|rows=2^6,d=256|m16|l2");
        CHECK(r["cpu"]["threads"].get<int>() >= 1);
        CHECK(r["result"]["median_s"].get<double>() > 0);
        CHECK(r["result"]["p20_s"].get<double>() <= r["result"]["p80_s"].get<double>());
        CHECK(r["result"]["limit_gbps"].get<double>() > 0);
        CHECK(r["schedule"].contains("knobs"));
        backends.insert(r["backend"]);
        if (r["chosen"].get<bool>()) ++chosen_in_last;
    }
    CHECK(backends == std::set<std::string>{"halide", "mlir"});
    CHECK(chosen_in_last == 1);
    // The candidates' objects: one folder, the declaration's hash and this build's fingerprint.
    std::vector<std::string> builds;
    for (const fs::directory_entry &e : fs::directory_iterator(t.cache / "rms_norm")) builds.push_back(e.path().filename().string());
    REQUIRE(builds.size() == 1);
    CHECK(builds[0].size() == 16 + 1 + 16);
    CHECK(builds[0].rfind(recs[0]["identity"]["decl_hash"].get<std::string>() + "-", 0) == 0);
    std::ifstream in(t.db / "best" / "rms_norm.json");
    REQUIRE(in);
    const json best = json::parse(in);
    REQUIRE(best["entries"].size() == 1);
    CHECK(best["entries"][0]["chosen"] == true);
}

TEST_CASE("tune --reindex: the index rebuilt from the records alone (a run that was killed)", "[cli][tune]") {
    const TinyRun &t = tiny();
    REQUIRE(t.r.code == 0);
    const fs::path db = fresh_dir("tune-reindex");
    fs::create_directories(db);
    fs::copy(t.db / "records", db / "records", fs::copy_options::recursive);
    REQUIRE_FALSE(fs::exists(db / "best"));
    Result r = normgen_cli("tune " + catalog("rms_norm") + " --reindex --db " + db.string());
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK(r.out.find("1 choice(s) from") != std::string::npos);
    std::ifstream in(db / "best" / "rms_norm.json");
    REQUIRE(in);
    std::ifstream orig(t.db / "best" / "rms_norm.json");
    CHECK(json::parse(in)["entries"] == json::parse(orig)["entries"]);
    fs::remove_all(db);
}

namespace {

// A retune of the tiny run's class from a copy of its database whose last choice was changed by
// `plant` (the schedule's knobs, the backend's name); the run's records, the planted schedule.
struct Retune {
    std::vector<json> recs;
    json planted;
};
Retune retune_planted(const std::string &name, const std::string &budget, const std::function<void(json &, const std::string &)> &plant) {
    const TinyRun &t = tiny();
    REQUIRE(t.r.code == 0);
    const fs::path db = fresh_dir(name), cache = fresh_dir(name + "-cache");
    fs::create_directories(db);
    fs::copy(t.db / "records", db / "records", fs::copy_options::recursive);
    fs::copy(t.db / "best", db / "best", fs::copy_options::recursive);
    json best = json::parse(std::ifstream(db / "best" / "rms_norm.json"));
    REQUIRE(best["entries"].size() == 1);
    json &entry = best["entries"][0];
    const std::string backend = entry["backend"];
    plant(entry["schedule"]["knobs"], backend);
    Retune out;
    out.planted = entry["schedule"];
    std::ofstream(db / "best" / "rms_norm.json") << best.dump(1);
    Result r = normgen_cli("tune " + catalog("rms_norm") + " --shapes 'rows=64,d=256' --budget " + budget +
                           " --rounds 2 --no-autoschedulers --backend " + backend + " --db " + db.string() + " --cache " + cache.string());
    INFO(r.out);
    REQUIRE(r.code == 0);
    std::vector<fs::path> shards;
    for (const fs::directory_entry &e : fs::directory_iterator(db / "records" / "rms_norm")) shards.push_back(e.path());
    REQUIRE(shards.size() == 1);
    out.recs = read_lines(shards[0]);
    REQUIRE_FALSE(out.recs.empty());
    fs::remove_all(db);
    fs::remove_all(cache);
    return out;
}

}  // namespace

TEST_CASE("tune: a retune whose budget the defaults take keeps the class's last choice among the finalists", "[cli][tune]") {
    // The class's last choice made a schedule no default is (a 2 GiB class's choice, say); a budget
    // of 1 s: the defaults' batch takes it, so the search never times a seed.
    const Retune t = retune_planted("tune-keep", "1", [](json &knobs, const std::string &backend) {
        if (backend == "halide")
            knobs["row_accumulators"] = knobs.value("row_accumulators", 4) == 2 ? 8 : 2;
        else
            knobs["sum_block"] = knobs.value("sum_block", 256) == 64 ? 1024 : 64;
    });
    const std::string run = t.recs.back()["run"];
    bool timed = false;
    for (const json &rec : t.recs)
        if (rec["run"] == run && rec["schedule"] == t.planted) timed = true;
    CHECK(timed);  // the last choice was timed beside the defaults, and can stay the choice
}

TEST_CASE("tune: the class's last choice, timed by the search, is timed again in the last batch beside the new choice", "[cli][tune]") {
    // A search batch of few rounds judges each seed against the default only; the last choice must
    // meet the choice that replaces it in the final batch's rounds. Planted: a last choice the
    // search reaches at once (a seed), slow enough not to be its best: one accumulator and the
    // narrowest vectors (Halide), the smallest blocks (MLIR).
    const Retune t = retune_planted("tune-meet", "4", [](json &knobs, const std::string &backend) {
        if (backend == "halide") {
            knobs["row_accumulators"] = 1;
            knobs["vector_width"] = 8;
        } else {
            knobs["sum_block"] = 64;
            knobs["chunk_bytes"] = 131072;
        }
    });
    const std::string run = t.recs.back()["run"];
    // The final batch: the run's last records, written together, of its rounds.
    const int final_reps = t.recs.back()["result"]["reps"];
    size_t k = t.recs.size();
    bool in_final = false, searched = false;
    while (k > 0 && t.recs[k - 1]["run"] == run && t.recs[k - 1]["result"]["reps"] == final_reps) in_final |= t.recs[--k]["schedule"] == t.planted;
    for (size_t i = 0; i < k; ++i) searched |= t.recs[i]["run"] == run && t.recs[i]["schedule"] == t.planted;
    REQUIRE(searched);  // timed by the search (as a seed)
    CHECK(in_final);
}

TEST_CASE("describe --shape: the tuned choice for the class, or the default and why", "[cli][tune]") {
    const TinyRun &t = tiny();
    REQUIRE(t.r.code == 0);
    Result r = normgen_cli("describe " + catalog("rms_norm") + " --shape rows=64,d=256 --db " + t.db.string());
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK(r.out.find("shape class: f32|rows=2^6,d=256|m16|l2") != std::string::npos);
    CHECK(r.out.find("schedule: tuned,") != std::string::npos);
    Result other = normgen_cli("describe " + catalog("rms_norm") + " --shape rows=64,d=7 --db " + t.db.string());
    CHECK(other.code == 0);
    CHECK(other.out.find("schedule: the default") != std::string::npos);
    CHECK(normgen_cli("describe " + catalog("rms_norm") + " --shape rows=64").code == 1);  // d missing: named
    CHECK(normgen_cli("describe " + catalog("rms_norm") + " --shape rows=64").out.find("axis 'd'") != std::string::npos);
}

TEST_CASE("tune: bad options and bad declarations are refused, nothing written", "[cli][tune]") {
    const fs::path db = fresh_dir("tune-bad");
    auto refused = [&](const std::string &args, const std::string &text) {
        Result r = normgen_cli("tune " + args + " --db " + db.string());
        INFO(args << "\n" << r.out);
        CHECK(r.code == 1);
        CHECK(r.out.find(text) != std::string::npos);
        CHECK_FALSE(fs::exists(db));
    };
    refused("", "give at least one .norm file");
    refused("--catalog " + catalog("rms_norm"), "give .norm files or --catalog, not both");
    refused("--catalog --shapes rows=64,d=256", "--catalog tunes the grid's shapes");
    refused(catalog("rms_norm") + " --time 0", "--time takes a positive number");
    refused(catalog("rms_norm") + " --budget 0", "--budget takes a positive number");
    refused(catalog("rms_norm") + " --backend cuda", "--backend 'cuda'");
    refused(catalog("rms_norm") + " --frobnicate", "unknown option '--frobnicate'");
    refused(catalog("rms_norm") + " --shapes 4096", "has 1 extents; x is [rows, d]");
    refused(catalog("batch_norm_eval") + " --grad --shapes grid", "backward shapes");
    const fs::path bad = fresh_dir("bad") += ".norm";
    std::ofstream(bad) << "norm bad(x: [rows, d]) -> y {\n  y = x * nope\n}\n";
    refused(bad.string(), ":2:");
    fs::remove(bad);
    Result help = normgen_cli("tune --help");
    CHECK(help.code == 0);
    CHECK(help.out.find("Ctrl-C") != std::string::npos);
}

TEST_CASE("autoschedule: Halide's autoschedulers' kernels as libraries for the benchmark", "[cli][tune]") {
    const fs::path out = fresh_dir("autoschedule");
    Result r = normgen_cli("autoschedule " + catalog("rms_norm") + " --shapes 'rows=32,d=512' -o " + out.string());
    INFO(r.out);
    REQUIRE(r.code == 0);
    int libraries = 0;
    for (const auto &e : fs::recursive_directory_iterator(out)) {
        if (e.path().filename() != "manifest.json") continue;
        std::ifstream in(e.path());
        const json m = json::parse(in);
        const json &k = m["kernels"][0];
        CHECK(k["baseline"]["sizes"] == json{{"d", 512}, {"rows", 32}});
        CHECK(fs::exists(e.path().parent_path() / "kernel.so"));
        ++libraries;
    }
    CHECK(libraries == 3);  // Adams2019, Li2018, Mullapudi2016
    // The benchmark, which links the catalog's kernel table, loads them as rows of their own (each
    // library's table is its own, not the program's).
    Result bench = tool_cli("normgen_bench", "--normgen_extra=" + out.string() + " --benchmark_filter='^no such row$'");
    INFO(bench.out);
    CHECK(bench.out.find("[extra] 3 kernel libraries") != std::string::npos);
    CHECK(bench.out.find("not in this program's kernel table") == std::string::npos);
    CHECK(normgen_cli("autoschedule " + catalog("rms_norm") + " --shapes 'rows=32,d=512'").code == 1);  // -o missing
    fs::remove_all(out);
}

TEST_CASE("normgen-measure: a candidate that computes something else fails verification", "[cli][tune]") {
    // A planted wrong candidate: a layer with RMSNorm's name and argument list but eps = 0.1, whose
    // kernel library comes from a tuning run's cache; the right one checks, the wrong one does not.
    const fs::path dir = fresh_dir("planted"), cache_right = dir / "right", cache_wrong = dir / "wrong";
    fs::create_directories(dir);
    std::ifstream src(catalog("rms_norm"));
    std::stringstream text;
    text << src.rdbuf();
    std::string wrong = text.str();
    const size_t eps = wrong.find("const eps = ");
    REQUIRE(eps != std::string::npos);
    wrong.replace(eps, wrong.find('\n', eps) - eps, "const eps = 0.1");
    std::ofstream(dir / "rms_norm.norm") << wrong;
    for (const auto &[file, cache] : {std::pair{catalog("rms_norm"), cache_right}, std::pair{(dir / "rms_norm.norm").string(), cache_wrong}}) {
        Result r = normgen_cli("tune " + file + " --shapes 'rows=4,d=64' --budget 1 --rounds 1 --backend halide --no-autoschedulers --db " +
                               (dir / "db").string() + " --cache " + cache.string());
        INFO(r.out);
        REQUIRE(r.code == 0);
    }
    // A candidate without streaming stores (those refuse the odd width of the case below); which
    // candidates the run compiled, and the order the directory lists them in, vary.
    auto library = [](const fs::path &cache) {
        for (const auto &e : fs::recursive_directory_iterator(cache)) {
            if (e.path().filename() != "kernel.so") continue;
            std::ifstream in(e.path().parent_path() / "manifest.json");
            const json m = json::parse(in);
            bool streams = false;
            for (const json &k : m["kernels"])
                streams = streams || k.value("schedule", json::object()).value("knobs", json::object()).value("streaming_stores", false);
            if (!streams) return e.path().parent_path();
        }
        return fs::path();
    };
    const fs::path right = library(cache_right), bad = library(cache_wrong);
    REQUIRE(!right.empty());
    REQUIRE(!bad.empty());
    const fs::path script = dir / "commands.jsonl";
    std::ofstream(script) << json{{"cmd", "load"}, {"id", "right"}, {"manifest", (right / "manifest.json").string()}, {"library", (right / "kernel.so").string()}}.dump()
                          << "\n"
                          << json{{"cmd", "load"}, {"id", "wrong"}, {"manifest", (bad / "manifest.json").string()}, {"library", (bad / "kernel.so").string()}}.dump()
                          << "\n"
                          << json{{"cmd", "case"}, {"kernel", "right"}, {"sizes", {{"rows", 32}, {"d", 100}}}, {"seed", 3}}.dump() << "\n"
                          << json{{"cmd", "verify"}, {"kernel", "right"}, {"sweep", true}}.dump() << "\n"
                          << json{{"cmd", "verify"}, {"kernel", "wrong"}, {"sweep", true}}.dump() << "\n";
    const std::string cmd = std::string(NORMGEN_BINARY_DIR) + "/bin/normgen-measure < " + script.string() + " 2>&1";
    FILE *p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    std::string out;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    pclose(p);
    INFO(out);
    std::vector<json> replies;
    std::stringstream lines(out);
    for (std::string l; std::getline(lines, l);) replies.push_back(json::parse(l));
    REQUIRE(replies.size() == 5);
    for (size_t i = 0; i < 4; ++i) CHECK(replies[i]["ok"] == true);
    CHECK(replies[4]["ok"] == false);
    CHECK(replies[4]["error"].get<std::string>().find("elements fail") != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("tune --time: each class its share of the time left; a class that cannot get 15 s is listed, not tuned", "[cli][tune]") {
    const fs::path db = fresh_dir("tune-time"), cache = fresh_dir("tune-time-cache");
    // 18 s for two classes: the first would get 9 s (under 15: skipped), the second about 18.
    Result r = normgen_cli("tune " + catalog("rms_norm") + " --shapes 'rows=64,d=256;rows=8,d=128' --time 0.3 --rounds 2 --no-autoschedulers --db " +
                           db.string() + " --cache " + cache.string());
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK(r.out.find("2 shape class(es) in 0:18") != std::string::npos);
    CHECK(r.out.find("[2/2] rms_norm f32 [f32|rows=8,d=128|m16|l2]: budget 18 s") != std::string::npos);
    CHECK(r.out.find("what it found on ") != std::string::npos);
    CHECK(r.out.find("x the default") != std::string::npos);
    CHECK(r.out.find("not tuned (out of time): 1 class(es)") != std::string::npos);
    CHECK(r.out.find("    rms_norm f32 [f32|rows=2^6,d=256|m16|l2]") != std::string::npos);
    std::ifstream in(db / "best" / "rms_norm.json");
    REQUIRE(in);
    CHECK(json::parse(in)["entries"].size() == 1);
    fs::remove_all(db);
    fs::remove_all(cache);
}
