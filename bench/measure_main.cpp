// normgen-measure: the timing half of `normgen tune` (codegen/driver/tune.cpp). The tuner compiles
// each candidate schedule into a small kernel library (an object, its manifest and kernel table,
// linked into a shared object); this process loads them, checks each against the float64
// reference, and times them interleaved, round by round, with the copy rooflines of the same bytes
// on the same threads. It is a process of its own because the candidates link against the Halide
// runtime carried here (exported to them), while the tuner links libHalide, whose JIT brings its own.
//
// Protocol: one JSON command per line on stdin, one JSON reply per line on stdout ("ok": true, or
// false with "error"); a `measure` also prints {"progress": r, "of": R} after each round.
//   {"cmd": "load", "id": "c1", "manifest": M.json, "library": L.so}      bind the library's only kernel
//   {"cmd": "case", "kernel": "c0", "forward": "f0"?, "sizes": {...}, "seed": N}
//        the tensors of one shape, made and checked with kernel c0 (a backward kernel also needs
//        `forward`, the full kernel of its forward layer, for the saved statistics)
//   {"cmd": "verify", "kernel": "c1", "sweep": true}
//        c1 on the case's tensors (outputs poisoned, a sample checked against the reference) and,
//        with sweep, on a spread of the verifier's shapes (large mean included)
//   {"cmd": "measure", "kernels": [...], "rounds": R, "min_sample_s": S, "reread_bytes": N, "limits": true}
//        R rounds; in each, one sample (back-to-back calls for at least S seconds, after one untimed
//        call unless that one alone took S) of every kernel,
//        of the streaming and the plain copy of the case's bytes, and, when N > 0, of a read-only
//        sweep of N bytes (the second read of a layer whose statistics do not fit the cache), in an
//        order rotated every round. Reply: per kernel and limit the median, 20th and 80th percentile
//        of seconds per call, and per kernel its samples in round order ("samples_s": the same
//        round's samples of two kernels ran within a round's time of each other, so their ratio
//        is free of the machine's slower drifts); "layer_limit": the case's bytes over (the faster
//        copy [+ the read]) per round. With "limits": false, the kernels alone (no copies; the
//        "layer_limit" 0): the tuner's confirmation of one candidate against its best.
//   {"cmd": "quit"}
#include "bench/copy_roofline.h"
#include "bench/kernel_case.h"
#include "bench/thread_pool.h"
#include "runtime/errors.h"
#include "runtime/kernel_table.h"
#include "runtime/mlir_abi.h"
#include "runtime/quantile.h"
#include "runtime/random_inputs.h"
#include "runtime/registry.h"
#include "runtime/run.h"
#include "runtime/verify.h"

#include <nlohmann/json.hpp>

#include <dlfcn.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace normgen;
using namespace normgen::bench;
using nlohmann::json;

// The candidates' MLIR kernels call these from their kernel tables: keep them in this program
// (a global the linker must keep, so their definitions are linked and exported with it).
extern "C" int halide_do_par_for(void *, int (*)(void *, int, uint8_t *), int, int, uint8_t *);
extern "C" {
extern void *normgen_measure_exports[2];
void *normgen_measure_exports[2] = {reinterpret_cast<void *>(&normgen::mlir_argv), reinterpret_cast<void *>(&halide_do_par_for)};
}

namespace {

struct Loaded {
    void *handle = nullptr;
    std::unique_ptr<Registry> registry;
    const Registry::Kernel *kernel = nullptr;
};

json stats(const std::vector<double> &seconds) {
    return {{"median_s", quantile(seconds, 0.5)}, {"p20_s", quantile(seconds, 0.2)}, {"p80_s", quantile(seconds, 0.8)},
            {"reps", (int)seconds.size()}};
}

double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

class Runner {
public:
    json handle(const json &c) {
        const std::string cmd = c.at("cmd").get<std::string>();
        if (cmd == "load") return load(c);
        if (cmd == "case") return make_case(c);
        if (cmd == "verify") return verify(c);
        if (cmd == "measure") return measure(c);
        throw UserError("unknown command '" + cmd + "'");
    }

private:
    std::map<std::string, Loaded> loaded_;
    std::unique_ptr<KernelCase> case_;
    std::map<std::string, int64_t> sizes_;
    uint64_t seed_ = 1;

    const Loaded &get(const json &c, const char *key) {
        const std::string id = c.at(key).get<std::string>();
        auto it = loaded_.find(id);
        if (it == loaded_.end()) throw UserError("no kernel loaded as '" + id + "'");
        return it->second;
    }

