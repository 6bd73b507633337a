#include "codegen/common/schedule_record.h"

#include "codegen/common/tuning_keys.h"
#include "runtime/errors.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace normgen {

using nlohmann::json;

const char *schedule_kind_name(ScheduleKind k) {
    switch (k) {
    case ScheduleKind::HalideCpu: return "halide-cpu";
    case ScheduleKind::MlirCpu: return "mlir-cpu";
    case ScheduleKind::MlirCuda: return "mlir-cuda";
    case ScheduleKind::HalideGpu: return "halide-gpu";
    }
    return "?";
}

const std::vector<KnobSpec> &schedule_knobs(ScheduleKind k) {
    // The defaults are what the lowerings did before schedules were data, measured (bench/README.md):
    // four accumulator vectors per row reduction (LayerNorm 16384 x 768 f32: 14.2 -> 17.1 GB/s);
    // blocks of 64 vectors per lane (one level left BatchNorm over 3 x 3 x 262144 f32 with rstd
    // 1.4e-5 off); 16 Welford lanes = one AVX-512 vector of f32; MLIR's 256-element blocks (a
    // straight shifted sum of a 262144-element row was 1e-6 off in its mean) and 512 KiB chunks
    // (LayerNorm 32768 x 8192 13.0 -> 19.4 GB/s: the passes over a chunk hit L2).
    static const std::vector<KnobSpec> halide{
        {"vector_width", 16, 4, 64, false, true, "f32 lanes of every vectorized loop (choose_schedule: 16 on AVX-512, 8 on AVX2)"},
        {"row_accumulators", 4, 1, 16, false, false,
         "vectors of partial sums per reduction over one contiguous axis (independent add chains)"},
        {"sum_block", 64, 1, 4096, false, false, "vectors each lane adds before its partial sum moves to the next level (blocked sums)"},
        {"welford_lanes", 16, 1, 64, false, true, "interleaved Welford accumulators, merged by Chan's formula"},
        {"welford_block", 64, 1, 4096, false, false, "serial Welford steps per lane before a pairwise merge"},
        {"min_task_elements", 16384, 1, int64_t(1) << 30, false, false, "rows are grouped so each parallel task touches at least this many elements"},
        {"row_in_cache", 1, 0, 1, true, false, "allow the row schedule (false: statistics first for every layer)"},
        {"column_block_elements", 262144, 1, int64_t(1) << 30, false, false,
         "elements of one block of rows when sums over the rows (parameter gradients) are per-block partials: the block's "
         "sweeps after the first hit the cache"},
        {"fuse_inner_pair", 1, 0, 1, true, false, "run the two innermost axes as one loop when the plan allows it (BatchNorm's h, w)"},
        {"streaming_stores", 0, 0, 1, true, false,
         "non-temporal stores of the main output (and outputs of its shape): the kernel then needs them aligned to its vector and "
         "their innermost extent a multiple of vector_width; other calls take the ordinary kernel (needs normgen-mlir, LLVM 22)"},
        {"fuse_reduced_axes", 0, 0, 1, true, false,
         "sum a reduction's innermost reduced axes that are neighbours in memory as one contiguous loop (BatchNorm's h, w; GroupNorm "
         "NCHW's cg, h, w)"},
        {"multi_axis_accumulators", 0, 0, 1, true, false,
         "row_accumulators vectors of lanes also for a row's reductions over several axes (the innermost axis must then fill "
         "row_accumulators x vector_width lanes: GroupNorm's 128 x 128 planes, not its 8 x 8 ones)"},
        {"fixed_inner_extent", 0, 0, int64_t(1) << 24, false, false,
         "a kernel only for calls whose innermost axis has exactly this extent (0: any), folded into the code as a constant "
         "(GroupNorm NHWC's 10 channels a group, BERT's 768); other calls take another kernel"},
        {"group_vectors", 0, 0, 1, true, false,
         "channels-last statistics per group (GroupNorm NHWC): vectors along all channels (g, cg) instead of masked vectors per group, "
         "the per-group values read from per-channel tables (fast with fixed_inner_extent, which the tuner sets with it)"},
        {"block_variance", 0, 0, 1, true, false,
         "with group_vectors, a two-pass variance whose pass 1 is the layer's own mean (GroupNorm NHWC) by blocks of one index "
         "of its outermost reduced axis: a block's mean, then its squared deviations from it while it is in cache, the blocks "
         "combined exactly (sum of squares about each block's mean + squares of the blocks' means about the mean): both "
         "statistics in one read of the data, no cancellation"},
        {"sample_statistics", 0, 0, 1, true, false,
         "root layout whose statistics all keep the outermost axis (GroupNorm NHWC's per sample and group): compute them per "
         "index of that axis inside the map's parallel loop, so a sample's later sweeps read it from cache, and a backward's "
         "sums over that axis (d_weight, d_bias) as per-sample partials there (the kernel is then parallel over that axis "
         "alone; ignored for a kernel that also writes saved statistics)"},
        {"group_statistics", 0, 0, 1, true, false,
         "with sample_statistics, statistics that also keep the second axis of the memory order (GroupNorm NCHW's groups, "
         "an affine InstanceNorm's channels) computed per index of that axis inside the map's loop over it: a group's sweeps after the "
         "first read it from L1 / L2, not the whole sample from L2 / L3 (the backward's per-sample partials join that loop)"},
        {"block_values", 0, 0, 1, true, false,
         "row layout with sums over the rows (a backward's parameter gradients): full-size values that call a transcendental and "
         "that a sum reads (DyT's backward's tanh(alpha x)) computed once per block of rows into f32 scratch kept in cache, "
         "instead of evaluated again by each sweep over the block (the map, the row sums, the partial sums)"},
        {"column_rows", 1, 1, 16, false, false,
         "row layout with sums over the rows (a backward's parameter gradients): rows whose terms each partial sum's vector adds in "
         "registers before it is stored (the row loop unrolled inside the vector loop), so the d-long partial rows, past L1 at large d, "
         "are loaded and stored once per that many rows"},
        {"checked_variance", 1, 0, 1, true, false,
         "row layout: a two-pass variance over one axis whose pass 1 is the layer's own mean (LayerNorm's) from shifted sums "
         "of x - k and (x - k)^2 in the mean's sweep (k the mean's shift), the second pass over the row only where the shift "
         "lies more than half a standard deviation from the mean (the one-pass formula could cancel there): one sweep of "
         "the row fewer, the two-pass accuracy"},
        {"sibling_sums", 0, 0, 1, true, false,
         "root layout: independent sums over the same axes keeping the same axes (a backward's sum(d_y) and sum(d_y * xhat) per "
         "channel, its d_weight and d_bias) as one Tuple-valued sum, so one sweep reads the data for all of them"},
    };
    static const std::vector<KnobSpec> mlir_cpu{
        {"sum_block", 256, 1, int64_t(1) << 20, false, false, "elements of the innermost reduced axis per block of a blocked sum"},
        {"chunk_bytes", 512 << 10, 4096, int64_t(1) << 34, false, false,
         "bytes of the tensors per chunk the runtime hands one call (chunks along a split axis, sized for L2)"},
        {"fuse_trailing", 1, 0, 1, true, false, "run trailing axes every operand has contiguous as one loop (checked at run time)"},
        {"pipeline_elements", 0, 0, int64_t(1) << 24, false, false,
         "row pipelining (0: off): a call's rows run in steps of about this many elements, each step's map in one loop with "
         "the next step's first statistics sweep (layers whose reductions are over the innermost axis alone)"},
        {"streaming_stores", 0, 0, 1, true, false,
         "non-temporal stores of the main output (and outputs of its shape) where LLVM's vectorized loops store whole aligned "
         "vectors: the kernel checks at entry that those outputs are 64-byte aligned with rows (or h x w planes) of whole 64 bytes, other calls "
         "store as usual"},
    };
    static const std::vector<KnobSpec> mlir_cuda{
        {"block_threads", 256, 32, 1024, false, true, "threads per block (one block per index of the plan's block axes)"},
        {"column_blocks", 264, 1, 65536, false, false,
         "the most blocks of rows when sums over the rows are per-block partials (the two-kernel form; 2 per SM of an H200)"},
    };
    // Halide on a GPU (CUDA, OpenCL): codegen/halide/schedule_gpu.h says how each knob is used.
    // Nothing measured on a GPU yet: the defaults are the usual ones for memory-bound kernels on
    // NVIDIA parts (256 threads, 16-byte vector accesses, 2 blocks of partial sums per SM of an H200).
    static const std::vector<KnobSpec> halide_gpu{
        {"block_threads", 256, 32, 1024, false, true, "threads per block"},
        {"vector_width", 4, 1, 8, false, true,
         "elements a thread loads and stores as one vector (choose_schedule: 16 bytes of the main output's storage type)"},
        {"rows_per_block", 1, 1, 32, false, true,
         "row layout: rows one block normalizes at once, its threads split into that many groups of at least 32 (narrow rows)"},
        {"block_reduction", 1, 0, 1, false, false,
         "how a block's threads combine their partial sums: 0 one thread adds them in order, 1 a tree in shared memory "
         "(groups of 16, then the groups)"},
        {"row_in_block", 1, 0, 1, true, false,
         "row layout: a row's statistics and its map in one block, one launch, the row re-read from the cache (false: "
         "statistics first, in launches of their own, then the map)"},
        {"column_blocks", 264, 1, 65536, false, false,
         "the most blocks of per-block partial sums of a reduction across rows (a backward's d_weight and d_bias, BatchNorm's "
         "statistics, GroupNorm's): each block sums a run of rows, a second launch adds the blocks"},
        {"welford_lanes", 16, 1, 64, false, true, "interleaved Welford accumulators, merged by Chan's formula (as halide-cpu's)"},
        {"welford_block", 64, 1, 4096, false, false, "serial Welford steps per lane before a pairwise merge (as halide-cpu's)"},
    };
    switch (k) {
    case ScheduleKind::HalideCpu: return halide;
    case ScheduleKind::MlirCpu: return mlir_cpu;
    case ScheduleKind::MlirCuda: return mlir_cuda;
    case ScheduleKind::HalideGpu: return halide_gpu;
    }
    throw std::logic_error("schedule_knobs: unknown kind");
}

