// KernelPlan: each catalog layer's layout class, main output, stages, split axes, CUDA blocks and
// kernel list, pinned; and the facts the consumers rely on (ABI order, variants).
#include "codegen/common/kernel_plan.h"
#include "dsl/checker.h"
#include "dsl/grad.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <map>

using namespace normgen;

namespace {

std::string catalog(const std::string &layer) { return std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/" + layer + ".norm"; }

std::string names(const NormSpec &spec, const std::vector<AxisId> &axes) {
    std::string s;
    for (AxisId a : axes) s += (s.empty() ? "" : ",") + spec.axes[a].name;
    return s;
}

struct Expected {
    LayoutClass core, full;  // the layout of the core and the full variant (the same without optional outputs)
    std::string main, rows, split, cuda_blocks;  // of the core variant
    std::vector<std::string> full_outputs;       // the main kernel's outputs in the widest variant
};

}  // namespace

TEST_CASE("every catalog layer's plan: layout class, rows, split axes, CUDA blocks, kernels", "[plan]") {
    using L = LayoutClass;
    // A full kernel's saved statistics are not shaped like y, so it takes the root layout (the row
    // schedule would have to recompute them): LayerNorm's full kernel is slower than its core one.
    const std::map<std::string, Expected> want{
        {"batch_norm_eval", {L::Map, L::Map, "y", "n,c,h", "n,c,h,w", "n,c,h", {"y"}}},
        {"batch_norm_train", {L::Root, L::Root, "y", "", "c", "c", {"y", "running_mean_out", "running_var_out", "mu", "rstd"}}},
        {"deepnorm", {L::Row, L::Row, "y", "rows", "rows", "rows", {"y"}}},
        {"dyt", {L::Map, L::Map, "y", "rows", "rows,d", "rows", {"y"}}},
        {"fused_add_rms_norm", {L::Row, L::Row, "h", "rows", "rows", "rows", {"h", "y"}}},  // h: the first of two same-shaped outputs
        {"group_norm_nchw", {L::Row, L::Root, "y", "n,g", "n,g", "n,g", {"y", "mu", "rstd"}}},
        {"group_norm_nhwc", {L::Root, L::Root, "y", "", "n,g", "n,g", {"y", "mu", "rstd"}}},
        {"instance_norm", {L::Row, L::Root, "y", "n,c", "n,c", "n,c", {"y", "mu", "rstd"}}},
        {"layer_norm", {L::Row, L::Root, "y", "rows", "rows", "rows", {"y", "mu", "rstd"}}},
        {"layer_norm_eps_outside_root", {L::Row, L::Row, "y", "rows", "rows", "rows", {"y"}}},
        {"layer_norm_last_two_axes", {L::Row, L::Row, "y", "n", "n", "n", {"y"}}},
        {"layer_norm_no_affine", {L::Row, L::Root, "y", "rows", "rows", "rows", {"y", "mu", "rstd"}}},
        {"layer_norm_weight_only", {L::Row, L::Root, "y", "rows", "rows", "rows", {"y", "mu", "rstd"}}},
        {"poly_norm", {L::Row, L::Row, "y", "rows", "rows", "rows", {"y"}}},
        {"qk_norm", {L::Row, L::Row, "y", "b,t,heads", "b,t,heads", "b,t,heads", {"y"}}},
        {"rms_norm", {L::Row, L::Root, "y", "rows", "rows", "rows", {"y", "rstd"}}},
        {"rms_norm_gemma", {L::Row, L::Row, "y", "rows", "rows", "rows", {"y"}}},
        {"rms_norm_llama", {L::Row, L::Row, "y", "rows", "rows", "rows", {"y"}}},
        {"sandwich_norm", {L::Row, L::Row, "h", "rows", "rows", "rows", {"h", "y"}}},
        {"scale_norm", {L::Row, L::Row, "y", "rows", "rows", "rows", {"y"}}},
        {"weight_norm", {L::Row, L::Row, "w", "o", "o", "o", {"w"}}},  // the normalized tensor is a parameter
    };
    size_t files = 0;
    for (const auto &entry : std::filesystem::directory_iterator(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog")) {
        if (entry.path().extension() != ".norm") continue;
        ++files;
        NormSpec spec = load_norm_file(entry.path().string());
        INFO(spec.name);
        auto it = want.find(spec.name);
        REQUIRE(it != want.end());  // a new catalog layer gets its row here
        const Expected &x = it->second;
        KernelPlan p = make_plan(spec, DType::F32, Variant::Core), f = make_plan(spec, DType::F32, variants_of(spec).back());
        INFO(plan_text(spec, p));
        CHECK(p.layout == x.core);
        CHECK(f.layout == x.full);
        CHECK_FALSE(p.layout_reason.empty());
        CHECK(spec.outputs[p.main_output].name == x.main);
        CHECK(names(spec, std::vector<AxisId>(p.main_order.begin(), p.main_order.begin() + p.row_axes)) == x.rows);
        CHECK(names(spec, p.split_axes) == x.split);
        CHECK(p.cuda_refusal.empty());
        CHECK(names(spec, p.cuda_block_axes) == x.cuda_blocks);
        REQUIRE(f.kernels.size() == 1);
        CHECK(f.kernels[0].role == "main");
        CHECK(f.kernels[0].outputs == x.full_outputs);
        // The ABI: inputs and params in declaration order, then the variant's outputs.
        REQUIRE(f.args.size() == spec.tensors.size() + x.full_outputs.size());
        for (size_t i = 0; i < spec.tensors.size(); ++i) CHECK(f.args[i].name == spec.tensors[i].name);
        // Stages keep what the declaration derives.
        CHECK(p.stages.size() == spec.stages.size());
    }
    CHECK(files == want.size());
}

TEST_CASE("variants: core drops the optional outputs, full keeps them; layers without any have core only", "[plan]") {
    NormSpec ln = load_norm_file(catalog("layer_norm"));
    REQUIRE(variants_of(ln) == std::vector<Variant>{Variant::Core, Variant::Full});
    KernelPlan core = make_plan(ln, DType::BF16, Variant::Core), full = make_plan(ln, DType::BF16, Variant::Full);
    CHECK(core.outputs().size() == 1);
    CHECK(full.outputs().size() == 3);
    CHECK(full.outputs()[1]->optional);
    CHECK(core.args[0].dtype == DType::BF16);
    NormSpec dyt = load_norm_file(catalog("dyt"));
    CHECK(variants_of(dyt) == std::vector<Variant>{Variant::Core});
}

TEST_CASE("the plan of GroupNorm NCHW passes c as (g, cg) and reduces (cg, h, w) in one stage", "[plan]") {
    NormSpec spec = load_norm_file(catalog("group_norm_nchw"));
    KernelPlan p = make_plan(spec, DType::F32, Variant::Core);
    CHECK(names(spec, p.args[0].atoms) == "n,g,cg,h,w");
    REQUIRE_FALSE(p.stages.empty());
    CHECK(names(spec, p.stages[0].reduced) == "cg,h,w");
    CHECK(names(spec, p.stages[0].independent) == "n,g");
    CHECK(names(spec, p.stages[0].blocked) == "w");  // the innermost reduced axis
    // (h, w) travel together in x and y, and no statistic varies along them (mu, rstd are per (n, g)).
    CHECK(p.inner_pair_fusable);
}

TEST_CASE("sibling sums: a stage's independent sums over the same axes keeping the same axes", "[plan][grad]") {
    // GroupNorm NCHW's backward: per channel sum(t1 * d_y) and sum(d_y) over (h, w); per group
    // their weighted sums over cg; per channel d_weight and d_bias over n.
    const NormSpec gn = differentiate(load_norm_file(catalog("group_norm_nchw"))).spec;
    const auto groups = make_plan(gn, DType::F32, Variant::Core).sibling_sums();
    REQUIRE(groups.size() == 3);
    std::vector<std::string> over;
    for (const auto &g : groups) {
        REQUIRE(g.size() == 2);
        CHECK(g[0]->over == g[1]->over);
        CHECK(g[0]->axes == g[1]->axes);
        CHECK(g[0]->stage == g[1]->stage);
        over.push_back(names(gn, g[0]->over));
    }
    CHECK(over == std::vector<std::string>{"h,w", "cg", "n"});
    // LayerNorm's forward: mean and variance are not sums (and not of one stage): none.
    const NormSpec ln = load_norm_file(catalog("layer_norm"));
    CHECK(make_plan(ln, DType::F32, Variant::Core).sibling_sums().empty());
}

TEST_CASE("block values: transcendental full-size values that a sum over the rows reads", "[plan][grad]") {
    // DyT's backward: t1 = tanh(alpha * x), read by d_x, d_alpha and d_weight; t2 = 1 - t1 * t1
    // calls nothing itself (it reads t1).
    const NormSpec dyt = differentiate(load_norm_file(catalog("dyt"))).spec;
    const auto kept = make_plan(dyt, DType::F32, Variant::Core).block_values(dyt);
    REQUIRE(kept.size() == 1);
    CHECK(dyt.values[(size_t)kept[0]].name == "t1");
    // Not DyT's forward (a map, no sums over the rows), nor LayerNorm's or RMSNorm's backward (no
    // transcendental: rsqrt is not one here, and their values are cheaper recomputed).
    const NormSpec fwd = load_norm_file(catalog("dyt"));
    CHECK(make_plan(fwd, DType::F32, Variant::Core).block_values(fwd).empty());
    for (const char *layer : {"layer_norm", "rms_norm"}) {
        const NormSpec g = differentiate(load_norm_file(catalog(layer))).spec;
        CHECK(make_plan(g, DType::F32, Variant::Core).block_values(g).empty());
    }
}

TEST_CASE("BatchNorm eval: the two innermost axes travel together", "[plan]") {
    NormSpec spec = load_norm_file(catalog("batch_norm_eval"));
    CHECK(make_plan(spec, DType::F32, Variant::Core).inner_pair_fusable);
}

TEST_CASE("a declaration the CUDA plan cannot take is refused at the reduction that breaks it", "[plan]") {
    NormSpec spec = load_norm_text("nested.norm", R"(norm nested(x: [a, b]) -> y {
  m = mean(x, over: b)
  mm = mean(m, over: a)
  y = x - mm
}
)");
    KernelPlan p = make_plan(spec, DType::F32, Variant::Core);
    CHECK_THAT(p.cuda_refusal, Catch::StartsWith("nested.norm:2:"));
    CHECK_THAT(p.cuda_refusal, Catch::Contains("keeps axis 'a'"));
    CHECK(p.layout == LayoutClass::Root);
}

TEST_CASE("plan_json carries what describe --plan prints", "[plan]") {
    NormSpec spec = load_norm_file(catalog("group_norm_nhwc"));
    KernelPlan p = make_plan(spec, DType::F32, Variant::Core);
    nlohmann::json j = plan_json(spec, p);
    CHECK(j["layout"] == "root");
    CHECK(j["variant"] == "core");
    CHECK(j["main_output"] == "y");
    CHECK(j["stages"][0]["reduces"] == nlohmann::json::array({"h", "w", "cg"}));
    CHECK(j["kernels"][0]["role"] == "main");
    CHECK(plan_text(spec, p).find("layout: root") != std::string::npos);
}

TEST_CASE("backward plans: parameter gradients summed over the rows make a row layout with column sums", "[plan][grad]") {
    using L = LayoutClass;
    // layer -> (layout of the core backward kernel, its column sums); the rest keep the root layout.
    const std::map<std::string, std::pair<L, std::string>> want{
        {"layer_norm", {L::Row, "d_weight,d_bias"}},
        {"rms_norm", {L::Row, "d_weight"}},
        {"fused_add_rms_norm", {L::Row, "d_weight"}},
        {"batch_norm_train", {L::Root, ""}},
        {"group_norm_nchw", {L::Root, ""}},
        {"dyt", {L::Row, "d_alpha,d_weight,d_bias"}},  // d_alpha: a total sum over rows x d
    };
    size_t files = 0, with_columns = 0;
    std::map<std::string, std::string> rows_form;
    for (const auto &entry : std::filesystem::directory_iterator(std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog")) {
        if (entry.path().extension() != ".norm") continue;
        const NormSpec fwd = load_norm_file(entry.path().string());
        const GradResult g = differentiate(fwd);
        const NormSpec &spec = g.spec;
        INFO(spec.name);
        const KernelPlan p = make_plan(spec, DType::F32, Variant::Core);
        std::string cols;
        for (int o : p.column_sums) {
            cols += (cols.empty() ? "" : ",") + spec.outputs[o].name;
            // Each is a sum over exactly the row axis keeping axes of the row block, or a total sum.
            const Node &e = *spec.values[spec.outputs[o].value].expr;
            CHECK(e.kind == Node::Reduce);
            CHECK((e.over == AxisSet{p.main_order[0]} || (e.axes.empty() && e.over.size() == p.main_order.size())));
            CHECK(o != p.main_output);
        }
        if (!p.column_sums.empty()) {
            ++with_columns;
            CHECK(p.layout == L::Row);
            CHECK(p.row_axes == 1);
            CHECK(p.layout_reason.find("final reduce") != std::string::npos);
            CHECK(plan_text(spec, p).find("column sums") != std::string::npos);
            CHECK(plan_json(spec, p)["column_sums"].size() == p.column_sums.size());
            // CUDA: the two-kernel form, blocks of rows, the column sums in the final kernel.
            CHECK(p.cuda_refusal == "");
            CHECK(p.cuda_block_axes == std::vector<AxisId>{p.main_order[0]});
            REQUIRE(p.kernels.size() == 2);
            CHECK(p.kernels[0].role == "main");
            CHECK(p.kernels[1].role == "final");
            CHECK(p.kernels[1].outputs.size() == p.column_sums.size());
        } else if (!p.cuda_columns.empty()) {
            // A root plan on CUDA: blocks of rows over the axes every statistic keeps; the column
            // outputs sum over at least one of them and nothing else reads them.
            CHECK(p.layout == L::Root);
            CHECK(p.cuda_refusal == "");
            CHECK(p.cuda_block_axes == p.cuda_row_axes);
            for (const PlanStage &st : p.stages)
                for (const NodePtr &n : st.reductions) {
                    bool column = false;
                    for (int o : p.cuda_columns) column = column || spec.values[spec.outputs[o].value].expr.get() == n.get();
                    if (column) continue;
                    for (AxisId a : p.cuda_row_axes) CHECK(std::count(n->axes.begin(), n->axes.end(), a) == 1);
                }
            for (int o : p.cuda_columns) {
                const Node &e = *spec.values[spec.outputs[o].value].expr;
                bool over_row = false;
                for (AxisId a : e.over) over_row = over_row || std::count(p.cuda_row_axes.begin(), p.cuda_row_axes.end(), a);
                CHECK(over_row);
            }
            REQUIRE(p.kernels.size() == 2);
            CHECK(p.kernels[1].outputs.size() == p.cuda_columns.size());
            CHECK(plan_json(spec, p)["cuda"]["columns"].size() == p.cuda_columns.size());
            rows_form[fwd.name] = names(spec, p.cuda_row_axes);
        } else {
            CHECK(p.kernels.size() == 1);
        }
        auto it = want.find(fwd.name);
        if (it != want.end()) {
            CHECK(p.layout == it->second.first);
            CHECK(cols == it->second.second);
        }
        ++files;
    }
    CHECK(files >= 20);
    CHECK(with_columns >= 5);
    // GroupNorm's rows: one group of one sample (its per-channel sums over h, w are held per block on
    // CUDA); QKNorm's: one head of one token (d_weight sums over all three); PolyNorm's: a row (its
    // d_weight_i sum the rows' own dot products sum(x^i * d_y, over: d), times a per-row factor).
    CHECK(rows_form == std::map<std::string, std::string>{
                           {"group_norm_nchw", "n,g"}, {"group_norm_nhwc", "n,g"}, {"poly_norm", "rows"}, {"qk_norm", "b,t,heads"}});
}
