// The keys of tuning: what a measured schedule is good for. A tuning record (tuning_db.h) is valid
// for one kernel identity, one shape class and one CPU; the generators build a kernel per winning
// schedule and the registry (runtime/registry.h) picks among them by the same keys at run time.
//
//   CpuFingerprint  vendor, model, ISA tier and flags, threads, cache sizes, read from this machine
//                   (/proc/cpuinfo, sysfs); distance() says how near two machines are (ISA must match)
//   ShapeClass      a call's shape as tuning sees it: storage type, each axis of the main output
//                   bucketed (exact up to 8, else the nearest power of two), the innermost extent's
//                   alignment class, and where the bytes live against this CPU's caches (l2/l3/dram)
//   KernelIdentity  the canonical declaration's hash and the generator, Halide and LLVM versions: a
//                   record whose identity differs from today's is stale (ignored, with a note)
//   LayerLimit      the roofline a layer is judged against at a shape: a copy of its bytes (the
//                   faster of streaming and ordinary stores, measured beside it), or, when its
//                   statistics span more than the cache holds (BatchNorm training at DRAM sizes),
//                   a read-only sweep of x followed by that copy
// All of it is plain data with JSON forms; nothing here runs a kernel.
#pragma once

#include "codegen/common/kernel_plan.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace normgen {

// The generator's version as tuning records see it: bump it when a lowering or a schedule changes
// what a record's knobs produce, so that records measured on the old code are ignored as stale.
constexpr const char *kGeneratorVersion = "normgen-codegen 2";

struct CpuFingerprint {
    std::string vendor;      // "GenuineIntel", "AuthenticAMD", ...
    std::string model;       // the model name
    std::string isa;         // "avx512", "avx2" or "none" (normgen's tiers, runtime/manifest_schema.h)
    std::vector<std::string> flags;  // the ISA flags normgen cares about (avx2, fma, f16c, avx512*)
    int threads = 1;         // the threads kernels run on (Halide's pool: $HL_NUM_THREADS or the cores)
    int64_t l1d = 0, l2 = 0, l3 = 0;  // bytes, per core for L1/L2, the largest L3

    nlohmann::json to_json() const;
    static CpuFingerprint from_json(const nlohmann::json &j);  // throws UserError on a malformed object
    std::string key() const;  // "AuthenticAMD|avx2|t2|l2=512K|l3=32M"
    std::string text() const; // "AMD EPYC (avx2, 2 threads, L2 512 KiB, L3 32 MiB)"
    std::string slug() const; // key() as a file name: "amd-avx2-t2-l2-512k-l3-32m"
};

// This machine (read once). `threads`: $HL_NUM_THREADS when set, else the hardware threads.
const CpuFingerprint &this_cpu();

// How far apart two machines are for tuning purposes: infinity when their ISA tiers differ (a
// schedule measured with other vector instructions says little), else the octaves between their
// L2 and L3 sizes and thread counts, plus 1 for another vendor. It ranks the machines whose
// choices foreign_refusal (below) lets travel.
double cpu_distance(const CpuFingerprint &a, const CpuFingerprint &b);

struct ShapeClass {
    std::string dtype;                                  // "f32", "bf16", "f16"
    std::vector<std::pair<std::string, int>> buckets;   // main output axes, memory order: (name, bucket)
    int inner_multiple = 1;   // the largest of 16, 8, 4, 2, 1 dividing the innermost extent
    std::string footprint;    // "l2" | "l3" | "dram": the call's bytes against the threads' L2 and the L3

    std::string key() const;  // "f32|rows=2^12,d=2^12|m16|dram", "f32|rows=2^14,d=768|m16|l3"
    nlohmann::json to_json() const;
    static ShapeClass from_json(const nlohmann::json &j);
    bool operator==(const ShapeClass &o) const { return key() == o.key(); }
};

// The innermost axis is bucketed exactly up to this width: the widths a tuned kernel may bake in
// (the knob fixed_inner_extent), so that a class holds one of them (LayerNorm's 768 and 1024 wide
// rows, both 2^10 in log2, were one class whose 768-wide winner refused the 1024-wide calls).
constexpr int64_t kExactInnerWidth = 1024;

// The bucket of one extent: the extent itself up to 8, else 1000 + round(log2(extent)) (printed
// 2^k); `innermost` and from 9 up to kExactInnerWidth: kExactBucket + the extent (printed as it
// is). Small exact extents (a 7 x 7 plane) are a kind of their own; exact innermost widths are
// as near to each other, and to the powers of two, as their log2 says.
constexpr int kExactBucket = 100000;
int extent_bucket(int64_t extent, bool innermost = false);
std::string bucket_text(int bucket);

// The bytes one call moves at the floor: every input and parameter read once, every output of the
// plan written once, at their storage sizes.
int64_t plan_bytes(const NormSpec &spec, const KernelPlan &plan, const std::vector<int64_t> &extents);