namespace {

const KnobSpec *find_knob(ScheduleKind k, const std::string &name) {
    for (const KnobSpec &s : schedule_knobs(k))
        if (name == s.name) return &s;
    return nullptr;
}

std::string knob_list(ScheduleKind k) {
    std::string s;
    for (const KnobSpec &n : schedule_knobs(k)) s += (s.empty() ? "" : ", ") + std::string(n.name);
    return s;
}

// The knob of `kind` called `name`, or a UserError naming it and listing the kind's knobs.
const KnobSpec &knob_or_refuse(ScheduleKind kind, const std::string &name, const std::string &what) {
    if (const KnobSpec *k = find_knob(kind, name)) return *k;
    throw UserError(what + ": the " + schedule_kind_name(kind) + " schedule has no knob '" + name + "' (its knobs: " + knob_list(kind) + ")");
}

// Sets the knobs a JSON object names (booleans as true/false, the others as integers).
void set_knobs(ScheduleRecord &r, const json &knobs, const std::string &what) {
    for (const auto &[name, v] : knobs.items()) {
        const KnobSpec &k = knob_or_refuse(r.kind(), name, what);
        if (v.is_boolean() && k.boolean) r.set(name, v.get<bool>() ? 1 : 0);
        else if (v.is_number_integer() && !k.boolean) r.set(name, v.get<int64_t>());
        else throw UserError(what + ": knob '" + name + "' takes " + (k.boolean ? "true or false" : "an integer") + ", got " + v.dump());
    }
}

// The knobs of a record as written in a JSON file: {"kind": ..., "knobs": {...}} or a bare object.
const json &knobs_of(const json &j, ScheduleKind expected, const std::string &what) {
    if (!j.is_object()) throw UserError(what + ": a schedule record is a JSON object");
    if (!j.contains("kind")) return j;
    if (!j["kind"].is_string() || j["kind"].get<std::string>() != schedule_kind_name(expected))
        throw UserError(what + ": a " + j["kind"].dump() + " schedule record, where a " + schedule_kind_name(expected) + " one is needed");
    if (!j.contains("knobs") || !j["knobs"].is_object()) throw UserError(what + ": the record has no \"knobs\" object");
    return j["knobs"];
}

std::string trim(const std::string &s) {
    size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

int64_t parse_value(const KnobSpec &k, const std::string &text, const std::string &what) {
    if (k.boolean) {
        if (text == "true" || text == "1" || text == "on") return 1;
        if (text == "false" || text == "0" || text == "off") return 0;
        throw UserError(what + ": knob '" + k.name + "' takes true or false, got '" + text + "'");
    }
    errno = 0;
    char *end = nullptr;
    long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end || errno) throw UserError(what + ": knob '" + std::string(k.name) + "' takes an integer, got '" + text + "'");
    return v;
}

}  // namespace

