// The PyTorch float64 golden cases (tests/golden, made by PyTorch, an oracle normgen did not write): every case
// in cases.json is expressed by a catalog declaration, evaluated by the interpreter, and every golden
// output is reproduced within 1e-10 relative. The hand-written references reproduce the cases they
// cover too. A case the catalog cannot express, or a missing golden folder, is a failure, not a skip.
#include "dsl/checker.h"
#include "golden_cases.h"
#include "runtime/errors.h"
#include "runtime/npy.h"
#include "runtime/reference/interpreter.h"
#include "runtime/reference/layers.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace normgen;
namespace fs = std::filesystem;
using Vec = std::vector<double>;
using Shape = std::vector<int64_t>;

namespace {

using namespace normgen::golden;

std::string golden_dir() { return NORMGEN_GOLDEN_DIR; }
std::vector<GoldenCase> load_cases() { return normgen::golden::load_cases(golden_dir()); }
HostTensor read_golden(const GoldenCase &c, const std::string &tensor) { return normgen::golden::read_golden(golden_dir(), c, tensor); }
double case_atol(const GoldenCase &c) { return normgen::golden::case_atol(golden_dir(), c); }

const GoldenCase &find_case(const std::vector<GoldenCase> &cases, const std::string &name) {
    for (const GoldenCase &c : cases)
        if (c.name == name) return c;
    throw std::runtime_error("cases.json has no case '" + name + "'");
}

// Why a case cannot be evaluated through its mapping, or "" when it can. Collected, then reported.
struct Evaluation {
    std::string problem;
    TensorMap outputs;  // golden output names, golden shapes
};

Evaluation evaluate_case(const GoldenCase &c) {
    Evaluation ev;
    auto it = case_table().find(c.name);
    if (it == case_table().end()) {
        ev.problem = "no catalog declaration is mapped to it";
        return ev;
    }
    const Mapping &m = it->second;
    NormSpec spec = catalog(m.declaration);

    Overrides ov;
    for (const auto &[name, value] : c.consts) {
        auto o = m.overridden.find(name);
        if (o != m.overridden.end()) {
            ov[o->second] = value;
            continue;
        }
        const ConstInfo *k = spec.find_const(name);
        if (!k) {
            ev.problem = "golden const '" + name + "' has no counterpart in " + m.declaration + ".norm";
            return ev;
        }
        if (std::fabs(k->value - value) > 1e-15 * std::fabs(value)) {
            std::ostringstream os;
            os.precision(17);
            os << m.declaration << ".norm declares " << name << " = " << k->value << " but the golden case uses " << value;
            ev.problem = os.str();
            return ev;
        }
    }

    TensorMap in;
    for (const auto &[name, shape] : c.inputs) {
        HostTensor t = read_golden(c, name);
        if (t.shape != shape) {
            ev.problem = "input '" + name + "' has shape " + shape_text(t.shape) + ", cases.json says " + shape_text(shape);
            return ev;
        }
        if (!spec.find_tensor(name)) {
            ev.problem = "golden input '" + name + "' is not an input or parameter of " + m.declaration + ".norm";
            return ev;
        }
        if (m.batch_norm_1d && name == "x") {
            if (t.shape.size() != 2) {
                ev.problem = "a BatchNorm1d case needs x of rank 2";
                return ev;
            }
            t.shape = {t.shape[0], t.shape[1], 1, 1};
        }
        in[name] = t;
    }

    TensorMap out;
    try {
        ReferenceOptions options;
        options.storage = c.storage;
        out = evaluate_reference(spec, in, ov, options);
    } catch (const UserError &e) {
        ev.problem = std::string("the interpreter refused it: ") + e.what();
        return ev;
    }
    for (const auto &[name, shape] : c.outputs) {
        auto o = out.find(name);
        if (o == out.end()) {
            ev.problem = "golden output '" + name + "' is not an output of " + m.declaration + ".norm";
            return ev;
        }
        HostTensor t = o->second;
        if (m.batch_norm_1d && name == "y") t.shape = {t.shape.at(0), t.shape.at(1)};
        if (t.shape != shape) {
            ev.problem = "output '" + name + "' has shape " + shape_text(t.shape) + ", golden " + shape_text(shape);
            return ev;
        }
        ev.outputs[name] = t;
    }
    return ev;
}

Vec nhwc_to_nchw(const Vec &x, int64_t n, int64_t h, int64_t w, int64_t c) {
    Vec y(x.size());
    for (int64_t a = 0; a < n; ++a)
        for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t i = 0; i < h; ++i)
                for (int64_t j = 0; j < w; ++j) y[((a * c + ch) * h + i) * w + j] = x[((a * h + i) * w + j) * c + ch];
    return y;
}