    json load(const json &c) {
        const std::string id = c.at("id").get<std::string>(), library = c.at("library").get<std::string>();
        Loaded l;
        l.handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!l.handle) throw UserError(std::string("cannot load ") + library + ": " + dlerror());
        using TableFn = const KernelEntry *(*)(size_t *);
        auto table = reinterpret_cast<TableFn>(dlsym(l.handle, "normgen_kernel_table"));
        if (!table) throw UserError(library + " has no normgen_kernel_table (not a kernel library)");
        size_t n = 0;
        const KernelEntry *entries = table(&n);
        l.registry = std::make_unique<Registry>(Registry::load(c.at("manifest").get<std::string>(), entries, n));
        const std::string function = c.value("function", "");
        for (const Registry::Kernel *k : l.registry->kernels())
            if (k->argv && (function.empty() || k->function == function)) {
                l.kernel = k;
                break;
            }
        if (!l.kernel) throw UserError(library + ": no host kernel" + (function.empty() ? "" : " named " + function));
        json r = {{"ok", true}, {"function", l.kernel->function}};
        loaded_[id] = std::move(l);
        return r;
    }

    json make_case(const json &c) {
        const Loaded &k = get(c, "kernel");
        const Registry::Kernel *forward = c.contains("forward") && !c["forward"].is_null() ? get(c, "forward").kernel : nullptr;
        case_.reset();
        CaseSpec cs;
        sizes_ = c.at("sizes").get<std::map<std::string, int64_t>>();
        cs.sizes = sizes_;
        seed_ = c.value("seed", uint64_t(1));
        // The whole reference when some output lacks the outermost axis (statistics over it:
        // BatchNorm training's running statistics, a backward's parameter gradients).
        const NormSpec &spec = *k.kernel->spec;
        const AxisId outer = spec.tensors.at(0).dims.at(0);
        for (const KernelArg &a : k.kernel->args)
            if (a.role == KernelArg::Output && !a.optional &&
                std::find(a.buffer_axes.begin(), a.buffer_axes.end(), outer) == a.buffer_axes.end())
                cs.full_reference = true;
        case_ = std::make_unique<KernelCase>(*k.kernel, cs, seed_, forward);
        if (!case_->error().empty()) {
            std::string e = case_->error();
            case_.reset();
            throw UserError("the case: " + e);
        }
        return {{"ok", true}, {"bytes", case_->bytes_per_call()}, {"check", case_->check_message()}, {"threads", bench_threads()}};
    }

    json verify(const json &c) {
        if (!case_) throw UserError("verify before case");
        const Loaded &l = get(c, "kernel");
        std::string why = case_->check_other(*l.kernel);
        if (!why.empty()) return {{"ok", false}, {"error", "on the case's tensors: " + why}};
        int shapes = 0, skipped = 0;
        if (c.value("sweep", true)) {
            // Every third shape of the verifier's sweep up to 2^20 elements, the large mean
            // included; shapes a streaming-store kernel cannot take go to the ordinary kernel in a
            // program (Registry::select_for), so they are skipped here.
            const Registry::Kernel &k = *l.kernel;
            const bool grad = !k.grad_of.empty();
            const Registry::Kernel *fk = grad && c.contains("forward") ? get(c, "forward").kernel : nullptr;
            if (grad && !fk) throw UserError("verify of a backward kernel needs its forward");
            const NormSpec &forward = grad ? *fk->spec : *k.spec;
            const StorageMap storage = k.storage();
            const InputMaker inputs = grad ? backward_input_maker(forward, *k.spec, storage) : InputMaker{};
            const KernelFn fn = [&k](const TensorMap &in, const Overrides &ov) { return run_kernel_f64(k, in, ov); };
            std::vector<VerifyShape> sweep = verify_shapes(forward);
            // A kernel compiled for one extent of its innermost axis gets the sweep's shapes with
            // that extent (each other axis still takes the sweep's awkward values).
            if (k.requirement.fixed_extent > 0)
                for (VerifyShape &v : sweep)
                    if (v.sizes.count(k.requirement.fixed_axis)) v.sizes[k.requirement.fixed_axis] = k.requirement.fixed_extent;
            for (size_t i = 0; i < sweep.size(); i += 3) {
                const AxisExtents ext = choose_extents(forward, sweep[i].sizes, 1);
                int64_t elements = 1;
                for (size_t a = 0; a < forward.axes.size(); ++a)
                    if (!forward.axes[a].is_split()) elements *= ext.extent[a];
                if (elements > (int64_t(1) << 20)) continue;
                if (!k.refuses({}, ext).empty()) {  // an extent the kernel never gets (streaming stores' multiple)
                    ++skipped;
                    continue;
                }
                CaseResult r = verify_case(*k.spec, storage, {fn}, sweep[i], seed_ + i, inputs, grad).front();
                ++shapes;
                if (!r.pass) {
                    std::string detail;
                    for (const OutputCheck &o : r.outputs)
                        if (!o.pass) detail += " " + (o.problem.empty() ? mismatch_text(o) : o.name + ": " + o.problem);
                    return {{"ok", false}, {"error", "shape " + sweep[i].label + ":" + detail}};
                }
            }
        }
        return {{"ok", true}, {"shapes", shapes}, {"skipped", skipped}};
    }

