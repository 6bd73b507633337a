// Gradients (dsl/grad.h): the backward declaration `normgen grad` derives, evaluated by the float64
// interpreter, against (a) finite differences of the float64 forward along random
// directions, for every catalog layer (saved statistics and recomputed) and for random declarations
// from the builder, and (b) PyTorch autograd on tests/golden/backward/. Plus the form of the
// result (checked, canonical, the classic LayerNorm sweeps) and the refusals.
#include "dsl/checker.h"
#include "dsl/grad.h"
#include "dsl/printer.h"
#include "examples/pre_post_ln/model.h"
#include "golden_cases.h"
#include "random_norm.h"
#include "runtime/errors.h"
#include "runtime/npy.h"
#include "runtime/random_inputs.h"
#include "runtime/reference/interpreter.h"
#include "runtime/shapes.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace normgen;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> catalog_files() {
    std::vector<std::string> v;
    for (const auto &e : fs::directory_iterator(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog"))
        if (e.path().extension() == ".norm") v.push_back(e.path().string());
    std::sort(v.begin(), v.end());
    return v;
}

uint64_t seed() {
    static const uint64_t s = [] {
        if (const char *e = std::getenv("NORMGEN_TEST_SEED")) return (uint64_t)std::strtoull(e, nullptr, 10);
        return ((uint64_t)std::random_device{}() << 32) ^ std::random_device{}();
    }();
    return s;
}

const ReferenceOptions kExact{StorageMap{}, Rounding::Ignored};

double dot(const std::vector<double> &a, const std::vector<double> &b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

std::vector<double> normal(size_t n, std::mt19937_64 &rng) {
    std::normal_distribution<double> N(0, 1);
    std::vector<double> v(n);
    for (double &x : v) x = N(rng);
    return v;
}

std::vector<const OutputInfo *> differentiable_outputs(const NormSpec &f) {
    std::vector<const OutputInfo *> v;
    for (const OutputInfo &o : f.outputs)
        if (!o.optional && o.updates.empty()) v.push_back(&o);
    return v;
}

// The backward's inputs: the forward's inputs and parameters, saved statistics from the forward's
// own outputs, and the upstream gradients.
TensorMap backward_inputs(const NormSpec &b, const TensorMap &in, const TensorMap &fwd_out, const TensorMap &upstream) {
    TensorMap m;
    for (const TensorInfo &t : b.tensors) {
        if (in.count(t.name)) m[t.name] = in.at(t.name);
        else if (upstream.count(t.name)) m[t.name] = upstream.at(t.name);
        else if (fwd_out.count(t.name)) m[t.name] = fwd_out.at(t.name);
        else FAIL("backward input '" << t.name << "' has no source");
    }
    return m;
}

// The gradient of tensor `t` assembled from the backward's outputs (d_t, or d_t_<i> per element
// of its leading indexed axis); empty when it has none.
std::vector<double> assembled(const TensorMap &grads, const std::string &t, const HostTensor &shape_of) {
    auto it = grads.find("d_" + t);
    if (it != grads.end()) return it->second.data;
    std::vector<double> g;
    const int64_t n = shape_of.numel();
    const int64_t lead = shape_of.shape.empty() ? 1 : shape_of.shape[0];
    for (int64_t i = 0; i < lead; ++i) {
        auto e = grads.find("d_" + t + "_" + std::to_string(i));
        const int64_t slice = n / lead;
        if (e == grads.end()) {
            g.insert(g.end(), (size_t)slice, 0.0);  // an element no output reads
            continue;
        }
        REQUIRE((int64_t)e->second.data.size() == slice);
        g.insert(g.end(), e->second.data.begin(), e->second.data.end());
    }
    bool any = false;
    for (const auto &[name, v] : grads) any |= name.rfind("d_" + t + "_", 0) == 0;
    return any ? g : std::vector<double>{};
}

// (a): for each input and parameter, two random directions; the directional derivative of
// L = sum over outputs <out, d_out> by finite differences against <gradient, direction>: the
// gradient must lie within the range of the forward and the backward difference, (L(x + h) - L(x))
// / h and (L(x) - L(x - h)) / h, and of their extrapolations from steps h and 2h (2 D(h) - D(2h),
// O(h^2)), widened by the tolerance. For a smooth L the one-sided differences bracket the derivative
// (their mean, the central difference, is off by h^2 L''' / 6: up to 7e-5 of the derivative on
// random declarations near a pole, such as the rsqrt of a variance over 2 values, beyond the 1e-6
// tolerance); where the step crosses a kink (abs, max) the extrapolated one-sided differences are
// the two sides' slopes, one of which the gradient takes. (A gradient 1e-4 off still fails at least
// half of the catalog layers' directions, on 200 of 201 seeds.) Tensors without a gradient must not
// move L. `corrupt` scales every gradient by 1 + corrupt (the check must then fail). Returns the
// directions checked and a line per failure.
struct FdResult {
    int checked = 0;
    std::vector<std::string> failures;
};

FdResult finite_differences(const NormSpec &f, const GradOptions &opts, uint64_t salt, double corrupt = 0) {
    GradResult g = differentiate(f, opts);
    std::mt19937_64 rng(seed() ^ salt);
    AxisExtents ext = choose_extents(f, {}, 3);
    TensorMap in = random_inputs(f, ext, RandomInputOptions{0, seed() ^ (salt * 7919)});
    TensorMap fo = evaluate_reference(f, in, {}, kExact);
    TensorMap up;
    for (const OutputInfo *o : differentiable_outputs(f)) {
        const HostTensor &y = fo.at(o->name);
        up["d_" + o->name] = HostTensor{y.shape, normal((size_t)y.numel(), rng)};
    }
    auto loss = [&](const TensorMap &x) {
        TensorMap out = evaluate_reference(f, x, {}, kExact);
        double s = 0;
        for (const OutputInfo *o : differentiable_outputs(f)) s += dot(out.at(o->name).data, up.at("d_" + o->name).data);
        return s;
    };
    TensorMap grads = evaluate_reference(g.spec, backward_inputs(g.spec, in, fo, up), {}, kExact);
    const double l0 = loss(in);
    FdResult r;
    for (const TensorInfo &t : f.tensors) {
        const HostTensor &x = in.at(t.name);
        std::vector<double> grad = assembled(grads, t.name, x);
        const bool none = grad.empty();
        for (double &v : grad) v *= 1 + corrupt;
        double scale = 0;
        for (double v : x.data) scale = std::max(scale, std::fabs(v));
        const double h = 1e-6 * std::max(1.0, scale);
        for (int k = 0; k < 2; ++k) {
            std::vector<double> dir = normal((size_t)x.numel(), rng);
            auto loss_at = [&](double step) {
                TensorMap moved = in;
                for (size_t i = 0; i < dir.size(); ++i) moved[t.name].data[i] += step * dir[i];
                return loss(moved);
            };
            const double lp = loss_at(h), lm = loss_at(-h), lp2 = loss_at(2 * h), lm2 = loss_at(-2 * h);
            const double fwd = (lp - l0) / h, bwd = (l0 - lm) / h, fd = (lp - lm) / (2 * h);
            const double fwd_x = 2 * fwd - (lp2 - l0) / (2 * h), bwd_x = 2 * bwd - (l0 - lm2) / (2 * h);
            double an = 0, mag = 0;
            if (!none) {
                an = dot(grad, dir);
                for (size_t i = 0; i < dir.size(); ++i) mag += std::fabs(grad[i] * dir[i]);
            }
            ++r.checked;
            const double tol = 1e-6 * mag + 1e-6 * std::max(1.0, std::fabs(fd));
            if (!(an >= std::min({fwd, bwd, fwd_x, bwd_x}) - tol && an <= std::max({fwd, bwd, fwd_x, bwd_x}) + tol)) {
                std::ostringstream os;
                os.precision(12);
                os << f.name << (opts.recompute ? " (recomputed)" : "") << ": d_" << t.name << (none ? " (no gradient)" : "")
                   << " along a random direction: finite differences " << bwd << " (backward), " << fwd << " (forward), gradient "
                   << an << " (seed " << seed() << ")\n"
                   << g.text;
                r.failures.push_back(os.str());
            }
        }
    }
    return r;
}

void check_fd(const NormSpec &f, const GradOptions &opts, uint64_t salt, int &checked) {
    FdResult r = finite_differences(f, opts, salt);
    for (const std::string &m : r.failures) FAIL_CHECK(m);
    checked += r.checked;
}

}  // namespace

TEST_CASE("every catalog layer has a backward that checks and prints canonically", "[grad]") {
    for (const std::string &file : catalog_files()) {
        NormSpec f = load_norm_file(file);
        INFO(file);
        GradResult g = differentiate(f);
        CHECK(g.spec.name == f.name + "_grad");
        // The printed text is the canonical text of the checked declaration, with a header.
        CHECK(g.text.find(print_norm(g.spec)) != std::string::npos);
        CHECK(g.text.rfind("# The backward of " + f.name + " (" + fs::path(file).filename().string(), 0) == 0);
        CHECK(!g.gradients.empty());
        for (const std::string &u : g.upstream) CHECK(u.rfind("d_", 0) == 0);
        // Every gradient is an output, and nothing else is.
        CHECK(g.spec.outputs.size() == g.gradients.size());
    }
}

TEST_CASE("LayerNorm's backward is the classic form: saved mu and rstd, two reductions per row in one stage", "[grad]") {
    NormSpec f = load_norm_file(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/layer_norm.norm");
    GradResult g = differentiate(f);
    CHECK(g.saved == std::vector<std::string>{"mu", "rstd"});
    CHECK(g.recomputed.empty());
    CHECK(g.gradients == std::vector<std::string>{"d_x", "d_weight", "d_bias"});
    CHECK(g.upstream == std::vector<std::string>{"d_y"});
    // d_x: one stage of reductions over d (sum(g) and sum(g * (x - mu))); d_weight, d_bias over rows.
    std::vector<AxisSet> stages = g.spec.reduction_axes_per_stage();
    REQUIRE(stages.size() == 1);
    int over_d = 0, over_rows = 0;
    for (const Stage &s : g.spec.stages)
        for (const NodePtr &r : s.reductions) (g.spec.axes[(size_t)r->over.at(0)].name == "d" ? over_d : over_rows)++;
    CHECK(over_d == 2);
    CHECK(over_rows == 2);
    // Recomputing instead of reading the saved statistics adds the forward's two-pass stages.
    GradResult r = differentiate(f, GradOptions{true});
    CHECK(r.saved.empty());
    CHECK(r.spec.reduction_axes_per_stage().size() == 2);  // mu and var (two-pass inside var), then the sums
}

TEST_CASE("GroupNorm's backward: saved statistics, per-channel sums over (h, w) that the group and parameter sums reuse", "[grad]") {
    // sum(w * d_y, over: cg, h, w) is taken as sum(w * sum(d_y, over: h, w), over: cg), and d_bias
    // as the sum over n of that per-channel sum: every sweep over x and d_y is one sum over (h, w).
    auto over_names = [](const GradResult &g) {
        std::multiset<std::string> out;
        for (const Stage &s : g.spec.stages)
            for (const NodePtr &r : s.reductions) {
                std::string n;
                for (AxisId a : r->over) n += (n.empty() ? "" : ",") + g.spec.axes[(size_t)a].name;
                out.insert(n);
            }
        return out;
    };
    auto load = [](const std::string &layer) { return load_norm_file(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/" + layer + ".norm"); };
    GradResult nchw = differentiate(load("group_norm_nchw"));
    CHECK(nchw.saved == std::vector<std::string>{"mu", "rstd"});
    CHECK(nchw.recomputed.empty());
    CHECK(over_names(nchw) == std::multiset<std::string>{"h,w", "h,w", "cg", "cg", "n", "n"});
    // NHWC the same: saved statistics read, its parameter gradients summed over n only.
    GradResult nhwc = differentiate(load("group_norm_nhwc"));
    CHECK(nhwc.saved == std::vector<std::string>{"mu", "rstd"});
    CHECK(over_names(nhwc) == std::multiset<std::string>{"h,w", "h,w", "cg", "cg", "n", "n"});
    // DyT's d_alpha stays one sum over rows and d (summing over the rows first would make it a
    // column sum of its own).
    CHECK(over_names(differentiate(load("dyt"))).count("rows,d") == 1);
}

TEST_CASE("BatchNorm training: no gradient for the running statistics, which reach only `updates` outputs", "[grad]") {
    NormSpec f = load_norm_file(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/batch_norm_train.norm");
    GradResult g = differentiate(f);
    CHECK(g.no_gradient == std::vector<std::string>{"running_mean", "running_var"});
    CHECK(g.gradients == std::vector<std::string>{"d_x", "d_weight", "d_bias"});
    CHECK(g.upstream == std::vector<std::string>{"d_y"});
}

TEST_CASE("backward declarations agree with finite differences of the forward: the catalog", "[grad][fd]") {
    int n = 0;
    uint64_t salt = 0;
    for (const std::string &file : catalog_files()) {
        NormSpec f = load_norm_file(file);
        for (bool recompute : {false, true}) check_fd(f, GradOptions{recompute}, ++salt, n);
    }
    CHECK(n > 100);
}

TEST_CASE("the finite-difference check fails on a gradient one percent off", "[grad][fd][negative]") {
    for (const char *layer : {"layer_norm", "rms_norm", "batch_norm_train", "dyt"}) {
        NormSpec f = load_norm_file(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/" + layer + ".norm");
        FdResult r = finite_differences(f, GradOptions{}, 77, 0.01);
        INFO(layer);
        CHECK(r.failures.size() * 2 >= (size_t)r.checked);  // every direction with a gradient fails
    }
}

TEST_CASE("backward declarations agree with finite differences of the forward: random declarations", "[grad][fd]") {
    int n = 0;
    for (uint64_t i = 0; i < 40; ++i) {
        NormSpec f = normgen::test::random_norm(seed() * 31 + i, "rnd_" + std::to_string(i));
        INFO("random declaration " << i << " of seed " << seed() << ":\n" << print_norm(f));
        check_fd(f, GradOptions{i % 2 == 1}, 1000 + i, n);
    }
    CHECK(n >= 80);
}

TEST_CASE("backward declarations reproduce PyTorch autograd on the golden cases", "[grad][golden]") {
    using namespace normgen::golden;
    const std::string dir = std::string(NORMGEN_GOLDEN_DIR) + "/backward";
    REQUIRE(fs::is_regular_file(dir + "/cases.json"));
    std::vector<GoldenCase> cases = load_cases(dir);
    REQUIRE(cases.size() >= 19);
    int compared = 0;
    for (const GoldenCase &c : cases) {
        INFO("case " << c.name);
        if (c.name == "pre_post_ln") continue;  // the model of check [d]: its own test below
        auto m = case_table().find(c.name);
        REQUIRE(m != case_table().end());
        NormSpec f = catalog(m->second.declaration);
        Overrides ov;
        for (const auto &[name, value] : c.consts) {
            auto o = m->second.overridden.find(name);
            if (o != m->second.overridden.end()) ov[o->second] = value;
        }
        for (bool recompute : {false, true}) {
            GradResult g = differentiate(f, GradOptions{recompute});
            INFO(g.text);
            TensorMap in, up;
            for (const auto &[name, shape] : c.inputs) {
                HostTensor t = read_golden(dir, c, name);
                if (m->second.batch_norm_1d && t.shape.size() == 2) t.shape = {t.shape[0], t.shape[1], 1, 1};
                (name.rfind("d_", 0) == 0 ? up : in)[name] = t;
            }
            // A case that stands for reduced storage types (the Llama RMSNorm in bf16) keeps its
            // declared rounding points: d_weight reads the rounded value.
            const ReferenceOptions options = c.storage.empty() ? kExact : ReferenceOptions{c.storage, Rounding::AsDeclared};
            TensorMap fo = evaluate_reference(f, in, ov, options);
            TensorMap grads = evaluate_reference(g.spec, backward_inputs(g.spec, in, fo, up), ov, options);
            // An indexed parameter (PolyNorm's weight[0], weight[1], ...) has one gradient per
            // element (d_weight_0, ...); PyTorch's is the whole tensor's.
            for (const auto &[name, shape] : c.outputs) {
                if (grads.count(name) || !grads.count(name + "_0")) continue;
                HostTensor whole{shape, {}};
                for (int i = 0; grads.count(name + "_" + std::to_string(i)); ++i) whole.data.push_back(grads.at(name + "_" + std::to_string(i)).data.at(0));
                grads[name] = whole;
            }
            for (const auto &[name, shape] : c.outputs) {
                INFO("gradient " << name << (recompute ? " (statistics recomputed)" : " (saved statistics)"));
                HostTensor want = read_golden(dir, c, name);
                REQUIRE(grads.count(name));
                double big = 0;
                for (double v : want.data) big = std::max(big, std::fabs(v));
                // PyTorch sums in another order: 1e-10 relative, and 1e-12 of the gradient's scale.
                const double atol = std::max(case_atol(dir, c), 1e-12 * big);
                CHECK_GOLDEN(grads.at(name).data, want.data, atol);
                // The comparison can fail: the same gradient 1e-8 off is caught.
                std::vector<double> off = grads.at(name).data;
                for (double &v : off) v *= 1 + 1e-8;
                if (big > 0) CHECK(compare(off, want.data, atol).worst > 1);
                ++compared;
            }
        }
    }
    CHECK(compared >= 80);
}

// The seeds' check [d] (golden/backward/pre_post_ln) on the oracle: the model of
// examples/pre_post_ln/model.h with the LayerNorm forward by the catalog declaration and its
// backward by the `normgen grad` declaration, both on the float64 interpreter. The blocks'
// weight-gradient norms must match PyTorch's (examples/pre_post_ln does the same on the kernels).
TEST_CASE("the seeds' check [d] on the reference: Pre-LN and Post-LN gradient norms match PyTorch", "[grad][golden][seed]") {
    using namespace normgen::example;
    const std::string dir = std::string(NORMGEN_GOLDEN_DIR) + "/backward/pre_post_ln/";
    const HostTensor x = read_npy(dir + "x.npy"), W = read_npy(dir + "lin_weight.npy"), B = read_npy(dir + "lin_bias.npy");
    const HostTensor HW = read_npy(dir + "head_weight.npy"), HB = read_npy(dir + "head_bias.npy");
    Weights w;
    w.rows = (int)x.shape[0];
    w.n = (int)x.shape[1];
    w.depth = (int)W.shape[0];
    w.lin_w = W.data.data();
    w.lin_b = B.data.data();
    w.head_w = HW.data.data();
    w.head_b = HB.data.data();
    const int64_t rows = w.rows, n = w.n;
    NormSpec ln = load_norm_file(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/layer_norm.norm");
    GradResult lng = differentiate(ln);
    const HostTensor ones{{n}, std::vector<double>((size_t)n, 1.0)}, zeros{{n}, std::vector<double>((size_t)n, 0.0)};
    LayerNormOps ops;
    ops.forward = [&](const Mat &h, std::vector<Mat> &saved) {
        TensorMap out = evaluate_reference(ln, {{"x", HostTensor{{rows, n}, h}}, {"weight", ones}, {"bias", zeros}});
        saved = {out.at("mu").data, out.at("rstd").data};
        return out.at("y").data;
    };
    ops.backward = [&](const Mat &h, const std::vector<Mat> &saved, const Mat &dy) {
        TensorMap in = {{"x", HostTensor{{rows, n}, h}},        {"mu", HostTensor{{rows}, saved[0]}},
                        {"rstd", HostTensor{{rows}, saved[1]}}, {"d_y", HostTensor{{rows, n}, dy}},
                        {"weight", ones}};
        return evaluate_reference(lng.spec, in).at("d_x").data;
    };
    for (bool pre : {true, false}) {
        INFO((pre ? "Pre-LN" : "Post-LN"));
        std::vector<double> norms = weight_grad_norms(pre, x.data, w, ops);
        const HostTensor want = read_npy(dir + (pre ? "pre" : "post") + "_weight_grad_norms.npy");
        REQUIRE(want.data.size() == norms.size());
        for (size_t k = 0; k < norms.size(); ++k) {
            INFO("block " << k << ": " << norms[k] << " vs PyTorch " << want.data[k]);
            CHECK(std::fabs(norms[k] - want.data[k]) <= 1e-9 * want.data[k]);
        }
        CHECK(std::fabs(norms.back() / norms.front() - (pre ? 0.4015 : 2.3457)) < 5e-5);
    }
}

TEST_CASE("a declaration that cannot be differentiated is refused with a located diagnostic", "[grad][diagnostics]") {
    auto refused = [](const std::string &text) {
        try {
            differentiate(load_norm_text("bad.norm", text));
        } catch (const DiagnosticError &e) {
            return std::string(e.what());
        }
        return std::string("<accepted>");
    };
    SECTION("no differentiable output") {
        std::string msg = refused(
            "norm ema(x: [rows, d], r: [d]) -> r_out updates r {\n  r_out = 0.9 * r + 0.1 * mean(x, over: rows)\n}\n");
        CHECK_THAT(msg, Catch::Contains("bad.norm:1:") && Catch::Contains("has no differentiable output"));
    }
    SECTION("outputs that depend on no input (found by the fuzzer)") {
        std::string msg = refused("norm a(x: [d]) -> y {\n  y = 2\n  r = x + 1\n}\n");
        CHECK_THAT(msg, Catch::Contains("bad.norm:1:") && Catch::Contains("no differentiable output depends on an input or parameter"));
        msg = refused("norm s(x: [rows, d]) -> y {\n  y = step(x)\n}\n");
        CHECK_THAT(msg, Catch::Contains("zero derivative"));
    }
    SECTION("a gradient name already taken") {
        std::string msg = refused("norm n(x: [rows, d], d_x: [rows, d]) -> y {\n  y = x * d_x\n}\n");
        CHECK_THAT(msg, Catch::Contains("bad.norm:1:") && Catch::Contains("would be named 'd_x'"));
    }
}

TEST_CASE("constants that would fold past the double range stay unfolded (found by the fuzzer)", "[grad]") {
    NormSpec f = load_norm_text("big.norm", "norm big(x: [rows, d]) -> y {\n  y = x * 1e300 * 1e300 + 1e308 * x + 1e308 * x\n}\n");
    GradResult g = differentiate(f);  // checks what it emits: an inf literal would not
    CHECK(g.text.find("inf") == std::string::npos);
    CHECK(g.gradients == std::vector<std::string>{"d_x"});
}

TEST_CASE("the subgradients: max, min, abs and the clamp, and step", "[grad]") {
    // y = max(x, w) + min(x, 2 w) + abs(x): at x > 2w > w > 0, dy/dx = 1 + 0 + 1, dy/dw = 0 + 2.
    NormSpec f = load_norm_text("sub.norm", "norm sub(x: [rows, d]) -> y {\n  param w: [d]\n  y = max(x, w) + min(x, 2 * w) + abs(x)\n}\n");
    GradResult g = differentiate(f);
    TensorMap in;
    in["x"] = HostTensor{{1, 3}, {3.0, -1.0, 0.5}};
    in["w"] = HostTensor{{3}, {1.0, 1.0, 1.0}};
    TensorMap up;
    up["d_y"] = HostTensor{{1, 3}, {1.0, 1.0, 1.0}};
    TensorMap out = evaluate_reference(g.spec, backward_inputs(g.spec, in, {}, up), {}, kExact);
    // x = 3: max -> x (1), min -> 2w (0 to x, 2 to w), abs -> +1; x = -1: max -> w (1 to w), min -> x (1), abs -> -1;
    // x = 0.5: max -> w, min -> x, abs -> +1.
    CHECK(out.at("d_x").data == std::vector<double>{2.0, 0.0, 2.0});
    CHECK(out.at("d_w").data == std::vector<double>{2.0, 1.0, 1.0});
}

TEST_CASE("a backward's outputs add up over slices of its outermost axis, as the benchmark's whole-tensor check evaluates them", "[grad]") {
    auto load = [](const std::string &layer) { return load_norm_file(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/" + layer + ".norm"); };
    auto outer = [](const NormSpec &s) { return s.tensors.at(0).dims.at(0); };
    // Parameter gradients summed over the rows or samples, nothing else reading across them.
    for (const char *layer : {"layer_norm", "layer_norm_weight_only", "rms_norm", "dyt", "fused_add_rms_norm", "poly_norm",
                              "group_norm_nchw", "group_norm_nhwc", "instance_norm"}) {
        INFO(layer);
        const NormSpec g = differentiate(load(layer)).spec;
        CHECK(slices_add_up(g, outer(g)));
    }
    // BatchNorm training's statistics reduce over its samples: its d_x needs all of them.
    const NormSpec bn = differentiate(load("batch_norm_train")).spec;
    CHECK_FALSE(slices_add_up(bn, outer(bn)));
    // A forward whose outputs all span the rows: side by side.
    CHECK(slices_add_up(load("layer_norm"), outer(load("layer_norm"))));
    // An output lacking the axis that is not a plain sum over it: a mean, a scaled sum, a sum read by another.
    for (const char *body : {"s = mean(x, over: rows)\n  y = x", "s = sum(x, over: rows) * 2\n  y = x", "s = sum(x, over: rows)\n  y = x - s"}) {
        INFO(body);
        const NormSpec t = load_norm_text("t.norm", std::string("norm t(x: [rows, d]) -> y, s {\n  ") + body + "\n}\n");
        CHECK_FALSE(slices_add_up(t, outer(t)));
    }

    // LayerNorm's backward on 13 rows, evaluated whole and 4 rows at a time: d_x's slices side
    // by side and d_weight's, d_bias's summed are the whole's, to float64's rounding.
    const NormSpec g = differentiate(load("layer_norm")).spec;
    const AxisId rows = outer(g);
    const AxisExtents ext = choose_extents(g, {{"rows", 13}, {"d", 37}}, 1);
    const TensorMap in = random_inputs(g, ext, RandomInputOptions{50, 7});
    const TensorMap whole = evaluate_reference(g, in);
    TensorMap sliced;
    for (int64_t first = 0; first < 13; first += 4) {
        const int64_t k = std::min<int64_t>(4, 13 - first);
        TensorMap part_in;
        for (const TensorInfo &t : g.tensors) {
            HostTensor h = in.at(t.name);
            if (!t.dims.empty() && t.dims[0] == rows) {
                const size_t row = h.data.size() / 13;
                h.data = std::vector<double>(h.data.begin() + (std::ptrdiff_t)(row * (size_t)first),
                                             h.data.begin() + (std::ptrdiff_t)(row * (size_t)(first + k)));
                h.shape[0] = k;
            }
            part_in[t.name] = h;
        }
        for (auto &[name, t] : evaluate_reference(g, part_in)) {
            HostTensor &w = sliced[name];
            if (g.find_output(name)->dims.at(0) == rows) {
                w.data.insert(w.data.end(), t.data.begin(), t.data.end());
            } else {
                w.data.resize(t.data.size(), 0.0);
                for (size_t i = 0; i < t.data.size(); ++i) w.data[i] += t.data[i];
            }
        }
    }
    for (const char *name : {"d_x", "d_weight", "d_bias"}) {
        INFO(name);
        const std::vector<double> &a = whole.at(name).data, &b = sliced.at(name).data;
        REQUIRE(a.size() == b.size());
        double worst = 0, scale = 0;
        for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i])), scale = std::max(scale, std::fabs(a[i]));
        CHECK(scale > 0);
        CHECK(worst <= 1e-12 * scale);
    }
}
