// The tuner's search strategy, apart from compiling and timing (codegen/driver/tune.cpp drives it):
// coordinate descent over each backend's schedule space, from its default record.
//
//   add_seed() a warm start: a schedule that won a neighbouring class (the same layer on this CPU),
//             timed in the first batch beside the defaults; one that wins becomes its backend's
//             best and the descent goes on from it. Only a record inside the space (every knob at
//             the default's value or one the space offers, seeds_fit()) is taken: a constant width
//             of another class or streaming stores a shape cannot take would only fail.
//   next()    the next batch: for one knob per backend (in the space's order), every value of that
//             knob not yet tried, set on that backend's best record so far; a backend whose best is
//             more than 25% slower than the fastest backend's sits out while another has a knob at
//             that step (the budget goes to the race), and gets the knobs it sat out at the end of
//             the pass (a structural knob of the slower backend can overturn the race: GroupNorm
//             NHWC's group_vectors made Halide 2.6x faster than the MLIR kernel that led); empty
//             when the space is exhausted (two passes, or one that moved nothing)
//   report()  the batch's timings: each backend's best re-measured in the same batch, and the
//             candidates that passed verification (a rejected candidate has no timing and can never
//             become a best). A candidate replaces its backend's best when its median is below the
//             best's by more than the noise of the batch: max(1%, half the best's p20-p80 spread).
//
// Plain data in, plain data out, so tests can plant a better schedule in a toy space and watch it
// being found.
#pragma once

#include "codegen/common/schedule_record.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace normgen {

struct SearchTiming {
    double median = 0, p20 = 0, p80 = 0;  // seconds per call
};

struct SearchCandidate {
    std::string backend;
    ScheduleRecord record;
    std::string knob;  // the knob this candidate changed ("" for a seed)
    std::string seed;  // a seed's provenance (add_seed), "" otherwise
};

// Whether `r` lies in `space` around `defaults`: every knob at the default's value or at one of the
// values the space offers for it.
bool seed_fits(const ScheduleRecord &r, const ScheduleRecord &defaults, const std::vector<KnobChoice> &space);

class CoordinateSearch {
public:
    // Per backend: its default record and its space (schedule_space()). `runs`, when given, says
    // whether a record's kernel can run on the class's tensors (record_runs_on()): one that cannot
    // is never proposed (it would be compiled only to fail on the call), as a seed or a step.
    void add_backend(const std::string &backend, const ScheduleRecord &defaults, const std::vector<KnobChoice> &space,
                     std::function<bool(const ScheduleRecord &)> runs = {});

    // A warm start for an added backend (see above); false, and nothing added, when `r` is not in
    // the backend's space or was already tried (the default). Seeds come in the first batch.
    bool add_seed(const std::string &backend, const ScheduleRecord &r, const std::string &provenance);

    // The next batch of new candidates; empty when done.
    std::vector<SearchCandidate> next();

    // The timings of the last batch: `bests` by backend (the bests it was measured beside),
    // `candidates` index-aligned with the batch next() returned; nullopt for a rejected one.
    void report(const std::map<std::string, SearchTiming> &bests, const std::vector<std::optional<SearchTiming>> &candidates);

    const ScheduleRecord &best(const std::string &backend) const { return state_.at(backend).best; }
    // The timing of a backend's best in the last batch that measured it (nullopt before any).
    std::optional<SearchTiming> best_timing(const std::string &backend) const { return state_.at(backend).best_time; }
    std::vector<std::string> backends() const;
    bool moved() const { return moved_; }  // some best changed in the last report

private:
    struct State {
        ScheduleRecord best;
        std::optional<SearchTiming> best_time;
        std::vector<KnobChoice> space;
        std::function<bool(const ScheduleRecord &)> runs;  // empty: every record runs
        std::vector<std::string> tried;  // records' text
        // Whether `r` is new to this backend and can run (then it counts as tried).
        bool first_try(const ScheduleRecord &r);
        std::vector<size_t> sat_out;     // knobs (indices into space) skipped this pass for the race
        ScheduleRecord defaults;
    };
    void add_candidates(const std::string &backend, State &s, size_t knob);
    std::map<std::string, State> state_;
    std::vector<std::string> order_;  // backends in the order added
    std::vector<SearchCandidate> batch_, seeds_;
    size_t knob_ = 0;
    int pass_ = 0;
    bool moved_ = false, moved_this_pass_ = false;
};

}  // namespace normgen