double const_of(const GoldenCase &c, const std::string &name) {
    for (const auto &[k, v] : c.consts)
        if (k == name) return v;
    throw std::runtime_error("case " + c.name + " has no const " + name);
}

}  // namespace

TEST_CASE("the golden folder is there and cases.json parses", "[runtime][golden]") {
    INFO("NORMGEN_GOLDEN_DIR = " << golden_dir());
    REQUIRE(fs::is_directory(golden_dir()));
    REQUIRE(fs::is_regular_file(golden_dir() + "/cases.json"));
    std::vector<GoldenCase> cases = load_cases();
    CHECK(cases.size() >= 19);
    for (const GoldenCase &c : cases) {
        INFO("case " << c.name);
        CHECK(fs::is_directory(golden_dir() + "/" + c.name));
        CHECK(!c.outputs.empty());
        // Every file in the case's folder is a declared input or output, and vice versa.
        std::vector<std::string> declared, found;
        for (const auto &kv : c.inputs) declared.push_back(kv.first + ".npy");
        for (const auto &kv : c.outputs) declared.push_back(kv.first + ".npy");
        for (const auto &e : fs::directory_iterator(golden_dir() + "/" + c.name)) found.push_back(e.path().filename().string());
        std::sort(declared.begin(), declared.end());
        std::sort(found.begin(), found.end());
        CHECK(found == declared);
    }
}

TEST_CASE("the table of golden cases matches cases.json exactly", "[runtime][golden]") {
    std::vector<std::string> in_json, in_table;
    for (const GoldenCase &c : load_cases()) in_json.push_back(c.name);
    for (const auto &kv : case_table()) in_table.push_back(kv.first);
    std::sort(in_json.begin(), in_json.end());
    std::vector<std::string> unmapped, stale;
    std::set_difference(in_json.begin(), in_json.end(), in_table.begin(), in_table.end(), std::back_inserter(unmapped));
    std::set_difference(in_table.begin(), in_table.end(), in_json.begin(), in_json.end(), std::back_inserter(stale));
    std::string u, s;
    for (const auto &n : unmapped) u += " " + n;
    for (const auto &n : stale) s += " " + n;
    INFO("golden cases with no catalog declaration:" << u);
    INFO("table entries with no golden case:" << s);
    CHECK(unmapped.empty());
    CHECK(stale.empty());
}

TEST_CASE("the interpreter reproduces every golden case from its catalog declaration", "[runtime][golden]") {
    REQUIRE(fs::is_directory(golden_dir()));
    std::vector<GoldenCase> cases = load_cases();
    REQUIRE(!cases.empty());
    std::vector<std::string> inexpressible;
    for (const GoldenCase &c : cases) {
        INFO("case " << c.name);
        Evaluation ev = evaluate_case(c);
        if (!ev.problem.empty()) {
            inexpressible.push_back(c.name + ": " + ev.problem);
            continue;
        }
        for (const auto &[name, shape] : c.outputs) {
            INFO("output " << name);
            HostTensor want = read_golden(c, name);
            REQUIRE(want.shape == shape);
            for (double v : want.data) REQUIRE(std::isfinite(v));
            CHECK_GOLDEN(ev.outputs.at(name).data, want.data, case_atol(c));
        }
    }
    std::string list;
    for (const auto &p : inexpressible) list += "\n  " + p;
    INFO("golden cases the catalog could not express:" << list);
    CHECK(inexpressible.empty());
}

TEST_CASE("the comparison with golden outputs can fail", "[runtime][golden][negative]") {
    REQUIRE(fs::is_directory(golden_dir()));
    const std::vector<GoldenCase> cases = load_cases();
    const GoldenCase &c = find_case(cases, "layer_norm_eps_outside_root");
    // The declaration's own eps (1e-5) instead of the case's 0.01: visibly different.
    NormSpec spec = catalog("layer_norm_eps_outside_root");
    TensorMap in{{"x", read_golden(c, "x")}, {"weight", read_golden(c, "weight")}, {"bias", read_golden(c, "bias")}};
    Vec want = read_golden(c, "y").data;
    Diff wrong = compare(evaluate_reference(spec, in).at("y").data, want, 1e-12);
    CHECK_FALSE((wrong.size_ok && wrong.worst <= 1));
    Diff right = compare(evaluate_reference(spec, in, {{"eps", const_of(c, "eps")}}).at("y").data, want, 1e-12);
    CHECK((right.size_ok && right.worst <= 1));
    // eps inside the root (plain layer_norm) with the case's eps: a different layer, caught.
    Diff inside = compare(evaluate_reference(catalog("layer_norm"), in, {{"eps", const_of(c, "eps")}}).at("y").data, want, 1e-12);
    CHECK_FALSE((inside.size_ok && inside.worst <= 1));
    // A 1e-9 relative change in one element is caught at 1e-10.
    Vec bumped = want;
    bumped[7] *= 1 + 1e-9;
    CHECK(compare(bumped, want, 1e-12).failures == 1);
    // NaN never passes.
    Vec nan = want;
    nan[0] = NAN;
    CHECK_FALSE((compare(nan, want, 1e-12).worst <= 1));
}

