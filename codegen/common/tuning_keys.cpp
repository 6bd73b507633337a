#include "codegen/common/tuning_keys.h"

#include "dsl/printer.h"
#include "runtime/errors.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#ifndef NORMGEN_HALIDE_VERSION
#define NORMGEN_HALIDE_VERSION "unknown"
#endif
#ifndef NORMGEN_LLVM_VERSION
#define NORMGEN_LLVM_VERSION "unknown"
#endif

namespace normgen {

using nlohmann::json;

namespace {

std::string bytes_text(int64_t b) {
    if (b >= (int64_t(1) << 20) && b % (int64_t(1) << 20) == 0) return std::to_string(b >> 20) + "M";
    if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + "K";
    return std::to_string(b);
}

std::string human_bytes(int64_t b) {
    if (b >= (int64_t(1) << 20)) return std::to_string(b >> 20) + " MiB";
    if (b >= 1024) return std::to_string(b >> 10) + " KiB";
    return std::to_string(b) + " B";
}

// "32K", "1024K", "32M" (sysfs spelling) -> bytes; 0 when unreadable.
int64_t parse_cache_size(const std::string &s) {
    int64_t v = 0;
    size_t k = 0;
    while (k < s.size() && s[k] >= '0' && s[k] <= '9') v = v * 10 + (s[k++] - '0');
    if (k < s.size() && (s[k] == 'K' || s[k] == 'k')) v <<= 10;
    if (k < s.size() && (s[k] == 'M' || s[k] == 'm')) v <<= 20;
    return v;
}

std::string read_line(const std::string &path) {
    std::ifstream f(path);
    std::string s;
    std::getline(f, s);
    return s;
}

CpuFingerprint read_this_cpu() {
    CpuFingerprint c;
    std::ifstream info("/proc/cpuinfo");
    std::string line, flags;
    while (std::getline(info, line)) {
        auto value = [&]() {
            size_t colon = line.find(':');
            std::string v = colon == std::string::npos ? "" : line.substr(colon + 1);
            size_t a = v.find_first_not_of(" \t");
            return a == std::string::npos ? std::string() : v.substr(a);
        };
        if (c.vendor.empty() && line.rfind("vendor_id", 0) == 0) c.vendor = value();
        else if (c.model.empty() && line.rfind("model name", 0) == 0) c.model = value();
        else if (flags.empty() && line.rfind("flags", 0) == 0) flags = value();
        if (!c.vendor.empty() && !c.model.empty() && !flags.empty()) break;
    }
    std::istringstream fs(flags);
    std::vector<std::string> all;
    for (std::string f; fs >> f;) all.push_back(f);
    auto has = [&](const char *f) { return std::find(all.begin(), all.end(), f) != all.end(); };
    for (const char *f : {"avx2", "fma", "f16c", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16", "avx512_fp16",
                          "avx512_vnni", "amx_bf16"})
        if (has(f)) c.flags.push_back(f);
    const bool avx2 = has("avx2") && has("fma") && has("f16c");
    const bool avx512 = avx2 && has("avx512f") && has("avx512cd") && has("avx512bw") && has("avx512dq") && has("avx512vl");
    c.isa = avx512 ? "avx512" : avx2 ? "avx2" : "none";
    if (c.vendor.empty()) c.vendor = "unknown";
    if (c.model.empty()) c.model = "unknown";
    for (int i = 0; i < 8; ++i) {
        const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
        const std::string level = read_line(dir + "level"), type = read_line(dir + "type");
        const int64_t size = parse_cache_size(read_line(dir + "size"));
        if (level.empty() || size <= 0) continue;
        if (level == "1" && type == "Data") c.l1d = size;
        if (level == "2") c.l2 = std::max(c.l2, size);
        if (level == "3") c.l3 = std::max(c.l3, size);
    }
    const char *env = std::getenv("HL_NUM_THREADS");
    c.threads = env && std::atoi(env) > 0 ? std::atoi(env) : (int)std::max(1u, std::thread::hardware_concurrency());
    return c;
}

double octaves(double a, double b) {
    if (a <= 0 || b <= 0) return a == b ? 0.0 : 1.0;
    return std::fabs(std::log2(a / b));
}

int64_t dtype_bytes(DType t) { return t == DType::F64 ? 8 : (t == DType::F32 ? 4 : 2); }

}  // namespace

json CpuFingerprint::to_json() const {
    return {{"vendor", vendor}, {"model", model}, {"isa", isa}, {"flags", flags}, {"threads", threads},
            {"l1d", l1d}, {"l2", l2}, {"l3", l3}};
}

CpuFingerprint CpuFingerprint::from_json(const json &j) {
    if (!j.is_object()) throw UserError("a CPU fingerprint is a JSON object");
    CpuFingerprint c;
    try {
        c.vendor = j.at("vendor").get<std::string>();
        c.model = j.at("model").get<std::string>();
        c.isa = j.at("isa").get<std::string>();
        c.flags = j.value("flags", std::vector<std::string>{});
        c.threads = j.at("threads").get<int>();
        c.l1d = j.value("l1d", int64_t(0));
        c.l2 = j.at("l2").get<int64_t>();
        c.l3 = j.at("l3").get<int64_t>();
    } catch (const json::exception &e) {
        throw UserError(std::string("a CPU fingerprint: ") + e.what());
    }
    return c;
}

std::string CpuFingerprint::key() const {
    return vendor + "|" + isa + "|t" + std::to_string(threads) + "|l2=" + bytes_text(l2) + "|l3=" + bytes_text(l3);
}

std::string CpuFingerprint::slug() const {
    std::string v = vendor == "GenuineIntel" ? "intel" : vendor == "AuthenticAMD" ? "amd" : vendor;
    std::string s;
    for (char ch : v + "-" + isa + "-t" + std::to_string(threads) + "-l2-" + bytes_text(l2) + "-l3-" + bytes_text(l3))
        if (std::isalnum((unsigned char)ch)) s += (char)std::tolower((unsigned char)ch);
        else if (ch == '-' && !s.empty() && s.back() != '-') s += '-';
    return s.empty() ? "cpu" : s;
}

std::string CpuFingerprint::text() const {
    return model + " (" + isa + ", " + std::to_string(threads) + " thread" + (threads == 1 ? "" : "s") + ", L2 " + human_bytes(l2) +
           ", L3 " + human_bytes(l3) + ")";
}

const CpuFingerprint &this_cpu() {
    static const CpuFingerprint c = read_this_cpu();
    return c;
}

double cpu_distance(const CpuFingerprint &a, const CpuFingerprint &b) {
    if (a.isa != b.isa) return std::numeric_limits<double>::infinity();
    return octaves((double)a.l2, (double)b.l2) + octaves((double)a.l3, (double)b.l3) + octaves(a.threads, b.threads) +
           (a.vendor == b.vendor ? 0.0 : 1.0);
}

int extent_bucket(int64_t extent, bool innermost) {
    if (extent <= 8) return (int)std::max<int64_t>(extent, 0);
    if (innermost && extent <= kExactInnerWidth) return kExactBucket + (int)extent;
    return 1000 + (int)std::lround(std::log2((double)extent));
}

std::string bucket_text(int bucket) {
    if (bucket >= kExactBucket) return std::to_string(bucket - kExactBucket);
    return bucket >= 1000 ? "2^" + std::to_string(bucket - 1000) : std::to_string(bucket);
}

std::string ShapeClass::key() const {
    std::string s = dtype + "|";
    for (size_t i = 0; i < buckets.size(); ++i) s += (i ? "," : "") + buckets[i].first + "=" + bucket_text(buckets[i].second);
    return s + "|m" + std::to_string(inner_multiple) + "|" + footprint;
}

json ShapeClass::to_json() const {
    json b = json::array();
    for (const auto &[n, v] : buckets) b.push_back({n, v});
    return {{"key", key()}, {"dtype", dtype}, {"buckets", b}, {"inner_multiple", inner_multiple}, {"footprint", footprint}};
}

ShapeClass ShapeClass::from_json(const json &j) {
    ShapeClass c;
    try {
        c.dtype = j.at("dtype").get<std::string>();
        for (const json &b : j.at("buckets")) c.buckets.push_back({b.at(0).get<std::string>(), b.at(1).get<int>()});
        c.inner_multiple = j.at("inner_multiple").get<int>();
        c.footprint = j.at("footprint").get<std::string>();
    } catch (const json::exception &e) {
        throw UserError(std::string("a shape class: ") + e.what());
    }
    return c;
}

int64_t plan_bytes(const NormSpec &spec, const KernelPlan &plan, const std::vector<int64_t> &extents) {
    int64_t total = 0;
    for (const PlanArg &a : plan.args) {
        int64_t n = dtype_bytes(a.dtype);
        for (AxisId x : a.atoms) n *= extents.at((size_t)x);
        total += n;
    }
    return total;
}

ShapeClass shape_class(const NormSpec &spec, const KernelPlan &plan, const std::vector<int64_t> &extents, const CpuFingerprint &cpu) {
    ShapeClass c;
    c.dtype = dtype_name(plan.dtype);
    for (AxisId a : plan.main_order)
        c.buckets.push_back({spec.axes[a].name, extent_bucket(extents.at((size_t)a), a == plan.main_order.back())});
    const int64_t inner = plan.main_order.empty() ? 1 : extents.at((size_t)plan.main_order.back());
    for (int m : {16, 8, 4, 2, 1})
        if (inner % m == 0) {
            c.inner_multiple = m;
            break;
        }
    const int64_t bytes = plan_bytes(spec, plan, extents);
    const int64_t l2 = cpu.l2 * std::max(1, cpu.threads);
    c.footprint = bytes <= l2 ? "l2" : (cpu.l3 > 0 && bytes <= cpu.l3) ? "l3" : "dram";
    return c;
}

namespace {

double bucket_log2(int bucket) {
    if (bucket >= kExactBucket) return std::log2(double(bucket - kExactBucket));
    return bucket >= 1000 ? double(bucket - 1000) : std::log2(std::max(1, bucket));
}

// The octaves between the buckets (infinite when the axes differ, or, `strict`, when a small
// exact extent differs).
double bucket_octaves(const ShapeClass &a, const ShapeClass &b, bool strict) {
    const double inf = std::numeric_limits<double>::infinity();
    if (a.buckets.size() != b.buckets.size()) return inf;
    double d = 0;
    for (size_t i = 0; i < a.buckets.size(); ++i) {
        if (a.buckets[i].first != b.buckets[i].first) return inf;
        // Small exact extents (a 7 x 7 plane) differ in kind, not only in size: keep them apart.
        const int x = a.buckets[i].second, y = b.buckets[i].second;
        if (strict && x != y && (x < 1000 || y < 1000)) return inf;
        d += std::fabs(bucket_log2(x) - bucket_log2(y));
    }
    return d;
}

}  // namespace

double shape_distance(const ShapeClass &a, const ShapeClass &b) {
    if (a.dtype != b.dtype || a.footprint != b.footprint || a.inner_multiple != b.inner_multiple) return std::numeric_limits<double>::infinity();
    return bucket_octaves(a, b, true);
}

double loose_shape_distance(const ShapeClass &a, const ShapeClass &b) {
    return bucket_octaves(a, b, false) + (a.footprint != b.footprint) + (a.inner_multiple != b.inner_multiple) + 2.0 * (a.dtype != b.dtype);
}

std::string foreign_refusal(const CpuFingerprint &here, const CpuFingerprint &there, double vs_fallback) {
    if (here.key() == there.key()) return "";
    if (here.vendor != there.vendor) return "another vendor (" + there.vendor + ")";
    if (here.isa != there.isa) return "another ISA tier (" + there.isa + ")";
    // Beyond the tier, the flags the generated code uses: the native bf16 and f16 conversions (AMX
    // and VNNI are never used by a normalization kernel: a machine with them is still the same kind).
    for (const char *f : {"avx512_bf16", "avx512_fp16"}) {
        auto has = [&](const CpuFingerprint &c) { return std::find(c.flags.begin(), c.flags.end(), f) != c.flags.end(); };
        if (has(here) != has(there)) return std::string(has(there) ? "" : "no ") + f + " there";
    }
    if (here.threads != there.threads) return std::to_string(there.threads) + " threads";
    if (octaves((double)here.l2, (double)there.l2) > 1.0 || octaves((double)here.l3, (double)there.l3) > 1.0)
        return "another cache regime (L2 " + bytes_text(there.l2) + ", L3 " + bytes_text(there.l3) + ")";
    if (!(vs_fallback >= kForeignMargin)) {
        char b[96];
        std::snprintf(b, sizeof b, "it beat the default by %.2fx there, under the %.2fx a choice must win by to travel", vs_fallback, kForeignMargin);
        return vs_fallback > 0 ? b : "its margin over the default there is not known";
    }
    return "";
}

double tuned_match_score(const ShapeClass &call, const CpuFingerprint &here, const ShapeClass &tuned, const CpuFingerprint &there,
                         double vs_fallback) {
    const double ds = shape_distance(call, tuned);
    if (!(ds <= kNearShape) || !foreign_refusal(here, there, vs_fallback).empty()) return std::numeric_limits<double>::infinity();
    return ds * 10 + cpu_distance(here, there);
}

json KernelIdentity::to_json() const {
    return {{"layer", layer}, {"decl_hash", decl_hash}, {"generator", generator}, {"halide", halide}, {"llvm", llvm}};
}

KernelIdentity KernelIdentity::from_json(const json &j) {
    KernelIdentity k;
    try {
        k.layer = j.at("layer").get<std::string>();
        k.decl_hash = j.at("decl_hash").get<std::string>();
        k.generator = j.at("generator").get<std::string>();
        k.halide = j.at("halide").get<std::string>();
        k.llvm = j.at("llvm").get<std::string>();
    } catch (const json::exception &e) {
        throw UserError(std::string("a kernel identity: ") + e.what());
    }
    return k;
}

std::string KernelIdentity::mismatch(const KernelIdentity &o) const {
    if (layer != o.layer) return "another layer (" + o.layer + ")";
    if (decl_hash != o.decl_hash) return "the declaration changed (hash " + o.decl_hash + ", now " + decl_hash + ")";
    if (generator != o.generator) return "generator " + o.generator + ", now " + generator;
    if (halide != o.halide) return "Halide " + o.halide + ", now " + halide;
    if (llvm != o.llvm) return "LLVM " + o.llvm + ", now " + llvm;
    return "";
}

const char *halide_version() { return NORMGEN_HALIDE_VERSION; }
const char *llvm_version() { return NORMGEN_LLVM_VERSION; }

KernelIdentity kernel_identity(const NormSpec &spec) {
    KernelIdentity k;
    k.layer = spec.name;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)canonical_hash(spec));
    k.decl_hash = hex;
    k.halide = halide_version();
    k.llvm = llvm_version();
    // tanh_f32 became a rational function (49aafc4): a layer calling tanh got a faster Halide default
    // and other code for every Halide record, and its earlier choices were measured against the old
    // one (a 480 MiB-L3 Xeon's DyT choices, 1.9-2.5x the old default there, were 0.61-0.93x the new
    // default on a 260 MiB-L3 Xeon). The declaration's text says whether it calls tanh.
    if (print_norm(spec).find("tanh(") != std::string::npos) {
        k.since = "2026-12-04T06:42:50Z";
        k.since_why = "tanh became a rational function";
    }
    return k;
}

