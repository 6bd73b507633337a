// The tools' shared structure as a user meets it: `describe --plan`, schedule records on the
// command line, one exit-code policy for every executable, valid JSON from `verify --json`,
// `compile`/`run`/`merge` with either backend.
#include "normgen_cli.h"

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>

namespace fs = std::filesystem;
using normgen::testing::normgen_cli;
using normgen::testing::Result;

namespace {

std::string src(const std::string &rel) { return std::string(NORMGEN_SOURCE_DIR) + "/" + rel; }

fs::path fresh_dir(const std::string &tag) {
    static std::mt19937_64 rng(std::random_device{}());
    return fs::temp_directory_path() / ("normgen-structure-" + tag + "-" + std::to_string(rng()));
}

Result tool(const std::string &exe, const std::string &args) {
    std::string cmd = std::string(NORMGEN_BINARY_DIR) + "/bin/" + exe + " " + args + " 2>&1";
    FILE *p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    int status = pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Disassembled, the instructions of one object (objdump, when the build found one; "" otherwise).
std::string disassembly(const fs::path &object) {
    std::string text;
    if (std::string(NORMGEN_OBJDUMP).empty()) return text;
    FILE *p = popen((std::string(NORMGEN_OBJDUMP) + " -d " + object.string()).c_str(), "r");
    REQUIRE(p);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
    pclose(p);
    return text;
}

// Each kernel's schedule_text in a manifest ({"kernels": [...]}) or a fragment (the array), by function.
std::map<std::string, std::string> schedule_texts(const fs::path &manifest) {
    std::map<std::string, std::string> t;
    const nlohmann::json m = nlohmann::json::parse(std::ifstream(manifest));
    for (const auto &k : m.is_array() ? m : m.at("kernels")) t[k.at("function").get<std::string>()] = k.at("schedule_text").get<std::string>();
    return t;
}

}  // namespace

TEST_CASE("describe --plan prints the plan of each variant, as text and as JSON", "[cli][plan]") {
    Result t = normgen_cli("describe " + src("dsl/catalog/layer_norm.norm") + " --plan");
    INFO(t.out);
    REQUIRE(t.code == 0);
    CHECK(t.out.find("plan layer_norm (f32, core)") != std::string::npos);
    CHECK(t.out.find("plan layer_norm (f32, full)") != std::string::npos);
    CHECK(t.out.find("layout: row (the reductions cover the trailing block (d)") != std::string::npos);
    Result j = normgen_cli("describe " + src("dsl/catalog/group_norm_nhwc.norm") + " --plan --json --dtype bf16");
    REQUIRE(j.code == 0);
    nlohmann::json doc = nlohmann::json::parse(j.out);
    CHECK(doc["layer"] == "group_norm_nhwc");
    REQUIRE(doc["plans"].size() == 2);  // core, and full (writing the saved mu, rstd)
    CHECK(doc["plans"][0]["variant"] == "core");
    CHECK(doc["plans"][1]["variant"] == "full");
    CHECK(doc["plans"][0]["layout"] == "root");
    CHECK(doc["plans"][0]["inner_pair_grouped"] == true);  // the core kernel does not write mu, rstd per (n, g)
    CHECK(doc["plans"][1]["inner_pair_grouped"] == false);
    CHECK(doc["plans"][0]["args"][0]["dtype"] == "bf16");
    CHECK(doc["plans"][0]["args"][0]["memory_order"] == nlohmann::json::array({"n", "h", "w", "g", "cg"}));
    CHECK(normgen_cli("describe " + src("dsl/catalog/layer_norm.norm") + " --json").code == 1);  // --json goes with --plan
}

TEST_CASE("a bad schedule knob is a user error naming the knob, in every command that takes one", "[cli][schedule]") {
    const std::string ln = src("dsl/catalog/layer_norm.norm");
    fs::path out = fresh_dir("sched");
    for (const std::string &cmd : {"verify " + ln + " --dtype f32 --target host --quick --schedule vector_widht=8",
                                   "compile " + ln + " -o " + out.string() + " --schedule vector_widht=8",
                                   "verify " + ln + " --backend mlir --dtype f32 --quick --schedule vector_width=8"}) {
        Result r = normgen_cli(cmd);
        INFO(cmd << "\n" << r.out);
        CHECK(r.code != 0);
        CHECK(r.out.find("has no knob") != std::string::npos);
    }
    CHECK_FALSE(fs::exists(out));  // nothing written on a bad call
    Result ok = normgen_cli("verify " + ln + " --dtype f32 --target host --quick --schedule row_accumulators=1,sum_block=8");
    INFO(ok.out);
    CHECK(ok.code == 0);
}

TEST_CASE("every executable maps a user's mistake to exit 1 and says internal errors are bugs", "[cli]") {
    fs::path out = fresh_dir("gen");
    Result g = tool("normgen-gen", "compile " + src("dsl/catalog/rms_norm.norm") + " --target nonsense --out " + out.string() +
                                       " --fragment " + (out / "x.json").string());
    INFO(g.out);
    CHECK(g.code == 1);
    CHECK_FALSE(fs::exists(out));  // refused before anything is written
    CHECK(g.out.find("unknown target 'nonsense'") != std::string::npos);
    CHECK(g.out.find("internal error") == std::string::npos);
    Result m = tool("normgen-mlir", "frobnicate");
    CHECK(m.code == 1);
    CHECK(m.out.find("(see normgen-mlir --help)") != std::string::npos);
    Result n = normgen_cli("frobnicate");
    CHECK(n.code == 1);
}

TEST_CASE("verify --json is valid JSON even when a message spans lines", "[cli]") {
    // A declaration the CUDA plan cannot take is fine for the CPU; here a kernel that fails to
    // compile (the MLIR CPU ABI takes at most 16 tensors) puts a multi-part message in the JSON.
    fs::path dir = fresh_dir("json");
    fs::create_directories(dir);
    std::string decl = "norm wide(x: [r, d]) -> y {\n";
    for (int i = 0; i < 17; ++i) decl += "  param p" + std::to_string(i) + ": [d]\n";
    decl += "  y = x";
    for (int i = 0; i < 17; ++i) decl += " + p" + std::to_string(i);
    decl += "\n}\n";
    std::ofstream(dir / "wide.norm") << decl;
    Result r = normgen_cli("verify " + (dir / "wide.norm").string() + " --backend mlir --dtype f32 --quick --json");
    INFO(r.out);
    CHECK(r.code == 1);
    std::string json = r.out.substr(r.out.find('{'));
    nlohmann::json doc = nlohmann::json::parse(json);  // throws on invalid JSON
    CHECK(doc["failed"].get<int>() >= 1);
    CHECK(doc["cases"][0]["problem"].get<std::string>().find("at most 16") != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("compile with --backend mlir and halide; merge joins two compiles", "[cli][mlir]") {
    fs::path dir = fresh_dir("mlir");
    const std::string rms = src("dsl/catalog/rms_norm.norm");
    Result c = normgen_cli("compile " + rms + " --backend mlir --dtype f32,bf16 -o " + (dir / "m").string());
    INFO(c.out);
    REQUIRE(c.code == 0);
    CHECK(fs::exists(dir / "m" / "rms_norm.mlir.a"));
    CHECK(fs::exists(dir / "m" / "halide_runtime.o"));
    nlohmann::json m = nlohmann::json::parse(std::ifstream(dir / "m" / "manifest.json"));
    REQUIRE(m["kernels"].size() == 4);  // f32, bf16 x core, full
    CHECK(m["kernels"][0]["backend"] == "mlir");
    CHECK(m["kernels"][0]["schedule"]["kind"] == "mlir-cpu");
    Result h = normgen_cli("compile " + rms + " --dtype f32 --target x86-64-avx2 -o " + (dir / "h").string() + " --schedule row_accumulators=2");
    INFO(h.out);
    REQUIRE(h.code == 0);
    nlohmann::json hm = nlohmann::json::parse(std::ifstream(dir / "h" / "manifest.json"));
    CHECK(hm["kernels"][0]["schedule"]["knobs"]["row_accumulators"] == 2);
    CHECK(hm["kernels"][0]["library"] == "rms_norm.a");
    Result merged = normgen_cli("merge --manifest " + (dir / "all.json").string() + " --table " + (dir / "table.cpp").string() + " " +
                                (dir / "m" / "manifest.json").string() + " " + (dir / "h" / "manifest.json").string());
    INFO(merged.out);
    REQUIRE(merged.code == 0);
    nlohmann::json all = nlohmann::json::parse(std::ifstream(dir / "all.json"));
    CHECK(all["kernels"].size() == 6);
    CHECK(all["kernels"][0]["library"] == "m/rms_norm.mlir.a");  // relative to the merged manifest
    Result twice = normgen_cli("merge --manifest " + (dir / "x.json").string() + " --table " + (dir / "x.cpp").string() + " " +
                               (dir / "h" / "manifest.json").string() + " " + (dir / "h" / "manifest.json").string());
    CHECK(twice.code == 1);
    CHECK(twice.out.find("comes from two inputs") != std::string::npos);

    fs::remove_all(dir);
}

TEST_CASE("bf16 kernels for AVX512-BF16 convert natively, streaming stores stay non-temporal, and without the LLVM 22 step "
          "the emulated conversion is kept",
          "[cli][mlir][bf16]") {
    // Cross-compiled for a Sapphire Rapids target whatever this host is: nothing here runs.
    const std::string spr = "x86-64-linux-avx-avx2-avx512-avx512_skylake-avx512_cannonlake-avx512_sapphirerapids-f16c-fma-sse41";
    const fs::path dir = fresh_dir("bf16");
    const std::string rms = src("dsl/catalog/rms_norm.norm");

    Result c = normgen_cli("compile " + rms + " --dtype bf16,f32 --target " + spr + ",x86-64-avx2 -o " + (dir / "a").string() +
                           " --schedule streaming_stores=1,vector_width=32");
    INFO(c.out);
    REQUIRE(c.code == 0);
    std::map<std::string, std::string> t = schedule_texts(dir / "a" / "manifest.json");
    CHECK(t.at("rms_norm__bf16__avx512__core").find("marked 1 stores non-temporal in 1 functions; 1 bf16 conversions native") != std::string::npos);
    CHECK(t.at("rms_norm__f32__avx512__core").find("bf16") == std::string::npos);       // no bf16 in the kernel
    CHECK(t.at("rms_norm__bf16__avx2__core").find("bf16 conversions") == std::string::npos);  // AVX2: no vcvtneps2bf16
    const std::string bf16 = disassembly(dir / "a" / "rms_norm__bf16__avx512__core.o");
    if (!bf16.empty()) {
        CHECK(bf16.find("vcvtneps2bf16") != std::string::npos);
        CHECK(bf16.find("vmovnt") != std::string::npos);  // LLVM 22 dropped the mark on a stored bfloat vector
    }
    CHECK(disassembly(dir / "a" / "rms_norm__bf16__avx2__core.o").find("vcvtneps2bf16") == std::string::npos);

    // Without streaming stores the bf16 kernel still takes the step; a build without normgen-mlir
    // (the tool not found) keeps Halide's own object, with the emulated conversion, and says so.
    Result plain = normgen_cli("compile " + rms + " --dtype bf16 --target " + spr + " -o " + (dir / "b").string());
    INFO(plain.out);
    REQUIRE(plain.code == 0);
    CHECK(schedule_texts(dir / "b" / "manifest.json").at("rms_norm__bf16__avx512__core").find("bf16 conversions native, ") !=
          std::string::npos);
    // AMD's Zen 4 and later have AVX512-BF16 too: the same step, and the kernel asks the CPU for it.
    const std::string zen4 = "x86-64-linux-avx-avx2-avx512-avx512_skylake-avx512_cannonlake-avx512_zen4-f16c-fma-sse41";
    Result amd = normgen_cli("compile " + rms + " --dtype bf16 --target " + zen4 + " -o " + (dir / "z").string());
    INFO(amd.out);
    REQUIRE(amd.code == 0);
    CHECK(schedule_texts(dir / "z" / "manifest.json").at("rms_norm__bf16__avx512__core").find("bf16 conversions native, ") !=
          std::string::npos);
    // The step also gives the bf16 kernels their multiply-adds back (Halide compiles a bf16 store's
    // value strictly: DyT's rational tanh came out as 13 vmulps + 10 vaddps), and a rounding whose
    // float was loaded as integers (fused add + RMSNorm's h, narrowed from its f32 row) is native too,
    // as is a rounding point inside the computation (Llama's RMSNorm rounds x * rstd to bf16 before
    // the weight: the round trip to bf16 and back, which LLVM folds to bits & 0xffff0000).
    for (const char *layer : {"dyt", "fused_add_rms_norm", "rms_norm_llama"}) {
        Result r = normgen_cli("compile " + src(std::string("dsl/catalog/") + layer + ".norm") + " --dtype bf16 --target " + spr +
                               " -o " + (dir / layer).string());
        INFO(r.out);
        REQUIRE(r.code == 0);
    }
    const std::string dyt_text = schedule_texts(dir / "dyt" / "manifest.json").at("dyt__bf16__avx512__core");
    CHECK(dyt_text.find("float operations contractible") != std::string::npos);
    CHECK(dyt_text.find(" 0 float operations contractible") == std::string::npos);
    const std::string dyt_asm = disassembly(dir / "dyt" / "dyt__bf16__avx512__core.o");
    const std::string fused_asm = disassembly(dir / "fused_add_rms_norm" / "fused_add_rms_norm__bf16__avx512__core.o");
    if (!dyt_asm.empty()) {
        CHECK(dyt_asm.find("vfmadd") != std::string::npos);
        CHECK(fused_asm.find("vcvtneps2bf16") != std::string::npos);
        CHECK(fused_asm.find("vpmovdw") == std::string::npos);  // no emulated narrowing left
        const std::string llama_asm = disassembly(dir / "rms_norm_llama" / "rms_norm_llama__bf16__avx512__core.o");
        CHECK(llama_asm.find("vcvtneps2bf16") != std::string::npos);
        CHECK(llama_asm.find("vpsrld") == std::string::npos);  // no emulated rounding left (its (bits >> 16) & 1)
    }
    std::string features;
    const nlohmann::json zm = nlohmann::json::parse(std::ifstream(dir / "z" / "manifest.json"));
    for (const auto &k : zm.at("kernels"))
        if (k.at("function") == "rms_norm__bf16__avx512__core") features = k.at("cpu_features").dump();
    CHECK(features.find("avx512bf16") != std::string::npos);
    const std::string amd_code = disassembly(dir / "z" / "rms_norm__bf16__avx512__core.o");
    if (!amd_code.empty()) CHECK(amd_code.find("vcvtneps2bf16") != std::string::npos);
    Result none = tool("normgen-gen", "compile " + rms + " --dtype bf16 --variants core --target " + spr + " --out " + (dir / "c").string() +
                                          " --fragment " + (dir / "c.json").string() + " --streaming-tool " + (dir / "no-such-tool").string());
    INFO(none.out);
    REQUIRE(none.code == 0);
    const std::string fragment = nlohmann::json::parse(std::ifstream(dir / "c.json")).dump();
    CHECK(fragment.find("bf16 conversions emulated") != std::string::npos);
    const std::string emulated = disassembly(dir / "c" / "rms_norm__bf16__avx512__core.o");
    if (!emulated.empty()) CHECK(emulated.find("vcvtneps2bf16") == std::string::npos);
    // Streaming stores cannot do without the step: an error naming it, not a silent fallback.
    Result nt = tool("normgen-gen", "compile " + rms + " --dtype bf16 --variants core --target " + spr + " --out " + (dir / "d").string() +
                                        " --fragment " + (dir / "d.json").string() + " --schedule streaming_stores=1 --streaming-tool " +
                                        (dir / "no-such-tool").string());
    CHECK(nt.code == 1);
    CHECK(nt.out.find("streaming stores need the MLIR backend's LLVM 22 step") != std::string::npos);
    // The step's own command line: something to do is required.
    Result usage = tool("normgen-mlir", "streaming " + (dir / "x.bc").string() + " -o " + (dir / "x.o").string());
    CHECK(usage.code == 1);
    CHECK(usage.out.find("at least one of the two") != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("MLIR kernels with streaming stores: the aligned version's vector stores are non-temporal, and both versions verify",
          "[cli][mlir]") {
    const fs::path dir = fresh_dir("mlir-nt");
    const std::string dyt = src("dsl/catalog/dyt.norm");
    Result c = tool("normgen-mlir", "compile " + dyt + " --dtype f32,bf16 --variants core --out " + (dir / "a").string() + " --fragment " +
                                        (dir / "a.json").string() + " --schedule streaming_stores=1");
    INFO(c.out);
    REQUIRE(c.code == 0);
    const std::map<std::string, std::string> t = schedule_texts(dir / "a.json");
    REQUIRE(t.size() == 2);
    for (const auto &[function, text] : t) {
        INFO(function << ": " << text);
        std::smatch m;
        REQUIRE(std::regex_search(text, m, std::regex("\\(([0-9]+) vector stores marked, checked at entry")));
        CHECK(std::stoi(m[1]) >= 1);  // the main loop's stores at least
        const std::string code = disassembly(dir / "a" / (function + ".o"));
        if (code.empty()) continue;
        CHECK(code.find("vmovnt") != std::string::npos);
        CHECK(code.find("sfence") != std::string::npos);
    }
    // The default schedule stores as usual.
    Result plain = tool("normgen-mlir", "compile " + dyt + " --dtype f32 --variants core --out " + (dir / "b").string() + " --fragment " +
                                            (dir / "b.json").string());
    REQUIRE(plain.code == 0);
    for (const auto &[function, text] : schedule_texts(dir / "b.json")) {
        CHECK(text.find("streaming") == std::string::npos);
        const std::string code = disassembly(dir / "b" / (function + ".o"));
        if (!code.empty()) CHECK(code.find("vmovnt") == std::string::npos);
    }
    // The JIT verifier places the outputs on a 64-byte boundary at every other call and one
    // element past it at the others: the sweep's widths that fill whole lines (16, 64, 4096, ...)
    // run the streaming version, the others and the shifted calls the ordinary one.
    Result v = normgen_cli("verify " + dyt + " " + src("dsl/catalog/rms_norm.norm") + " " + src("dsl/catalog/layer_norm.norm") +
                           " --backend mlir --dtype f32,bf16 --schedule streaming_stores=1");
    INFO(v.out);
    CHECK(v.code == 0);
    fs::remove_all(dir);
}