ScheduleRecord::ScheduleRecord(ScheduleKind kind) : kind_(kind) {
    for (const KnobSpec &k : schedule_knobs(kind)) values_.push_back({k.name, k.fallback});
}

int64_t ScheduleRecord::get(const std::string &knob) const {
    for (const auto &[n, v] : values_)
        if (n == knob) return v;
    internal_error(std::string("schedule record ") + schedule_kind_name(kind_) + " has no knob '" + knob + "'", __FILE__, __LINE__);
}

void ScheduleRecord::set(const std::string &knob, int64_t value) {
    const KnobSpec *k = &knob_or_refuse(kind_, knob, "schedule");
    if (value < k->min || value > k->max)
        throw UserError(std::string("schedule: knob '") + knob + "' = " + std::to_string(value) + " is out of range [" + std::to_string(k->min) +
                        ", " + std::to_string(k->max) + "] (" + k->doc + ")");
    if (k->power_of_two && (value & (value - 1)))
        throw UserError(std::string("schedule: knob '") + knob + "' = " + std::to_string(value) + " is not a power of two (" + k->doc + ")");
    for (auto &[n, v] : values_)
        if (n == knob) v = value;
}

json ScheduleRecord::to_json() const {
    json knobs = json::object();
    for (const auto &[n, v] : values_) {
        if (find_knob(kind_, n)->boolean) knobs[n] = v != 0;
        else knobs[n] = v;
    }
    return {{"kind", schedule_kind_name(kind_)}, {"knobs", knobs}};
}