std::string KernelIdentity::stale(const KernelIdentity &o, const std::string &when) const {
    if (std::string why = mismatch(o); !why.empty()) return why;
    if (!since.empty() && when < since) return "measured before " + since_why + " (" + since + ")";
    return "";
}

LayerLimit layer_limit(const NormSpec &spec, const KernelPlan &plan, const std::vector<int64_t> &extents, const CpuFingerprint &cpu) {
    LayerLimit l;
    l.bytes = plan_bytes(spec, plan, extents);
    if (plan.layout != LayoutClass::Root || plan.stages.empty()) {
        l.why = plan.layout == LayoutClass::Map ? "no statistics: one read, one write" : "statistics per row while the row is in cache";
        return l;
    }
    // A root plan: the statistics are done before the map. The slab one statistic depends on is x
    // divided along the axes every statistic keeps that lie outside all reduced axes in memory
    // (GroupNorm NHWC: a sample; BatchNorm: nothing, the whole tensor). The threads hold one slab
    // each; when that does not fit in the L3, x leaves the cache between the sweeps.
    AxisSet kept = plan.stages[0].independent;
    for (const PlanStage &s : plan.stages) kept = axis_intersection(kept, s.independent);
    int64_t units = 1;
    for (AxisId a : plan.main_order) {
        if (std::find(plan.reduced.begin(), plan.reduced.end(), a) != plan.reduced.end()) break;
        if (std::find(kept.begin(), kept.end(), a) != kept.end()) units *= extents.at((size_t)a);
    }
    int64_t read = 0;  // the inputs the statistics read
    const std::set<int> reduced = spec.reduced_tensors();
    for (const PlanArg &a : plan.args) {
        if (a.role == PlanArg::Output) continue;
        const int ti = (int)(std::find_if(spec.tensors.begin(), spec.tensors.end(), [&](const TensorInfo &t) { return t.name == a.name; }) -
                             spec.tensors.begin());
        if (!reduced.count(ti)) continue;
        int64_t n = dtype_bytes(a.dtype);
        for (AxisId x : a.atoms) n *= extents.at((size_t)x);
        read += n;
    }
    const int64_t slab = read / std::max<int64_t>(1, units);
    const int64_t live = slab * std::min<int64_t>(std::max(1, cpu.threads), std::max<int64_t>(1, units));
    if (cpu.l3 > 0 && live > cpu.l3) {
        l.reads_twice = true;
        l.reread_bytes = read;
        l.why = "the statistics span " + human_bytes(slab) + " a unit (" + std::to_string(units) + " units), past the " + human_bytes(cpu.l3) +
                " L3: x is read twice";
    } else {
        l.why = "the statistics' slabs fit in the L3: one read";
    }
    return l;
}

