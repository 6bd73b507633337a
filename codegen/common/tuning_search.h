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
//             become a best). A candidate replaces its backend's best when it is faster by more
//             than the noise of the batch. With both timed round by round in the same batch
//             (SearchTiming::rounds), the statistic is the paired one: the median over the rounds
//             of the candidate's time over the best's in the same round (two kernels timed within
//             a round of each other see the same neighbours, so the machine's drift between
//             rounds cancels), and it must be below 1 - max(1%, 1.5 x the ratios' p20-p80 spread /
//             sqrt(rounds)), about two standard errors of that median. Without rounds: the median
//             below the best's by more than max(1%, half the best's p20-p80 spread).
//   confirm() with confirm_with_more_rounds(true) (the tuner), report() takes no decision on
//             paired timings: the candidate of the batch with the lowest paired median, if below
//             0.995, is pending(), and the driver times it against the best alone for more rounds
//             and calls confirm(), which applies the same rule to those rounds. Measured on the
//             AMD EPYC VM (RMSNorm backward 4096 x 8192, 12 batches of 5 rounds): a kernel
//             against itself passed a paired rule on the batch's own rounds (1 - max(1%, half
//             the spread)) in 2 batches, a 2.5% gain (column_rows=4) in 4 (one call's time varies
//             5-10% there); 30 rounds put that gain's paired median at 0.966-0.979 in four of
//             four runs.
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
    std::vector<double> rounds;           // seconds per call, one sample a round of the batch (may be empty)
    SearchTiming() = default;
    SearchTiming(double median_s, double p20_s, double p80_s, std::vector<double> rounds_s = {})
        : median(median_s), p20(p20_s), p80(p80_s), rounds(std::move(rounds_s)) {}
};

// The paired comparison of `a` against `b` timed in the same batch: the median and the p20-p80
// spread over the rounds of a's sample over b's of the same round; nullopt without at least 3
// rounds each, or with a different count.
struct PairedRatio {
    double median = 1, spread = 0;
    size_t rounds = 0;
    // Whether the first kernel is faster beyond the noise (the rule above).
    bool faster() const;
};
std::optional<PairedRatio> paired_ratio(const SearchTiming &a, const SearchTiming &b);

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

    // Whether a paired win is confirmed with more rounds before it counts (see above).
    void confirm_with_more_rounds(bool on) { confirming_ = on; }
    // The candidates of the last report waiting for confirm(), one per backend at most.
    const std::vector<SearchCandidate> &pending() const { return pending_; }
    // A pending candidate's timing against its backend's best, measured together round by round;
    // true when it became the best. Pending is cleared by the next report().
    bool confirm(const SearchCandidate &c, const SearchTiming &best, const SearchTiming &candidate);

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
    std::vector<SearchCandidate> batch_, seeds_, pending_;
    bool confirming_ = false;
    size_t knob_ = 0;
    int pass_ = 0;
    bool moved_ = false, moved_this_pass_ = false;
};

}  // namespace normgen