    json measure(const json &c) {
        if (!case_) throw UserError("measure before case");
        std::vector<std::string> ids = c.at("kernels").get<std::vector<std::string>>();
        const int rounds = std::max(1, c.value("rounds", 7));
        const double min_sample = c.value("min_sample_s", 0.02);
        const int64_t reread = c.value("reread_bytes", int64_t(0));
        const size_t bytes = case_->bytes_per_call();
        std::vector<int (*)(void **)> fns;
        for (const std::string &id : ids) fns.push_back(get(json{{"id", id}}, "id").kernel->argv);
        // Items: the kernels, then the limits.
        const size_t nk = ids.size();
        const bool with_limits = c.value("limits", true);
        std::vector<std::string> limits;
        if (with_limits) limits = {"copy_nt", "copy_plain"};
        if (with_limits && reread > 0) limits.push_back("read");
        std::vector<std::vector<double>> samples(nk + limits.size());
        std::vector<double> layer;
        std::vector<std::string> failed(nk);
        const double cpu0 = cpu_seconds(), wall0 = now();
        for (int r = 0; r < rounds; ++r) {
            std::map<std::string, double> limit_now;
            const size_t items = nk + limits.size();
            for (size_t j = 0; j < items; ++j) {
                const size_t i = (j + (size_t)r) % items;  // rotated, so no item always follows the same one
                if (i >= nk) {
                    const std::string &l = limits[i - nk];
                    const double t = l == "read" ? copy_sample_seconds((size_t)reread, CopyKind::Read, min_sample)
                                                 : copy_sample_seconds(bytes, l == "copy_nt" ? CopyKind::NonTemporal : CopyKind::Plain, min_sample);
                    samples[i].push_back(t);
                    limit_now[l] = t;
                    continue;
                }
                if (!failed[i].empty()) continue;
                // One call first: when it alone takes the sample's time (a DRAM-sized case, where
                // the cache holds nothing of the last item) it is the sample; otherwise it warms up.
                double t0 = now();
                int rc = case_->run_other(fns[i]);
                double t = now() - t0;
                int calls = 1;
                if (t < min_sample && rc == 0) {
                    calls = 0;
                    t0 = now();
                    do {
                        rc |= case_->run_other(fns[i]);
                        ++calls;
                        t = now() - t0;
                    } while (t < min_sample && rc == 0);
                }
                if (rc) failed[i] = "Halide error " + std::to_string(rc);
                else samples[i].push_back(t / calls);
            }
            // The layer's limit this round: the faster of the two copies (streaming stores win past
            // the cache, ordinary ones inside it), after the second read of x when there is one.
            if (with_limits) layer.push_back(std::min(limit_now["copy_nt"], limit_now["copy_plain"]) + (reread > 0 ? limit_now["read"] : 0.0));
            std::cout << json{{"progress", r + 1}, {"of", rounds}}.dump() << std::endl;
        }
        json results = json::object(), lim = json::object();
        for (size_t i = 0; i < nk; ++i) {
            if (!failed[i].empty()) results[ids[i]] = {{"error", failed[i]}};
            else {
                results[ids[i]] = stats(samples[i]);
                results[ids[i]]["samples_s"] = samples[i];  // round by round: paired across kernels
            }
        }
        for (size_t i = 0; i < limits.size(); ++i) lim[limits[i]] = stats(samples[nk + i]);
        // The layer's limit per round: bytes / (streaming copy [+ second read]) seconds.
        std::vector<double> gbps;
        for (double t : layer) gbps.push_back((double)bytes / t / 1e9);
        const double share = (cpu_seconds() - cpu0) / ((now() - wall0) * std::max(1, bench_threads()));
        return {{"ok", true},
                {"results", results},
                {"limits", lim},
                {"layer_limit", {{"kind", reread > 0 ? "read+copy" : "copy"}, {"gbps", quantile(gbps, 0.5)},
                                 {"p20_gbps", quantile(gbps, 0.2)}, {"p80_gbps", quantile(gbps, 0.8)}}},
                {"bytes", bytes},
                {"cpu_share", share}};
    }
};

}  // namespace

int main(int argc, char **argv) {
    if (argc > 1) {
        std::fprintf(stderr, "normgen-measure: the timing process of `normgen tune` (JSON commands on stdin; see bench/measure_main.cpp)\n");
        return std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ? 0 : 1;
    }
    configure_threads();
    Runner runner;
    std::string line;
    while (std::getline(std::cin, line)) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        json reply;
        try {
            json c = json::parse(line);
            if (c.value("cmd", "") == "quit") break;
            reply = runner.handle(c);
        } catch (const std::exception &e) {
            reply = {{"ok", false}, {"error", e.what()}};
        }
        std::cout << reply.dump() << std::endl;
    }
    return 0;
}