TEST_CASE("the hand-written references reproduce the golden cases they cover", "[runtime][golden]") {
    REQUIRE(fs::is_directory(golden_dir()));
    std::vector<GoldenCase> cases = load_cases();
    auto g = [&](const GoldenCase &c, const std::string &t) { return read_golden(c, t); };
    std::vector<std::string> covered;

    for (const char *name : {"layer_norm", "layer_norm_no_affine_bf16_inputs", "layer_norm_large_mean", "layer_norm_last_two_axes"}) {
        const GoldenCase &c = find_case(cases, name);
        INFO("case " << name);
        HostTensor x = g(c, "x");
        int64_t d = 1;
        for (size_t i = 1; i < x.shape.size(); ++i) d *= x.shape[i];  // the normalized axes are all but the first
        int64_t rows = x.shape[0];
        bool affine = c.inputs.size() == 3;
        Vec w = affine ? g(c, "weight").data : Vec{}, b = affine ? g(c, "bias").data : Vec{};
        CHECK_GOLDEN(ref::layer_norm(x.data, rows, d, w, b, const_of(c, "eps")), g(c, "y").data, case_atol(c));
        covered.push_back(name);
    }
    {
        const GoldenCase &c = find_case(cases, "deepnorm");
        HostTensor x = g(c, "x"), f = g(c, "f");
        Vec h(x.data.size());
        for (size_t i = 0; i < h.size(); ++i) h[i] = const_of(c, "alpha") * x.data[i] + f.data[i];
        CHECK_GOLDEN(ref::layer_norm(h, x.shape[0], x.shape[1], g(c, "weight").data, g(c, "bias").data, const_of(c, "eps")),
                     g(c, "y").data, case_atol(c));
        covered.push_back(c.name);
    }
    for (const char *name : {"rms_norm", "rms_norm_gemma_bf16_inputs"}) {
        const GoldenCase &c = find_case(cases, name);
        INFO("case " << name);
        HostTensor x = g(c, "x");
        bool gemma = std::string(name).find("gemma") != std::string::npos;
        CHECK_GOLDEN(ref::rms_norm(x.data, x.shape[0], x.shape[1], g(c, "weight").data, const_of(c, "eps"), gemma), g(c, "y").data, case_atol(c));
        covered.push_back(name);
    }
    {
        const GoldenCase &c = find_case(cases, "fused_add_rms_norm");
        HostTensor x = g(c, "x"), r = g(c, "residual");
        Vec h(x.data.size());
        for (size_t i = 0; i < h.size(); ++i) h[i] = x.data[i] + r.data[i];
        CHECK_GOLDEN(h, g(c, "h").data, case_atol(c));
        CHECK_GOLDEN(ref::rms_norm(h, x.shape[0], x.shape[1], g(c, "weight").data, const_of(c, "eps")), g(c, "y").data, case_atol(c));
        covered.push_back(c.name);
    }
    {
        const GoldenCase &c = find_case(cases, "qk_norm");
        HostTensor q = g(c, "q");
        int64_t dh = q.shape.back();
        CHECK_GOLDEN(ref::rms_norm(q.data, q.numel() / dh, dh, g(c, "weight").data, const_of(c, "eps")), g(c, "y").data, case_atol(c));
        covered.push_back(c.name);
    }
    for (const char *name : {"batch_norm_nchw_train", "batch_norm_1d_train"}) {
        const GoldenCase &c = find_case(cases, name);
        INFO("case " << name);
        HostTensor x = g(c, "x");
        int64_t n = x.shape[0], ch = x.shape[1], hw = x.numel() / (n * ch);
        ref::BatchNormTrainResult r = ref::batch_norm_train(x.data, n, ch, hw, g(c, "weight").data, g(c, "bias").data,
                                                            g(c, "running_mean").data, g(c, "running_var").data,
                                                            const_of(c, "momentum"), const_of(c, "eps"));
        CHECK_GOLDEN(r.y, g(c, "y").data, case_atol(c));
        CHECK_GOLDEN(r.running_mean, g(c, "running_mean_out").data, case_atol(c));
        CHECK_GOLDEN(r.running_var, g(c, "running_var_out").data, case_atol(c));
        covered.push_back(name);
    }
    for (const char *name : {"batch_norm_nchw_eval", "batch_norm_1d_eval"}) {
        const GoldenCase &c = find_case(cases, name);
        INFO("case " << name);
        HostTensor x = g(c, "x");
        int64_t n = x.shape[0], ch = x.shape[1], hw = x.numel() / (n * ch);
        CHECK_GOLDEN(ref::batch_norm_eval(x.data, n, ch, hw, g(c, "weight").data, g(c, "bias").data, g(c, "running_mean").data,
                                          g(c, "running_var").data, const_of(c, "eps")),
                     g(c, "y").data, case_atol(c));
        covered.push_back(name);
    }
    {
        const GoldenCase &c = find_case(cases, "group_norm_nchw");
        HostTensor x = g(c, "x");
        int64_t n = x.shape[0], ch = x.shape[1], hw = x.shape[2] * x.shape[3];
        CHECK_GOLDEN(ref::group_norm(x.data, n, ch, hw, (int64_t)const_of(c, "groups"), g(c, "weight").data, g(c, "bias").data,
                                     const_of(c, "eps")),
                     g(c, "y").data, case_atol(c));
        covered.push_back(c.name);
    }
    {
        const GoldenCase &c = find_case(cases, "group_norm_nhwc");
        HostTensor x = g(c, "x");  // [n, h, w, c]
        int64_t n = x.shape[0], h = x.shape[1], w = x.shape[2], ch = x.shape[3];
        Vec y = ref::group_norm(nhwc_to_nchw(x.data, n, h, w, ch), n, ch, h * w, (int64_t)const_of(c, "groups"), g(c, "weight").data,
                                g(c, "bias").data, const_of(c, "eps"));
        CHECK_GOLDEN(y, nhwc_to_nchw(g(c, "y").data, n, h, w, ch), case_atol(c));
        // The README's claim: the same values as group_norm_nchw, stored channels-last.
        CHECK(nhwc_to_nchw(x.data, n, h, w, ch) == g(find_case(cases, "group_norm_nchw"), "x").data);
        covered.push_back(c.name);
    }
    {
        const GoldenCase &c = find_case(cases, "instance_norm");
        HostTensor x = g(c, "x");
        CHECK_GOLDEN(ref::instance_norm(x.data, x.shape[0], x.shape[1], x.shape[2] * x.shape[3], const_of(c, "eps")), g(c, "y").data, case_atol(c));
        covered.push_back(c.name);
    }
    {
        const GoldenCase &c = find_case(cases, "dyt");
        HostTensor x = g(c, "x");
        CHECK_GOLDEN(ref::dyt(x.data, x.shape[0], x.shape[1], g(c, "alpha").data.at(0), g(c, "weight").data, g(c, "bias").data),
                     g(c, "y").data, case_atol(c));
        covered.push_back(c.name);
    }
    // The rest have no hand-written reference (layers.h has no ScaleNorm, eps-outside-root LayerNorm,
    // Llama RMSNorm rounding, WeightNorm or PolyNorm); the interpreter test above covers them. Name
    // them, so a new case is a decision.
    std::vector<std::string> uncovered;
    for (const GoldenCase &c : cases)
        if (std::find(covered.begin(), covered.end(), c.name) == covered.end()) uncovered.push_back(c.name);
    std::sort(uncovered.begin(), uncovered.end());
    CHECK(uncovered ==
          std::vector<std::string>{"layer_norm_eps_outside_root", "poly_norm", "rms_norm_llama_bf16_inputs", "scale_norm", "weight_norm"});
}