std::vector<int64_t> extents_from_sizes(const NormSpec &spec, const std::map<std::string, int64_t> &sizes) {
    std::vector<int64_t> ext(spec.axes.size(), -1);
    for (const auto &[name, v] : sizes) {
        AxisId a = spec.find_axis(name);
        if (a < 0) throw UserError(spec.name + " has no axis '" + name + "'");
        if (v < 1) throw UserError("axis '" + name + "' = " + std::to_string(v) + ": extents are at least 1");
        if (spec.axes[a].is_split()) {
            // A split axis: its fixed parts determine the free one.
            int64_t fixed = 1;
            AxisId free_part = -1;
            for (AxisId p : spec.axes[a].parts) {
                if (spec.axes[p].fixed_extent) fixed *= *spec.axes[p].fixed_extent;
                else free_part = p;
            }
            if (free_part < 0 || v % fixed) throw UserError("axis '" + name + "' = " + std::to_string(v) + " does not split as declared");
            ext[(size_t)free_part] = v / fixed;
            continue;
        }
        ext[(size_t)a] = v;
    }
    for (size_t a = 0; a < spec.axes.size(); ++a) {
        if (spec.axes[a].is_split()) continue;
        if (ext[a] < 0 && spec.axes[a].fixed_extent) ext[a] = *spec.axes[a].fixed_extent;
        if (ext[a] < 0) throw UserError(spec.name + ": give the extent of axis '" + spec.axes[a].name + "'");
    }
    for (size_t a = 0; a < spec.axes.size(); ++a)
        if (spec.axes[a].is_split()) {
            int64_t n = 1;
            for (AxisId p : spec.axes[a].parts) n *= ext[(size_t)p];
            ext[a] = n;
        }
    return ext;
}

std::map<std::string, int64_t> parse_sizes(const std::string &text) {
    std::map<std::string, int64_t> out;
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');) {
        if (item.empty()) continue;
        size_t eq = item.find('=');
        char *end = nullptr;
        long long v = eq == std::string::npos ? 0 : std::strtoll(item.c_str() + eq + 1, &end, 10);
        if (eq == std::string::npos || eq == 0 || !end || *end || v < 1)
            throw UserError("'" + item + "' is not AXIS=EXTENT (e.g. rows=4096,d=4096)");
        out[item.substr(0, eq)] = v;
    }
    if (out.empty()) throw UserError("no sizes in '" + text + "' (e.g. rows=4096,d=4096)");
    return out;
}

std::string sizes_text(const NormSpec &spec, const std::vector<int64_t> &extents) {
    std::string s;
    for (size_t a = 0; a < spec.axes.size(); ++a) {
        if (spec.axes[a].is_split() || spec.axes[a].fixed_extent) continue;  // fixed extents are the declaration's
        s += (s.empty() ? "" : ",") + spec.axes[a].name + "=" + std::to_string(extents.at(a));
    }
    return s;
}

}  // namespace normgen
