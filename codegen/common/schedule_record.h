// Schedules as data: one serializable record per backend x device holding every decision a
// lowering makes that is not the declared algorithm (vector width, accumulators, block sizes, task
// grain, fused axes, threads per block). A record is plain knob = integer pairs with a kind; the
// backends read it, the manifest stores it as JSON, `--schedule` overrides it, a tuner can search,
// store and replay it. A knob may reorder a sum; none changes the declared algorithm.
//
//   choose_schedule(plan, kind, isa[, overrides])   today's defaults for a plan on an instruction set
//   apply_schedule_overrides(rec, s)   'knob=value,...' or a JSON file; an unknown knob or a value
//                                      out of range is refused naming the knob
#pragma once

#include "codegen/common/kernel_plan.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace normgen {

enum class ScheduleKind { HalideCpu, MlirCpu, MlirCuda, HalideGpu };
const char *schedule_kind_name(ScheduleKind k);  // "halide-cpu", "mlir-cpu", "mlir-cuda", "halide-gpu"

struct KnobSpec {
    const char *name;
    int64_t fallback;  // the default where it does not depend on the ISA (choose_schedule may refine it)
    int64_t min, max;
    bool boolean;       // 0 / 1 (spelled true/false)
    bool power_of_two;
    const char *doc;
};
// The knobs of a kind, in a fixed order (the order of text(); the JSON object sorts them by name).
const std::vector<KnobSpec> &schedule_knobs(ScheduleKind k);

class ScheduleRecord {
public:
    explicit ScheduleRecord(ScheduleKind kind);  // every knob at its default (KnobSpec::fallback)
    ScheduleKind kind() const { return kind_; }
    int64_t get(const std::string &knob) const;  // an unknown knob is an internal error
    bool flag(const std::string &knob) const { return get(knob) != 0; }
    // Sets a knob, refusing (UserError naming the knob) an unknown name or a value out of range.
    void set(const std::string &knob, int64_t value);
    const std::vector<std::pair<std::string, int64_t>> &values() const { return values_; }

    nlohmann::json to_json() const;  // {"kind": "halide-cpu", "knobs": {"vector_width": 16, ...}}
    // Reads a record written by to_json, or a bare object of knobs (missing knobs keep their defaults). Refuses a record of
    // another kind, an unknown knob or a bad value, naming it; `what` names the source in messages.
    static ScheduleRecord from_json(const nlohmann::json &j, ScheduleKind expected, const std::string &what);
    std::string text() const;  // "vector_width=16,row_accumulators=4,..."
    bool operator==(const ScheduleRecord &o) const { return kind_ == o.kind_ && values_ == o.values_; }

private:
    ScheduleKind kind_;
    std::vector<std::pair<std::string, int64_t>> values_;
};

// The defaults for a plan, with `overrides` applied when given (apply_schedule_overrides). A
// halide-gpu record takes its defaults from the plan (vectors of 16 bytes of the main output's
// storage type) and is checked against it (check_gpu_schedule).
ScheduleRecord choose_schedule(const KernelPlan &plan, ScheduleKind kind, Isa isa, const std::string &overrides = "");

// Refuses (UserError naming the knob) a halide-gpu record whose knobs do not fit together or the
// plan: a row group of fewer than 32 threads (rows_per_block against block_threads), vectors wider
// than 16 bytes of the main output.
void check_gpu_schedule(const KernelPlan &plan, const ScheduleRecord &record);

// Streaming stores (the halide-cpu knob streaming_stores): the outputs they apply to (the main
// output and those of its shape) and what a call must give them: data aligned to `alignment` bytes
// (the vector's bytes) and the innermost axis a multiple of `multiple` elements, so that Halide
// proves every full-vector store aligned. alignment 0: the record does not stream.
struct StreamingRequirement {
    std::vector<std::string> outputs;
    std::string inner_axis;
    int multiple = 1;
    int alignment = 0;
};
StreamingRequirement streaming_requirement(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &record);
// Whether a kernel of `record` runs on tensors whose innermost extent is `inner_extent`: not when
// its streaming stores need a multiple the extent is not (vector_width=32 with streaming stores on
// BatchNorm's 112-wide rows: Halide error -8 on the call, the registry takes the ordinary kernel).
bool record_runs_on(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &record, int64_t inner_extent);

// The schedule space a tuner searches for one plan (`normgen tune`): the knobs that change the
// kernel of this plan, each with the values worth trying, most promising knob first; the record's
// default is among each knob's values. `inner_extent`: the innermost extent of the shape tuned
// (streaming stores need a multiple of the vector; a short one may be fixed as a constant).
struct KnobChoice {
    std::string knob;
    std::vector<int64_t> values;
    // Knobs set together with every nonzero value (group_vectors needs the group's width as a
    // constant: without it the fused channel index is not linear and every load is a gather).
    std::vector<std::pair<std::string, int64_t>> with = {};
};
// `plane_extent`: the two innermost extents' product when the main output has three axes or more
// (an MLIR kernel streams a contiguous plane as one loop; 0: none).
std::vector<KnobChoice> schedule_space(const NormSpec &spec, const KernelPlan &plan, const ScheduleRecord &defaults, int64_t inner_extent,
                                       int64_t plane_extent = 0);

// Overrides from the command line: `spec` is a path to a JSON file (a record or an object of knobs)
// when such a file exists or it ends in ".json", else "knob=value,knob=value". Knobs the record's
// kind does not have are refused, naming the knob and listing the kind's knobs.
void apply_schedule_overrides(ScheduleRecord &rec, const std::string &spec);

// Refuses (UserError) overrides a record of `kind` would refuse: for checking a command line before
// anything is compiled or written.
void check_schedule_overrides(ScheduleKind kind, const std::string &spec);

}  // namespace normgen
