// The tuning database (generated/tuning/ for the catalog; any folder for a user's project):
//
//   records/<layer>/<dtype>-<cpu>.jsonl  append-only, one JSON object per line, one line per
//                      measurement `normgen tune` made of that layer (every candidate that passed
//                      verification, each default, each autoscheduler baseline); one folder per
//                      layer, so a layer's history is read and compacted alone, and one file per
//                      storage type and CPU fingerprint (CpuFingerprint::slug), so a retune on one
//                      machine grows only its own file. A database written before the split
//                      (records/<layer>.jsonl) is still read, before the folder's files.
//   best/<layer>.json  the compacted index: per key (kernel identity, storage type, variant, shape
//                      class, CPU fingerprint) the schedule the latest tuning run chose, with its
//                      measurement; what the generators read to build one kernel per winner
//
// A record (schema 1):
//   {"schema": 1, "identity": {layer, decl_hash, generator, halide, llvm},
//    "dtype": "f32", "variant": "core", "backend": "halide" | "mlir", "isa": "avx2",
//    "role": "default" | "candidate" | "autoscheduler", "autoscheduler": "Adams2019" (that role only),
//    "chosen": true (the run's winner for its key), "sizes": {"rows": 16384, "d": 8192}, "bytes": N,
//    "shape": ShapeClass JSON, "cpu": CpuFingerprint JSON,
//    "schedule": {"kind": "halide-cpu", "knobs": {...}} (the schedule record; autoscheduler: its params),
//    "result": {"median_s", "p20_s", "p80_s", "reps", "gbps", "limit", "limit_gbps", "limit_p20_gbps",
//               "limit_p80_gbps", "frac", "vs_default", "vs_fallback" (best/ only)},
//    "when": "2026-12-01T12:00:00Z", "run": "<run id>"}
// A record whose identity is not this build's (another declaration text, generator, Halide or LLVM
// version) is stale: readers skip it and say so once per layer.
#pragma once

#include "codegen/common/schedule_record.h"
#include "codegen/common/tuning_keys.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace normgen {

constexpr int kTuningSchema = 1;

struct TuningResult {
    double median_s = 0, p20_s = 0, p80_s = 0;
    int reps = 0;
    double gbps = 0;
    std::string limit;  // "copy" or "read+copy": the layer's limit (tuning_keys.h, LayerLimit), the faster copy
    double limit_gbps = 0, limit_p20_gbps = 0, limit_p80_gbps = 0;
    double frac = 0;        // gbps / limit_gbps
    double vs_default = 0;  // the same run's default (this backend's) median time / this median time
    // The same run's Halide default median time / this median time: what the choice wins over
    // dispatch's fallback (set when the index is compacted; 0 when that run timed no Halide default).
    double vs_fallback = 0;
};

struct TuningRecord {
    int schema = kTuningSchema;
    KernelIdentity identity;
    std::string dtype = "f32", variant = "core", backend = "halide", isa;
    std::string role = "candidate";  // "default", "candidate", "autoscheduler"
    std::string autoscheduler;       // role autoscheduler: Adams2019, Li2018, Mullapudi2016
    bool chosen = false;
    std::map<std::string, int64_t> sizes;
    int64_t bytes = 0;
    ShapeClass shape;
    CpuFingerprint cpu;
    nlohmann::json schedule;  // {"kind", "knobs"}
    TuningResult result;
    std::string when, run;

    nlohmann::json to_json() const;
    static TuningRecord from_json(const nlohmann::json &j);  // UserError on a malformed record
    // The index key: layer|dtype|variant|shape class|cpu.
    std::string key() const;
};

// One winning schedule of a kernel and the keys it won.
struct TunedSchedule {
    nlohmann::json schedule;             // the schedule record (kind + knobs)
    std::vector<TuningRecord> wins;      // the best/<layer>.json entries that chose it
};

class TuningDb {
public:
    explicit TuningDb(std::string dir) : dir_(std::move(dir)) {}
    const std::string &dir() const { return dir_; }
    // The file that records of this layer, storage type and CPU are appended to.
    std::string records_path(const std::string &layer, const std::string &dtype, const CpuFingerprint &cpu) const;
    std::string best_path(const std::string &layer) const;
    // The files that hold the layer's records: records/<layer>.jsonl when present, then every
    // records/<layer>/*.jsonl in name order.
    std::vector<std::string> record_files(const std::string &layer) const;

    // Every record of the layer's files (none there: none). A line that is not a record is skipped
    // with a note naming the file and line.
    std::vector<TuningRecord> records(const std::string &layer, std::vector<std::string> *notes = nullptr) const;
    // Appends records (one line each) to their files (records_path), creating the folders and files.
    void append(const std::vector<TuningRecord> &records) const;
    // Rewrites best/<layer>.json of every layer in `layers` from its records: per key, the chosen
    // record of the latest run; records of another identity than layers[layer] are left out.
    // Returns the number of entries written per layer.
    std::map<std::string, size_t> compact(const std::map<std::string, KernelIdentity> &layers) const;
    // The entries of best/<layer>.json (none when absent), each checked against `current`: stale
    // ones are dropped with a note.
    std::vector<TuningRecord> best(const std::string &layer, const KernelIdentity &current, std::vector<std::string> *notes = nullptr) const;

private:
    std::string dir_;
};

// The winners in `best` for one kernel of a generator: storage type, variant, backend and ISA,
// grouped by schedule (equal knobs = one kernel), in a stable order.
std::vector<TunedSchedule> tuned_schedules(const std::vector<TuningRecord> &best, const std::string &dtype, const std::string &variant,
                                           const std::string &backend, const std::string &isa);

// The schedules a generator builds for one (storage type, variant, backend, ISA): the default record
// first, then each distinct schedule tuning chose (one equal to the default marks the default
// instead), each with its manifest "tuned" field (null for a default nobody chose). `kind` parses
// the chosen records; `what` names the database in errors.
std::vector<std::pair<ScheduleRecord, nlohmann::json>> kernel_schedules(const ScheduleRecord &defaults, const std::vector<TuningRecord> &best,
                                                                        const std::string &dtype, const std::string &variant,
                                                                        const std::string &backend, const std::string &isa,
                                                                        const std::string &what);

// The index entries a retune of `shape` on `cpu` starts from (warm starts), nearest first: the
// class's own last choice on that CPU (distance 0: a retune with a smaller budget, or in a noisier
// hour, then measures it beside whatever it finds instead of losing it), then other classes' choices
// on that CPU by loose_shape_distance. Core kernels only, no autoscheduler rows; the caller takes
// the first few that fit its search space.
std::vector<const TuningRecord *> warm_starts(const std::vector<TuningRecord> &best, const CpuFingerprint &cpu, const ShapeClass &shape);

// The "tuned" list of a manifest entry: the classes a kernel won ({"shape": ..., "cpu": ...,
// "sizes": ..., "frac": ...}), read by the registry's dispatch (runtime/registry.h).
nlohmann::json tuned_manifest_field(const TunedSchedule &t);

// An 8-hex-digit tag of a schedule record (its knobs' text): the suffix of a tuned kernel's name.
std::string schedule_tag(const nlohmann::json &schedule);

// "2026-12-01T12:00:00Z", now.
std::string utc_now();

}  // namespace normgen
