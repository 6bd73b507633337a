// The C++ builder API produces the same NormSpec as the text: same canonical print, same facts.
#include "dsl/builder.h"
#include "dsl/checker.h"
#include "dsl/printer.h"

#include <catch2/catch.hpp>

using namespace normgen;

namespace {

std::string catalog_print(const std::string &name) {
    return print_norm(load_norm_file(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/" + name + ".norm"));
}

const std::vector<DType> kAll = {DType::F32, DType::BF16, DType::F16};

}  // namespace

TEST_CASE("builder: LayerNorm equals the catalog's", "[dsl][builder]") {
    NormBuilder b("layer_norm");
    auto x = b.input("x", {"rows", "d"});
    auto w = b.param("weight", {"d"});
    auto bias = b.param("bias", {"d"});
    auto eps = b.constant("eps", 1e-5);
    auto mu = b.let("mu", mean(x, {"d"}));
    auto rstd = b.let("rstd", rsqrt(var(x, {"d"}) + eps));
    b.output("y", (x - mu) * rstd * w + bias);
    b.mark_output("mu", optional_output());
    b.mark_output("rstd", optional_output());
    b.accumulate(DType::F32);
    b.variance(VarianceAlgorithm::TwoPass);
    b.storage({"x", "y"}, kAll);
    NormSpec s = b.build();
    CHECK(print_norm(s) == catalog_print("layer_norm"));
    CHECK(s.stages.size() == 1);
    CHECK(s.eps_uses().at(0).placement == EpsPlacement::InsideRoot);
}

TEST_CASE("builder: the catalog's layers, printed identically", "[dsl][builder]") {
    SECTION("rms_norm_gemma") {
        NormBuilder b("rms_norm_gemma");
        auto x = b.input("x", {"rows", "d"});
        auto w = b.param("weight", {"d"});
        auto eps = b.constant("eps", 1e-6);
        auto ms = b.let("ms", mean(x * x, {"d"}));
        b.output("y", x * rsqrt(ms + eps) * (1 + w));
        b.accumulate(DType::F32);
        b.storage({"x", "y", "weight"}, kAll);
        CHECK(print_norm(b.build()) == catalog_print("rms_norm_gemma"));
    }
    SECTION("batch_norm_train") {
        NormBuilder b("batch_norm_train");
        auto x = b.input("x", {"n", "c", "h", "w"});
        auto rm = b.input("running_mean", {"c"});
        auto rv = b.input("running_var", {"c"});
        auto w = b.param("weight", {"c"});
        auto bias = b.param("bias", {"c"});
        auto eps = b.constant("eps", 1e-5);
        auto momentum = b.constant("momentum", 0.1);
        auto mu = b.let("mu", mean(x, {"n", "h", "w"}));
        auto v = b.let("v", var(x, {"n", "h", "w"}));
        auto rstd = b.let("rstd", rsqrt(v + eps));
        b.output("y", (x - mu) * rstd * w + bias);
        auto m = b.let("m", count({"n", "h", "w"}));
        b.output("running_mean_out", (1 - momentum) * rm + momentum * mu, updates_input("running_mean"));
        b.output("running_var_out", (1 - momentum) * rv + momentum * v * m / (m - 1), updates_input("running_var"));
        b.mark_output("mu", optional_output());
        b.mark_output("rstd", optional_output());
        b.accumulate(DType::F32);
        b.variance(VarianceAlgorithm::TwoPass);
        b.storage({"x", "y"}, kAll);
        CHECK(print_norm(b.build()) == catalog_print("batch_norm_train"));
    }
    SECTION("group_norm_nhwc") {
        NormBuilder b("group_norm_nhwc");
        auto x = b.input("x", {"n", "h", "w", split("c", {"g", "cg"})});
        b.axis("g", 32);
        auto w = b.param("weight", {"c"});
        auto bias = b.param("bias", {"c"});
        auto eps = b.constant("eps", 1e-5);
        auto mu = b.let("mu", mean(x, {"cg", "h", "w"}));
        auto rstd = b.let("rstd", rsqrt(var(x, {"cg", "h", "w"}) + eps));
        b.output("y", (x - mu) * rstd * w + bias);
        b.mark_output("mu", optional_output());
        b.mark_output("rstd", optional_output());
        b.accumulate(DType::F32);
        b.variance(VarianceAlgorithm::TwoPass);
        b.storage({"x", "y"}, kAll);
        CHECK(print_norm(b.build()) == catalog_print("group_norm_nhwc"));
    }
    SECTION("dyt") {
        NormBuilder b("dyt");
        auto x = b.input("x", {"rows", "d"});
        auto alpha = b.param("alpha", {});
        auto w = b.param("weight", {"d"});
        auto bias = b.param("bias", {"d"});
        b.output("y", w * tanh(alpha * x) + bias);
        b.storage({"x", "y"}, kAll);
        CHECK(print_norm(b.build()) == catalog_print("dyt"));
    }
    SECTION("scale_norm") {
        NormBuilder b("scale_norm");
        auto x = b.input("x", {"rows", "d"});
        auto g = b.param("g", {});
        auto eps = b.constant("eps", 1e-5);
        auto n2 = b.let("norm2", sqrt(sum(x * x, {"d"})));
        b.output("y", g * x / max(n2, eps));
        b.accumulate(DType::F32);
        b.storage({"x", "y"}, kAll);
        CHECK(print_norm(b.build()) == catalog_print("scale_norm"));
    }
    SECTION("sandwich_norm") {
        NormBuilder b("sandwich_norm");
        auto x = b.input("x", {"rows", "d"});
        auto f = b.input("f", {"rows", "d"});
        auto pw = b.param("post_weight", {"d"});
        auto qw = b.param("pre_weight", {"d"});
        auto eps = b.constant("eps", 1e-6);
        auto ms_f = b.let("ms_f", mean(f * f, {"d"}));
        auto h = b.output("h", x + f * rsqrt(ms_f + eps) * pw);
        auto ms_h = b.let("ms_h", mean(h * h, {"d"}));
        b.output("y", h * rsqrt(ms_h + eps) * qw);
        b.accumulate(DType::F32);
        b.storage({"x", "f", "h", "y"}, kAll);
        CHECK(print_norm(b.build()) == catalog_print("sandwich_norm"));
    }
}

TEST_CASE("builder: mistakes get the same diagnostics as text", "[dsl][builder]") {
    NormBuilder b("bad");
    auto x = b.input("x", {"rows", "d"});
    b.output("y", x - mean(x, {"q"}));
    try {
        b.build();
        FAIL("accepted");
    } catch (const DiagnosticError &e) {
        CHECK(e.diagnostics().at(0).message == "unknown axis 'q'");
        CHECK_FALSE(e.diagnostics().at(0).loc.valid());
    }
}
