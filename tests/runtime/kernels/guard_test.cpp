// Guard pages: every kernel this CPU runs (both backends, every storage type, every ISA) on odd
// shapes with each input and output placed flush against a PROT_NONE page, once at the end of its
// mapping (a read or write past the last element faults) and once at the start (a read or write
// before the first element faults). A fault names the kernel, the shape and the placement (the
// handler prints them before the process dies, so ctest shows which call). Outputs are poisoned
// with NaN beforehand: an element the kernel never wrote fails the reference check with its index.
//
// The inputs are drawn from a seed printed with every failure; set NORMGEN_TEST_SEED to replay one.
#include "kernel_test_util.h"
#include "runtime/kernel_table.h"
#include "runtime/random_inputs.h"
#include "runtime/reference/interpreter.h"
#include "runtime/registry.h"
#include "runtime/run.h"
#include "runtime/storage.h"
#include "runtime/verify.h"

#include <catch2/catch.hpp>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

using namespace normgen;
using normgen::test::fitted;
using normgen::test::registry;
using normgen::test::taking;
using normgen::test::test_seed;

namespace {

// What is running, for the fault handler (async-signal-safe: a fixed buffer written with write()).
char g_current[512] = "(no kernel)";

void on_fault(int sig) {
    const char head[] = "\nguard_test: memory fault (a read or write outside a tensor) in ";
    ssize_t w = write(2, head, sizeof head - 1);
    w = write(2, g_current, strlen(g_current));
    w = write(2, "\n", 1);
    (void)w;
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}

// `bytes` of accessible memory flush against a PROT_NONE page: after it (at_end) or before it.
class Guarded {
public:
    Guarded(size_t bytes, bool at_end) : bytes_(bytes) {
        const size_t page = (size_t)sysconf(_SC_PAGESIZE);
        const size_t data_pages = (bytes + page - 1) / page + 1;
        size_ = (data_pages + 1) * page;
        base_ = (uint8_t *)mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        REQUIRE(base_ != MAP_FAILED);
        if (at_end) {
            REQUIRE(mprotect(base_ + data_pages * page, page, PROT_NONE) == 0);
            data_ = base_ + data_pages * page - bytes;
        } else {
            REQUIRE(mprotect(base_, page, PROT_NONE) == 0);
            data_ = base_ + page;
        }
    }
    ~Guarded() { munmap(base_, size_); }
    Guarded(const Guarded &) = delete;
    Guarded &operator=(const Guarded &) = delete;
    uint8_t *data() const { return data_; }
    size_t bytes() const { return bytes_; }

private:
    uint8_t *base_ = nullptr, *data_ = nullptr;
    size_t size_ = 0, bytes_ = 0;
};

// The shapes: every free axis at 1, 3 and 5; the innermost free axis of the first tensor at 17 and
// 4097 with the others at 2 and 1 (a split axis's free part counts as free).
std::vector<std::map<std::string, int64_t>> shapes_for(const NormSpec &spec) {
    std::vector<std::string> free;
    for (const Axis &a : spec.axes)
        if (!a.is_split() && !a.fixed_extent) free.push_back(a.name);
    std::string inner;
    for (AxisId a : spec.memory_atoms(spec.tensors.front().dims))
        if (!spec.axes[a].fixed_extent) inner = spec.axes[a].name;
    std::vector<std::map<std::string, int64_t>> out;
    auto all = [&](int64_t v, int64_t inner_v) {
        std::map<std::string, int64_t> m;
        for (const std::string &n : free) m[n] = n == inner ? inner_v : v;
        out.push_back(m);
    };
    all(1, 1);
    all(3, 3);
    all(5, 5);
    all(2, 17);
    all(1, 4097);
    return out;
}

std::string sizes_text(const std::map<std::string, int64_t> &m) {
    std::string s;
    for (const auto &[n, v] : m) s += (s.empty() ? "" : " ") + n + "=" + std::to_string(v);
    return s;
}

}  // namespace

