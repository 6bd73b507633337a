// `normgen tune`: search the schedule space of a declaration's kernels for its shapes on this
// machine, and keep what was found in a tuning database (codegen/common/tuning_db.h).
//
// Per layer, storage type and shape class (codegen/common/tuning_keys.h), starting from both
// backends' defaults: coordinate descent over the knobs of schedule_space() (one knob at a time,
// each of its values tried from the best record so far, a move kept when it beats the best by more
// than the noise measured in the same batch), within a time budget. Every candidate is compiled
// ahead of time into a small kernel library (cached by its record), checked against the float64
// reference before it is timed (the case's tensors, then a spread of the verifier's shapes with the
// large mean: a wrong candidate is discarded and logged, never stored), and timed in
// normgen-measure interleaved, round by round, with the defaults and the copy rooflines. The last
// batch times the defaults, each backend's best and Halide's autoschedulers together; its fastest
// is the class's choice. Ctrl-C stops after the batch at hand and keeps what was found.
#pragma once

#include "dsl/norm_spec.h"

#include <string>
#include <vector>

namespace normgen {

struct TuneOptions {
    std::vector<std::string> files;
    std::vector<std::string> backends{"halide", "mlir"};
    std::vector<DType> dtypes{DType::F32};
    std::string shapes = "grid";  // "grid" (the benchmark's shapes of the layer) or sizes lists
    double budget_s = 60;         // per (layer, storage type, shape class)
    bool budget_given = false;    // --budget was given (with --time: the most a class gets)
    double total_s = 0;           // --time: the whole run's time; each class gets its share (0 = none)
    bool catalog = false;         // --catalog: every catalog layer of the benchmark grid
    std::string db = "tuning";    // the database folder
    std::string cache;            // compiled candidates ("" = a temporary folder, removed at the end)
    bool grad = false;            // tune the backward layer (`normgen grad FILE`) instead
    bool autoschedulers = true;   // time Halide's autoschedulers in the last batch (records, not choices)
    int rounds = 7;               // rounds of a batch (the last batch: twice as many)
    double min_sample_s = 0.02;   // each sample: back-to-back calls for at least this long
    bool dry_run = false;         // print the classes and the space, compile and time nothing
    bool reindex = false;         // rewrite best/<layer>.json from the records, measure nothing
    // `normgen autoschedule ... -o DIR`: build Halide's autoschedulers' kernels for every shape (not
    // class) as kernel libraries in DIR, for normgen_bench --normgen_extra=DIR; time nothing.
    std::string autoschedule_out;
};

TuneOptions parse_tune_args(const std::vector<std::string> &args);
int run_tune(const TuneOptions &options);

extern const char *kTuneUsage;
extern const char *kAutoscheduleUsage;

}  // namespace normgen