// The shape class of a call of `plan` with these atomic axis extents (per axis id) on `cpu`.
ShapeClass shape_class(const NormSpec &spec, const KernelPlan &plan, const std::vector<int64_t> &extents, const CpuFingerprint &cpu);

// How far a call's class is from a tuned one: infinity when the storage type, the axes, the
// innermost alignment class or the footprint differ; else the octaves between their buckets
// (exact buckets count as log2 of the extent). kNearShape: the most that still uses a tuned schedule.
double shape_distance(const ShapeClass &a, const ShapeClass &b);
constexpr double kNearShape = 2.0;

// How far apart two classes are for a warm start (`normgen tune` seeds a class with the winners of
// its neighbours): the octaves between the buckets as in shape_distance, small exact extents by
// their log2 too, plus 1 for another footprint, 1 for another alignment class and 2 for another
// storage type; infinite only when the axes differ.
double loose_shape_distance(const ShapeClass &a, const ShapeClass &b);

// Whether a choice tuning made on `there` may choose for `here`: "" when it may, else why not.
// The machine's own choices (the same fingerprint key) always may. Another machine's only when it
// is of the same kind for a memory-bound kernel: the same vendor, ISA tier, native conversions
// (avx512_bf16, avx512_fp16) and thread count, and the same cache regime (its L2 and L3 each within a factor of two of this one's), and
// only when the choice beat the Halide default, what dispatch falls back to, by kForeignMargin on
// its own machine (`vs_fallback`; 0: not known, refused). Measured on the forward f32 grid on a
// Xeon (AVX-512, 260 MiB L3) with only a 480 MiB-L3 Xeon's choices to go by: taken blindly they
// were 1.49x the default over 77 cases but behind it on 6 (0.61-0.92x); every loser but DyT's had
// won by at most 1.17x at home (README "Tuning": an unknown CPU). A user's machine gets its own
// choices with `normgen tune --catalog --time MINUTES`.
std::string foreign_refusal(const CpuFingerprint &here, const CpuFingerprint &there, double vs_fallback);
constexpr double kForeignMargin = 1.2;

// How well a schedule tuned for (tuned, there) fits a call of class `call` on `here`: infinity when
// it may not be used (the shape class too far, or foreign_refusal says no), else smaller is nearer
// (the shape class weighs ten times the CPU). The registry's dispatch and `normgen describe
// --shape` rank tuned schedules by it.
double tuned_match_score(const ShapeClass &call, const CpuFingerprint &here, const ShapeClass &tuned, const CpuFingerprint &there,
                         double vs_fallback);

struct KernelIdentity {
    std::string layer;
    std::string decl_hash;  // FNV-1a of the canonical declaration text (hex)
    std::string generator = kGeneratorVersion;
    std::string halide, llvm;  // the versions this build of normgen uses

    nlohmann::json to_json() const;
    static KernelIdentity from_json(const nlohmann::json &j);
    // "" when `o` is the same kernel, else what differs ("the declaration changed", "Halide 20.0.0 -> 21.0.0").
    std::string mismatch(const KernelIdentity &o) const;
    // Records of this kernel measured before `since` (UTC, as TuningRecord::when) are stale too: the
    // code generated for their knobs changed then for this layer without a new generator version
    // (since_why says what). Not written to records; set by kernel_identity().
    std::string since, since_why;
    // mismatch(o), else why a record of identity `o` measured at `when` is stale, else "".
    std::string stale(const KernelIdentity &o, const std::string &when) const;
};

// The identity of a declaration's kernels in this build of normgen.
KernelIdentity kernel_identity(const NormSpec &spec);
// The Halide and LLVM versions this build was configured with.
const char *halide_version();
const char *llvm_version();

// The limit a layer is judged against at a shape (DESIGN.md, Performance).
struct LayerLimit {
    bool reads_twice = false;  // x must be read twice: the statistics span more than the cache holds
    int64_t bytes = 0;         // floor bytes of a call (plan_bytes)
    int64_t reread_bytes = 0;  // the bytes read a second time (the inputs the statistics read)
    std::string why;           // one line
};
LayerLimit layer_limit(const NormSpec &spec, const KernelPlan &plan, const std::vector<int64_t> &extents, const CpuFingerprint &cpu);

// Extents per atomic axis id from sizes by axis name (every atomic axis named, or fixed by an
// `axis g = N` declaration); throws UserError naming a missing or unknown axis.
std::vector<int64_t> extents_from_sizes(const NormSpec &spec, const std::map<std::string, int64_t> &sizes);

// "rows=4096,d=4096" <-> sizes by axis name (user input: UserError on a malformed list).
std::map<std::string, int64_t> parse_sizes(const std::string &text);
std::string sizes_text(const NormSpec &spec, const std::vector<int64_t> &extents);

}  // namespace normgen
