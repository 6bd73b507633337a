// The `normgen` command line as a user meets it: exit codes, diagnostics, and `run` on real files.
#include "runtime/npy.h"

#include "normgen_cli.h"

#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <sys/wait.h>

namespace fs = std::filesystem;
using namespace normgen;

namespace {

using normgen::testing::Result;
using normgen::testing::normgen_cli;


std::string src(const std::string &rel) { return std::string(NORMGEN_SOURCE_DIR) + "/" + rel; }
std::string golden(const std::string &rel) { return std::string(NORMGEN_GOLDEN_DIR) + "/" + rel; }

fs::path fresh_dir(const std::string &tag) {
    static std::mt19937_64 rng(std::random_device{}());
    fs::path d = fs::temp_directory_path() / ("normgen-cli-" + tag + "-" + std::to_string(rng()));
    return d;
}

double max_rel_error(const HostTensor &a, const HostTensor &b) {
    REQUIRE(a.shape == b.shape);
    double m = 0;
    for (size_t i = 0; i < a.data.size(); ++i) {
        double e = std::fabs(a.data[i] - b.data[i]) / (std::fabs(b.data[i]) + 1e-12);
        if (std::isnan(e)) return INFINITY;
        m = std::max(m, e);
    }
    return m;
}

}  // namespace

TEST_CASE("--help explains every command and exits 0", "[cli]") {
    Result r = normgen_cli("--help");
    CHECK(r.code == 0);
    for (const char *w : {"check FILE", "print FILE", "grad FILE", "describe FILE", "run FILE", "exit codes"}) CHECK(r.out.find(w) != std::string::npos);
    CHECK(normgen_cli("run --help").code == 0);
}

TEST_CASE("usage mistakes exit 1 with a hint", "[cli]") {
    CHECK(normgen_cli("").code == 1);
    Result r = normgen_cli("frobnicate");
    CHECK(r.code == 1);
    CHECK(r.out.find("unknown command 'frobnicate'") != std::string::npos);
    CHECK(normgen_cli("print").code == 1);
    CHECK(normgen_cli("check").code == 1);
}

TEST_CASE("check accepts the whole catalog", "[cli]") {
    Result r = normgen_cli("check " + src("dsl/catalog/*.norm"));
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK(r.out.empty());
}

