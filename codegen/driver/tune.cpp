#include "codegen/driver/tune.h"

#include "bench/shape_grids.h"
#include "codegen/common/manifest.h"
#include "codegen/common/tuning_db.h"
#include "codegen/common/tuning_search.h"
#include "codegen/halide/aot.h"
#include "codegen/halide/autoschedule.h"
#include "codegen/halide/jit.h"
#include "codegen/tool/options.h"
#include "codegen/tool/subprocess.h"
#include "dsl/checker.h"
#include "dsl/grad.h"
#include "dsl/printer.h"
#include "runtime/errors.h"

#include <nlohmann/json.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#ifndef NORMGEN_SOURCE_ROOT
#define NORMGEN_SOURCE_ROOT "."
#endif

namespace normgen {

namespace fs = std::filesystem;
using nlohmann::json;

const char *kTuneUsage = R"(normgen tune - search the schedules of a declaration's kernels for its shapes on this machine.

usage: normgen tune FILE.norm... | --catalog [--backend halide,mlir] [--dtype f32,bf16,f16|all]
                    [--shapes grid|SIZES[;SIZES...]] [--budget SECONDS] [--time MINUTES] [--db DIR]
                    [--grad] [--cache DIR] [--rounds N] [--no-autoschedulers] [--dry-run] [--reindex]

  For each declaration, storage type and shape class (the storage type, each axis of the main
  output bucketed to a power of two (exactly up to 8), the innermost extent's alignment class and
  where the bytes live against this CPU's caches), starting from both backends' default schedules:
  one knob of the schedule record at a time, each value tried from the best record so far, kept
  when it beats it beyond the noise: the batch's candidate with the lowest median, over the
  batch's rounds, of its time over the best's in the same round (if below 0.995) is timed against
  the best alone for about 6 s more (24-96 rounds) and kept when the median of those ratios is
  below 1 - max(1%, about two standard errors). Every candidate is compiled ahead of time, checked
  against the float64 reference (the case's tensors, then a spread of the verifier's shapes with a
  large mean) before it is timed; a wrong one is discarded and logged (DIR/rejected.log). Timing
  (normgen-measure, beside this program) is interleaved round by round with both defaults and the
  copy rooflines of the same bytes; the last batch times the defaults, each backend's best, the
  class's last choice on this CPU and Halide's autoschedulers together, and its fastest (again by
  the rounds' ratios, to the Halide default) is the class's choice.
  Ctrl-C stops after the batch at hand and keeps what was found.

  --backend LIST     halide, mlir or both (default both; mlir needs normgen-mlir beside normgen)
  --dtype LIST       storage types (default f32)
  --shapes S         grid: the benchmark grid's shapes of the layer (bench/shape_grids.h; short:
                     the README run command's short grid); or
                     sizes by axis, `rows=4096,d=4096`, or the first input's declared shape,
                     `4096x4096` (several separated by ';'). Shapes of one class are tuned once.
  --catalog          every catalog layer the benchmark grid has (forward, or backward with --grad),
                     at the grid's shapes: the classes a user's own machine needs tuned
  --budget SECONDS   per (layer, storage type, shape class), compiling included (default 60)
  --time MINUTES     the whole run: the classes are counted first, then each gets an equal share
                     of the time that is left when it starts (at most --budget when given, at least
                     15 s); when the time cannot give every class 15 s, the DRAM-sized classes go
                     first, then L3, then L2, and the classes left over keep their previous choice
                     (or the default) and are listed. The run ends with what it found: each class's
                     choice against the default and the limit, and the geometric mean.
  --db DIR           the tuning database (default ./tuning): DIR/records/<layer>/<type>-<cpu>.jsonl
                     gets one line per measurement, DIR/best/<layer>.json the chosen schedule per key,
                     rewritten after every shape class (normgen compile --tuning DIR and
                     normgen_add_kernels(... TUNING DIR) build them)
  --grad             tune the backward layer (`normgen grad FILE`) instead
  --cache DIR        keep the compiled candidates there (default: a temporary folder); reused
                     only by the same build of normgen on the same declaration
  --rounds N         rounds of timing per batch (default 7; the last batch twice as many)
  --no-autoschedulers  skip the Adams2019 / Li2018 / Mullapudi2016 baselines
  --dry-run          print the shape classes and the schedule space; compile and time nothing
  --reindex          rewrite the files' best/<layer>.json from their records (the choices of the
                     latest run per key, stale records left out); compile and time nothing

examples:
  normgen tune dsl/catalog/rms_norm.norm --shapes 'rows=16384,d=8192' --budget 30
  normgen tune --catalog --dtype f32 --time 30 --db generated/tuning     (scripts/tune.sh)
  normgen tune my_norm.norm --dtype f32,bf16 --shapes '4096x4096;32x4096' --db tuning/
)";

const char *kAutoscheduleUsage = R"(normgen autoschedule - Halide's autoschedulers on a declaration's kernels, as benchmark baselines.

usage: normgen autoschedule FILE.norm... -o DIR [--shapes grid|short|SIZES[;SIZES...]] [--dtype LIST] [--grad]

  For every shape (default: the benchmark grid's shapes of the layer) and storage type, the same
  lowered algorithm normgen schedules itself, scheduled instead by Adams2019, Li2018 and
  Mullapudi2016 (the plugins of the Halide 21 wheel; parallelism = this machine's threads, the
  shape as estimates), each compiled into a kernel library under DIR. normgen_bench
  --normgen_extra=DIR times them as rows of their own beside the tuned and default kernels
  (checked against the float64 reference first, like every row). Compiled kernels are kept: a
  second run builds only what is missing.
)";

namespace {

// The benchmark grid a tuning run takes its shapes from: forward or backward, full or short.
std::vector<bench::GridCase> tuning_grid(bool grad, bool short_grid) {
    return short_grid ? (grad ? bench::short_backward_grid() : bench::short_grid()) : (grad ? bench::backward_grid() : bench::model_grid());
}

}  // namespace

// The catalog's declarations of every layer the benchmark grid has (the backward grid's with
// `grad`), in the grid's order.
std::vector<std::string> catalog_grid_files(bool grad, bool short_grid) {
    const std::vector<bench::GridCase> grid = tuning_grid(grad, short_grid);
    std::vector<std::string> files;
    for (const bench::GridCase &g : grid) {
        const std::string f = (fs::path(NORMGEN_SOURCE_ROOT) / "dsl" / "catalog" / (g.layer + ".norm")).string();
        if (std::find(files.begin(), files.end(), f) != files.end()) continue;
        if (!fs::exists(f)) throw UserError("tune: --catalog: " + f + " is missing (the catalog ships with normgen's source)");
        files.push_back(f);
    }
    return files;
}

TuneOptions parse_tune_args(const std::vector<std::string> &args) {
    TuneOptions o;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string &a = args[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= args.size()) throw Usage("tune: " + a + " needs a value");
            return args[++i];
        };
        auto number = [&](const std::string &v) {
            char *end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            if (v.empty() || *end || !(x > 0)) throw Usage("tune: " + a + " takes a positive number, not '" + v + "'");
            return x;
        };
        if (a == "--backend") {
            o.backends = split_list(value());
            for (const std::string &b : o.backends)
                if (b != "halide" && b != "mlir") throw Usage("tune: --backend '" + b + "' (halide, mlir)");
            if (o.backends.empty()) throw Usage("tune: --backend needs halide, mlir or both");
        } else if (a == "--dtype") o.dtypes = parse_dtypes(value());
        else if (a == "--shapes") o.shapes = value();
        else if (a == "--budget") {
            o.budget_s = number(value());
            o.budget_given = true;
        } else if (a == "--time") o.total_s = 60 * number(value());
        else if (a == "--catalog") o.catalog = true;
        else if (a == "--db") o.db = value();
        else if (a == "--cache") o.cache = value();
        else if (a == "--grad") o.grad = true;
        else if (a == "--rounds") o.rounds = std::max(1, (int)number(value()));
        else if (a == "--no-autoschedulers") o.autoschedulers = false;
        else if (a == "--dry-run") o.dry_run = true;
        else if (a == "--reindex") o.reindex = true;
        else if (a == "-o" || a == "--out") o.autoschedule_out = value();
        else if (!a.empty() && a[0] == '-') throw Usage("tune: unknown option '" + a + "'");
        else o.files.push_back(a);
    }
    if (o.catalog && !o.files.empty()) throw Usage("tune: give .norm files or --catalog, not both");
    if (o.catalog && o.shapes != "grid" && o.shapes != "short") throw Usage("tune: --catalog tunes the grid's shapes (--shapes grid or short)");
    if (o.catalog) o.files = catalog_grid_files(o.grad, o.shapes == "short");
    if (o.files.empty()) throw Usage("tune: give at least one .norm file (or --catalog)");
    if (o.shapes.empty()) throw Usage("tune: --shapes needs 'grid' or sizes");
    return o;
}

