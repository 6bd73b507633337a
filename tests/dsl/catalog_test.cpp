// The catalog: every file is valid, prints canonically, round-trips, and records the facts a
// backend needs (stages and their axes, eps placement, affine terms, precisions).
#include "dsl/checker.h"
#include "dsl/printer.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

using namespace normgen;
namespace fs = std::filesystem;

namespace {

std::string catalog(const std::string &name) { return std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/" + name + ".norm"; }

std::vector<std::string> catalog_files() {
    std::vector<std::string> files;
    for (const auto &e : fs::directory_iterator(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog"))
        if (e.path().extension() == ".norm") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    return files;
}

std::vector<std::string> axis_names(const NormSpec &s, const AxisSet &ids) {
    std::vector<std::string> r;
    for (AxisId a : ids) r.push_back(s.axes[a].name);
    return r;
}

using Names = std::vector<std::string>;

}  // namespace

TEST_CASE("the catalog holds the layers the design promises", "[dsl][catalog]") {
    Names expected = {"batch_norm_eval", "batch_norm_train", "deepnorm", "dyt", "fused_add_rms_norm", "group_norm_nchw",
                      "group_norm_nhwc", "instance_norm", "layer_norm", "layer_norm_eps_outside_root",
                      "layer_norm_last_two_axes", "layer_norm_no_affine", "layer_norm_weight_only", "poly_norm", "qk_norm",
                      "rms_norm", "rms_norm_gemma", "rms_norm_llama", "sandwich_norm", "scale_norm", "weight_norm"};
    Names found;
    for (const auto &f : catalog_files()) found.push_back(fs::path(f).stem().string());
    CHECK(found == expected);
}

TEST_CASE("print(parse(print(s))) == print(s) for every catalog file", "[dsl][catalog][printer]") {
    for (const auto &f : catalog_files()) {
        SECTION(f) {
            NormSpec s = load_norm_file(f);
            CHECK(s.name == fs::path(f).stem().string());
            std::string once = print_norm(s);
            std::string twice = print_norm(load_norm_text("printed.norm", once));
            CHECK(once == twice);
        }
    }
}

TEST_CASE("numbers print as the shortest text that reads back exactly", "[dsl][printer]") {
    CHECK(format_number(1e-5) == "1e-05");
    CHECK(format_number(0.1) == "0.1");
    CHECK(format_number(2) == "2");
    CHECK(format_number(2.213363839400643) == "2.213363839400643");
    CHECK(std::strtod(format_number(1.0 / 3.0).c_str(), nullptr) == 1.0 / 3.0);
}

TEST_CASE("the printer keeps the meaning of operator precedence", "[dsl][printer]") {
    NormSpec s = load_norm_text("t.norm", "norm p(x: [d]) -> y {\n  y = (x - (x - 1)) / (x / (2 * x)) - -x * (1 + x)\n}");
    CHECK(print_expr(s, *s.values[0].expr) == "(x - (x - 1)) / (x / (2 * x)) - -x * (1 + x)");
    NormSpec t = load_norm_text("t.norm", "norm p(x: [d]) -> y {\n  y = ((x * 2) + 1) - (x + 1)\n}");
    CHECK(print_expr(t, *t.values[0].expr) == "x * 2 + 1 - (x + 1)");
}

TEST_CASE("LayerNorm records one stage over d, eps inside the root, weight and bias", "[dsl][catalog]") {
    NormSpec s = load_norm_file(catalog("layer_norm"));
    REQUIRE(s.stages.size() == 1);
    CHECK(axis_names(s, s.reduction_axes_per_stage()[0]) == Names{"d"});
    CHECK(s.stages[0].reductions.size() == 2);  // mean and var in the same stage
    auto eps = s.eps_uses();
    REQUIRE(eps.size() == 1);
    CHECK(eps[0].name == "eps");
    CHECK(eps[0].value == 1e-5);
    CHECK(eps[0].placement == EpsPlacement::InsideRoot);
    auto affine = s.affine_terms();
    REQUIRE(affine.size() == 2);
    CHECK(affine[0].param == "weight");
    CHECK(affine[0].role == "scale");
    CHECK(affine[1].param == "bias");
    CHECK(affine[1].role == "shift");
    CHECK(s.accumulate == DType::F32);
    CHECK(s.variance == VarianceAlgorithm::TwoPass);
    CHECK(s.storage_of("x") == std::vector<DType>{DType::F32, DType::BF16, DType::F16});
    CHECK(s.storage_of("weight") == std::vector<DType>{DType::F32});
    REQUIRE(s.outputs.size() == 3);
    CHECK_FALSE(s.outputs[0].optional);
    CHECK(s.outputs[1].optional);
    CHECK(s.outputs[1].name == "mu");
    CHECK(axis_names(s, s.outputs[1].axes) == Names{"rows"});
}

TEST_CASE("eps placement: outside the root and as a clamp", "[dsl][catalog]") {
    auto out = load_norm_file(catalog("layer_norm_eps_outside_root")).eps_uses();
    REQUIRE(out.size() == 1);
    CHECK(out[0].placement == EpsPlacement::OutsideRoot);
    CHECK(out[0].where == "sigma + eps");
    auto clamp = load_norm_file(catalog("scale_norm")).eps_uses();
    REQUIRE(clamp.size() == 1);
    CHECK(clamp[0].placement == EpsPlacement::Clamp);
    CHECK(clamp[0].where == "max(norm2, eps)");
    CHECK(load_norm_file(catalog("dyt")).eps_uses().empty());
}

TEST_CASE("affine terms: Gemma's (1 + weight) and DyT's alpha inside tanh", "[dsl][catalog]") {
    auto gemma = load_norm_file(catalog("rms_norm_gemma")).affine_terms();
    REQUIRE(gemma.size() == 1);
    CHECK(gemma[0].role == "offset scale (1 + weight)");
    auto dyt = load_norm_file(catalog("dyt")).affine_terms();
    REQUIRE(dyt.size() == 3);
    CHECK(dyt[0].param == "weight");
    CHECK(dyt[0].role == "scale");
    CHECK(dyt[1].param == "alpha");
    CHECK(dyt[1].role == "input scale (inside a nonlinearity)");
    CHECK(dyt[2].param == "bias");
    CHECK(dyt[2].role == "shift");
}

TEST_CASE("reduction axes per layer", "[dsl][catalog]") {
    struct Expect {
        const char *file;
        std::vector<Names> stages;
    };
    std::vector<Expect> expect = {
        {"batch_norm_train", {{"n", "h", "w"}}},
        {"batch_norm_eval", {}},
        {"dyt", {}},
        {"layer_norm_last_two_axes", {{"s", "d"}}},
        {"group_norm_nchw", {{"cg", "h", "w"}}},
        {"group_norm_nhwc", {{"h", "w", "cg"}}},  // declaration order of the atomic axes
        {"instance_norm", {{"h", "w"}}},
        {"qk_norm", {{"dh"}}},
        {"sandwich_norm", {{"d"}, {"d"}}},
        {"fused_add_rms_norm", {{"d"}}},
    };
    for (const auto &e : expect) {
        SECTION(e.file) {
            NormSpec s = load_norm_file(catalog(e.file));
            auto per = s.reduction_axes_per_stage();
            REQUIRE(per.size() == e.stages.size());
            for (size_t i = 0; i < per.size(); ++i) CHECK(axis_names(s, per[i]) == e.stages[i]);
        }
    }
}

TEST_CASE("GroupNorm's split view: c = (g, cg), g fixed, y laid out like x", "[dsl][catalog]") {
    for (const char *f : {"group_norm_nchw", "group_norm_nhwc"}) {
        NormSpec s = load_norm_file(catalog(f));
        AxisId c = s.find_axis("c");
        REQUIRE(c >= 0);
        REQUIRE(s.axes[c].is_split());
        CHECK(s.axes[s.find_axis("g")].fixed_extent == 32);
        const OutputInfo &y = s.outputs[0];
        CHECK(y.dims == s.tensors[0].dims);
        // The statistics live on (n, g).
        CHECK(axis_names(s, s.stages[0].reductions[0]->axes) == Names{"n", "g"});
    }
}

TEST_CASE("BatchNorm training: running statistics update their inputs in place", "[dsl][catalog]") {
    NormSpec s = load_norm_file(catalog("batch_norm_train"));
    const OutputInfo *rm = s.find_output("running_mean_out");
    const OutputInfo *rv = s.find_output("running_var_out");
    REQUIRE(rm);
    REQUIRE(rv);
    CHECK(rm->updates == "running_mean");
    CHECK(rv->updates == "running_var");
    CHECK(s.variance == VarianceAlgorithm::TwoPass);
    CHECK(s.find_output("mu")->optional);
    CHECK(s.find_output("rstd")->optional);
}

TEST_CASE("sandwich norm has two dependent stages; fused add writes h", "[dsl][catalog]") {
    NormSpec s = load_norm_file(catalog("sandwich_norm"));
    REQUIRE(s.stages.size() == 2);
    CHECK(s.stages[0].names == Names{"ms_f"});
    CHECK(s.stages[1].names == Names{"ms_h"});
    NormSpec f = load_norm_file(catalog("fused_add_rms_norm"));
    REQUIRE(f.outputs.size() == 2);
    CHECK(f.outputs[0].name == "h");
    CHECK(f.stages.size() == 1);
}

// "No input crashes the front end": mutate every catalog file at random (byte edits, deletions,
// insertions of syntax characters, truncations) and require a clean accept or a DiagnosticError.
TEST_CASE("random mutations of the catalog never crash the front end", "[dsl][robustness]") {
    std::mt19937 rng(20261129);
    const std::string alphabet = "()[]{},:=+-*/|?#\n x0.5e_abcdgnorm";
    int diagnosed = 0, total = 0;
    for (const auto &f : catalog_files()) {
        std::ifstream in(f);
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        for (int trial = 0; trial < 150; ++trial) {
            std::string m = text;
            int edits = 1 + (int)(rng() % 4);
            for (int k = 0; k < edits && !m.empty(); ++k) {
                size_t pos = rng() % m.size();
                switch (rng() % 4) {
                case 0: m[pos] = alphabet[rng() % alphabet.size()]; break;
                case 1: m.erase(pos, 1 + rng() % 8); break;
                case 2: m.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
                case 3: m.resize(pos); break;
                }
            }
            ++total;
            try {
                load_norm_text("mutant.norm", m);
            } catch (const DiagnosticError &e) {
                ++diagnosed;
                // Every diagnostic points inside the file.
                for (const auto &d : e.diagnostics()) CHECK(d.loc.line >= 1);
            }
        }
    }
    CHECK(diagnosed > total / 2);  // the mutations really do break things
}
