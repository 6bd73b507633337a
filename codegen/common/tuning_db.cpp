#include "codegen/common/tuning_db.h"

#include "codegen/common/manifest.h"
#include "dsl/printer.h"
#include "runtime/errors.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>

namespace normgen {

using nlohmann::json;
namespace fs = std::filesystem;

json TuningRecord::to_json() const {
    json r = {{"median_s", result.median_s}, {"p20_s", result.p20_s}, {"p80_s", result.p80_s}, {"reps", result.reps},
              {"gbps", result.gbps}, {"limit", result.limit}, {"limit_gbps", result.limit_gbps},
              {"limit_p20_gbps", result.limit_p20_gbps}, {"limit_p80_gbps", result.limit_p80_gbps}, {"frac", result.frac},
              {"vs_default", result.vs_default}};
    if (result.vs_fallback > 0) r["vs_fallback"] = result.vs_fallback;
    json j = {{"schema", schema}, {"identity", identity.to_json()}, {"dtype", dtype}, {"variant", variant}, {"backend", backend},
              {"isa", isa}, {"role", role}, {"chosen", chosen}, {"sizes", sizes}, {"bytes", bytes}, {"shape", shape.to_json()},
              {"cpu", cpu.to_json()}, {"schedule", schedule}, {"result", r}, {"when", when}, {"run", run}};
    if (!autoscheduler.empty()) j["autoscheduler"] = autoscheduler;
    return j;
}

TuningRecord TuningRecord::from_json(const json &j) {
    if (!j.is_object()) throw UserError("a tuning record is a JSON object");
    TuningRecord t;
    try {
        t.schema = j.at("schema").get<int>();
        if (t.schema != kTuningSchema)
            throw UserError("schema " + std::to_string(t.schema) + " (this normgen reads " + std::to_string(kTuningSchema) + ")");
        t.identity = KernelIdentity::from_json(j.at("identity"));
        t.dtype = j.at("dtype").get<std::string>();
        t.variant = j.at("variant").get<std::string>();
        t.backend = j.at("backend").get<std::string>();
        t.isa = j.at("isa").get<std::string>();
        t.role = j.at("role").get<std::string>();
        t.autoscheduler = j.value("autoscheduler", "");
        t.chosen = j.value("chosen", false);
        t.sizes = j.at("sizes").get<std::map<std::string, int64_t>>();
        t.bytes = j.at("bytes").get<int64_t>();
        t.shape = ShapeClass::from_json(j.at("shape"));
        t.cpu = CpuFingerprint::from_json(j.at("cpu"));
        t.schedule = j.at("schedule");
        if (!t.schedule.is_object()) throw UserError("\"schedule\" is not an object");
        const json &r = j.at("result");
        t.result.median_s = r.at("median_s").get<double>();
        t.result.p20_s = r.value("p20_s", 0.0);
        t.result.p80_s = r.value("p80_s", 0.0);
        t.result.reps = r.value("reps", 0);
        t.result.gbps = r.at("gbps").get<double>();
        t.result.limit = r.value("limit", "");
        t.result.limit_gbps = r.value("limit_gbps", 0.0);
        t.result.limit_p20_gbps = r.value("limit_p20_gbps", 0.0);
        t.result.limit_p80_gbps = r.value("limit_p80_gbps", 0.0);
        t.result.frac = r.value("frac", 0.0);
        t.result.vs_default = r.value("vs_default", 0.0);
        t.result.vs_fallback = r.value("vs_fallback", 0.0);
        t.when = j.value("when", "");
        t.run = j.value("run", "");
    } catch (const json::exception &e) {
        throw UserError(std::string("a tuning record: ") + e.what());
    }
    if (t.backend != "halide" && t.backend != "mlir") throw UserError("a tuning record: backend '" + t.backend + "'");
    return t;
}

std::string TuningRecord::key() const { return identity.layer + "|" + dtype + "|" + variant + "|" + shape.key() + "|" + cpu.key(); }

std::string TuningDb::records_path(const std::string &layer, const std::string &dtype, const CpuFingerprint &cpu) const {
    return (fs::path(dir_) / "records" / layer / (dtype + "-" + cpu.slug() + ".jsonl")).string();
}
std::string TuningDb::best_path(const std::string &layer) const { return (fs::path(dir_) / "best" / (layer + ".json")).string(); }

std::vector<std::string> TuningDb::record_files(const std::string &layer) const {
    std::vector<std::string> files;
    const fs::path legacy = fs::path(dir_) / "records" / (layer + ".jsonl");
    std::error_code ec;
    if (fs::is_regular_file(legacy, ec)) files.push_back(legacy.string());
    std::vector<std::string> shards;
    const fs::path folder = fs::path(dir_) / "records" / layer;
    if (fs::is_directory(folder, ec))
        for (const fs::directory_entry &e : fs::directory_iterator(folder, ec))
            if (e.is_regular_file(ec) && e.path().extension() == ".jsonl") shards.push_back(e.path().string());
    std::sort(shards.begin(), shards.end());
    files.insert(files.end(), shards.begin(), shards.end());
    return files;
}

std::vector<TuningRecord> TuningDb::records(const std::string &layer, std::vector<std::string> *notes) const {
    std::vector<TuningRecord> out;
    for (const std::string &path : record_files(layer)) {
        std::ifstream in(path);
        if (!in) {
            if (notes) notes->push_back(path + ": cannot be read; skipped");
            continue;
        }
        std::string line;
        for (int n = 1; std::getline(in, line); ++n) {
            if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
            json j = json::parse(line, nullptr, false);
            try {
                if (j.is_discarded()) throw UserError("not JSON");
                TuningRecord r = TuningRecord::from_json(j);
                if (r.identity.layer != layer) throw UserError("a record of layer '" + r.identity.layer + "'");
                out.push_back(std::move(r));
            } catch (const UserError &e) {
                if (notes) notes->push_back(path + ":" + std::to_string(n) + ": skipped: " + e.what());
            }
        }
    }
    return out;
}

void TuningDb::append(const std::vector<TuningRecord> &records) const {
    std::map<std::string, std::string> lines;  // shard -> its new lines
    for (const TuningRecord &r : records) lines[records_path(r.identity.layer, r.dtype, r.cpu)] += r.to_json().dump() + "\n";
    for (const auto &[path, text] : lines) {
        fs::create_directories(fs::path(path).parent_path());
        std::ofstream out(path, std::ios::app | std::ios::binary);
        out << text;
        out.flush();
        if (!out) throw UserError(path + ": cannot append the tuning records");
    }
}

std::map<std::string, size_t> TuningDb::compact(const std::map<std::string, KernelIdentity> &layers) const {
    std::map<std::string, size_t> written;
    for (const auto &[layer, identity] : layers) {
        // Per key, the chosen record of the latest run (a newer run of the same key replaces an older
        // one: retuning is how a user changes their mind); ties in time go to the larger fraction.
        std::map<std::string, TuningRecord> best;
        std::map<std::string, double> fallback;  // run|key -> the Halide default's median time
        const std::vector<TuningRecord> all = records(layer);
        for (const TuningRecord &r : all) {
            if (!identity.stale(r.identity, r.when).empty()) continue;
            if (r.role == "default" && r.backend == "halide" && r.result.median_s > 0) fallback[r.run + "|" + r.key()] = r.result.median_s;
            if (!r.chosen || r.role == "autoscheduler") continue;
            auto it = best.find(r.key());
            if (it == best.end() || r.when > it->second.when || (r.when == it->second.when && r.result.frac > it->second.result.frac))
                best[r.key()] = r;
        }
        for (auto &[key, r] : best) {
            auto f = fallback.find(r.run + "|" + key);
            r.result.vs_fallback = f != fallback.end() && r.result.median_s > 0 ? f->second / r.result.median_s : 0.0;
        }
        json entries = json::array();
        for (const auto &[key, r] : best) entries.push_back(r.to_json());
        fs::create_directories(fs::path(best_path(layer)).parent_path());
        json doc = {{"schema", kTuningSchema}, {"layer", layer}, {"identity", identity.to_json()}, {"entries", entries}};
        write_file_atomically(best_path(layer), doc.dump(1) + "\n");
        written[layer] = best.size();
    }
    return written;
}

std::vector<TuningRecord> TuningDb::best(const std::string &layer, const KernelIdentity &current, std::vector<std::string> *notes) const {
    std::vector<TuningRecord> out;
    std::ifstream in(best_path(layer));
    if (!in) return out;
    json doc = json::parse(in, nullptr, false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("entries") || !doc["entries"].is_array()) {
        if (notes) notes->push_back(best_path(layer) + ": not a tuning index; ignored");
        return out;
    }
    if (doc.value("schema", 0) != kTuningSchema) {
        if (notes) notes->push_back(best_path(layer) + ": schema " + doc.value("schema", json(0)).dump() + " (this normgen reads " +
                                    std::to_string(kTuningSchema) + "); ignored");
        return out;
    }
    std::set<std::string> said;
    for (const json &e : doc["entries"]) {
        try {
            TuningRecord r = TuningRecord::from_json(e);
            const std::string why = current.stale(r.identity, r.when);
            if (!why.empty()) {
                if (notes && said.insert(why).second) notes->push_back(best_path(layer) + ": stale records ignored: " + why);
                continue;
            }
            out.push_back(r);
        } catch (const UserError &err) {
            if (notes) notes->push_back(best_path(layer) + ": an entry skipped: " + err.what());
        }
    }
    return out;
}

std::vector<TunedSchedule> tuned_schedules(const std::vector<TuningRecord> &best, const std::string &dtype, const std::string &variant,
                                           const std::string &backend, const std::string &isa) {
    std::vector<TunedSchedule> out;
    for (const TuningRecord &r : best) {
        if (r.dtype != dtype || r.variant != variant || r.backend != backend || r.isa != isa) continue;
        auto it = std::find_if(out.begin(), out.end(), [&](const TunedSchedule &t) { return t.schedule == r.schedule; });
        if (it == out.end()) {
            out.push_back({r.schedule, {}});
            it = out.end() - 1;
        }
        it->wins.push_back(r);
    }
    std::sort(out.begin(), out.end(), [](const TunedSchedule &a, const TunedSchedule &b) { return a.schedule.dump() < b.schedule.dump(); });
    return out;
}

std::vector<std::pair<ScheduleRecord, json>> kernel_schedules(const ScheduleRecord &defaults, const std::vector<TuningRecord> &best,
                                                              const std::string &dtype, const std::string &variant, const std::string &backend,
                                                              const std::string &isa, const std::string &what) {
    std::vector<std::pair<ScheduleRecord, json>> kernels{{defaults, json()}};
    for (const TunedSchedule &ts : tuned_schedules(best, dtype, variant, backend, isa)) {
        // Records written before a knob existed spell the same schedule without it: they are one
        // kernel, and every class that chose it keeps its win (a second spelling of the default
        // used to replace the first one's wins, so those classes ran the Halide default).
        ScheduleRecord tuned = ScheduleRecord::from_json(ts.schedule, defaults.kind(), what);
        const json wins = tuned_manifest_field(ts);
        auto same = std::find_if(kernels.begin(), kernels.end(), [&](const auto &k) { return k.first == tuned; });
        if (same == kernels.end()) {
            kernels.push_back({tuned, wins});
            continue;
        }
        if (same->second.is_null()) same->second = json::array();
        for (const json &w : wins) same->second.push_back(w);
    }
    return kernels;
}

std::vector<const TuningRecord *> warm_starts(const std::vector<TuningRecord> &best, const CpuFingerprint &cpu, const ShapeClass &shape) {
    const std::string here = cpu.key();
    // Sorted by distance, the class's own entry first among equals (another class's buckets can
    // be 0 octaves away too).
    std::vector<std::pair<std::pair<double, bool>, const TuningRecord *>> near;
    for (const TuningRecord &r : best) {
        if (r.cpu.key() != here || r.variant != "core" || r.role == "autoscheduler") continue;
        const double d = loose_shape_distance(shape, r.shape);
        if (std::isfinite(d)) near.push_back({{d, r.shape.key() != shape.key()}, &r});
    }
    std::stable_sort(near.begin(), near.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
    std::vector<const TuningRecord *> out;
    for (const auto &[order, r] : near) out.push_back(r);
    return out;
}

json tuned_manifest_field(const TunedSchedule &t) {
    json list = json::array();
    for (const TuningRecord &r : t.wins)
        list.push_back({{"shape", r.shape.to_json()}, {"cpu", r.cpu.to_json()}, {"sizes", r.sizes}, {"gbps", r.result.gbps},
                        {"frac", r.result.frac}, {"limit", r.result.limit}, {"vs_fallback", r.result.vs_fallback}, {"when", r.when}});
    return list;
}

std::string schedule_tag(const json &schedule) {
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", (unsigned)(text_hash(schedule.dump()) & 0xffffffffu));
    return hex;
}

std::string utc_now() {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

}  // namespace normgen