namespace {

std::atomic<int> g_interrupts{0};
extern "C" void on_sigint(int) { g_interrupts.fetch_add(1); }

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// text_hash (FNV-1a) of the bytes of the programs that generate the candidates: this one (the
// Halide backend is linked in) and normgen-mlir beside it. A candidate's object is reused only by the
// build that made it: a change to the code generated for an unchanged record (a schedule's lowering,
// a conversion) cannot let a retune time the old code, with no number to remember to raise.
std::string code_generator_fingerprint() {
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    std::string bytes;
    for (const std::string &p : {ec ? std::string() : self.string(), sibling_tool("normgen-mlir")}) {
        std::ifstream in(p, std::ios::binary);
        // An absent program (no MLIR backend) leaves a marker: still a distinct key.
        bytes += in ? std::string(std::istreambuf_iterator<char>(in), {}) : std::string("\xff");
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)text_hash(bytes));
    return hex;
}

// Runs `work` in a child process limited to `seconds` of wall time and `bytes` of address space:
// Halide's autoschedulers can take minutes and more memory than the machine has on some pipelines
// (Adams2019 on BatchNorm training at 32 x 64 x 112 x 112 was killed at 24 GiB here). "" when it
// finished, else why not.
std::string in_child(const std::function<void()> &work, int seconds, int64_t bytes) {
    std::cout.flush();
    std::cerr.flush();
    const pid_t pid = fork();
    if (pid < 0) return "fork failed";
    if (pid == 0) {
        rlimit r{(rlim_t)bytes, (rlim_t)bytes};
        setrlimit(RLIMIT_AS, &r);
        alarm((unsigned)seconds);
        int rc = 0;
        try {
            work();
        } catch (const std::exception &e) {
            std::fprintf(stderr, "%s\n", e.what());
            rc = 1;
        } catch (...) {
            rc = 1;
        }
        std::fflush(nullptr);
        _exit(rc);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) return "did not finish within " + std::to_string(seconds) + " s";
    if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status)) + " (out of memory past " + std::to_string(bytes >> 30) + " GiB?)";
    return "failed (exit " + std::to_string(WEXITSTATUS(status)) + ")";
}

// The limits of one autoscheduler run.
constexpr int kAutoscheduleSeconds = 120;
constexpr int64_t kAutoscheduleBytes = int64_t(6) << 30;

std::string fmt(double v, int digits = 1) {
    char b[64];
    std::snprintf(b, sizeof b, "%.*f", digits, v);
    return b;
}

// One status line on a terminal (rewritten in place), plain lines otherwise.
class Progress {
public:
    Progress() : tty_(isatty(2)) {}
    void status(const std::string &s) {
        if (!tty_) return;
        std::string line = s.size() > 150 ? s.substr(0, 147) + "..." : s;
        std::cerr << "\r\033[K" << line << std::flush;
        shown_ = true;
    }
    void line(const std::string &s) {
        if (shown_) std::cerr << "\r\033[K";
        shown_ = false;
        std::cerr << s << "\n" << std::flush;
    }

private:
    bool tty_;
    bool shown_ = false;
};

struct Built {
    std::string manifest, library;
};

struct Candidate {
    std::string backend;        // halide | mlir
    std::string autoscheduler;  // set for an autoscheduler baseline
    json schedule;              // the record (kind + knobs), or {"autoscheduler": name}
    std::string label;          // what it is, in words
    std::string id;             // normgen-measure's name for it ("" until loaded)
};

struct Timing {
    double median = 0, p20 = 0, p80 = 0;
    int reps = 0;
    std::vector<double> samples;  // seconds per call, round by round (normgen-measure's samples_s)
    std::string error;
};

SearchTiming search_timing(const Timing &t) { return SearchTiming{t.median, t.p20, t.p80, t.samples}; }

struct BatchResult {
    std::map<std::string, Timing> t;  // by candidate id
    double limit_gbps = 0, limit_p20 = 0, limit_p80 = 0;
    std::string limit_kind;
    double cpu_share = 0;
};

// Everything a class's tuning needs about the layer and the shape.
struct ClassJob {
    std::string file;
    const NormSpec *spec = nullptr;     // the layer tuned (the backward with --grad)
    const NormSpec *forward = nullptr;  // with --grad: the forward (its full kernel fills the saved statistics)
    DType dtype = DType::F32;
    KernelPlan plan;
    std::map<std::string, int64_t> sizes;
    std::vector<int64_t> extents;
    ShapeClass shape;
    LayerLimit limit;
};

class Tuner {
public:
    explicit Tuner(const TuneOptions &o) : o_(o), db_(o.db) {
        run_id_ = utc_now() + "-" + std::to_string(getpid());
        if (!o_.autoschedule_out.empty()) {
            cache_ = o_.autoschedule_out;
            fs::create_directories(cache_);
        } else if (o_.cache.empty()) {
            char tmpl[] = "/tmp/normgen-tune-XXXXXX";
            if (!mkdtemp(tmpl)) throw UserError("tune: cannot create a temporary folder for the candidates");
            cache_ = tmpl;
            temp_cache_ = true;
        } else {
            cache_ = o_.cache;
            fs::create_directories(cache_);
        }
    }
    ~Tuner() {
        measure_.reset();
        if (temp_cache_) {
            std::error_code ec;
            fs::remove_all(cache_, ec);
        }
    }

    int run() {
        const CpuFingerprint &cpu = this_cpu();
        if (cpu.isa == "none") throw UserError("tune: this CPU has no AVX2 (normgen's CPU kernels need AVX2, FMA and F16C)");
        if (o_.autoschedule_out.empty())
            progress_.line("normgen tune: " + cpu.text() + ", " + cpu.vendor + "; " + (o_.total_s > 0 ? clock_text(o_.total_s) + " in all" : "budget " + fmt(o_.budget_s, 0) + " s per shape class") +
                           "; database " + o_.db + (o_.dry_run ? " (dry run)" : ""));
        else
            progress_.line("normgen autoschedule: " + cpu.text() + " -> " + o_.autoschedule_out);
        struct sigaction sa {};
        sa.sa_handler = on_sigint;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = 0;
        struct sigaction old {};
        sigaction(SIGINT, &sa, &old);
        if (o_.reindex) return reindex();
        int status = 0;
        try {
            for (const std::string &f : o_.files) {
                if (g_interrupts) break;
                tune_file(f);
            }
            tune_jobs();
        } catch (...) {
            finish();
            sigaction(SIGINT, &old, nullptr);
            throw;
        }
        finish();
        sigaction(SIGINT, &old, nullptr);
        if (g_interrupts) {
            progress_.line("normgen tune: interrupted; what was measured is in " + (fs::path(o_.db) / "records").string() + "/");
            status = 130;
        }
        return status;
    }

private:
    TuneOptions o_;
    TuningDb db_;
    std::string run_id_, cache_;
    std::string generator_key_;  // code_generator_fingerprint(), computed on first use
    std::set<std::string> pruned_;  // layers whose stale candidate folders candidate_dir removed
    bool temp_cache_ = false;
    std::unique_ptr<LineProcess> measure_;
    std::map<std::string, std::string> loaded_;  // library -> id in normgen-measure
    std::set<std::string> swept_;                // ids whose sweep passed
    std::map<std::string, std::string> rejected_;  // id -> why
    std::map<std::string, KernelIdentity> tuned_layers_;
    Progress progress_;
    const Isa isa_ = hl::isa_of(hl::parse_target("host"));  // the ISA this host's kernels are compiled for
    int next_id_ = 0;
    int classes_done_ = 0;
    std::deque<NormSpec> specs_;   // the declarations the jobs point into
    std::vector<ClassJob> jobs_;   // every shape class to tune, collected before the first is tuned
    double class_budget_s_ = 60;   // the class at hand's budget (--budget, or its share of --time)
    // A tuned class's outcome, for the summary.
    struct Found {
        std::string head, choice;
        double gbps = 0, frac = 0, vs_default = 0;
        bool is_default = false;
    };
    std::vector<Found> found_;
    static constexpr double kMinClassSeconds = 15;