ScheduleRecord ScheduleRecord::from_json(const json &j, ScheduleKind expected, const std::string &what) {
    ScheduleRecord r(expected);
    set_knobs(r, knobs_of(j, expected, what), what);
    return r;
}

std::string ScheduleRecord::text() const {
    std::string s;
    for (const auto &[n, v] : values_) {
        s += (s.empty() ? "" : ",") + n + "=";
        s += find_knob(kind_, n)->boolean ? (v ? "true" : "false") : std::to_string(v);
    }
    return s;
}

namespace {

// Bytes of the main output's storage type (4 when the plan has none).
int main_output_bytes(const KernelPlan &plan) {
    for (const PlanArg *o : plan.outputs())
        if (o->output == plan.main_output) return o->dtype == DType::F32 ? 4 : o->dtype == DType::F64 ? 8 : 2;
    return 4;
}

}  // namespace

ScheduleRecord choose_schedule(const KernelPlan &plan, ScheduleKind kind, Isa isa, const std::string &overrides) {
    ScheduleRecord r(kind);  // every knob at its default (schedule_knobs)
    if (kind == ScheduleKind::HalideCpu) r.set("vector_width", isa == Isa::Avx512 ? 16 : 8);  // the natural f32 width
    if (kind == ScheduleKind::HalideGpu) r.set("vector_width", 16 / main_output_bytes(plan));  // 16-byte accesses
    if (!overrides.empty()) apply_schedule_overrides(r, overrides);
    if (kind == ScheduleKind::HalideGpu) check_gpu_schedule(plan, r);
    return r;
}

void check_gpu_schedule(const KernelPlan &plan, const ScheduleRecord &r) {
    const int64_t threads = r.get("block_threads"), rows = r.get("rows_per_block"), vw = r.get("vector_width");
    if (threads / rows < 32)
        throw UserError("schedule: knob 'rows_per_block' = " + std::to_string(rows) + " with block_threads = " + std::to_string(threads) +
                        " leaves " + std::to_string(threads / rows) + " threads a row; a row needs at least 32 (one warp)");
    if (vw * main_output_bytes(plan) > 16)
        throw UserError("schedule: knob 'vector_width' = " + std::to_string(vw) + " makes " + std::to_string(vw * main_output_bytes(plan)) +
                        "-byte accesses of the " + dtype_name(plan.dtype) + " output; a GPU access is at most 16 bytes");
}

