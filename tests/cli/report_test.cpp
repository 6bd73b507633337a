// `normgen report` on a small, hand-made Google Benchmark JSON (tests/cli/data/bench_small.json):
// three cases, one of them a loss, one vendor row that is an "unsupported" error, mean rows that
// must be ignored in favour of medians, and a copy row that is not a case.
#include "normgen_cli.h"

#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <sys/wait.h>

namespace fs = std::filesystem;

namespace {

using normgen::testing::Result;
using normgen::testing::normgen_cli;


fs::path fresh_dir() {
    static std::mt19937_64 rng(std::random_device{}());
    return fs::temp_directory_path() / ("normgen-report-" + std::to_string(rng()));
}

std::string read(const fs::path &p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

const std::string kSmall = std::string(NORMGEN_SOURCE_DIR) + "/tests/cli/data/bench_small.json";

// `normgen report --no-plots` on `json` (the small file, edited by the test); its report.md.
std::string report_of(const std::string &json) {
    const fs::path in = fs::temp_directory_path() / ("normgen-report-in-" + fresh_dir().filename().string() + ".json");
    std::ofstream(in) << json;
    const fs::path dir = fresh_dir();
    Result r = normgen_cli("report " + in.string() + " -o " + dir.string() + " --no-plots");
    INFO(r.out);
    REQUIRE(r.code == 0);
    const std::string md = read(dir / "report.md");
    fs::remove(in);
    fs::remove_all(dir);
    return md;
}

}  // namespace

TEST_CASE("report: tables, speedups, losses, unsupported vendors and plots from a small JSON", "[cli][report]") {
    fs::path dir = fresh_dir();
    Result r = normgen_cli("report " + kSmall + " -o " + dir.string());
    INFO(r.out);
    REQUIRE(r.code == 0);
    const std::string md = read(dir / "report.md");
    // Medians, not the mean row (99 GB/s) of the scalar baseline; without limit counters (an
    // older run) the limit is the NT copy. (The file's cv row has Google Benchmark's bare NaN and
    // -Infinity, which are not JSON: read anyway.)
    CHECK(md.find("| llama3-8b 4096x4096 | 128.0 | **30.00** |  |  |  |  |  | 20.00 | 10.00 | 8.00 | 40.0 | 75% | 1.50x |  |") !=
          std::string::npos);
    CHECK(md.find("99.00") == std::string::npos);
    // The CPU named in the header (the model, ISA and caches normgen_bench recorded).
    CHECK(md.find("Machine: testhost, 2 CPUs (Test CPU (avx512, 2 threads, L2 2 MiB, L3 480 MiB))") != std::string::npos);
    // The DRAM-sized case: tuned beside the default and Adams2019, the limit with its spread.
    CHECK(md.find("| llama3-70b 16384x8192 | 1024.0 | **16.00** | 12.00 |  | 14.00 |  |  | 18.00 | 12.00 | 8.00 | 40.0 (36.0-44.0) | 40% | "
                  "**0.89x** | 1.33x |") != std::string::npos);
    // The loss: 16 vs oneDNN's 18 at the DRAM-sized case, listed and in bold.
    CHECK(md.find("- layer_norm/llama3-70b/f32/16384x8192: tuned 16.00 GB/s, onednn 18.00 GB/s (0.89x)") != std::string::npos);
    // Summary: LayerNorm's DRAM case at 40% of its limit (36-44% over the limit's spread);
    // geo-mean sqrt(1.5 * 0.889) = 1.15; tuned / default 1.33.
    CHECK(md.find("| layer_norm | 2 | 16.00 GB/s (llama3-70b 16384x8192) | 40% (36-44%) | 1.15x | 1 | 1.33x |") != std::string::npos);
    // RMSNorm: oneDNN has no primitive -> n/a and the reason; the best vendor is PyTorch (4x).
    CHECK(md.find("| llama3-8b 4096x4096 | 128.0 | **24.00** |  |  |  |  |  | n/a | 6.00 | 12.00 |") != std::string::npos);
    CHECK(md.find("onednn: unsupported: oneDNN 2.6 has no RMSNorm primitive") != std::string::npos);
    CHECK(md.find("| rms_norm | 1 | — | — | 4.00x | 0 | — |") != std::string::npos);
    // (1.5 x 0.889 x 4)^(1/3); tuned against the default and the autoscheduler.
    CHECK(md.find("geo-mean 1.75x over the best vendor on 3 cases with a vendor; normgen is slower on 1. Tuned / default: geo-mean 1.33x on 1 "
                  "cases. Tuned / autoscheduler: adams2019 1.14x (1 cases).") != std::string::npos);
    CHECK(md.find("Nowhere, beyond the noise") != std::string::npos);
    CHECK(r.out.find("ignored 1 rows") != std::string::npos);  // the copy row
    // One PNG per layer (python3-matplotlib is installed by scripts/install-deps.sh).
    for (const char *l : {"layer_norm", "rms_norm"}) {
        const std::string png = read(dir / (std::string(l) + ".png"));
        REQUIRE(png.size() > 1000);
        CHECK(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
    }
    fs::remove_all(dir);
}

TEST_CASE("report: bad input is refused and nothing is written", "[cli][report]") {
    fs::path dir = fresh_dir();
    SECTION("missing file") {
        Result r = normgen_cli("report /nonexistent/bench.json -o " + dir.string());
        CHECK(r.code == 1);
        CHECK(r.out.find("cannot open") != std::string::npos);
    }
    SECTION("malformed JSON") {
        fs::path bad = fs::temp_directory_path() / "normgen-report-bad.json";
        std::ofstream(bad) << "{\"benchmarks\": [ {\"name\": ";
        Result r = normgen_cli("report " + bad.string() + " -o " + dir.string());
        CHECK(r.code == 1);
        CHECK(r.out.find("not valid JSON") != std::string::npos);
        fs::remove(bad);
    }
    SECTION("JSON without benchmark rows") {
        fs::path bad = fs::temp_directory_path() / "normgen-report-empty.json";
        std::ofstream(bad) << "{\"benchmarks\": [{\"name\": \"copy/nt/1024\", \"run_name\": \"copy/nt/1024\"}]}";
        Result r = normgen_cli("report " + bad.string() + " -o " + dir.string());
        CHECK(r.code == 1);
        CHECK(r.out.find("no normgen_bench rows") != std::string::npos);
        fs::remove(bad);
    }
    SECTION("several runs, one of them malformed") {
        fs::path bad = fs::temp_directory_path() / "normgen-report-bad2.json";
        std::ofstream(bad) << "{\"benchmarks\": [ {\"name\": ";
        Result r = normgen_cli("report " + kSmall + " " + bad.string() + " -o " + dir.string());
        CHECK(r.code == 1);
        CHECK(r.out.find("not valid JSON") != std::string::npos);
        fs::remove(bad);
    }
    SECTION("no output folder") {
        Result r = normgen_cli("report " + kSmall);
        CHECK(r.code == 1);
        CHECK(r.out.find("give -o DIR") != std::string::npos);
    }
    CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("report: --no-plots writes the markdown only; --print echoes it", "[cli][report]") {
    fs::path dir = fresh_dir();
    Result r = normgen_cli("report " + kSmall + " -o " + dir.string() + " --no-plots --print");
    REQUIRE(r.code == 0);
    CHECK(r.out.find("# normgen benchmark report") != std::string::npos);
    CHECK(fs::exists(dir / "report.md"));
    CHECK_FALSE(fs::exists(dir / "layer_norm.png"));
    CHECK(read(dir / "report.md").find("![layer_norm]") == std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("report: the summary's DRAM-sized case is the layer's largest, not its fastest", "[cli][report]") {
    // With a 16 MiB last-level cache both LayerNorm cases (128 and 1024 MiB) are DRAM-sized; the
    // smaller runs at 30 GB/s, the larger at 16: the summary names the larger.
    std::string text = read(kSmall);
    const std::string key = "\"context\": {";
    const size_t at = text.find(key);
    REQUIRE(at != std::string::npos);
    text.insert(at + key.size(), "\n    \"llc_bytes\": \"16777216\",");
    const std::string md = report_of(text);
    CHECK(md.find("| layer_norm | 2 | 16.00 GB/s (llama3-70b 16384x8192) | 40% (36-44%) |") != std::string::npos);
    CHECK(md.find("30.00 GB/s (llama3-8b 4096x4096)") == std::string::npos);
}

TEST_CASE("report: a tuned row that ran the default's own kernel is 1.00x the default, not behind it", "[cli][report]") {
    // The DRAM case's tuned and default rows labelled with one kernel (the class kept the default
    // record), the tuned row slower by noise (10 GB/s to the default's 12): 1.00x, not listed as
    // behind, 1.00 in the mean.
    std::string text = read(kSmall);
    for (const char *impl : {"normgen", "default"}) {
        const std::string row = std::string("\"name\": \"layer_norm/llama3-70b/f32/16384x8192/") + impl + "/";
        const size_t at = text.find(row);
        REQUIRE(at != std::string::npos);
        text.insert(at, std::string("\"label\": \"layer_norm__f32__avx512__core") + (impl[0] == 'n' ? " (tuned)" : "") + "\",\n      ");
    }
    const std::string tuned = "\"GBps\": 16.0";  // the DRAM case's tuned row only
    const size_t at = text.find(tuned);
    REQUIRE(at != std::string::npos);
    REQUIRE(text.find(tuned, at + 1) == std::string::npos);
    text.replace(at, tuned.size(), "\"GBps\": 10.0");
    const std::string md = report_of(text);
    CHECK(md.find("| 25% | **0.56x** | 1.00x (same kernel) |") != std::string::npos);
    CHECK(md.find("Tuned / default: geo-mean 1.00x on 1 cases.") != std::string::npos);
    // Behind Halide's Adams2019 (14 GB/s, another kernel), not behind the default.
    CHECK(md.find("tuned 10.00 GB/s, adams2019 14.00 GB/s (0.71x") != std::string::npos);
    CHECK(md.find("tuned 10.00 GB/s, default") == std::string::npos);
}

TEST_CASE("report: a case's limit is the one measured beside its tuned row, not a later row's from another run", "[cli][report]") {
    // A file merged from several runs (each row the median of its runs) may hold the DRAM case's
    // Adams2019 row from a run whose copy ran at 80 GB/s: the tuned row's 16 GB/s stays 40 % of the
    // 40 GB/s measured beside it, not 20 %.
    std::string text = read(kSmall);
    const std::string row = "\"name\": \"layer_norm/llama3-70b/f32/16384x8192/adams2019/";
    const size_t at = text.find(row);
    REQUIRE(at != std::string::npos);
    text.insert(at, "\"limit_GBps\": 80.0, \"limit_p20_GBps\": 70.0, \"limit_p80_GBps\": 90.0,\n      ");
    const std::string md = report_of(text);
    CHECK(md.find("| 40.0 (36.0-44.0) | 40% | **0.89x** | 1.33x |") != std::string::npos);
    CHECK(md.find("| layer_norm | 2 | 16.00 GB/s (llama3-70b 16384x8192) | 40% (36-44%) |") != std::string::npos);
    CHECK(md.find("80.0 (70.0-90.0)") == std::string::npos);
}

TEST_CASE("report: several runs of one grid, each case whole from the run of its tuned row's median", "[cli][report]") {
    // Three runs: the DRAM case's tuned row at 16 GB/s beside a 40 GB/s limit and a default at 12
    // (the file as is), at 10 beside 25 and 9, at 20 beside 80 and 11. The median run is the first:
    // 16 GB/s, 40 % of its 40, its default's 12 beside it (1.33x) — not another run's limit, nor the
    // default's own median (11: a row-by-row merge).
    const std::string text = read(kSmall);
    auto edited = [&](const char *gbps, const char *limit, const char *dflt) {
        std::string t = text;
        auto swap = [&](const std::string &from, const std::string &to) {
            const size_t at = t.find(from);
            REQUIRE(at != std::string::npos);
            t.replace(at, from.size(), to);
        };
        swap("\"GBps\": 16.0", std::string("\"GBps\": ") + gbps);
        swap("\"limit_GBps\": 40.0", std::string("\"limit_GBps\": ") + limit);
        const std::string dname = "\"name\": \"layer_norm/llama3-70b/f32/16384x8192/default/";
        const size_t d = t.find(dname);
        REQUIRE(d != std::string::npos);
        const size_t g = t.find("\"GBps\": 12.0", d);
        REQUIRE(g != std::string::npos);
        t.replace(g, std::string("\"GBps\": 12.0").size(), std::string("\"GBps\": ") + dflt);
        return t;
    };
    std::vector<fs::path> files;
    for (const std::string &t : {text, edited("10.0", "25.0", "9.0"), edited("20.0", "80.0", "11.0")}) {
        files.push_back(fs::temp_directory_path() / ("normgen-report-run-" + fresh_dir().filename().string() + ".json"));
        std::ofstream(files.back()) << t;
    }
    const fs::path dir = fresh_dir();
    Result r = normgen_cli("report " + files[1].string() + " " + files[0].string() + " " + files[2].string() + " -o " + dir.string() +
                           " --no-plots");
    INFO(r.out);
    REQUIRE(r.code == 0);
    const std::string md = read(dir / "report.md");
    CHECK(md.find("(3 runs; each case's rows from the run of its tuned row's median)") != std::string::npos);
    CHECK(md.find("| llama3-70b 16384x8192 | 1024.0 | **16.00** | 12.00 |") != std::string::npos);
    CHECK(md.find("| 40.0 (36.0-44.0) | 40% | **0.89x** | 1.33x |") != std::string::npos);
    // The other cases are the same in every run: each appears once.
    const std::string small_case = "| llama3-8b 4096x4096 | 128.0 | **30.00** |";
    CHECK(md.find(small_case) != std::string::npos);
    CHECK(md.find(small_case, md.find(small_case) + 1) == std::string::npos);
    for (const fs::path &f : files) fs::remove(f);
    fs::remove_all(dir);
}