TEST_CASE("no kernel reads or writes outside its tensors (guard pages on both sides), every output is written", "[kernels][guard]") {
    std::signal(SIGSEGV, on_fault);
    std::signal(SIGBUS, on_fault);
    int calls = 0, own_calls = 0;
    uint64_t salt = 0;
    for (const Registry::Kernel *k : registry().kernels()) {
        if (!k->runs_here()) continue;
        const NormSpec &spec = *k->spec;
        // A kernel with a requirement (tuned: a fixed extent, streaming stores) gets the shapes as
        // they are, which a program's call hands to another kernel, and fitted to what it takes.
        std::vector<std::map<std::string, int64_t>> shapes = shapes_for(spec);
        if (k->requirement.any())
            for (size_t i = 0, n = shapes.size(); i < n; ++i) shapes.push_back(fitted(*k, shapes[i]));
        for (const auto &sizes : shapes) {
            for (bool at_end : {true, false}) {
                std::snprintf(g_current, sizeof g_current, "%s (%s), %s, tensors %s a guard page", k->function.c_str(),
                              backend_name(k->backend), sizes_text(sizes).c_str(), at_end ? "ending at" : "starting after");
                INFO(g_current << ", seed " << test_seed());
                AxisExtents ext = choose_extents(spec, sizes, 1);
                TensorMap in = random_inputs(spec, ext, RandomInputOptions{0, test_seed() ^ ++salt});
                std::vector<std::unique_ptr<Guarded>> mem;
                std::map<std::string, TensorView> views;
                TensorMap stored;
                for (const KernelArg &a : k->args) {
                    if (a.role == KernelArg::Output) continue;
                    const HostTensor &h = in.at(a.name);
                    std::vector<uint8_t> bytes = encode(h.data, a.dtype);
                    mem.push_back(std::make_unique<Guarded>(bytes.size(), at_end));
                    std::memcpy(mem.back()->data(), bytes.data(), bytes.size());
                    views[a.name] = TensorView{mem.back()->data(), a.dtype, h.shape, {}};
                    stored[a.name] = HostTensor{h.shape, decode(bytes.data(), (size_t)h.numel(), a.dtype)};
                }
                TensorMap ref = evaluate_reference(spec, stored, {}, {k->storage()});
                // A backward kernel's terms cancel inside: its bound adds the running error bound.
                const TensorMap mags = k->grad_of.empty() ? TensorMap{} : evaluate_magnitudes(spec, stored, {}, {k->storage()});
                for (const KernelArg &a : k->args) {
                    if (a.role != KernelArg::Output) continue;
                    const HostTensor &r = ref.at(a.name);
                    const size_t bytes = (size_t)r.numel() * dtype_size(a.dtype);
                    mem.push_back(std::make_unique<Guarded>(bytes, at_end));
                    std::memset(mem.back()->data(), 0xff, bytes);  // NaN in every storage type
                    views[a.name] = TensorView{mem.back()->data(), a.dtype, r.shape, {}};
                }
                const Registry::Kernel &runs = taking(*k, views);
                run_kernel(runs, views);
                ++calls;
                if (&runs == k && k->requirement.any()) ++own_calls;
                for (const KernelArg &a : k->args) {
                    if (a.role != KernelArg::Output) continue;
                    const TensorView &v = views.at(a.name);
                    HostTensor got{v.shape, decode((const uint8_t *)v.data, (size_t)v.numel(), a.dtype)};
                    OutputCheck c = compare_output(a.name, got, ref.at(a.name), a.dtype, spot_check_bound(spec, mags, a.name));
                    if (!c.pass) FAIL_CHECK(mismatch_text(c));
                }
            }
        }
    }
    std::snprintf(g_current, sizeof g_current, "(no kernel)");
    CHECK(calls > 100);
    // The tuned kernels with a requirement ran themselves too (when the build has any).
    bool any_required = false;
    for (const Registry::Kernel *k : registry().kernels()) any_required = any_required || (k->runs_here() && k->requirement.any());
    if (any_required) CHECK(own_calls > 0);
}