StreamingRequirement streaming_requirement(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &record) {
    StreamingRequirement r;
    if (record.kind() != ScheduleKind::HalideCpu || !record.flag("streaming_stores") || plan.main_order.empty()) return r;
    const int vw = (int)record.get("vector_width");
    int bytes = 0;
    for (const PlanArg *o : plan.outputs()) {
        if (o->output != plan.main_output && std::find(plan.same_shape.begin(), plan.same_shape.end(), o->output) == plan.same_shape.end())
            continue;
        r.outputs.push_back(o->name);
        bytes = std::max(bytes, o->dtype == DType::F32 ? 4 : o->dtype == DType::F64 ? 8 : 2);
    }
    r.inner_axis = spec.axes[plan.main_order.back()].name;
    r.multiple = vw;
    r.alignment = std::min(64, vw * bytes);
    return r;
}

bool record_runs_on(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &record, int64_t inner_extent) {
    const StreamingRequirement st = streaming_requirement(spec, plan, record);
    return st.alignment == 0 || inner_extent % st.multiple == 0;
}

std::vector<KnobChoice> schedule_space(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &defaults, int64_t inner_extent,
                                       int64_t plane_extent) {
    std::vector<KnobChoice> space;
    int inner_multiple = 1;
    for (int m : {16, 8, 4, 2})
        if (inner_extent % m == 0) {
            inner_multiple = m;
            break;
        }
    // `with`: knobs set together with every nonzero value (KnobChoice::with).
    auto add = [&](const std::string &knob, std::vector<int64_t> values, std::vector<std::pair<std::string, int64_t>> with = {}) {
        const int64_t d = defaults.get(knob);
        if (std::find(values.begin(), values.end(), d) == values.end()) values.insert(values.begin(), d);
        if (values.size() > 1) space.push_back({knob, values, std::move(with)});
    };
    if (defaults.kind() == ScheduleKind::MlirCpu) {
        // Streaming stores first where rows (or, fused, planes) can start on 64-byte lines (the
        // kernel checks it at entry; 16 f32 are one line); blocked sums only where there are sums.
        const bool plane_lines = plan.main_order.size() >= 3 && plane_extent > 0 && plane_extent % 16 == 0 && defaults.flag("fuse_trailing");
        if ((inner_multiple >= 16 || plane_lines) && !plan.main_order.empty()) add("streaming_stores", {0, 1});
        add("chunk_bytes", {128 << 10, 512 << 10, 2 << 20, 8 << 20});
        const bool sums = std::any_of(plan.stages.begin(), plan.stages.end(), [](const PlanStage &st) { return !st.reductions.empty(); });
        if (sums) add("sum_block", {64, 256, 1024});
        add("fuse_trailing", {1, 0});
        if (plan.layout == LayoutClass::Row) add("pipeline_elements", {0, 16384, 65536});
        return space;
    }
    if (defaults.kind() != ScheduleKind::HalideCpu) return space;
    const std::vector<AxisId> &order = plan.main_order;
    // A reduction over both innermost axes (BatchNorm's and GroupNorm's h, w) may sum them as one loop.
    bool pair_reduced = false;
    if (order.size() >= 2)
        for (const PlanStage &st : plan.stages)
            for (const NodePtr &r : st.reductions)
                pair_reduced = pair_reduced || (std::count(r->over.begin(), r->over.end(), order.back()) &&
                                                std::count(r->over.begin(), r->over.end(), order[order.size() - 2]));
    const int64_t vw = defaults.get("vector_width");
    // Structure first (what changes the loop nest), then widths and grains.
    // Streaming stores need rows that are a multiple of the vector (on AVX-512 of 16: ResNet's
    // 56-wide rows, a multiple of 8, made every such candidate fail its alignment check).
    if (inner_multiple >= vw && !plan.main_order.empty()) add("streaming_stores", {0, 1});
    if (pair_reduced) add("fuse_reduced_axes", {0, 1});
    if (pair_reduced && plan.layout == LayoutClass::Row) add("multi_axis_accumulators", {0, 1});
    // A short innermost axis as a constant (its loops, masks and the indices through it fold).
    if (inner_extent > 1 && inner_extent <= kExactInnerWidth) add("fixed_inner_extent", {0, inner_extent});
    // Vectors across the groups read x densely only where the group's width is a constant
    // (GroupNorm NHWC 2 x 64 x 64 x 320 on AVX-512: 0.8 GB/s without, 25 with, 6.9 the default).
    if (plan.inner_pair_grouped && inner_extent > 1 && inner_extent <= kExactInnerWidth) {
        add("group_vectors", {0, 1}, {{"fixed_inner_extent", inner_extent}});
        // Both statistics of a two-pass GroupNorm in one read (2 x 64 x 64 x 320: see README).
        if (spec.variance == VarianceAlgorithm::TwoPass && spec.has_var_reduction()) {
            add("block_variance", {0, 1}, {{"group_vectors", 1}, {"fixed_inner_extent", inner_extent}});
        }
    }
    if (plan.layout == LayoutClass::Row) add("row_in_cache", {1, 0});
    if (plan.layout == LayoutClass::Row && !checked_variances(spec).empty()) add("checked_variance", {1, 0});
    if (plan.statistics_per_outer_index(spec)) add("sample_statistics", {0, 1});
    if (plan.statistics_per_second_index(spec)) add("group_statistics", {0, 1}, {{"sample_statistics", 1}});
    if (plan.layout != LayoutClass::Row && !plan.sibling_sums().empty()) add("sibling_sums", {0, 1});
    add("vector_width", {vw, 2 * vw});
    if (plan.layout == LayoutClass::Row) {
        add("row_accumulators", {1, 2, 4, 8});
        add("min_task_elements", {4096, 16384, 65536, 262144});
        if (!plan.column_sums.empty()) add("column_block_elements", {65536, 262144, 1 << 20});
        if (!plan.block_values(spec).empty()) add("block_values", {0, 1});
        if (!plan.column_sums.empty()) add("column_rows", {1, 4});
    }
    if (plan.layout == LayoutClass::Map) add("min_task_elements", {4096, 16384, 65536, 262144});
    if (plan.inner_pair_fusable) add("fuse_inner_pair", {1, 0});
    if (!plan.stages.empty()) add("sum_block", {32, 64, 128, 256});
    if (spec.variance == VarianceAlgorithm::Welford && spec.has_var_reduction()) {
        add("welford_lanes", {8, 16, 32});
        add("welford_block", {32, 64, 256});
    }
    return space;
}