    void finish() {
        if (!tuned_layers_.empty()) {
            std::string layers;
            for (const auto &[l, id] : tuned_layers_) layers += (layers.empty() ? "" : ", ") + l;
            progress_.line("normgen tune: " + std::to_string(classes_done_) + " shape class(es) tuned; index rewritten for " + layers + " (" +
                           (fs::path(o_.db) / "best").string() + "/)");
        }
    }

    // --reindex: each file's layer (its backward under --grad) compacted from its records.
    int reindex() {
        std::map<std::string, KernelIdentity> layers;
        for (const std::string &f : o_.files) {
            const NormSpec forward = load_norm_file(f);
            const NormSpec spec = o_.grad ? differentiate(forward).spec : forward;
            layers[spec.name] = kernel_identity(spec);
        }
        for (const auto &[layer, n] : db_.compact(layers)) {
            std::vector<std::string> notes;
            const std::vector<TuningRecord> all = db_.records(layer, &notes);
            std::map<std::string, int> stale;  // why -> records
            for (const TuningRecord &r : all)
                if (std::string why = layers.at(layer).stale(r.identity, r.when); !why.empty()) ++stale[why];
            for (const auto &[why, count] : stale) notes.push_back(std::to_string(count) + " stale record(s) left out: " + why);
            for (const std::string &note : notes) progress_.line("  note: " + note);
            progress_.line("normgen tune: " + db_.best_path(layer) + ": " + std::to_string(n) + " choice(s) from " + std::to_string(all.size()) +
                           " record(s)");
        }
        return 0;
    }

    // ---- shapes -------------------------------------------------------------------------------------

    // The shapes of `forward`'s layer to tune in `dtype`: the grid's cases of that layer and type
    // (all of the layer's when the grid has none in that type), or --shapes.
    std::vector<std::map<std::string, int64_t>> shapes_of(const NormSpec &forward, bool grad, DType dtype) const {
        std::vector<std::map<std::string, int64_t>> out;
        if (o_.shapes == "grid" || o_.shapes == "short") {
            const std::vector<bench::GridCase> grid = tuning_grid(grad, o_.shapes == "short");
            for (const bench::GridCase &g : grid)
                if (g.layer == forward.name && g.dtype == dtype && std::find(out.begin(), out.end(), g.sizes) == out.end()) out.push_back(g.sizes);
            if (out.empty())
                for (const bench::GridCase &g : grid)
                    if (g.layer == forward.name && std::find(out.begin(), out.end(), g.sizes) == out.end()) out.push_back(g.sizes);
            if (out.empty())
                throw UserError("tune: the benchmark grid has no " + std::string(grad ? "backward " : "") + "shapes of layer '" + forward.name +
                                "'; give --shapes (e.g. rows=4096,d=4096)");
            return out;
        }
        std::stringstream ss(o_.shapes);
        for (std::string item; std::getline(ss, item, ';');) {
            if (item.empty()) continue;
            if (item.find('=') != std::string::npos) {
                out.push_back(parse_sizes(item));
                continue;
            }
            // AxBxC: the first input's declared shape.
            const std::vector<AxisId> &dims = forward.tensors.at(0).dims;
            std::vector<int64_t> v;
            std::stringstream xs(item);
            for (std::string n; std::getline(xs, n, 'x');) {
                char *end = nullptr;
                long long e = std::strtoll(n.c_str(), &end, 10);
                if (n.empty() || *end || e < 1) throw UserError("tune: --shapes '" + item + "' is not AxBx... or axis=extent,...");
                v.push_back(e);
            }
            if (v.size() != dims.size())
                throw UserError("tune: --shapes '" + item + "' has " + std::to_string(v.size()) + " extents; " + forward.tensors[0].name + " is " +
                                forward.axes_text(dims));
            std::map<std::string, int64_t> s;
            for (size_t i = 0; i < dims.size(); ++i) s[forward.axes[dims[i]].name] = v[i];
            out.push_back(s);
        }
        if (out.empty()) throw UserError("tune: no shapes in --shapes '" + o_.shapes + "'");
        return out;
    }

    // ---- the layer ----------------------------------------------------------------------------------

    void tune_file(const std::string &file) {
        const NormSpec &forward = specs_.emplace_back(load_norm_file(file));
        const NormSpec &spec = o_.grad ? specs_.emplace_back(differentiate(forward).spec) : forward;
        if (o_.shapes != "grid" && o_.shapes != "short") shapes_of(forward, o_.grad, DType::F32);  // a malformed --shapes is refused before anything runs
        for (DType dtype : o_.dtypes) {
            const std::vector<std::map<std::string, int64_t>> shapes = shapes_of(forward, o_.grad, dtype);
            const std::vector<DType> allowed = spec.storage_of(spec.tensors.empty() ? spec.outputs.at(0).name : spec.tensors[0].name);
            if (std::find(allowed.begin(), allowed.end(), dtype) == allowed.end()) {
                progress_.line("  " + spec.name + ": no " + dtype_name(dtype) + " storage in its declaration; skipped");
                continue;
            }
            // One job per shape class: the first shape of each class stands for it.
            std::map<std::string, ClassJob> classes;
            std::vector<std::string> order;
            for (const auto &sizes : shapes) {
                ClassJob j;
                j.file = file;
                j.spec = &spec;
                j.forward = o_.grad ? &forward : nullptr;
                j.dtype = dtype;
                j.plan = make_plan(spec, dtype, Variant::Core);
                j.sizes = sizes;
                j.extents = extents_from_sizes(spec, sizes);  // a backward has its forward's axes
                j.shape = shape_class(spec, j.plan, j.extents, this_cpu());
                j.limit = layer_limit(spec, j.plan, j.extents, this_cpu());
                const std::string key = j.shape.key();
                if (classes.emplace(key, j).second) order.push_back(key);
            }
            if (!o_.autoschedule_out.empty()) {
                autoschedule_shapes(spec, forward, dtype, shapes);
                continue;
            }
            for (const std::string &key : order) jobs_.push_back(classes.at(key));
        }
    }