// README: "Inputs were drawn in float32 (some rounded to bfloat16 first, as the case name says), so
// they are exact in f32, and in bf16 where stated". That matters for the tensors a kernel reads in a
// reduced storage type (the declaration's `storage` groups): the kernel's input must be the oracle's.
// (tests/golden/make_golden.py draws every input in float32; scale_norm's g is 1.75 and DyT's alpha
// 0.625, exact too.)
TEST_CASE("golden inputs a kernel stores in f32 / bf16 / f16 are exact in f32 (and in bf16 where stated)", "[runtime][golden]") {
    REQUIRE(fs::is_directory(golden_dir()));
    int checked = 0;
    for (const GoldenCase &c : load_cases()) {
        auto it = case_table().find(c.name);
        REQUIRE(it != case_table().end());
        NormSpec spec = catalog(it->second.declaration);
        bool bf16 = c.name.find("bf16") != std::string::npos;
        for (const auto &[name, shape] : c.inputs) {
            std::vector<DType> types = spec.storage_of(name);
            bool reduced = std::find(types.begin(), types.end(), DType::BF16) != types.end() ||
                           std::find(types.begin(), types.end(), DType::F16) != types.end();
            if (!reduced) continue;
            INFO("case " << c.name << ", input " << name);
            ++checked;
            for (double v : read_golden(c, name).data) {
                REQUIRE((double)(float)v == v);
                if (bf16) {  // the low 16 bits of the float are zero
                    float f = (float)v;
                    uint32_t bits;
                    std::memcpy(&bits, &f, 4);
                    REQUIRE((bits & 0xffffu) == 0u);
                }
            }
        }
    }
    CHECK(checked >= 19);
}
