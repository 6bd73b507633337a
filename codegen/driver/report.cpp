#include "codegen/driver/report.h"

#include "runtime/errors.h"
#include "report_plot_script.h"  // generated from bench/report_plot.py: kReportPlotScript

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

namespace fs = std::filesystem;
using nlohmann::json;

namespace normgen {
namespace {

const char *const kVendors[] = {"onednn", "torch"};
// normgen: the kernel a program gets (tuned dispatch); default: the Halide default schedule; mlir:
// the MLIR default; then Halide's autoschedulers on the same algorithm; then the vendors.
const char *const kImpls[] = {"normgen", "default", "mlir", "adams2019", "li2018", "mullapudi2016", "onednn", "torch", "scalar"};
const char *const kAutoschedulers[] = {"adams2019", "li2018", "mullapudi2016"};

struct Measure {
    double gbps = 0;
    double bytes = 0;    // per call
    std::string kernel;  // the row's label without " (tuned)": which compiled kernel it timed
};

struct Case {
    std::string layer, model, dtype, shape;
    std::map<std::string, Measure> impl;   // by implementation
    std::map<std::string, std::string> error;
    double copy_nt = 0, copy_plain = 0, read = 0, bytes = 0;
    // The layer's limit at this shape (the streaming copy, or a read + the copy when x is read
    // twice): median and spread of the case's interleaved samples as the tuned row carries them
    // (those taken up to and with its own timing, in its run), else as the last row does (which
    // saw all). Not the last row's where a tuned row has them: a file merged from several runs
    // (each row the median of its runs) may hold a case's rows from different runs, and a tuned
    // kernel's share of the limit is of the limit measured beside it (its `layer_frac`).
    double limit = 0, limit_p20 = 0, limit_p80 = 0;
    bool reads_twice = false, limit_of_tuned = false;
    double lim() const { return limit > 0 ? limit : std::max(copy_nt, copy_plain); }  // runs without limit counters: the faster copy
    std::string key() const { return layer + "/" + model + "/" + dtype + "/" + shape; }
    std::string label() const { return model + " " + shape + (dtype == "f32" ? "" : " " + dtype); }
    bool dram = false;
    // Best vendor GB/s and which; 0 when no vendor ran.
    std::pair<double, std::string> best_vendor() const {
        std::pair<double, std::string> b{0, ""};
        for (const char *v : kVendors) {
            auto it = impl.find(v);
            if (it != impl.end() && it->second.gbps > b.first) b = {it->second.gbps, v};
        }
        return b;
    }
};

// "layer/model/dtype/shape/impl/min_time:0.100/repeats:3/real_time" -> the five leading parts.
bool split_name(const std::string &run_name, std::vector<std::string> &parts) {
    parts.clear();
    std::stringstream ss(run_name);
    std::string p;
    while (std::getline(ss, p, '/'))
        if (p.find(':') == std::string::npos && p != "real_time" && p != "process_time") parts.push_back(p);
    return parts.size() == 5;
}

double num(const json &j, const char *key) {
    auto it = j.find(key);
    return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

double seconds_of(const json &b) {
    const double t = num(b, "real_time");
    const std::string u = b.value("time_unit", "ns");
    const double scale = u == "s" ? 1 : u == "ms" ? 1e-3 : u == "us" ? 1e-6 : 1e-9;
    return t * scale;
}

std::string fixed(double v, int prec) {
    std::ostringstream o;
    o << std::fixed << std::setprecision(prec) << v;
    return o.str();
}

std::string md_escape(std::string s) {
    for (size_t i = 0; (i = s.find('|', i)) != std::string::npos; i += 2) s.replace(i, 1, "\\|");
    return s;
}

struct Parsed {
    std::vector<Case> cases;
    json context;
    size_t ignored = 0;
};

Parsed parse(const std::string &path) {
    std::ifstream in(path);
    if (!in) throw UserError("cannot open '" + path + "'");
    std::stringstream text;
    text << in.rdbuf();
    // Google Benchmark writes a value that is not a number as a bare NaN or Infinity (its "cv"
    // aggregate of a counter that is 0 in every repetition is 0 / 0), which JSON does not have:
    // read as null (a value the report never uses).
    static const std::regex not_json(R"((:\s*)-?(NaN|Infinity)(\s*[,}\n]))");
    json j;
    try {
        j = json::parse(std::regex_replace(text.str(), not_json, "$1null$3"));
    } catch (const json::parse_error &e) {
        throw UserError("'" + path + "' is not valid JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("benchmarks") || !j["benchmarks"].is_array())
        throw UserError("'" + path + "' has no \"benchmarks\" array: not Google Benchmark JSON (run normgen_bench with "
                        "--benchmark_out=FILE --benchmark_out_format=json)");
    Parsed r;
    r.context = j.value("context", json::object());
    std::map<std::string, size_t> index;
    // Medians where the run has aggregates; single iterations otherwise.
    std::set<std::string> has_median;
    for (const json &b : j["benchmarks"])
        if (b.value("aggregate_name", "") == "median") has_median.insert(b.value("run_name", ""));
    std::vector<std::string> parts;
    for (const json &b : j["benchmarks"]) {
        if (!b.is_object()) continue;
        const std::string run_name = b.value("run_name", b.value("name", ""));
        if (!split_name(run_name, parts)) {
            ++r.ignored;
            continue;
        }
        const bool error = b.value("error_occurred", false);
        const bool median = b.value("aggregate_name", "") == "median";
        if (!error && !median && (b.value("run_type", "") == "aggregate" || has_median.count(run_name))) continue;
        Case c;
        c.layer = parts[0];
        c.model = parts[1];
        c.dtype = parts[2];
        c.shape = parts[3];
        auto it = index.find(c.key());
        if (it == index.end()) {
            it = index.emplace(c.key(), r.cases.size()).first;
            r.cases.push_back(c);
        }
        Case &dst = r.cases[it->second];
        const std::string &impl = parts[4];
        if (error) {
            dst.error[impl] = b.value("error_message", "error");
            continue;
        }
        Measure m;
        m.gbps = num(b, "GBps");
        if (m.gbps <= 0) m.gbps = num(b, "bytes_per_second") / 1e9;
        m.bytes = num(b, "bytes_per_second") * seconds_of(b);
        m.kernel = b.value("label", "");
        if (const std::string tag = " (tuned)"; m.kernel.size() > tag.size() && m.kernel.compare(m.kernel.size() - tag.size(), tag.size(), tag) == 0)
            m.kernel.resize(m.kernel.size() - tag.size());
        dst.impl[impl] = m;
        // The rooflines: every row carries the case's samples so far; the last row saw them all.
        if (num(b, "copy_nt_GBps") > 0) dst.copy_nt = num(b, "copy_nt_GBps");
        if (num(b, "copy_plain_GBps") > 0) dst.copy_plain = num(b, "copy_plain_GBps");
        if (num(b, "read_GBps") > 0) dst.read = num(b, "read_GBps");
        if (num(b, "limit_GBps") > 0 && !dst.limit_of_tuned) {
            dst.limit_of_tuned = impl == "normgen";
            dst.limit = num(b, "limit_GBps");
            dst.limit_p20 = num(b, "limit_p20_GBps");
            dst.limit_p80 = num(b, "limit_p80_GBps");
            dst.reads_twice = num(b, "limit_reads_twice") > 0.5;
        }
        dst.bytes = std::max(dst.bytes, m.bytes);
    }
    if (r.cases.empty())
        throw UserError("'" + path + "' has no normgen_bench rows (names like layer_norm/llama3-8b/f32/4096x4096/normgen)");
    return r;
}

std::string context_line(const json &c) {
    std::ostringstream o;
    auto s = [&](const char *k) { return c.contains(k) && c[k].is_string() ? c[k].get<std::string>() : std::string(); };
    o << s("host_name") << ", " << c.value("num_cpus", 0) << " CPUs";
    if (!s("cpu").empty()) o << " (" << s("cpu") << ")";  // the model, ISA and caches (normgen_bench)
    if (!s("threads").empty()) o << ", threads: " << s("threads");
    if (!s("kernel_isa").empty()) o << ", kernels: " << s("kernel_isa");
    if (!s("onednn").empty()) o << ", oneDNN " << s("onednn");
    if (!s("torch").empty()) o << ", PyTorch " << s("torch");
    if (!s("date").empty()) o << ", " << s("date");
    return o.str();
}

double geomean(const std::vector<double> &v) {
    if (v.empty()) return 0;
    double s = 0;
    for (double x : v) s += std::log(x);
    return std::exp(s / v.size());
}

}  // namespace

// Several runs of one grid as one: per case (in the order of first appearance), every row from
// the run whose tuned row's GB/s is the median of the runs that have it (the lower middle of an
// even count; a case no run timed the tuned kernel of comes from the first run that has it). The
// context is the first run's.
Parsed merge_runs(std::vector<Parsed> runs) {
    Parsed m;
    m.context = runs.front().context;
    std::vector<std::string> keys;
    std::map<std::string, std::vector<const Case *>> by_key;
    for (const Parsed &r : runs) {
        m.ignored += r.ignored;
        for (const Case &c : r.cases) {
            if (!by_key.count(c.key())) keys.push_back(c.key());
            by_key[c.key()].push_back(&c);
        }
    }
    for (const std::string &k : keys) {
        std::vector<const Case *> timed;
        for (const Case *c : by_key[k])
            if (c->impl.count("normgen")) timed.push_back(c);
        const Case *pick = by_key[k].front();
        if (!timed.empty()) {
            std::stable_sort(timed.begin(), timed.end(),
                             [](const Case *a, const Case *b) { return a->impl.at("normgen").gbps < b->impl.at("normgen").gbps; });
            pick = timed[(timed.size() - 1) / 2];
        }
        m.cases.push_back(*pick);
    }
    return m;
}

int run_report(const ReportOptions &opt) {
    if (opt.inputs.empty()) throw UserError("report: no results file");
    std::vector<Parsed> runs;
    for (const std::string &f : opt.inputs) runs.push_back(parse(f));
    Parsed p = runs.size() == 1 ? std::move(runs.front()) : merge_runs(std::move(runs));
    // The DRAM-sized case of a layer: its largest byte count of at least 4 x the last-level cache
    // the benchmark's machine reported (context "llc_bytes"; bench/shape_grids.h), else beyond
    // 512 MiB (runs from before the context had it).
    double dram_bytes = 512.0 * 1048576;
    if (p.context.contains("llc_bytes") && p.context["llc_bytes"].is_string()) {
        try {
            dram_bytes = 4.0 * std::stod(p.context["llc_bytes"].get<std::string>());
        } catch (const std::exception &) {
        }
    }
    std::map<std::string, std::vector<Case *>> by_layer;
    std::vector<std::string> layers;
    for (Case &c : p.cases) {
        if (!by_layer.count(c.layer)) layers.push_back(c.layer);
        by_layer[c.layer].push_back(&c);
        c.dram = c.bytes >= dram_bytes;
    }
    for (auto &[l, cs] : by_layer) std::stable_sort(cs.begin(), cs.end(), [](const Case *a, const Case *b) { return a->bytes < b->bytes; });

    std::ostringstream md, summary, losses, behind, tables;
    json plot = {{"context", p.context.value("host_name", std::string("normgen_bench"))}, {"layers", json::array()}};
    std::vector<double> all_speedups, all_vs_default;
    std::map<std::string, std::vector<double>> all_vs_auto;  // autoscheduler -> tuned / it, per case
    int n_losses = 0, n_behind = 0;

    summary << "| layer | cases | tuned at the DRAM-sized case | % of the layer's limit there | geo-mean vs best vendor | cases < 1.0x | "
               "tuned / default (geo-mean) |\n"
               "|---|---:|---|---:|---:|---:|---:|\n";
    for (const std::string &layer : layers) {
        const std::vector<Case *> &cs = by_layer[layer];
        std::vector<double> speedups, vs_default;
        int below = 0;
        // The largest DRAM-sized case (cs is sorted by bytes), not the fastest of them.
        const Case *dram = nullptr;
        for (const Case *c : cs)
            if (c->dram && c->impl.count("normgen")) dram = c;

        tables << "\n## " << layer << "\n\n"
               << "| case | MiB | tuned | default | MLIR | Adams2019 | Li2018 | Mullapudi2016 | oneDNN | PyTorch | scalar | limit (p20-p80) | "
                  "% of limit | vs best vendor | vs default |\n"
               << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
        std::map<std::string, std::string> notes;  // "impl: message" -> first case
        json series = json::object(), roof = {{"limit", json::array()}, {"limit_p20", json::array()}, {"limit_p80", json::array()},
                                              {"copy_nt", json::array()}, {"copy_plain", json::array()}};
        for (const char *i : kImpls) series[i] = json::array();
        json labels = json::array();
        for (const Case *c : cs) {
            auto cell = [&](const char *impl) -> std::string {
                auto it = c->impl.find(impl);
                if (it != c->impl.end()) return fixed(it->second.gbps, 2);
                auto e = c->error.find(impl);
                if (e != c->error.end()) {
                    notes.emplace(std::string(impl) + ": " + e->second, c->label());
                    return e->second.rfind("unsupported", 0) == 0 ? "n/a" : "FAIL";
                }
                return "";
            };
            std::string ng = cell("normgen"), pct, vs, vd;
            auto bv = c->best_vendor();
            if (c->impl.count("normgen")) {
                const double g = c->impl.at("normgen").gbps;
                if (c->lim() > 0) pct = fixed(100 * g / c->lim(), 0) + "%";
                if (bv.first > 0) {
                    const double sp = g / bv.first;
                    speedups.push_back(sp);
                    all_speedups.push_back(sp);
                    vs = fixed(sp, 2) + "x";
                    if (sp < 1.0) {
                        ++below;
                        ++n_losses;
                        vs = "**" + vs + "**";
                        losses << "- " << c->key() << ": tuned " << fixed(g, 2) << " GB/s, " << bv.second << " " << fixed(bv.first, 2) << " GB/s ("
                               << fixed(sp, 2) << "x)\n";
                    }
                }
                // Tuned against the default and each autoscheduler, beside the noise of the case's
                // limit (its p20-p80 spread as a fraction of its median). Where the tuned row timed
                // the other row's own kernel (a class that kept the default record), the ratio is
                // 1 by construction: what the two rows differ by is the machine's noise.
                const double noise = c->limit > 0 ? (c->limit_p80 - c->limit_p20) / c->limit : 0;
                const std::string &tuned_kernel = c->impl.at("normgen").kernel;
                auto versus = [&](const char *other, const std::string &name, std::vector<double> *into) {
                    auto o = c->impl.find(other);
                    if (o == c->impl.end() || o->second.gbps <= 0) return std::string();
                    const bool same = !tuned_kernel.empty() && o->second.kernel == tuned_kernel;
                    const double r = same ? 1.0 : g / o->second.gbps;
                    if (into) into->push_back(r);
                    if (same) return std::string("1.00x (same kernel)");
                    if (r < 1.0 - std::max(0.02, noise / 2)) {
                        ++n_behind;
                        behind << "- " << c->key() << ": tuned " << fixed(g, 2) << " GB/s, " << name << " " << fixed(o->second.gbps, 2) << " GB/s ("
                               << fixed(r, 2) << "x; the limit's spread in this case: " << fixed(100 * noise, 0) << "%)\n";
                    }
                    return fixed(r, 2) + "x";
                };
                vd = versus("default", "default", &vs_default);
                for (const char *a : kAutoschedulers) versus(a, a, &all_vs_auto[a]);
            }
            if (!vd.empty()) all_vs_default.push_back(vs_default.back());
            std::string limit = c->lim() > 0 ? fixed(c->lim(), 1) : "";
            if (c->limit > 0) limit += " (" + fixed(c->limit_p20, 1) + "-" + fixed(c->limit_p80, 1) + ")" + (c->reads_twice ? " r+c" : "");
            tables << "| " << c->label() << " | " << fixed(c->bytes / 1048576.0, 1) << " | " << (ng.empty() ? "" : "**" + ng + "**") << " | "
                   << cell("default") << " | " << cell("mlir") << " | " << cell("adams2019") << " | " << cell("li2018") << " | " << cell("mullapudi2016")
                   << " | " << cell("onednn") << " | " << cell("torch") << " | " << cell("scalar") << " | " << limit << " | " << pct << " | " << vs << " | "
                   << vd << " |\n";
            labels.push_back(c->label());
            for (const char *i : kImpls) {
                auto it = c->impl.find(i);
                series[i].push_back(it == c->impl.end() ? json() : json(it->second.gbps));
            }
            roof["limit"].push_back(c->lim() > 0 ? json(c->lim()) : json());
            roof["limit_p20"].push_back(c->limit_p20 > 0 ? json(c->limit_p20) : json());
            roof["limit_p80"].push_back(c->limit_p80 > 0 ? json(c->limit_p80) : json());
            roof["copy_nt"].push_back(c->copy_nt > 0 ? json(c->copy_nt) : json());
            roof["copy_plain"].push_back(c->copy_plain > 0 ? json(c->copy_plain) : json());
        }
        for (const auto &[n, first] : notes) tables << "\n- " << md_escape(n) << " (first at " << first << ")";
        if (!notes.empty()) tables << "\n";
        if (opt.plots) tables << "\n![" << layer << "](" << layer << ".png)\n";
        json present = json::object();
        for (auto &[impl, ys] : series.items()) {
            bool any = false;
            for (const json &v : ys) any = any || !v.is_null();
            if (any) present[impl] = ys;
        }
        plot["layers"].push_back({{"name", layer}, {"cases", labels}, {"series", present}, {"rooflines", roof}});

        summary << "| " << layer << " | " << cs.size() << " | ";
        if (dram) {
            const double g = dram->impl.at("normgen").gbps;
            summary << fixed(g, 2) << " GB/s (" << dram->label() << ") | ";
            if (dram->lim() > 0) {
                summary << fixed(100 * g / dram->lim(), 0) << "%";
                if (dram->limit > 0)
                    summary << " (" << fixed(100 * g / dram->limit_p80, 0) << "-" << fixed(100 * g / dram->limit_p20, 0) << "%"
                            << (dram->reads_twice ? ", read + copy" : "") << ")";
            }
            summary << " | ";
        } else {
            summary << "— | — | ";
        }
        summary << (speedups.empty() ? "no vendor" : fixed(geomean(speedups), 2) + "x") << " | " << below << " | "
                << (vs_default.empty() ? "—" : fixed(geomean(vs_default), 2) + "x") << " |\n";
    }

    std::ostringstream autos;
    for (const char *a : kAutoschedulers) {
        const std::vector<double> &v = all_vs_auto[a];
        if (v.empty()) continue;
        autos << (autos.str().empty() ? "" : ", ") << a << " " << fixed(geomean(v), 2) << "x (" << v.size() << " cases)";
    }
    std::string input_names;
    for (const std::string &f : opt.inputs) input_names += (input_names.empty() ? "" : " ") + fs::path(f).filename().string();
    md << "# normgen benchmark report\n\n"
       << "Generated by `normgen report " << input_names << "` from Google Benchmark JSON of `normgen_bench`"
       << (opt.inputs.size() > 1 ? " (" + std::to_string(opt.inputs.size()) + " runs; each case's rows from the run of its tuned row's median)" : "")
       << ".\n"
       << "Machine: " << context_line(p.context) << ".\n\n"
       << "GB/s count the floor traffic of each case (x read once, y written once, plus parameters and\n"
       << "extra outputs; a backward layer `*_grad`: x, the saved statistics and every upstream gradient read\n"
       << "once, d_x written once, plus the parameters and their gradients), the same byte count for every\n"
       << "implementation; medians of the repetitions. The DRAM-sized case of a layer: its largest one of at\n"
       << "least 4 x the last-level cache the benchmark's machine reported.\n"
       << "`tuned` is the kernel a program gets for the case's shapes (Registry::select_for: the kernel tuning\n"
       << "chose for the shape class on this CPU, else the default), `default` the Halide kernel with the default\n"
       << "schedule record, `MLIR` the mlir-cpu kernel with its default record, Adams2019 / Li2018 / Mullapudi2016\n"
       << "Halide's autoschedulers on the same algorithm with the case's shape as estimates.\n"
       << "`limit`: the layer's limit at the case, measured interleaved with the implementations (median and\n"
       << "p20-p80 of the case's samples up to and with the tuned row's timing, in its run: a file merged from\n"
       << "several runs may hold a case's rows from different runs): a copy of the same bytes (the faster of\n"
       << "non-temporal and ordinary stores), or for a layer whose statistics span more than the cache holds\n"
       << "(`r+c`) a read-only sweep of x followed by that copy.\n"
       << "`% of limit`, `vs best vendor` (max of oneDNN and PyTorch) and `vs default` are the tuned kernel's;\n"
       << "every implementation was checked against the float64 reference before it was timed. Where the tuned\n"
       << "row ran the default's own kernel (the class kept the default record), `vs default` is 1.00x (same\n"
       << "kernel): the two rows then differ by the machine's noise only.\n\n"
       << "## Summary\n\n"
       << summary.str() << "\n"
       << "Across the grid: geo-mean " << (all_speedups.empty() ? std::string("—") : fixed(geomean(all_speedups), 2) + "x")
       << " over the best vendor on " << all_speedups.size() << " cases with a vendor; normgen is slower on " << n_losses << ".";
    if (!all_vs_default.empty()) md << " Tuned / default: geo-mean " << fixed(geomean(all_vs_default), 2) << "x on " << all_vs_default.size() << " cases.";
    if (!autos.str().empty()) md << " Tuned / autoscheduler: " << autos.str() << ".";
    md << "\n\n## Where normgen loses\n\n"
       << (n_losses ? losses.str() : std::string("Nowhere: no case below 1.0x.\n"))
       << "\n## Where the tuned kernel is behind the default or an autoscheduler\n\n"
       << (n_behind ? behind.str() : std::string("Nowhere, beyond the noise (2%, or half the case's limit spread).\n")) << tables.str();

    // Everything is computed: now write.
    std::error_code ec;
    fs::create_directories(opt.out_dir, ec);
    if (ec) throw UserError("cannot create '" + opt.out_dir + "': " + ec.message());
    const fs::path dir(opt.out_dir);
    {
        std::ofstream f(dir / "report.md");
        f << md.str();
        if (!f) throw UserError("cannot write '" + (dir / "report.md").string() + "'");
    }
    {
        std::ofstream f(dir / "data.json");
        f << plot.dump(1) << "\n";
    }
    std::cerr << "normgen report: " << p.cases.size() << " cases, " << layers.size() << " layers -> " << (dir / "report.md").string() << "\n";
    if (p.ignored) std::cerr << "normgen report: ignored " << p.ignored << " rows that are not CASE/IMPL rows (e.g. copy rows)\n";
    if (opt.print) std::cout << md.str();
    if (!opt.plots) return 0;

    if (dir.string().find('\'') != std::string::npos) {
        std::cerr << "normgen report: plots skipped: the output folder's name contains a quote\n";
        return 0;
    }
    // Debian's python3 has python3-matplotlib; a python3 earlier on PATH (a venv) may not.
    std::string python;
    for (const char *c : {"python3", "/usr/bin/python3"})
        if (std::system((std::string(c) + " -c 'import matplotlib' >/dev/null 2>&1").c_str()) == 0) {
            python = c;
            break;
        }
    const std::string cmd = python + " - '" + (dir / "data.json").string() + "' '" + dir.string() + "'";
    FILE *py = python.empty() ? nullptr : popen(cmd.c_str(), "w");
    int rc = -1;
    if (py) {
        std::fputs(kReportPlotScript, py);
        rc = pclose(py);
    }
    if (rc != 0)
        std::cerr << "normgen report: plots skipped: `python3` with matplotlib (Debian: python3-matplotlib) failed or is missing; "
                     "report.md is complete\n";
    else
        std::cerr << "normgen report: plots " << (dir / "<layer>.png").string() << "\n";
    return 0;
}

}  // namespace normgen