void check_schedule_overrides(ScheduleKind kind, const std::string &spec) {
    if (spec.empty()) return;
    ScheduleRecord probe(kind);
    apply_schedule_overrides(probe, spec);
}

void apply_schedule_overrides(ScheduleRecord &rec, const std::string &spec) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_regular_file(spec, ec) || (spec.size() > 5 && spec.compare(spec.size() - 5, 5, ".json") == 0)) {
        std::ifstream in(spec);
        if (!in) throw UserError("--schedule " + spec + ": cannot read the file");
        json j = json::parse(in, nullptr, false);
        if (j.is_discarded()) throw UserError("--schedule " + spec + ": not valid JSON");
        // Only the knobs the file names override: the others keep the plan's defaults.
        set_knobs(rec, knobs_of(j, rec.kind(), "--schedule " + spec), "--schedule " + spec);
        return;
    }
    size_t pos = 0;
    while (pos <= spec.size()) {
        size_t comma = spec.find(',', pos);
        const std::string item = trim(spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
        pos = comma == std::string::npos ? spec.size() + 1 : comma + 1;
        if (item.empty()) continue;
        size_t eq = item.find('=');
        if (eq == std::string::npos || eq == 0)
            throw UserError("--schedule: '" + item + "' is not knob=value (knobs of the " + schedule_kind_name(rec.kind()) +
                            " schedule: " + knob_list(rec.kind()) + ")");
        const std::string name = trim(item.substr(0, eq));
        rec.set(name, parse_value(knob_or_refuse(rec.kind(), name, "--schedule"), trim(item.substr(eq + 1)), "--schedule"));
    }
}

}  // namespace normgen
