#include "codegen/common/tuning_search.h"

#include "runtime/quantile.h"

#include <algorithm>
#include <cmath>

namespace normgen {

void CoordinateSearch::add_backend(const std::string &backend, const ScheduleRecord &defaults, const std::vector<KnobChoice> &space,
                                   std::function<bool(const ScheduleRecord &)> runs) {
    State s{defaults, std::nullopt, space, std::move(runs), {defaults.text()}, {}, defaults};
    state_.erase(backend);
    state_.emplace(backend, std::move(s));
    if (std::find(order_.begin(), order_.end(), backend) == order_.end()) order_.push_back(backend);
}

std::vector<std::string> CoordinateSearch::backends() const { return order_; }

std::optional<PairedRatio> paired_ratio(const SearchTiming &a, const SearchTiming &b) {
    if (a.rounds.size() < 3 || a.rounds.size() != b.rounds.size()) return std::nullopt;
    std::vector<double> q;
    for (size_t r = 0; r < a.rounds.size(); ++r) {
        if (!(a.rounds[r] > 0) || !(b.rounds[r] > 0)) return std::nullopt;
        q.push_back(a.rounds[r] / b.rounds[r]);
    }
    return PairedRatio{median(q), quantile(q, 0.8) - quantile(q, 0.2), q.size()};
}

bool PairedRatio::faster() const { return median < 1 - std::max(0.01, 1.5 * spread / std::sqrt((double)rounds)); }

bool CoordinateSearch::State::first_try(const ScheduleRecord &r) {
    const std::string text = r.text();
    if (std::find(tried.begin(), tried.end(), text) != tried.end()) return false;
    tried.push_back(text);
    return !runs || runs(r);
}

bool seed_fits(const ScheduleRecord &r, const ScheduleRecord &defaults, const std::vector<KnobChoice> &space) {
    if (r.kind() != defaults.kind()) return false;
    for (const auto &[knob, value] : r.values()) {
        if (value == defaults.get(knob)) continue;
        const auto k = std::find_if(space.begin(), space.end(), [&](const KnobChoice &c) { return c.knob == knob; });
        bool offered = k != space.end() && std::count(k->values.begin(), k->values.end(), value);
        // A knob set together with another one (group_vectors with the group's width) is offered there.
        for (const KnobChoice &c : space)
            for (const auto &[w, wv] : c.with)
                offered = offered || (w == knob && wv == value && r.get(c.knob) != 0);
        if (!offered) return false;
    }
    return true;
}

bool CoordinateSearch::add_seed(const std::string &backend, const ScheduleRecord &r, const std::string &provenance) {
    auto it = state_.find(backend);
    if (it == state_.end() || !seed_fits(r, it->second.defaults, it->second.space)) return false;
    if (!it->second.first_try(r)) return false;
    seeds_.push_back({backend, r, "", provenance});
    return true;
}

void CoordinateSearch::add_candidates(const std::string &backend, State &s, size_t knob) {
    const KnobChoice &k = s.space[knob];
    for (int64_t v : k.values) {
        if (s.best.get(k.knob) == v) continue;
        ScheduleRecord r = s.best;
        r.set(k.knob, v);
        if (v != 0)
            for (const auto &[knob_name, value] : k.with) r.set(knob_name, value);
        if (!s.first_try(r)) continue;
        batch_.push_back({backend, r, k.knob, ""});
    }
}

std::vector<SearchCandidate> CoordinateSearch::next() {
    batch_.clear();
    if (!seeds_.empty()) {
        batch_.swap(seeds_);
        return batch_;
    }
    for (;;) {
        size_t longest = 0;
        for (const auto &[b, s] : state_) longest = std::max(longest, s.space.size());
        if (knob_ >= longest) {
            // The knobs a backend sat out for the race, one per backend and batch, before the pass ends.
            for (const std::string &b : order_) {
                State &s = state_.at(b);
                if (s.sat_out.empty()) continue;
                const size_t k = s.sat_out.front();
                s.sat_out.erase(s.sat_out.begin());
                add_candidates(b, s, k);
            }
            if (!batch_.empty()) return batch_;
            bool waiting = false;
            for (const auto &[b, s] : state_) waiting = waiting || !s.sat_out.empty();
            if (waiting) continue;
            // The end of a pass: another one only when this one moved something (at most two).
            if (!moved_this_pass_ || ++pass_ >= 2) return {};
            moved_this_pass_ = false;
            knob_ = 0;
            continue;
        }
        // The budget goes to the backends in the race: one more than 25% slower than the fastest
        // best is searched only once the others have no knob left at this step.
        double fastest = 0;
        for (const auto &[b, st] : state_)
            if (st.best_time && st.best_time->median > 0 && (fastest == 0 || st.best_time->median < fastest)) fastest = st.best_time->median;
        auto in_race = [&](const State &st) { return fastest == 0 || !st.best_time || st.best_time->median <= 1.25 * fastest; };
        bool racing_left = false;
        for (const auto &[b, st] : state_) racing_left = racing_left || (in_race(st) && knob_ < st.space.size());
        for (const std::string &b : order_) {
            State &s = state_.at(b);
            if (knob_ >= s.space.size()) continue;
            if (racing_left && !in_race(s)) {
                s.sat_out.push_back(knob_);
                continue;
            }
            add_candidates(b, s, knob_);
        }
        ++knob_;
        if (!batch_.empty()) return batch_;
    }
}

void CoordinateSearch::report(const std::map<std::string, SearchTiming> &bests, const std::vector<std::optional<SearchTiming>> &candidates) {
    moved_ = false;
    pending_.clear();
    for (const auto &[b, t] : bests)
        if (state_.count(b)) state_.at(b).best_time = t;
    for (const std::string &b : order_) {
        State &s = state_.at(b);
        if (!s.best_time || s.best_time->median <= 0) continue;
        std::optional<size_t> promising;  // the lowest paired median below 0.995, for confirm()
        double lowest = 0.995;
        for (size_t i = 0; i < candidates.size() && i < batch_.size(); ++i) {
            if (batch_[i].backend != b || !candidates[i] || candidates[i]->median <= 0) continue;
            const SearchTiming &bt = *s.best_time;
            bool faster;
            if (auto q = paired_ratio(*candidates[i], bt)) {
                if (confirming_) {
                    if (q->median < lowest) lowest = q->median, promising = i;
                    continue;
                }
                faster = q->faster();
            } else {
                faster = candidates[i]->median < bt.median * (1 - std::max(0.01, 0.5 * (bt.p80 - bt.p20) / bt.median));
            }
            if (faster) {
                s.best = batch_[i].record;
                s.best_time = candidates[i];
                moved_ = moved_this_pass_ = true;
            }
        }
        if (promising) pending_.push_back(batch_[*promising]);
    }
}

bool CoordinateSearch::confirm(const SearchCandidate &c, const SearchTiming &best, const SearchTiming &candidate) {
    auto it = state_.find(c.backend);
    const auto q = paired_ratio(candidate, best);
    if (it == state_.end() || !q || !q->faster()) return false;
    it->second.best = c.record;
    it->second.best_time = candidate;
    moved_ = moved_this_pass_ = true;
    return true;
}

}  // namespace normgen