TEST_CASE("check on a malformed file: located diagnostics, exit 1", "[cli]") {
    fs::path dir = fresh_dir("check");
    fs::create_directories(dir);
    std::string bad = (dir / "bad.norm").string();
    std::ofstream(bad) << "norm bad(x: [rows, d]) -> y {\n  ms = mean(x * x, over: q)\n  y = x * rsqrt(ms)\n}\n";
    Result r = normgen_cli("check " + src("dsl/catalog/rms_norm.norm") + " " + bad);
    CHECK(r.code == 1);
    CHECK(r.out.find(bad + ":2:26: error: unknown axis 'q'") != std::string::npos);
    CHECK(r.out.find("    ms = mean(x * x, over: q)\n                           ^") != std::string::npos);
    CHECK(r.out.find("1 of 2 files had errors") != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("print is canonical and describe states the facts", "[cli]") {
    Result p = normgen_cli("print " + src("dsl/catalog/rms_norm_gemma.norm"));
    CHECK(p.code == 0);
    CHECK(p.out.find("y = x * rsqrt(ms + eps) * (1 + weight)") != std::string::npos);
    Result d = normgen_cli("describe " + src("dsl/catalog/layer_norm_eps_outside_root.norm"));
    CHECK(d.code == 0);
    CHECK(d.out.find("eps = 1e-05: outside the root, in sigma + eps") != std::string::npos);
    CHECK(d.out.find("stage 1 over [d]") != std::string::npos);
    CHECK(d.out.find("accumulate f32") != std::string::npos);
}

TEST_CASE("grad prints the backward declaration, writes it with -o (which then checks), refuses what it cannot differentiate", "[cli][grad]") {
    Result g = normgen_cli("grad " + src("dsl/catalog/layer_norm.norm"));
    INFO(g.out);
    CHECK(g.code == 0);
    CHECK(g.out.find("# The backward of layer_norm (layer_norm.norm") == 0);
    CHECK(g.out.find("norm layer_norm_grad(x: [rows, d], mu: [rows], rstd: [rows], d_y: [rows, d])") != std::string::npos);
    CHECK(g.out.find("d_weight = sum(") != std::string::npos);
    Result r = normgen_cli("grad " + src("dsl/catalog/layer_norm.norm") + " --recompute");
    CHECK(r.code == 0);
    CHECK(r.out.find("Recomputed: mu") != std::string::npos);

    fs::path dir = fresh_dir("grad");
    fs::create_directories(dir);
    const std::string out = (dir / "ln_grad.norm").string();
    Result w = normgen_cli("grad " + src("dsl/catalog/layer_norm.norm") + " -o " + out);
    CHECK(w.code == 0);
    CHECK(normgen_cli("check " + out).code == 0);
    // Nothing to differentiate: a located error, exit 1, nothing written.
    const std::string bad = (dir / "ema.norm").string(), bad_out = (dir / "ema_grad.norm").string();
    std::ofstream(bad) << "norm ema(x: [rows, d], r: [d]) -> r_out updates r {\n  r_out = 0.9 * r + 0.1 * mean(x, over: rows)\n}\n";
    Result e = normgen_cli("grad " + bad + " -o " + bad_out);
    CHECK(e.code == 1);
    CHECK(e.out.find(bad + ":1:") != std::string::npos);
    CHECK(e.out.find("no differentiable output") != std::string::npos);
    CHECK(!fs::exists(bad_out));
    // Usage mistakes.
    CHECK(normgen_cli("grad").code == 1);
    CHECK(normgen_cli("grad " + src("dsl/catalog/layer_norm.norm") + " --frobnicate").code == 1);
    CHECK(normgen_cli("grad " + src("dsl/catalog/layer_norm.norm") + " -o").code == 1);
    // An unwritable -o is a user error naming the file.
    Result u = normgen_cli("grad " + src("dsl/catalog/layer_norm.norm") + " -o " + (dir / "no/such/dir/x.norm").string());
    CHECK(u.code == 1);
    CHECK(u.out.find("cannot write file") != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("run --backend reference reproduces a golden case", "[cli][golden]") {
    fs::path out = fresh_dir("run");
    Result r = normgen_cli("run " + src("dsl/catalog/rms_norm.norm") + " --backend reference --in x=" + golden("rms_norm/x.npy") +
                           " --in weight=" + golden("rms_norm/weight.npy") + " --set eps=1e-6 --out " + out.string());
    INFO(r.out);
    REQUIRE(r.code == 0);
    CHECK(max_rel_error(read_npy((out / "y.npy").string()), read_npy(golden("rms_norm/y.npy"))) < 1e-12);
    CHECK(fs::exists(out / "rstd.npy"));  // optional outputs are written too
    fs::remove_all(out);
}

TEST_CASE("run: GroupNorm NHWC with the group count set on the command line", "[cli][golden]") {
    fs::path out = fresh_dir("gn");
    std::string g = golden("group_norm_nhwc/");
    Result r = normgen_cli("run " + src("dsl/catalog/group_norm_nhwc.norm") + " --in x=" + g + "x.npy --in weight=" + g +
                           "weight.npy --in bias=" + g + "bias.npy --set g=4 --out " + out.string());
    INFO(r.out);
    REQUIRE(r.code == 0);
    CHECK(max_rel_error(read_npy((out / "y.npy").string()), read_npy(g + "y.npy")) < 1e-10);
    fs::remove_all(out);
}

TEST_CASE("run refuses bad calls, names the tensor, and writes nothing", "[cli]") {
    fs::path out = fresh_dir("bad");
    std::string ln = src("dsl/catalog/layer_norm.norm");
    std::string x = golden("layer_norm/x.npy"), w = golden("layer_norm/weight.npy"), b = golden("layer_norm/bias.npy");
    struct Bad {
        std::string args, message;
    };
    std::vector<Bad> bad = {
        {"--in x=" + x + " --in weight=" + w, "missing parameter 'bias' of shape [d]"},
        {"--in x=" + x + " --in weight=" + x + " --in bias=" + b, "parameter 'weight': expected rank 1 [d], got shape [5, 37]"},
        {"--in x=" + w + " --in weight=" + w + " --in bias=" + b, "input 'x': expected rank 2 [rows, d], got shape [37]"},
        {"--in x=" + x + " --in weight=" + golden("rms_norm/weight.npy") + " --in bias=" + b,
         "parameter 'weight': axis 'd' has extent 129 but 'x' gives it 37"},
        {"--in x=" + x + " --in weight=" + w + " --in bias=" + b + " --in z=" + x, "has no input or parameter named 'z'"},
        {"--in x=" + x + " --in weight=" + w + " --in bias=" + b + " --set q=1", "--set q: 'layer_norm' has no constant or axis named 'q'"},
        {"--in x=no/such.npy --in weight=" + w + " --in bias=" + b, "no/such.npy: cannot open file"},
        {"--in x=" + x + " --in weight=" + w + " --in bias=" + b + " --backend cuda", "unknown backend 'cuda' (available: reference, halide, mlir)"},
        {"--in x=" + ln + " --in weight=" + w + " --in bias=" + b, "not a NumPy .npy file"},
    };
    for (const Bad &c : bad) {
        SECTION(c.message) {
            Result r = normgen_cli("run " + ln + " " + c.args + " --out " + out.string());
            INFO(r.out);
            CHECK(r.code == 1);
            CHECK(r.out.find(c.message) != std::string::npos);
            CHECK_FALSE(fs::exists(out));
        }
    }
}

TEST_CASE("run --backend halide and mlir reproduce golden cases in f32 and bf16", "[cli][golden][halide][mlir]") {
    struct Case {
        std::string layer, golden, ins, sets;
        const char *dtype;
        double tol;  // relative, plus the same absolute: f32 1e-5; bf16 two ulps (2^-7)
    };
    std::string g = std::string(NORMGEN_GOLDEN_DIR) + "/";
    std::vector<Case> cases = {
        {"layer_norm", "layer_norm", "x weight bias", "", "f32", 1e-5},
        {"rms_norm", "rms_norm", "x weight", "", "f32", 1e-5},
        {"group_norm_nhwc", "group_norm_nhwc", "x weight bias", "--set g=4", "f32", 1e-5},
        {"batch_norm_train", "batch_norm_nchw_train", "x weight bias running_mean running_var", "", "f32", 1e-5},
        {"dyt", "dyt", "x alpha weight bias", "", "f32", 1e-5},
        {"layer_norm_eps_outside_root", "layer_norm_eps_outside_root", "x weight bias", "--set eps=0.01", "f32", 1e-5},
        {"rms_norm_gemma", "rms_norm_gemma_bf16_inputs", "x weight", "", "bf16", 1.0 / 64},
    };
    for (const Case &c : cases)
    for (const char *backend : {"halide", "mlir"}) {
        SECTION(c.golden + " " + c.dtype + " " + backend) {
            fs::path out = fresh_dir(backend);
            std::string args = "run " + src("dsl/catalog/" + c.layer + ".norm") + " --backend " + backend + " --dtype " + c.dtype + " " + c.sets;
            std::istringstream names(c.ins);
            for (std::string n; names >> n;) args += " --in " + n + "=" + g + c.golden + "/" + n + ".npy";
            Result r = normgen_cli(args + " --out " + out.string());
            INFO(r.out);
            REQUIRE(r.code == 0);
            HostTensor got = read_npy((out / "y.npy").string()), want = read_npy(g + c.golden + "/y.npy");
            REQUIRE(got.shape == want.shape);
            for (size_t i = 0; i < want.data.size(); ++i) {
                INFO("element " << i);
                REQUIRE(std::fabs(got.data[i] - want.data[i]) <= c.tol * (std::fabs(want.data[i]) + 1));
            }
            fs::remove_all(out);
        }
    }
}