    // Every class collected from the files, each within its budget: --budget, or with --time its
    // share of what is left (the DRAM-sized classes first when the time is short), then what it found.
    void tune_jobs() {
        const size_t n = jobs_.size();
        if (n == 0) return;
        const double t_start = now_s();
        std::vector<size_t> order(n);
        for (size_t i = 0; i < n; ++i) order[i] = i;
        const bool short_of_time = o_.total_s > 0 && o_.total_s / (double)n < kMinClassSeconds;
        if (short_of_time) {
            auto rank = [](const std::string &f) { return f == "dram" ? 0 : f == "l3" ? 1 : 2; };
            std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rank(jobs_[a].shape.footprint) < rank(jobs_[b].shape.footprint); });
        }
        if (o_.total_s > 0)
            progress_.line("normgen tune: " + std::to_string(n) + " shape class(es) in " + clock_text(o_.total_s) + ": about " +
                           fmt(std::min(o_.total_s / (double)n, o_.budget_given ? o_.budget_s : 1e9), 0) + " s each" +
                           (short_of_time ? " (short of " + fmt(kMinClassSeconds, 0) + " s a class: DRAM-sized classes first)" : ""));
        std::vector<std::string> untuned;
        for (size_t k = 0; k < n; ++k) {
            const ClassJob &j = jobs_[order[k]];
            if (g_interrupts) {
                untuned.push_back(header(j));
                continue;
            }
            class_budget_s_ = o_.budget_s;
            if (o_.total_s > 0) {
                const double left = o_.total_s - (now_s() - t_start);
                const double share = left / (double)(n - k);
                if (share < kMinClassSeconds && !o_.dry_run) {
                    untuned.push_back(header(j));
                    continue;
                }
                class_budget_s_ = o_.budget_given ? std::min(share, o_.budget_s) : share;
            }
            progress_.line("[" + std::to_string(k + 1) + "/" + std::to_string(n) + "] " + header(j) + ": budget " + fmt(class_budget_s_, 0) +
                           " s; " + clock_text(now_s() - t_start) + (o_.total_s > 0 ? " of " + clock_text(o_.total_s) : "") + " gone");
            tune_class(j);
        }
        if (o_.dry_run) return;
        summarize(now_s() - t_start, untuned);
    }

    static std::string clock_text(double s) {
        char b[32];
        std::snprintf(b, sizeof b, "%d:%02d", (int)(s / 60), (int)s % 60);
        return b;
    }

    // What the run found: each tuned class's choice against the Halide default and its limit.
    void summarize(double seconds, const std::vector<std::string> &untuned) {
        if (found_.empty() && untuned.empty()) return;
        progress_.line("normgen tune: what it found on " + this_cpu().text() + " (" + std::to_string(found_.size()) + " class(es) in " +
                       clock_text(seconds) + "):");
        double log_sum = 0;
        int counted = 0, kept_default = 0, faster = 0;
        for (const Found &f : found_) {
            progress_.line("  " + f.head + ": " + f.choice + ", " + fmt(f.gbps) + " GB/s = " + fmt(100 * f.frac, 0) + "% of its limit, " +
                           (f.vs_default > 0 ? fmt(f.vs_default, 2) + "x the default" : "the default not timed"));
            if (f.vs_default > 0) {
                log_sum += std::log(f.vs_default);
                ++counted;
                faster += f.vs_default > 1.02;
            }
            kept_default += f.is_default;
        }
        if (counted)
            progress_.line("  tuned / default: geometric mean " + fmt(std::exp(log_sum / counted), 2) + "x over " + std::to_string(counted) +
                           " class(es); faster than the default by > 2% in " + std::to_string(faster) + ", the default kept in " +
                           std::to_string(kept_default));
        if (!untuned.empty()) {
            progress_.line("  not tuned (" + std::string(g_interrupts ? "interrupted" : "out of time") + "): " + std::to_string(untuned.size()) +
                           " class(es); they keep their previous choice, or the default:");
            for (const std::string &u : untuned) progress_.line("    " + u);
        }
    }

    // `normgen autoschedule`: every shape's three autoscheduled kernels, built into the output folder.
    void autoschedule_shapes(const NormSpec &spec, const NormSpec &forward, DType dtype, const std::vector<std::map<std::string, int64_t>> &shapes) {
        for (const auto &sizes : shapes) {
            ClassJob j;
            j.file = "";
            j.spec = &spec;
            j.dtype = dtype;
            j.plan = make_plan(spec, dtype, Variant::Core);
            j.extents = extents_from_sizes(spec, sizes);
            for (const std::string &a : hl::autoscheduler_names()) {
                if (g_interrupts) return;
                const double t0 = now_s();
                progress_.status("  " + spec.name + " " + dtype_name(dtype) + " " + sizes_text(spec, j.extents) + ": " + a);
                const std::string what = "  " + spec.name + " " + dtype_name(dtype) + " " + sizes_text(spec, j.extents) + ": " + a;
                const std::string why = in_child([&] { build_halide(spec, dtype, Variant::Core, nullptr, a, &j, spec.file, o_.grad ? forward.name : ""); },
                                                 kAutoscheduleSeconds, kAutoscheduleBytes);
                progress_.line(what + (why.empty() ? " (" + fmt(now_s() - t0, 1) + " s)" : ": " + why));
            }
        }
    }

    static std::map<std::string, int64_t> sizes_by_atomic_name(const NormSpec &s, const std::vector<int64_t> &ext) {
        std::map<std::string, int64_t> m;
        for (size_t a = 0; a < s.axes.size(); ++a)
            if (!s.axes[a].is_split() && !s.axes[a].fixed_extent) m[s.axes[a].name] = ext[a];
        return m;
    }

    // ---- compiling candidates ---------------------------------------------------------------------

    // Per declaration text and build of the code generators, so an edited declaration or any other
    // build of normgen never reuses an old candidate's object (a hand-raised number did this before
    // and was forgotten once: a retune timed the old code for every record it had tried). The
    // layer's objects of other declarations or builds are removed on first use: nothing can reuse
    // them, and `normgen autoschedule`'s folder is loaded whole by normgen_bench --normgen_extra.
    std::string candidate_dir(const NormSpec &spec, DType dtype, Variant v, const std::string &what) {
        if (generator_key_.empty()) generator_key_ = code_generator_fingerprint();
        const std::string key = kernel_identity(spec).decl_hash + "-" + generator_key_;
        const fs::path layer_dir = fs::path(cache_) / spec.name;
        if (pruned_.insert(spec.name).second && fs::is_directory(layer_dir)) {
            // Listed first, removed after: removing during the iteration leaves what the iterator
            // sees next unspecified.
            std::error_code ec;
            std::vector<fs::path> stale;
            for (const fs::directory_entry &e : fs::directory_iterator(layer_dir, ec))
                if (e.path().filename() != key) stale.push_back(e.path());
            for (const fs::path &p : stale) fs::remove_all(p, ec);
        }
        return (layer_dir / key / dtype_name(dtype) / variant_name(v) / what).string();
    }

    // -Bsymbolic: the library's normgen_kernel_table returns its own normgen::kKernelTable even in
    // a program that has one of its own (normgen_bench, which links the catalog's: without it the
    // library's table bound to the program's, and every --normgen_extra library was refused).
    void link(const std::string &dir, const std::vector<std::string> &objects, Built &b) const {
        const char *cxx = std::getenv("CXX");
        std::vector<std::string> cmd{cxx && *cxx ? cxx : "c++", "-shared", "-fPIC", "-O1", "-Wl,-Bsymbolic", "-I", NORMGEN_SOURCE_ROOT,
                                     "-o", b.library + ".tmp", (fs::path(dir) / "kernel_table.cpp").string()};
        cmd.insert(cmd.end(), objects.begin(), objects.end());
        ProcessResult r = run_process(cmd);
        if (r.status != 0) throw std::runtime_error("linking the candidate in " + dir + " failed:\n" + r.output);
        fs::rename(b.library + ".tmp", b.library);
    }

    Built built_in(const std::string &dir) const {
        return {(fs::path(dir) / "manifest.json").string(), (fs::path(dir) / "kernel.so").string()};
    }

    // A Halide kernel of `spec` under `record` (or an autoscheduler's) for this host, as a library.
    Built build_halide(const NormSpec &spec, DType dtype, Variant variant, const ScheduleRecord *record, const std::string &autoscheduler,
                       const ClassJob *job, const std::string &source, const std::string &grad_of) {
        const std::string what = autoscheduler.empty() ? "halide-" + schedule_tag(record->to_json())
                                                       : "auto-" + autoscheduler + "-" + sizes_text(*job->spec, job->extents);
        const std::string dir = candidate_dir(spec, dtype, variant, what);
        Built b = built_in(dir);
        if (fs::exists(b.library)) return b;
        fs::create_directories(dir);
        const KernelPlan plan = make_plan(spec, dtype, variant);
        const Halide::Target t = hl::parse_target("host").with_feature(Halide::Target::NoRuntime).without_feature(Halide::Target::JIT);
        KernelEntryInfo info;
        info.backend = Backend::Halide;
        info.isa = hl::isa_of(t);
        info.source = source;
        info.target = t.to_string();
        info.cpu_features = hl::cpu_features(t);
        info.grad_of = grad_of;
        const std::string fn = kernel_function_name(spec.name, dtype, Backend::Halide, info.isa, variant);
        hl::CompiledObject c;
        ScheduleRecord defaults = choose_schedule(plan, ScheduleKind::HalideCpu, info.isa);
        // A candidate Halide refuses (a knob combination its scheduling rejects) is rejected like one
        // that fails its check, instead of ending the whole run as an internal error.
        hl::halide_errors_as_exceptions([&] {
            if (autoscheduler.empty()) {
                c = hl::compile_halide_kernel(spec, plan, *record, t, fn, dir, "");
                info.schedule = record;
            } else {
                const CpuFingerprint &cpu = this_cpu();
                c = hl::compile_autoscheduled_kernel(spec, plan, autoscheduler, job->extents, cpu.threads, cpu.l3, t, fn, dir);
                info.schedule = &defaults;  // the algorithm's parameters; the schedule is the autoscheduler's
            }
        });
        info.schedule_text = c.text;
        json e = manifest_entry(spec, plan, info);
        // An autoscheduler's kernel says what it is and the shape it was scheduled for (normgen_bench
        // --normgen_extra matches it to its case by these).
        std::string lower;
        for (char ch : autoscheduler) lower += (char)std::tolower((unsigned char)ch);
        if (!autoscheduler.empty()) e["baseline"] = {{"name", lower}, {"autoscheduler", autoscheduler}, {"sizes", sizes_by_atomic_name(*job->spec, job->extents)}};
        write_manifest(json::array({e}), b.manifest);
        write_kernel_table(json::array({e}), (fs::path(dir) / "kernel_table.cpp").string());
        link(dir, {c.object}, b);
        return b;
    }

    Built build_mlir(const ClassJob &j, const ScheduleRecord &record) {
        const std::string dir = candidate_dir(*j.spec, j.dtype, Variant::Core, "mlir-" + schedule_tag(record.to_json()));
        Built b = built_in(dir);
        if (fs::exists(b.library)) return b;
        fs::create_directories(dir);
        const std::string sched = (fs::path(dir) / "schedule.json").string();
        write_file_atomically(sched, record.to_json().dump() + "\n");
        std::vector<std::string> cmd{sibling_tool("normgen-mlir"), "compile", j.file, "--dtype", dtype_name(j.dtype), "--variants", "core",
                                     "--schedule", sched, "--out", dir, "--manifest", b.manifest,
                                     "--table", (fs::path(dir) / "kernel_table.cpp").string(), "--archive", "kernels.a"};
        if (o_.grad) cmd.push_back("--grad");
        ProcessResult r = run_process(cmd);
        if (r.status != 0) throw std::runtime_error("normgen-mlir compile failed:\n" + r.output);
        std::ifstream in(b.manifest);
        json m = json::parse(in);
        std::vector<std::string> objects;
        for (const json &e : m["kernels"])
            if (e.value("device", "cpu") == "cpu") objects.push_back((fs::path(dir) / (e["function"].get<std::string>() + ".o")).string());
        link(dir, objects, b);
        return b;
    }

    // ---- normgen-measure --------------------------------------------------------------------------

    json request(const json &cmd, const std::string &status = "") {
        if (!measure_) {
            const std::string tool = sibling_tool("normgen-measure");
            measure_ = std::make_unique<LineProcess>(std::vector<std::string>{tool});
        }
        measure_->send(cmd.dump());
        for (;;) {
            const std::string line = measure_->receive();
            json r = json::parse(line, nullptr, false);
            if (r.is_discarded()) throw std::runtime_error("normgen-measure said something that is not JSON: " + line);
            if (r.contains("progress")) {
                if (!status.empty()) progress_.status(status + " (round " + std::to_string(r["progress"].get<int>()) + "/" +
                                                      std::to_string(r["of"].get<int>()) + ")");
                continue;
            }
            return r;
        }
    }

    std::string load(const Built &b) {
        auto it = loaded_.find(b.library);
        if (it != loaded_.end()) return it->second;
        const std::string id = "k" + std::to_string(next_id_++);
        json r = request({{"cmd", "load"}, {"id", id}, {"manifest", b.manifest}, {"library", b.library}});
        if (!r.value("ok", false)) throw std::runtime_error("normgen-measure cannot load " + b.library + ": " + r.value("error", "?"));
        loaded_[b.library] = id;
        return id;
    }

    // ---- one class --------------------------------------------------------------------------------

    struct State {
        const ClassJob *job = nullptr;
        std::string forward_id;  // --grad: the forward's full kernel
        std::vector<Candidate> all;  // everything measured in this class, by index
        std::map<std::string, size_t> best;      // backend -> index into all
        std::map<std::string, size_t> defaults;  // backend -> index into all
        double t0 = 0;
        double final_guess = 0;   // seconds the last batch will take
        double item_round_s = 0;  // seconds one item of one round took in the defaults' batch
        BatchResult last;
        int rejected = 0;
        bool case_made = false;
    };

    std::string header(const ClassJob &j) const {
        return j.spec->name + " " + dtype_name(j.dtype) + " [" + j.shape.key() + "]";
    }

    // Compiles, loads and verifies a candidate; false (logged) when it fails.
    bool prepare(State &s, Candidate &c) {
        const ClassJob &j = *s.job;
        try {
            Built b;
            if (c.backend == "mlir") {
                b = build_mlir(j, ScheduleRecord::from_json(c.schedule, ScheduleKind::MlirCpu, "candidate"));
            } else if (!c.autoscheduler.empty()) {
                // A quarter of the class's budget each (at least 10 s): the three baselines are not
                // worth more of the tuning time than the search itself.
                const int seconds = (int)std::clamp(class_budget_s_ / 4, 10.0, (double)kAutoscheduleSeconds);
                const std::string why = in_child([&] { build_halide(*j.spec, j.dtype, Variant::Core, nullptr, c.autoscheduler, &j, j.file,
                                                                    o_.grad ? j.forward->name : ""); },
                                                 seconds, kAutoscheduleBytes);
                if (!why.empty()) throw std::runtime_error(c.autoscheduler + " " + why);
                b = build_halide(*j.spec, j.dtype, Variant::Core, nullptr, c.autoscheduler, &j, j.file, o_.grad ? j.forward->name : "");
            } else {
                const ScheduleRecord rec = ScheduleRecord::from_json(c.schedule, ScheduleKind::HalideCpu, "candidate");
                b = build_halide(*j.spec, j.dtype, Variant::Core, &rec, "", &j, j.file, o_.grad ? j.forward->name : "");
            }
            c.id = load(b);
        } catch (const std::exception &e) {
            reject(s, c, std::string("does not compile: ") + e.what());
            return false;
        }
        if (rejected_.count(c.id)) return false;
        // An autoscheduler's kernel is a baseline for this shape, never a choice: it is checked on
        // the case's tensors only (its vector tails read out of bounds on extents below a vector,
        // where Halide's bounds checks stop it: measured on RMSNorm with d = 1).
        const bool sweep = c.autoscheduler.empty() && !swept_.count(c.id);
        json cmd = {{"cmd", "verify"}, {"kernel", c.id}, {"sweep", sweep}};
        if (!s.forward_id.empty()) cmd["forward"] = s.forward_id;
        json r = request(cmd);
        if (!r.value("ok", false)) {
            reject(s, c, r.value("error", "?"));
            rejected_[c.id] = r.value("error", "?");
            return false;
        }
        swept_.insert(c.id);
        return true;
    }

    void reject(State &s, const Candidate &c, const std::string &why_text) {
        ++s.rejected;
        // One line each in the log (Halide's messages span several).
        std::string why = why_text;
        std::replace(why.begin(), why.end(), '\n', ' ');
        const std::string line = utc_now() + " " + header(*s.job) + " " + c.label + ": " + why;
        progress_.line("  rejected " + c.label + ": " + why.substr(0, 300));
        fs::create_directories(o_.db);
        std::ofstream(fs::path(o_.db) / "rejected.log", std::ios::app) << line << "\n";
    }

    BatchResult measure(State &s, const std::vector<size_t> &which, int rounds, const std::string &what, bool limits = true) {
        json ids = json::array();
        for (size_t i : which) ids.push_back(s.all[i].id);
        const std::string status = "  " + header(*s.job) + ": " + what;
        json r = request({{"cmd", "measure"}, {"kernels", ids}, {"rounds", rounds}, {"min_sample_s", o_.min_sample_s},
                          {"reread_bytes", s.job->limit.reads_twice ? s.job->limit.reread_bytes : 0}, {"limits", limits}},
                         status);
        if (!r.value("ok", false)) throw std::runtime_error("normgen-measure: " + r.value("error", "?"));
        BatchResult b;
        for (size_t i : which) {
            const json &x = r["results"][s.all[i].id];
            Timing t;
            if (x.contains("error")) t.error = x["error"];
            else {
                t.median = x["median_s"];
                t.p20 = x["p20_s"];
                t.p80 = x["p80_s"];
                t.reps = x["reps"];
                t.samples = x.value("samples_s", std::vector<double>{});
            }
            b.t[s.all[i].id] = t;
        }
        b.limit_kind = r["layer_limit"]["kind"];
        b.limit_gbps = r["layer_limit"]["gbps"];
        b.limit_p20 = r["layer_limit"]["p20_gbps"];
        b.limit_p80 = r["layer_limit"]["p80_gbps"];
        b.cpu_share = r.value("cpu_share", 0.0);
        return b;
    }

    TuningRecord record_of(const State &s, const Candidate &c, const Timing &t, const BatchResult &b, const std::string &role) const {
        const ClassJob &j = *s.job;
        TuningRecord r;
        r.identity = kernel_identity(*j.spec);
        r.dtype = dtype_name(j.dtype);
        r.variant = "core";
        r.backend = c.backend;
        r.isa = this_cpu().isa;
        r.role = role;
        r.autoscheduler = c.autoscheduler;
        r.sizes = sizes_by_atomic_name(*j.spec, j.extents);
        r.bytes = j.limit.bytes;
        r.shape = j.shape;
        r.cpu = this_cpu();
        r.schedule = c.schedule;
        r.result.median_s = t.median;
        r.result.p20_s = t.p20;
        r.result.p80_s = t.p80;
        r.result.reps = t.reps;
        r.result.gbps = (double)j.limit.bytes / t.median / 1e9;
        r.result.limit = b.limit_kind;
        r.result.limit_gbps = b.limit_gbps;
        r.result.limit_p20_gbps = b.limit_p20;
        r.result.limit_p80_gbps = b.limit_p80;
        r.result.frac = r.result.gbps / b.limit_gbps;
        auto d = s.defaults.find("halide");
        if (d != s.defaults.end() && b.t.count(s.all[d->second].id) && b.t.at(s.all[d->second].id).median > 0)
            r.result.vs_default = b.t.at(s.all[d->second].id).median / t.median;
        r.when = utc_now();
        r.run = run_id_;
        return r;
    }

    std::string gbps(const State &s, const Timing &t) const { return fmt((double)s.job->limit.bytes / t.median / 1e9) + " GB/s"; }

    // Warm starts (CoordinateSearch::add_seed; tuning_db.h warm_starts): the class's own last choice
    // on this CPU, then the schedules this layer's index chose for other classes on it, nearest
    // first, three at most; those outside this class's space are left out by the search.
    // Returns the class's own last choice when it is a seed (tune_class makes it a finalist).
    std::optional<SearchCandidate> add_seeds(CoordinateSearch &search, const ClassJob &j) {
        std::vector<TuningRecord> prior;
        try {
            prior = db_.best(j.spec->name, kernel_identity(*j.spec));
        } catch (const UserError &) {
            return std::nullopt;  // an unreadable index: no warm start (compaction says why)
        }
        std::optional<SearchCandidate> own;
        int taken = 0;
        for (const TuningRecord *r : warm_starts(prior, this_cpu(), j.shape)) {
            if (taken == 3) break;
            const ScheduleKind kind = r->backend == "halide" ? ScheduleKind::HalideCpu : ScheduleKind::MlirCpu;
            const bool mine = r->shape.key() == j.shape.key();
            const std::string what = mine ? "this class's last choice" : "winner of " + r->shape.key();
            try {
                const ScheduleRecord rec = ScheduleRecord::from_json(r->schedule, kind, db_.best_path(j.spec->name));
                if (search.add_seed(r->backend, rec, what)) {
                    ++taken;
                    if (mine) own = SearchCandidate{r->backend, rec, "", what};
                }
            } catch (const UserError &) {
                // a record of another knob set: not a seed
            }
        }
        return own;
    }

    void tune_class(const ClassJob &j) {
        State s;
        s.job = &j;
        s.t0 = now_s();
        const std::string head = header(j);
        const ScheduleRecord hdef = choose_schedule(j.plan, ScheduleKind::HalideCpu, isa_);
        const ScheduleRecord mdef = choose_schedule(j.plan, ScheduleKind::MlirCpu, isa_);
        std::map<std::string, std::vector<KnobChoice>> space;
        std::vector<std::string> backends;
        for (const std::string &b : o_.backends) {
            if (b == "mlir" && sibling_tool("normgen-mlir") == "normgen-mlir" && run_process({"normgen-mlir", "--help"}).status != 0) {
                progress_.line("  " + head + ": no normgen-mlir beside normgen; the mlir backend is skipped");
                continue;
            }
            backends.push_back(b);
            const std::vector<AxisId> &order = j.plan.main_order;
            const int64_t plane = order.size() >= 3 ? j.extents.at((size_t)order.back()) * j.extents.at((size_t)order[order.size() - 2]) : 0;
            space[b] = schedule_space(*j.spec, j.plan, b == "halide" ? hdef : mdef, j.extents.at((size_t)order.back()), plane);
        }
        if (o_.dry_run) {
            progress_.line("  " + head + ": shape " + sizes_text(*j.spec, j.extents) + ", limit: " + j.limit.why);
            for (const auto &[b, knobs] : space) {
                std::string line = "    " + b + ":";
                for (const KnobChoice &k : knobs) {
                    line += " " + k.knob + "={";
                    for (size_t i = 0; i < k.values.size(); ++i) line += (i ? "," : "") + std::to_string(k.values[i]);
                    line += "}";
                    for (const auto &[knob, value] : k.with) line += "+" + knob + "=" + std::to_string(value);
                }
                progress_.line(line);
            }
            return;
        }
        progress_.line("  " + head + ": shape " + sizes_text(*j.spec, j.extents) + "; limit " + (j.limit.reads_twice ? "a read of x + a copy" : "a copy") +
                       " (" + j.limit.why + ")");

        // The defaults, the case's tensors, and (with --grad) the forward kernel for the saved statistics.
        if (o_.grad) {
            const Variant fv = variants_of(*j.forward).back();
            const ScheduleRecord fdef = choose_schedule(make_plan(*j.forward, j.dtype, fv), ScheduleKind::HalideCpu, isa_);
            s.forward_id = load(build_halide(*j.forward, j.dtype, fv, &fdef, "", nullptr, j.file, ""));
        }
        for (const std::string &b : backends) {
            Candidate c{b, "", (b == "halide" ? hdef : mdef).to_json(), b + " default", ""};
            progress_.status("  " + head + ": compiling " + c.label);
            s.all.push_back(c);
            const size_t idx = s.all.size() - 1;
            if (!ensure_case(s, s.all[idx]) || !prepare(s, s.all[idx])) {
                s.all.pop_back();
                continue;
            }
            s.defaults[b] = s.best[b] = idx;
        }
        if (s.defaults.empty()) {
            progress_.line("  " + head + ": no default kernel could be prepared; class skipped");
            return;
        }
        std::vector<size_t> base;
        for (const auto &[b, i] : s.defaults) base.push_back(i);
        // DRAM-sized classes: a call takes tens of milliseconds, each sample is one call; fewer
        // rounds per search batch leave the budget for more candidates (the last batch has twice --rounds).
        const int search_rounds = j.shape.footprint == "dram" ? std::max(3, o_.rounds - 2) : o_.rounds;
        const double m0 = now_s();
        s.last = measure(s, base, search_rounds, "defaults");
        // Seconds per item of a round (the limits counted as items too), for the last batch's size:
        // twice the rounds, the bests and (compiled first) three autoschedulers beside the defaults.
        s.item_round_s = (now_s() - m0) / search_rounds / (double)(base.size() + (j.limit.reads_twice ? 3 : 2));
        s.final_guess = s.item_round_s * 2 * o_.rounds * (2 * base.size() + 3 + 3);
        keep_records(s, base, s.last, "default");
        // Halide's autoschedulers are compiled (and verified) before the search, so the time they
        // take comes out of the budget before the search plans its batches: compiled afresh on the
        // image pipelines they took 5-15 s, and when they were compiled last the bf16 retune at
        // 60 s ran 63-66 s a class. They are timed in the last batch.
        std::vector<size_t> baselines;
        if (o_.autoschedulers && !g_interrupts && std::count(backends.begin(), backends.end(), "halide"))
            for (const std::string &a : hl::autoscheduler_names()) {
                Candidate c{"halide", a, json{{"autoscheduler", a}}, a + " autoscheduler", ""};
                progress_.status("  " + head + ": compiling " + c.label);
                if (!prepare(s, c)) continue;
                s.all.push_back(c);
                baselines.push_back(s.all.size() - 1);
            }
        std::map<std::string, Timing> best_t;
        for (const auto &[b, i] : s.best) best_t[b] = s.last.t[s.all[i].id];
        report_status(s, best_t);

        // Coordinate descent (codegen/common/tuning_search.h): one knob per backend at a time, from
        // each backend's best so far; the bests and the defaults are timed beside every batch.
        CoordinateSearch search;
        const int64_t inner_extent = j.extents.at((size_t)j.plan.main_order.back());
        for (const std::string &b : backends)
            if (s.best.count(b))
                search.add_backend(b, b == "halide" ? hdef : mdef, space[b],
                                   [&, inner_extent](const ScheduleRecord &r) { return record_runs_on(*j.spec, j.plan, r, inner_extent); });
        const std::optional<SearchCandidate> own = add_seeds(search, j);
        search.confirm_with_more_rounds(true);
        std::map<std::string, size_t> by_record;  // backend|record text -> index into s.all
        for (const auto &[b, i] : s.best) by_record[b + "|" + (b == "halide" ? hdef : mdef).text()] = i;
        // A batch starts only when it (as long as the one before: compiling and timing) and the
        // last batch both fit in what is left (2-5 s over the budget when only the last batch was
        // reserved).
        double batch_s = 0;
        while (!g_interrupts && now_s() - s.t0 + batch_s + s.final_guess <= class_budget_s_) {
            const double batch_t0 = now_s();
            const std::vector<SearchCandidate> proposed = search.next();
            if (proposed.empty()) break;
            std::vector<size_t> batch;
            for (const auto &[b, i] : s.defaults) batch.push_back(i);
            for (const auto &[b, i] : s.best)
                if (std::find(batch.begin(), batch.end(), i) == batch.end()) batch.push_back(i);
            const size_t fixed = batch.size();
            std::vector<long> slot(proposed.size(), -1);  // each proposal's place in the batch, -1 if rejected
            for (size_t n = 0; n < proposed.size(); ++n) {
                const SearchCandidate &p = proposed[n];
                Candidate c{p.backend, "", p.record.to_json(),
                            p.knob.empty() ? p.backend + " " + p.seed
                                           : p.backend + " " + p.knob + "=" + std::to_string(p.record.get(p.knob)) + " (from " + s.all[s.best[p.backend]].label + ")",
                            ""};
                progress_.status("  " + head + ": compiling " + c.label);
                if (!prepare(s, c)) continue;
                s.all.push_back(c);
                by_record[p.backend + "|" + p.record.text()] = s.all.size() - 1;
                slot[n] = (long)batch.size();
                batch.push_back(s.all.size() - 1);
            }
            std::vector<std::optional<SearchTiming>> timings(proposed.size());
            std::map<std::string, SearchTiming> bests;
            if (batch.size() > fixed) {
                s.last = measure(s, batch, search_rounds, "timing " + std::to_string(batch.size() - fixed) + " candidate(s)");
                keep_records(s, std::vector<size_t>(batch.begin() + (long)fixed, batch.end()), s.last, "candidate");
                auto timing = [&](size_t i) -> std::optional<SearchTiming> {
                    const Timing &t = s.last.t[s.all[i].id];
                    if (!t.error.empty() || t.median <= 0) return std::nullopt;
                    return search_timing(t);
                };
                for (size_t n = 0; n < proposed.size(); ++n)
                    if (slot[n] >= 0) timings[n] = timing(batch[(size_t)slot[n]]);
                for (const auto &[b, i] : s.best)
                    if (auto t = timing(i)) bests[b] = *t;
            }
            search.report(bests, timings);
            // A paired win in the batch's few rounds is timed again against the best alone, for
            // about 6 s (24-96 rounds), before it counts (tuning_search.h: confirm).
            for (const SearchCandidate &p : search.pending()) {
                const size_t best_i = s.best[p.backend], cand_i = by_record.at(p.backend + "|" + p.record.text());
                const int rounds = std::clamp((int)(6.0 / std::max(1e-3, 2 * s.item_round_s)), 24, 96);
                const BatchResult r = measure(s, {best_i, cand_i}, rounds, "confirming " + s.all[cand_i].label, false);
                const Timing &bt = r.t.at(s.all[best_i].id), &ct = r.t.at(s.all[cand_i].id);
                if (!bt.error.empty() || !ct.error.empty()) continue;
                const bool won = search.confirm(p, search_timing(bt), search_timing(ct));
                if (!won)
                    if (auto q = paired_ratio(search_timing(ct), search_timing(bt)))
                        progress_.line("  " + head + ": " + s.all[cand_i].label + ": " + fmt(q->median, 3) + "x the best's time over " +
                                       std::to_string(q->rounds) + " rounds (p20-p80 spread " + fmt(q->spread, 3) + "), not beyond the noise");
                // The confirmation's own timings stand for both (the batch's are of fewer rounds).
                s.last.t[s.all[best_i].id] = bt;
                s.last.t[s.all[cand_i].id] = ct;
            }
            for (const std::string &b : search.backends()) {
                const size_t was = s.best[b];
                s.best[b] = by_record.at(b + "|" + search.best(b).text());
                if (s.best[b] != was) {
                    const Timing &now_t = s.last.t[s.all[s.best[b]].id], &was_t = s.last.t[s.all[was].id];
                    std::string by = "median " + fmt(now_t.median / was_t.median, 3) + "x";
                    if (auto q = paired_ratio(search_timing(now_t), search_timing(was_t)))
                        by = "median over " + std::to_string(q->rounds) + " rounds of the ratio " + fmt(q->median, 3) + "x, p20-p80 spread " + fmt(q->spread, 3);
                    progress_.line("  " + head + ": new best " + s.all[s.best[b]].label + ": its time " + by + " the last best's");
                }
                best_t[b] = s.last.t[s.all[s.best[b]].id];
            }
            report_status(s, best_t);
            batch_s = now_s() - batch_t0;
        }

        // The last batch: the defaults, each backend's best, the autoschedulers; the fastest is chosen.
        std::vector<size_t> last;
        for (const auto &[b, i] : s.defaults) last.push_back(i);
        for (const auto &[b, i] : s.best)
            if (std::find(last.begin(), last.end(), i) == last.end()) last.push_back(i);
        // The class's own last choice is a finalist too, timed beside the new choice in the last
        // batch's rounds. When the search never timed it (a 2 GiB class whose first batch, the
        // defaults, took the budget), a run short of time must not replace a choice measured
        // before with the default (on a 480 MiB-L3 Xeon at 40 s a class, GroupNorm NCHW's
        // 64 x 320 x 128 x 128 went from its choice at 84 % of the copy to the default at 52 %).
        // When the search timed it, it was judged only in one batch of few rounds against the
        // default, beside the seeds: on the AMD EPYC GroupNorm NHWC bf16 16 x 128 x 128 x 320's
        // first batch took another class's winner over it, which in 30 paired rounds afterwards
        // ran 1.08x its time (0.41 of the copy against 0.48 in the benchmark).
        if (own && !g_interrupts) {
            if (auto it = by_record.find(own->backend + "|" + own->record.text()); it != by_record.end()) {
                if (std::find(last.begin(), last.end(), it->second) == last.end()) last.push_back(it->second);
            } else {
                Candidate c{own->backend, "", own->record.to_json(), own->backend + " " + own->seed + " (not reached by the search)", ""};
                progress_.status("  " + head + ": compiling " + c.label);
                if (prepare(s, c)) {
                    s.all.push_back(c);
                    last.push_back(s.all.size() - 1);
                }
            }
        }
        const size_t finalists = last.size();
        last.insert(last.end(), baselines.begin(), baselines.end());
        // Twice the rounds of a batch, fewer when that would take the class past its budget (at least 3).
        const double items = (double)last.size() + (j.limit.reads_twice ? 3 : 2);
        const int final_rounds = std::clamp((int)((class_budget_s_ - (now_s() - s.t0)) / std::max(1e-3, s.item_round_s * items)), 3, 2 * o_.rounds);
        BatchResult fin = g_interrupts ? s.last : measure(s, last, final_rounds, "final timing");
        // The fastest finalist: by the median over the rounds of its time over the first default's
        // (Halide's) in the same round when every finalist was timed round by round (as the search
        // compares, tuning_search.h), else by its median.
        const Timing &ref = fin.t[s.all[last[0]].id];
        auto score = [&](const Timing &t) -> double {
            if (!t.error.empty() || t.median <= 0) return 0;
            if (auto q = paired_ratio(search_timing(t), search_timing(ref))) return q->median;
            return t.median / (ref.error.empty() && ref.median > 0 ? ref.median : 1.0);
        };
        size_t winner = last[0];
        for (size_t n = 0; n < finalists; ++n) {
            const double t = score(fin.t[s.all[last[n]].id]), w = score(fin.t[s.all[winner].id]);
            if (t > 0 && (w <= 0 || t < w)) winner = last[n];
        }
        std::vector<TuningRecord> recs;
        for (size_t n = 0; n < last.size(); ++n) {
            const Candidate &c = s.all[last[n]];
            auto it = fin.t.find(c.id);
            if (it == fin.t.end() || !it->second.error.empty() || it->second.median <= 0) continue;
            const bool is_default = s.defaults.count(c.backend) && s.defaults[c.backend] == last[n];
            TuningRecord r = record_of(s, c, it->second, fin, !c.autoscheduler.empty() ? "autoscheduler" : is_default ? "default" : "candidate");
            r.chosen = last[n] == winner;
            recs.push_back(r);
        }
        db_.append(recs);
        // The index follows every class, so a run that is killed keeps the choices it made.
        tuned_layers_[j.spec->name] = kernel_identity(*j.spec);
        db_.compact({{j.spec->name, tuned_layers_[j.spec->name]}});
        ++classes_done_;

        // The summary line: the choice against the default, the autoschedulers and the limit.
        const Timing &wt = fin.t[s.all[winner].id];
        const Timing &dt = fin.t[s.all[s.defaults.begin()->second].id];
        const bool chose_default = s.defaults.count(s.all[winner].backend) && s.defaults.at(s.all[winner].backend) == winner;
        std::string line = "  " + head + ": chose " + s.all[winner].label + (chose_default ? "" : " [" + knob_diff(s, winner) + "]") +
                           ": " + gbps(s, wt) + " = " + fmt(100.0 * (double)j.limit.bytes / wt.median / 1e9 / fin.limit_gbps, 0) + "% of " + fin.limit_kind + " " +
                           fmt(fin.limit_gbps) + " (" + fmt(fin.limit_p20) + "-" + fmt(fin.limit_p80) + ")";
        if (dt.median > 0) line += "; " + fmt(dt.median / wt.median, 2) + "x the halide default";
        for (size_t n = finalists; n < last.size(); ++n) {
            const Timing &t = fin.t[s.all[last[n]].id];
            if (t.error.empty() && t.median > 0) line += "; " + s.all[last[n]].autoscheduler + " " + gbps(s, t);
        }
        line += "; " + std::to_string(s.all.size()) + " measured, " + std::to_string(s.rejected) + " rejected, " + fmt(now_s() - s.t0, 0) + " s";
        progress_.line(line);
        found_.push_back({head, s.all[winner].label + (chose_default ? "" : " [" + knob_diff(s, winner) + "]"),
                          (double)j.limit.bytes / wt.median / 1e9, (double)j.limit.bytes / wt.median / 1e9 / fin.limit_gbps,
                          dt.median > 0 ? dt.median / wt.median : 0.0, chose_default});
    }

    // The knobs where a candidate differs from its backend's default.
    std::string knob_diff(const State &s, size_t i) const {
        const Candidate &c = s.all[i];
        const Candidate &d = s.all[s.defaults.at(c.backend)];
        std::string out;
        for (const auto &[k, v] : c.schedule["knobs"].items())
            if (d.schedule["knobs"].value(k, json()) != v) out += (out.empty() ? "" : ",") + k + "=" + v.dump();
        return out.empty() ? "= default" : out;
    }

    // The case's tensors, made with the first default that compiles.
    bool ensure_case(State &s, Candidate &c) {
        if (s.case_made) return true;
        const ClassJob &j = *s.job;
        try {
            Built b = c.backend == "mlir" ? build_mlir(j, ScheduleRecord::from_json(c.schedule, ScheduleKind::MlirCpu, "default"))
                                          : [&] {
                                                const ScheduleRecord rec = ScheduleRecord::from_json(c.schedule, ScheduleKind::HalideCpu, "default");
                                                return build_halide(*j.spec, j.dtype, Variant::Core, &rec, "", &j, j.file, o_.grad ? j.forward->name : "");
                                            }();
            c.id = load(b);
        } catch (const std::exception &e) {
            progress_.line("  " + header(j) + ": " + c.label + " does not compile: " + e.what());
            return false;
        }
        json cmd = {{"cmd", "case"}, {"kernel", c.id}, {"sizes", sizes_by_atomic_name(*j.spec, j.extents)}, {"seed", 20261201}};
        if (!s.forward_id.empty()) cmd["forward"] = s.forward_id;
        progress_.status("  " + header(j) + ": making the case's tensors");
        json r = request(cmd);
        if (!r.value("ok", false)) throw UserError("tune: " + header(j) + ": " + r.value("error", "?"));
        s.case_made = true;
        return true;
    }

    void keep_records(State &s, const std::vector<size_t> &which, const BatchResult &b, const std::string &role) {
        std::vector<TuningRecord> recs;
        for (size_t i : which) {
            const Timing &t = b.t.at(s.all[i].id);
            if (!t.error.empty() || t.median <= 0) continue;
            recs.push_back(record_of(s, s.all[i], t, b, role));
        }
        db_.append(recs);
    }

    void report_status(const State &s, const std::map<std::string, Timing> &best_t) {
        std::string line = "  " + header(*s.job) + ": " + std::to_string(s.all.size()) + " measured";
        for (const auto &[b, t] : best_t)
            if (t.median > 0)
                line += " | best " + b + " " + gbps(s, t) + " (" + fmt(100.0 * (double)s.job->limit.bytes / t.median / 1e9 / s.last.limit_gbps, 0) + "%)";
        line += " | limit " + fmt(s.last.limit_gbps) + " GB/s | " + fmt(now_s() - s.t0, 0) + "/" + fmt(class_budget_s_, 0) + " s";
        progress_.status(line);
    }
};

}  // namespace

int run_tune(const TuneOptions &options) {
    Tuner t(options);
    return t.run();
}

}  // namespace normgen
