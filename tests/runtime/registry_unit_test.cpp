// The kernel registry and dispatch (runtime/registry.h, runtime/run.h) without any generated kernel:
// hand-written manifests in a temporary folder, bound to a fake kernel table whose entry points
// record the halide_buffer_t arguments they receive (and fill their outputs, so a call that should
// have been refused would show). Covers manifest parsing and its errors, kernel selection, every
// refusal of run_kernel (with the outputs left untouched), the buffers a kernel is handed (dims,
// extents, strides, types, split axes as two dims), in-place updates, and Halide errors as exceptions.
#include "codegen/common/kernel_plan.h"
#include "codegen/common/tuning_keys.h"
#include "dsl/checker.h"
#include "dsl/printer.h"
#include "runtime/errors.h"
#include "runtime/halide_errors.h"
#include "runtime/registry.h"
#include "runtime/run.h"

#include <HalideRuntime.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

using namespace normgen;
using nlohmann::json;
namespace fs = std::filesystem;
using Shape = std::vector<int64_t>;

// ---------------------------------------------------------------------------------------------
// A fake Halide runtime: the error handler the registry installs is kept here, so a fake kernel
// can report an error the way the real runtime does.
namespace {
halide_error_handler_t g_handler = nullptr;
}
extern "C" halide_error_handler_t halide_set_error_handler(halide_error_handler_t handler) {
    halide_error_handler_t old = g_handler;
    g_handler = handler;
    return old;
}
// (run_kernel copies a GPU kernel's outputs back and frees its device memory: no GPU kernel here.)
extern "C" int halide_copy_to_host(void *, halide_buffer_t *) { return 0; }
extern "C" int halide_device_free(void *, halide_buffer_t *) { return 0; }

namespace {

// ---------------------------------------------------------------------------------------------
// The fake kernels.
struct RecordedBuffer {
    void *host;
    halide_type_t type;
    std::vector<halide_dimension_t> dims;
    uint64_t flags, device;
    const void *device_interface;
};
struct RecordedCall {
    int kernel;
    std::vector<RecordedBuffer> bufs;
};
std::vector<RecordedCall> g_calls;
size_t g_nargs = 0;          // how many arguments the kernel being called has
size_t g_first_output = 0;   // arguments from here on are outputs: the fake fills them with 0x5a bytes
bool g_fail = false;         // the fake reports a Halide error instead
bool g_touch = true;         // the fake writes its outputs (off for calls on fake addresses)

template <int I>
int fake_argv(void **args) {
    if (g_fail) {
        if (g_handler) g_handler(nullptr, "Input buffer x is accessed at 9, which is beyond the max (8) in dimension 0\n");
        return -4;
    }
    RecordedCall c{I, {}};
    for (size_t i = 0; i < g_nargs; ++i) {
        auto *b = static_cast<halide_buffer_t *>(args[i]);
        RecordedBuffer r{b->host, b->type, std::vector<halide_dimension_t>(b->dim, b->dim + b->dimensions), b->flags, b->device,
                         b->device_interface};
        c.bufs.push_back(r);
        if (g_touch && i >= g_first_output) {
            int64_t n = 1;
            for (int d = 0; d < b->dimensions; ++d) n *= b->dim[d].extent;
            std::memset(b->host, 0x5a, (size_t)n * b->type.bytes());
        }
    }
    g_calls.push_back(c);
    return 0;
}

// Every kernel the test manifests name, and its fake.
const std::vector<std::string> kFunctions = {
    "layer_norm__f32__avx2__core",   "layer_norm__f32__avx2__full",   "layer_norm__f32__avx512__core",
    "layer_norm__f32__avx512__full", "layer_norm__bf16__avx2__core",  "layer_norm__bf16__avx512__core",
    "layer_norm__f16__avx2__core",   "batch_norm_train__f32__avx2__core", "batch_norm_train__f32__avx2__full",
    "group_norm_nchw__f32__avx2__core", "dyt__f32__avx2__core",    "rms_norm__f32__avx512__core",
    "rms_norm__f32__avx2__core",
    // Tuned kernels (dispatch by shape class): one per winning schedule.
    "rms_norm__f32__avx2__core__ta", "rms_norm__f32__avx2__core__tb", "rms_norm__f32__avx2__core__tc",
};
template <int... I>
std::vector<KernelEntry> make_table(std::integer_sequence<int, I...>) {
    return {KernelEntry{kFunctions[I].c_str(), &fake_argv<I>}...};
}
const std::vector<KernelEntry> &table() {
    static const std::vector<KernelEntry> t = make_table(std::make_integer_sequence<int, 16>{});
    return t;
}
int kernel_index(const std::string &fn) {
    return (int)(std::find(kFunctions.begin(), kFunctions.end(), fn) - kFunctions.begin());
}

// ---------------------------------------------------------------------------------------------
// Hand-written manifests.
struct TempDir {
    fs::path path;
    TempDir() {
        std::random_device rd;
        path = fs::temp_directory_path() / ("normgen_registry_test_" + std::to_string(rd()) + std::to_string(rd()));
        fs::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::string write(const std::string &name, const std::string &text) const {
        std::string p = (path / name).string();
        std::ofstream(p, std::ios::binary) << text;
        return p;
    }
};

std::string catalog_path(const std::string &layer) { return std::string(NORMGEN_SOURCE_DIR) + "/dsl/catalog/" + layer + ".norm"; }

const std::vector<std::string> kAvx2 = {"sse4.1", "avx", "avx2", "fma", "f16c"};
const std::vector<std::string> kAvx512 = {"sse4.1", "avx", "avx2", "fma", "f16c", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"};

// One manifest entry, laid out as codegen/halide/aot.cpp writes them.
json entry(const std::string &layer, DType want, const std::string &isa, bool full,
           const std::vector<std::string> &features = {}) {
    NormSpec spec = load_norm_file(catalog_path(layer));
    json e;
    std::string fn = layer + "__" + dtype_name(want) + "__" + isa + "__" + (full ? "full" : "core");
    e["function"] = fn;
    e["layer"] = layer;
    e["source"] = "dsl/catalog/" + layer + ".norm";
    e["norm"] = print_norm(spec);
    e["dtype"] = dtype_name(want);
    e["target"] = isa == "avx512" ? "x86-64-linux-avx-avx2-avx512-f16c-fma-sse41" : "x86-64-linux-avx-avx2-f16c-fma-sse41";
    e["isa"] = isa;
    e["cpu_features"] = features.empty() ? (isa == "avx512" ? kAvx512 : kAvx2) : features;
    e["variant"] = full ? "full" : "core";
    e["schedule_text"] = "test";
    e["library"] = fn + ".a";
    e["header"] = fn + ".h";
    auto arg = [&](const std::string &name, const char *role, const std::vector<AxisId> &dims, bool optional,
                   const std::string &updates) {
        std::vector<DType> allowed = spec.storage_of(name);
        DType t = std::find(allowed.begin(), allowed.end(), want) != allowed.end() ? want : allowed[0];
        json a;
        a["name"] = name;
        a["role"] = role;
        a["dtype"] = dtype_name(t);
        json d = json::array(), b = json::array();
        std::vector<AxisId> atoms;
        for (AxisId x : dims) {
            d.push_back(spec.axes[x].name);
            if (spec.axes[x].is_split()) atoms.insert(atoms.end(), spec.axes[x].parts.begin(), spec.axes[x].parts.end());
            else atoms.push_back(x);
        }
        for (auto it = atoms.rbegin(); it != atoms.rend(); ++it) b.push_back(spec.axes[*it].name);
        a["dims"] = d;
        a["buffer_dims"] = b;
        a["optional"] = optional;
        a["updates"] = updates;
        return a;
    };
    json args = json::array();
    for (const TensorInfo &t : spec.tensors) args.push_back(arg(t.name, t.role == TensorInfo::Param ? "param" : "input", t.dims, false, ""));
    for (const OutputInfo &o : spec.outputs)
        if (!o.optional || full) args.push_back(arg(o.name, "output", o.dims, o.optional, o.updates));
    e["args"] = args;
    return e;
}

json manifest(const std::vector<json> &entries) {
    json m;
    m["normgen_manifest"] = 1;
    m["kernels"] = entries;
    return m;
}

json standard_manifest() {
    return manifest({
        entry("layer_norm", DType::F32, "avx2", false),
        entry("layer_norm", DType::F32, "avx2", true),
        entry("layer_norm", DType::F32, "avx512", false),
        entry("layer_norm", DType::F32, "avx512", true),
        entry("layer_norm", DType::BF16, "avx2", false),
        entry("layer_norm", DType::BF16, "avx512", false),
        entry("layer_norm", DType::F16, "avx2", false),
        entry("batch_norm_train", DType::F32, "avx2", false),
        entry("batch_norm_train", DType::F32, "avx2", true),
        entry("group_norm_nchw", DType::F32, "avx2", false),
        entry("dyt", DType::F32, "avx2", false),
    });
}

Registry load_json(const TempDir &dir, const json &m, const std::string &name = "manifest.json") {
    std::string p = dir.write(name, m.dump(1));
    return Registry::load(p, table().data(), table().size());
}

const Registry &standard() {
    static TempDir dir;
    static const Registry reg = load_json(dir, standard_manifest());
    return reg;
}

const Registry::Kernel &kernel(const std::string &fn) {
    const Registry::Kernel *k = standard().find(fn);
    REQUIRE(k);
    return *k;
}

// ---------------------------------------------------------------------------------------------
// Tensors: caller-owned storage with a sentinel, and views of it.
struct Buf {
    std::vector<uint8_t> bytes;
    Shape shape;
    DType dtype;
    Buf(Shape s, DType t = DType::F32, uint8_t fill = 0x11) : shape(std::move(s)), dtype(t) {
        int64_t n = 1;
        for (int64_t x : shape) n *= x;
        bytes.assign((size_t)n * (t == DType::F32 ? 4 : 2), fill);
    }
    TensorView view() { return TensorView{bytes.data(), dtype, shape, {}}; }
    bool all(uint8_t v) const {
        return std::all_of(bytes.begin(), bytes.end(), [&](uint8_t b) { return b == v; });
    }
};
constexpr uint8_t kSentinel = 0xee;

// The message of the UserError `f` throws ("<no UserError>" if it throws none or another kind).
template <typename F>
std::string user_error_of(F f) {
    try {
        f();
    } catch (const UserError &e) {
        return e.what();
    } catch (const std::exception &e) {
        return std::string("<not a UserError: ") + e.what() + ">";
    }
    return "<no UserError>";
}

// Calls run_kernel with the fake told which of the kernel's arguments are outputs.
void call(const Registry::Kernel &k, const std::map<std::string, TensorView> &t) {
    g_nargs = k.args.size();
    g_first_output = 0;
    while (g_first_output < k.args.size() && k.args[g_first_output].role != KernelArg::Output) ++g_first_output;
    run_kernel(k, t);
}

// A refused call: UserError with `text`, no kernel called, the sentinel outputs untouched.
void require_refused(const Registry::Kernel &k, const std::map<std::string, TensorView> &t, const std::string &text,
                     const std::vector<const Buf *> &outputs) {
    size_t calls = g_calls.size();
    CHECK_THAT(user_error_of([&] { call(k, t); }), Catch::Contains(text));
    CHECK(g_calls.size() == calls);
    for (const Buf *o : outputs) CHECK(o->all(kSentinel));
}

// layer_norm with rows x d, f32: x, weight, bias, y (sentinel).
struct LayerNormCall {
    Buf x, w, b, y;
    LayerNormCall(int64_t rows, int64_t d, DType t = DType::F32)
        : x({rows, d}, t), w({d}), b({d}), y({rows, d}, t, kSentinel) {}
    std::map<std::string, TensorView> tensors() { return {{"x", x.view()}, {"weight", w.view()}, {"bias", b.view()}, {"y", y.view()}}; }
};

}  // namespace

// =============================================================================================
TEST_CASE("the manifest loads, binds each kernel to its entry point and parses each layer once", "[registry]") {
    const Registry &reg = standard();
    CHECK(reg.kernels().size() == 11);
    const Registry::Kernel &k = kernel("layer_norm__f32__avx2__core");
    CHECK(k.layer == "layer_norm");
    CHECK(k.dtype == DType::F32);
    CHECK(k.isa == Isa::Avx2);
    CHECK(k.variant == Variant::Core);
    CHECK_FALSE(k.full());
    CHECK(k.argv == &fake_argv<0>);
    REQUIRE(k.args.size() == 4);
    CHECK(k.args[0].name == "x");
    CHECK(k.args[0].role == KernelArg::Input);
    CHECK(k.args[0].buffer_dims == std::vector<std::string>{"d", "rows"});
    CHECK(k.args[1].role == KernelArg::Param);
    CHECK(k.args[3].name == "y");
    CHECK(k.args[3].role == KernelArg::Output);
    REQUIRE(k.spec);
    CHECK(k.spec->name == "layer_norm");
    // One NormSpec per layer, shared by its kernels.
    CHECK(kernel("layer_norm__bf16__avx512__core").spec == k.spec);
    CHECK(reg.spec("layer_norm") == k.spec);
    CHECK(reg.spec("no_such_layer") == nullptr);
    CHECK(reg.find("no_such_function") == nullptr);
    const Registry::Kernel &bf = kernel("layer_norm__bf16__avx2__core");
    CHECK(bf.args[0].dtype == DType::BF16);  // x, y take the asked type; weight, bias stay f32
    CHECK(bf.args[1].dtype == DType::F32);
    CHECK(bf.args[3].dtype == DType::BF16);
    const Registry::Kernel &gn = kernel("group_norm_nchw__f32__avx2__core");
    CHECK(gn.args[0].dims == std::vector<std::string>{"n", "c", "h", "w"});
    CHECK(gn.args[0].buffer_dims == std::vector<std::string>{"w", "h", "cg", "g", "n"});
}

TEST_CASE("a manifest that cannot be used is a UserError naming the file", "[registry]") {
    TempDir dir;
    auto fails_with = [&](const std::string &text, const std::string &what) {
        std::string p = dir.write("m.json", text);
        CHECK_THAT(user_error_of([&] { Registry::load(p, table().data(), table().size()); }), Catch::Contains(what) && Catch::Contains(p));
    };
    SECTION("missing file") {
        std::string p = (dir.path / "absent.json").string();
        CHECK_THAT(user_error_of([&] { Registry::load(p, table().data(), table().size()); }),
                   Catch::Contains(p) && Catch::Contains("NORMGEN_MANIFEST"));
    }
    SECTION("not JSON") { fails_with("{ \"normgen_manifest\": 1, ", "not valid JSON"); }
    SECTION("not a manifest") { fails_with("{\"kernels\": []}", "not a normgen manifest"); }
    SECTION("another version") { fails_with("{\"normgen_manifest\": 2, \"kernels\": []}", "unsupported format version 2"); }
    SECTION("a field missing") {
        json m = manifest({entry("layer_norm", DType::F32, "avx2", false)});
        m["kernels"][0].erase("args");
        fails_with(m.dump(), "kernel 'layer_norm__f32__avx2__core': missing field 'args'");
    }
    SECTION("an unknown storage type") {
        json m = manifest({entry("layer_norm", DType::F32, "avx2", false)});
        m["kernels"][0]["dtype"] = "f8";
        fails_with(m.dump(), "unknown storage type 'f8'");
    }
    SECTION("an unknown isa, backend, variant; a schedule that is not a record") {
        json m = manifest({entry("layer_norm", DType::F32, "avx2", false)});
        json bad = m;
        bad["kernels"][0]["isa"] = "sse2";
        fails_with(bad.dump(), "isa 'sse2' (expected avx2, avx512 or sm_90)");
        bad = m;
        bad["kernels"][0]["backend"] = "triton";
        fails_with(bad.dump(), "backend 'triton' (expected halide or mlir)");
        bad = m;
        bad["kernels"][0]["variant"] = "half";
        fails_with(bad.dump(), "variant 'half' (expected core or full)");
        bad = m;
        bad["kernels"][0]["device"] = "cuda";
        fails_with(bad.dump(), "isa 'avx2' is not an isa of device 'cuda'");
        bad = m;
        bad["kernels"][0]["schedule"] = "row schedule";
        fails_with(bad.dump(), "field 'schedule' is not a schedule record");
    }
    SECTION("a function the program was not linked with") {
        json m = manifest({entry("layer_norm", DType::F32, "avx2", false)});
        m["kernels"][0]["function"] = "layer_norm__f32__avx2__zzz";
        fails_with(m.dump(), "function 'layer_norm__f32__avx2__zzz' is not in this program's kernel table");
    }
    SECTION("a declaration that does not check") {
        json m = manifest({entry("layer_norm", DType::F32, "avx2", false)});
        m["kernels"][0]["norm"] = "norm layer_norm(x: [rows, d]) -> y { y = mean(x, over: q) }";
        fails_with(m.dump(), "does not check");
    }
    SECTION("args that do not match the declaration") {
        json m = manifest({entry("layer_norm", DType::F32, "avx2", false)});
        std::swap(m["kernels"][0]["args"][1], m["kernels"][0]["args"][2]);
        fails_with(m.dump(), "do not match the core kernel ABI");
    }
    SECTION("buffer dims that do not match the declaration") {
        json m = manifest({entry("group_norm_nchw", DType::F32, "avx2", false)});
        m["kernels"][0]["args"][0]["buffer_dims"] = json::array({"w", "h", "c", "n"});
        fails_with(m.dump(), "arg 'x': buffer_dims [w, h, c, n], but its atomic axes innermost first are [w, h, cg, g, n]");
    }
    SECTION("a full kernel's args without its optional outputs") {
        json m = manifest({entry("layer_norm", DType::F32, "avx2", true)});
        m["kernels"][0]["args"].erase(5);
        fails_with(m.dump(), "do not match the full kernel ABI");
    }
    SECTION("two kernels of one layer with different declarations") {
        json a = entry("layer_norm", DType::F32, "avx2", false), b = entry("layer_norm", DType::F32, "avx512", false);
        std::string norm = b["norm"];
        size_t at = norm.find("const eps = ");
        REQUIRE(at != std::string::npos);
        norm.insert(at + 12, "2");  // eps = 21e-05
        b["norm"] = norm;
        fails_with(manifest({a, b}).dump(), "differs from that of another kernel");
    }
}

TEST_CASE("select picks the widest ISA this CPU runs, core unless optional outputs are needed", "[registry]") {
    const Registry &reg = standard();
    const std::optional<Isa> here = cpu_isa();
    INFO("cpu_isa() = '" << cpu_isa_name() << "'");

    const Registry::Kernel *k = reg.select("layer_norm", DType::F32, false);
    if (!here) {
        CHECK(k == nullptr);
    } else {
        REQUIRE(k);
        CHECK(k->isa == *here);
        CHECK(k->variant == Variant::Core);
        CHECK(k->runs_here());
    }
    if (here == Isa::Avx512) CHECK(reg.select("layer_norm", DType::BF16, false)->function == "layer_norm__bf16__avx512__core");

    // Asked for avx2, avx2 it is.
    if (here) {
        const Registry::Kernel *a = reg.select("layer_norm", DType::F32, false, Isa::Avx2);
        REQUIRE(a);
        CHECK(a->function == "layer_norm__f32__avx2__core");
        const Registry::Kernel *f = reg.select("layer_norm", DType::F32, true, Isa::Avx2);
        REQUIRE(f);
        CHECK(f->function == "layer_norm__f32__avx2__full");
        CHECK(reg.select("layer_norm", DType::F16, false, Isa::Avx2)->function == "layer_norm__f16__avx2__core");
        // A layer without optional outputs has only a core kernel, which writes everything.
        CHECK(reg.select("dyt", DType::F32, true)->function == "dyt__f32__avx2__core");
    }
    CHECK(reg.select("no_such_layer", DType::F32, false) == nullptr);
    CHECK(reg.select("layer_norm", DType::F16, false, Isa::Avx512) == nullptr);  // none generated
    CHECK(reg.select("layer_norm", DType::F16, true) == nullptr);             // no f16 full kernel
}

TEST_CASE("select skips kernels needing a CPU feature this machine lacks", "[registry]") {
    TempDir dir;
    Registry reg = load_json(dir, manifest({
        entry("rms_norm", DType::F32, "avx512", false, {"avx512f", "no_such_feature"}),
        entry("rms_norm", DType::F32, "avx2", false, {"avx2"}),
    }));
    CHECK_FALSE(reg.find("rms_norm__f32__avx512__core")->runs_here());
    CHECK_FALSE(cpu_supports("no_such_feature"));
    if (cpu_supports("avx2")) {
        REQUIRE(reg.select("rms_norm", DType::F32, false));
        CHECK(reg.select("rms_norm", DType::F32, false)->isa == Isa::Avx2);
    }
    CHECK(reg.select("rms_norm", DType::F32, false, Isa::Avx512) == nullptr);
}

TEST_CASE("cpu features and the default manifest path", "[registry]") {
    CHECK(cpu_supports("sse2"));  // every x86-64
    std::optional<Isa> isa = cpu_isa();
    CHECK((isa == Isa::Avx512 || isa == Isa::Avx2 || !isa));
    CHECK(cpu_isa_name() == (isa ? isa_name(*isa) : "none"));
    if (isa == Isa::Avx512) CHECK(cpu_supports("avx512f"));

    const char *old = std::getenv("NORMGEN_MANIFEST");
    std::string saved = old ? old : "";
    unsetenv("NORMGEN_MANIFEST");
    CHECK(default_manifest_path() == "generated/manifest.json");  // this test is not linked with the kernels
    setenv("NORMGEN_MANIFEST", "/x/y/manifest.json", 1);
    CHECK(default_manifest_path() == "/x/y/manifest.json");
    setenv("NORMGEN_MANIFEST", "", 1);
    CHECK(default_manifest_path() == "generated/manifest.json");
    if (old) setenv("NORMGEN_MANIFEST", saved.c_str(), 1);
    else unsetenv("NORMGEN_MANIFEST");
    CHECK(manifest_path_from_env("a/b.json") == (old && *old ? saved : std::string("a/b.json")));
}

// =============================================================================================
TEST_CASE("run_kernel hands the kernel one dense halide_buffer_t per argument, in manifest order", "[run]") {
    const Registry::Kernel &k = kernel("layer_norm__f32__avx2__core");
    LayerNormCall c(3, 5);
    g_calls.clear();
    call(k, c.tensors());
    REQUIRE(g_calls.size() == 1);
    const RecordedCall &r = g_calls[0];
    CHECK(r.kernel == kernel_index(k.function));
    REQUIRE(r.bufs.size() == 4);
    // x: [rows, d] -> dim 0 is d (stride 1), dim 1 is rows (stride d).
    CHECK(r.bufs[0].host == c.x.bytes.data());
    REQUIRE(r.bufs[0].dims.size() == 2);
    CHECK(r.bufs[0].dims[0] == halide_dimension_t(0, 5, 1));
    CHECK(r.bufs[0].dims[1] == halide_dimension_t(0, 3, 5));
    CHECK(r.bufs[0].type == halide_type_t(halide_type_float, 32, 1));
    CHECK(r.bufs[0].flags == 0);
    CHECK(r.bufs[0].device == 0);
    CHECK(r.bufs[0].device_interface == nullptr);
    CHECK(r.bufs[1].host == c.w.bytes.data());
    REQUIRE(r.bufs[1].dims.size() == 1);
    CHECK(r.bufs[1].dims[0] == halide_dimension_t(0, 5, 1));
    CHECK(r.bufs[2].host == c.b.bytes.data());
    CHECK(r.bufs[3].host == c.y.bytes.data());
    CHECK(r.bufs[3].dims == r.bufs[0].dims);
    CHECK(c.y.all(0x5a));  // the fake wrote the output
    CHECK(c.x.all(0x11));
}

TEST_CASE("buffer types follow each argument's storage type", "[run]") {
    g_calls.clear();
    {
        const Registry::Kernel &k = kernel("layer_norm__bf16__avx2__core");
        LayerNormCall c(2, 4, DType::BF16);
        call(k, c.tensors());
    }
    {
        const Registry::Kernel &k = kernel("layer_norm__f16__avx2__core");
        LayerNormCall c(2, 4, DType::F16);
        call(k, c.tensors());
    }
    REQUIRE(g_calls.size() == 2);
    CHECK(g_calls[0].bufs[0].type == halide_type_t(halide_type_bfloat, 16, 1));
    CHECK(g_calls[0].bufs[1].type == halide_type_t(halide_type_float, 32, 1));  // weight stays f32
    CHECK(g_calls[0].bufs[3].type == halide_type_t(halide_type_bfloat, 16, 1));
    CHECK(g_calls[1].bufs[0].type == halide_type_t(halide_type_float, 16, 1));
    CHECK(g_calls[1].bufs[3].type == halide_type_t(halide_type_float, 16, 1));
}

TEST_CASE("a split axis is passed as its two atomic parts", "[run]") {
    const Registry::Kernel &k = kernel("group_norm_nchw__f32__avx2__core");
    const int64_t n = 2, c = 64, h = 3, w = 5;  // g = 32 (fixed), cg = 2
    Buf x({n, c, h, w}), wt({c}), b({c}), y({n, c, h, w}, DType::F32, kSentinel);
    g_calls.clear();
    call(k, {{"x", x.view()}, {"weight", wt.view()}, {"bias", b.view()}, {"y", y.view()}});
    REQUIRE(g_calls.size() == 1);
    const auto &xb = g_calls[0].bufs[0];
    REQUIRE(xb.dims.size() == 5);
    CHECK(xb.dims[0] == halide_dimension_t(0, w, 1));
    CHECK(xb.dims[1] == halide_dimension_t(0, h, w));
    CHECK(xb.dims[2] == halide_dimension_t(0, 2, w * h));
    CHECK(xb.dims[3] == halide_dimension_t(0, 32, 2 * w * h));
    CHECK(xb.dims[4] == halide_dimension_t(0, n, c * w * h));
    const auto &wb = g_calls[0].bufs[1];
    REQUIRE(wb.dims.size() == 2);
    CHECK(wb.dims[0] == halide_dimension_t(0, 2, 1));
    CHECK(wb.dims[1] == halide_dimension_t(0, 32, 2));
    CHECK(g_calls[0].bufs[3].dims == xb.dims);
}

TEST_CASE("a scalar parameter is a zero-dimensional buffer; shape [] or [1] both work", "[run]") {
    const Registry::Kernel &k = kernel("dyt__f32__avx2__core");
    for (Shape alpha_shape : {Shape{}, Shape{1}}) {
        Buf x({4, 6}), alpha(alpha_shape), w({6}), b({6}), y({4, 6}, DType::F32, kSentinel);
        g_calls.clear();
        call(k, {{"x", x.view()}, {"alpha", alpha.view()}, {"weight", w.view()}, {"bias", b.view()}, {"y", y.view()}});
        REQUIRE(g_calls.size() == 1);
        CHECK(k.args[1].name == "alpha");
        CHECK(g_calls[0].bufs[1].dims.empty());
        CHECK(g_calls[0].bufs[1].host == alpha.bytes.data());
    }
}

TEST_CASE("a full kernel's optional outputs the caller omits go to scratch", "[run]") {
    const Registry::Kernel &k = kernel("layer_norm__f32__avx2__full");
    REQUIRE(k.args.size() == 6);
    LayerNormCall c(3, 7);
    Buf mu({3}, DType::F32, kSentinel);
    auto t = c.tensors();
    t["mu"] = mu.view();
    g_calls.clear();
    call(k, t);
    REQUIRE(g_calls.size() == 1);
    const auto &r = g_calls[0];
    CHECK(r.bufs[4].host == mu.bytes.data());
    CHECK(r.bufs[4].dims == std::vector<halide_dimension_t>{halide_dimension_t(0, 3, 1)});
    CHECK(r.bufs[5].host != nullptr);  // rstd: scratch
    CHECK(r.bufs[5].host != mu.bytes.data());
    CHECK(r.bufs[5].dims == std::vector<halide_dimension_t>{halide_dimension_t(0, 3, 1)});
    CHECK(mu.all(0x5a));
    CHECK(c.y.all(0x5a));
}

TEST_CASE("run_kernel refuses a bad call before anything is written", "[run]") {
    const Registry::Kernel &k = kernel("layer_norm__f32__avx2__core");
    LayerNormCall c(3, 5);
    auto t = c.tensors();
    std::vector<const Buf *> outs = {&c.y};

    SECTION("missing input") {
        t.erase("x");
        require_refused(k, t, "missing input 'x' of shape [rows, d]", outs);
    }
    SECTION("missing parameter") {
        t.erase("bias");
        require_refused(k, t, "missing parameter 'bias' of shape [d]", outs);
    }
    SECTION("missing required output") {
        t.erase("y");
        require_refused(k, t, "missing output 'y' of shape [rows, d]", {});
    }
    SECTION("unknown name") {
        Buf z({3, 5});
        t["z"] = z.view();
        require_refused(k, t, "unknown tensor 'z': layer 'layer_norm' has inputs x, weight, bias; outputs y, mu?, rstd?", outs);
    }
    SECTION("null data") {
        t["weight"].data = nullptr;
        require_refused(k, t, "tensor 'weight': data pointer is null", outs);
    }
    SECTION("null output data") {
        t["y"].data = nullptr;
        require_refused(k, t, "tensor 'y': data pointer is null", {});
    }
    SECTION("wrong dtype") {
        const Registry::Kernel &kb = kernel("layer_norm__bf16__avx2__core");
        LayerNormCall cb(3, 5, DType::BF16);
        auto tb = cb.tensors();
        tb["x"] = c.x.view();  // f32 storage given to a bf16 kernel
        require_refused(kb, tb, "tensor 'x': expected bf16, got f32", {&cb.y});
        tb = cb.tensors();
        tb["weight"].dtype = DType::BF16;
        require_refused(kb, tb, "tensor 'weight': expected f32, got bf16", {&cb.y});
    }
    SECTION("wrong rank") {
        Buf x3({3, 5, 1});
        t["x"] = x3.view();
        require_refused(k, t, "input 'x': expected rank 2 [rows, d], got shape [3, 5, 1]", outs);
    }
    SECTION("wrong parameter shape") {
        Buf w6({6});
        t["weight"] = w6.view();
        require_refused(k, t, "parameter 'weight': axis 'd' has extent 6 but 'x' gives it 5", outs);
    }
    SECTION("wrong output shape") {
        Buf y2({3, 6}, DType::F32, kSentinel);
        t["y"] = y2.view();
        require_refused(k, t, "output 'y': expected shape [3, 5] [rows, d], got [3, 6]", {&y2, &c.y});
    }
    SECTION("an extent below one") {
        t["weight"].shape = {0};
        require_refused(k, t, "tensor 'weight': shape [0] has an extent below 1", outs);
    }
    SECTION("non-contiguous strides") {
        t["x"].strides = {10, 1};
        require_refused(k, t, "tensor 'x': strides [10, 1] for shape [3, 5] are not contiguous row-major (expected [5, 1])", outs);
        t["x"].strides = {1, 3};  // column-major
        require_refused(k, t, "(Halide) takes contiguous row-major tensors, the MLIR kernels take strided inputs", outs);
        t["x"].strides = {5};
        require_refused(k, t, "tensor 'x': 1 strides for shape [3, 5]", outs);
    }
    SECTION("explicit dense strides are fine, and any stride on an extent-1 axis") {
        t["x"].strides = {5, 1};
        g_calls.clear();
        call(k, t);
        CHECK(g_calls.size() == 1);
        LayerNormCall c1(1, 5);
        auto t1 = c1.tensors();
        t1["x"].strides = {999, 1};
        call(k, t1);
        CHECK(g_calls.size() == 2);
    }
    SECTION("an optional output given to a core kernel") {
        Buf mu({3}, DType::F32, kSentinel);
        t["mu"] = mu.view();
        require_refused(k, t, "tensor 'mu' is an optional output, which the core kernel 'layer_norm__f32__avx2__core' does not write; select a full kernel",
                        {&mu, &c.y});
    }
    SECTION("an output overlapping an input") {
        t["y"].data = c.x.bytes.data() + 4;  // shifted by one element
        require_refused(k, t, "output 'y' overlaps input 'x' in memory", {});
        CHECK(c.x.all(0x11));
        t["y"].data = c.x.bytes.data();  // exactly x: still refused, y does not update x
        require_refused(k, t, "output 'y' overlaps input 'x' in memory", {});
        CHECK(c.x.all(0x11));
    }
    SECTION("an output overlapping a parameter") {
        Buf big({3, 5}, DType::F32, kSentinel);
        t["weight"].data = big.bytes.data() + 8 * 4;  // weight lies inside y's memory
        t["y"] = big.view();
        require_refused(k, t, "output 'y' overlaps input 'weight' in memory", {});
        CHECK(big.all(kSentinel));
    }
}

TEST_CASE("outputs must not overlap each other", "[run]") {
    const Registry::Kernel &k = kernel("layer_norm__f32__avx2__full");
    LayerNormCall c(3, 5);
    Buf stats({4}, DType::F32, kSentinel);
    auto t = c.tensors();
    TensorView mu{stats.bytes.data(), DType::F32, {3}, {}}, rstd{stats.bytes.data() + 4, DType::F32, {3}, {}};
    t["mu"] = mu;
    t["rstd"] = rstd;
    require_refused(k, t, "output 'rstd' overlaps output 'mu' in memory", {&stats, &c.y});
}

TEST_CASE("an `updates` output may be exactly its input's buffer, and nothing else", "[run]") {
    const Registry::Kernel &k = kernel("batch_norm_train__f32__avx2__core");
    const int64_t n = 2, c = 3, h = 2, w = 2;
    Buf x({n, c, h, w}), rm({c}), rv({c}), wt({c}), b({c}), y({n, c, h, w}, DType::F32, kSentinel);
    Buf rm_out({c}, DType::F32, kSentinel), rv_out({c}, DType::F32, kSentinel);
    std::map<std::string, TensorView> t = {{"x", x.view()},       {"running_mean", rm.view()}, {"running_var", rv.view()},
                                           {"weight", wt.view()}, {"bias", b.view()},          {"y", y.view()},
                                           {"running_mean_out", rm_out.view()}, {"running_var_out", rv_out.view()}};
    SECTION("separate buffers") {
        g_calls.clear();
        call(k, t);
        CHECK(g_calls.size() == 1);
        CHECK(rm_out.all(0x5a));
    }
    SECTION("in place") {
        t["running_mean_out"] = rm.view();
        t["running_var_out"] = rv.view();
        g_calls.clear();
        call(k, t);
        REQUIRE(g_calls.size() == 1);
        const auto &r = g_calls[0];
        CHECK(r.bufs[1].host == rm.bytes.data());
        CHECK(r.bufs[6].host == rm.bytes.data());
        CHECK(r.bufs[7].host == rv.bytes.data());
        CHECK(rm.all(0x5a));  // written in place
    }
    SECTION("partially overlapping the input it updates") {
        Buf both({c + 1}, DType::F32, kSentinel);
        t["running_mean"] = TensorView{both.bytes.data(), DType::F32, {c}, {}};
        t["running_mean_out"] = TensorView{both.bytes.data() + 4, DType::F32, {c}, {}};
        require_refused(k, t, "output 'running_mean_out' overlaps input 'running_mean' without being exactly its buffer", {&both, &y, &rv_out});
    }
    SECTION("the buffer of an input it does not update") {
        t["running_mean_out"] = rv.view();
        require_refused(k, t, "output 'running_mean_out' overlaps input 'running_var' in memory; it may share memory only with 'running_mean'",
                        {&y, &rv_out});
        CHECK(rv.all(0x11));
    }
    SECTION("in place, the input a view of a larger allocation") {
        Buf rm2({c * 2});
        t["running_mean"] = rm2.view();
        t["running_mean"].shape = {c};
        t["running_mean_out"] = TensorView{rm2.bytes.data(), DType::F32, {c}, {}};
        g_calls.clear();
        call(k, t);  // same pointer and shape: fine
        CHECK(g_calls.size() == 1);
    }
}

TEST_CASE("a split axis not divisible by its fixed part is refused", "[run]") {
    const Registry::Kernel &gk = kernel("group_norm_nchw__f32__avx2__core");
    Buf gx({2, 65, 3, 3}), gw({65}), gb({65}), gy({2, 65, 3, 3}, DType::F32, kSentinel);
    require_refused(gk, {{"x", gx.view()}, {"weight", gw.view()}, {"bias", gb.view()}, {"y", gy.view()}},
                    "input 'x': axis 'c' has extent 65, which is not divisible by 32 (the fixed parts of its split)", {&gy});
}

TEST_CASE("a Halide runtime error becomes a std::runtime_error carrying its message", "[run]") {
    const Registry::Kernel &k = kernel("layer_norm__f32__avx2__core");
    LayerNormCall c(3, 5);
    g_fail = true;
    try {
        call(k, c.tensors());
        g_fail = false;
        FAIL("no exception");
    } catch (const UserError &) {
        g_fail = false;
        FAIL("a kernel failure is not a UserError");
    } catch (const std::runtime_error &e) {
        g_fail = false;
        std::string m = e.what();
        CHECK_THAT(m, Catch::Contains("kernel 'layer_norm__f32__avx2__core' failed (Halide error -4)"));
        CHECK_THAT(m, Catch::Contains("Input buffer x is accessed at 9, which is beyond the max (8) in dimension 0"));
        CHECK(m.back() != '\n');
    }
    g_fail = false;
    REQUIRE(g_handler != nullptr);  // run_kernel installed its handler
    // The next call starts clean.
    g_calls.clear();
    call(k, c.tensors());
    CHECK(g_calls.size() == 1);
    CHECK(take_halide_error().empty());
}

TEST_CASE("check_kernel_call refuses exactly what run_kernel refuses, and calls nothing", "[run]") {
    const Registry::Kernel &k = kernel("layer_norm__f32__avx2__core");
    LayerNormCall c(3, 5);
    g_calls.clear();
    CHECK_NOTHROW(check_kernel_call(k, c.tensors()));
    CHECK(g_calls.empty());
    CHECK(c.y.all(kSentinel));
    auto t = c.tensors();
    t.erase("weight");
    CHECK_THROWS_AS(check_kernel_call(k, t), UserError);
}

// ---------------------------------------------------------------------------------------------
// Past 2^31 elements: the call is cut into chunks along the largest tensor's outermost axis. The
// tensors are fake addresses (never touched: the fake records and writes nothing), so the chunk
// arithmetic is checked at sizes no test could allocate.
namespace {

struct FakeTouch {
    FakeTouch() { g_touch = false; }
    ~FakeTouch() { g_touch = true; }
};

// A view at a fake address: `base` GiB into an address range nothing maps.
TensorView fake_view(uintptr_t base_gib, Shape shape, DType t = DType::F32) {
    return TensorView{reinterpret_cast<void *>((uintptr_t)0x100000000000ull + (base_gib << 30)), t, std::move(shape), {}};
}

// The calls a LayerNorm of rows x d gets: each chunk's row range, checked for the buffers.
std::vector<std::pair<int64_t, int64_t>> layer_norm_chunks(int64_t rows, int64_t d) {
    FakeTouch quiet;
    const Registry::Kernel &k = kernel("layer_norm__f32__avx2__core");
    std::map<std::string, TensorView> t = {{"x", fake_view(0, {rows, d})},
                                           {"weight", fake_view(4096, {d})},
                                           {"bias", fake_view(8192, {d})},
                                           {"y", fake_view(12288, {rows, d})}};
    g_calls.clear();
    call(k, t);
    std::vector<std::pair<int64_t, int64_t>> out;
    int64_t next = 0;
    for (const RecordedCall &c : g_calls) {
        REQUIRE(c.bufs.size() == 4);
        const RecordedBuffer &x = c.bufs[0], &y = c.bufs[3];
        REQUIRE(x.dims.size() == 2);
        CHECK(x.dims[0] == halide_dimension_t(0, (int32_t)d, 1));
        CHECK(x.dims[1].min == 0);
        CHECK(x.dims[1].stride == d);
        const int64_t len = x.dims[1].extent;
        CHECK(len >= 1);
        CHECK(len * d <= INT32_MAX);  // every chunk fits 32-bit indexing
        // Each chunk starts where the previous one ended, in x and y alike; the parameters are whole.
        CHECK((uintptr_t)x.host == (uintptr_t)t.at("x").data + (uintptr_t)(next * d * 4));
        CHECK((uintptr_t)y.host == (uintptr_t)t.at("y").data + (uintptr_t)(next * d * 4));
        CHECK(y.dims == x.dims);
        CHECK(c.bufs[1].host == t.at("weight").data);
        CHECK(c.bufs[1].dims[0] == halide_dimension_t(0, (int32_t)d, 1));
        out.push_back({next, next + len});
        next += len;
    }
    CHECK(next == rows);  // every row exactly once, in order
    return out;
}

}  // namespace

TEST_CASE("a call past 2^31 elements is cut along rows into chunks that fit 32-bit indexing", "[run][chunks]") {
    const int64_t M = INT32_MAX;  // 2^31 - 1: the most a chunk holds
    using R = std::vector<std::pair<int64_t, int64_t>>;
    SECTION("2^31 - 1 rows: one call") { CHECK(layer_norm_chunks(M, 1) == R{{0, M}}); }
    SECTION("2^31 rows: two calls") { CHECK(layer_norm_chunks(M + 1, 1) == R{{0, M}, {M, M + 1}}); }
    SECTION("2^31 + 1 rows") { CHECK(layer_norm_chunks(M + 2, 1) == R{{0, M}, {M, M + 2}}); }
    SECTION("2^32 + 5 rows") {
        const int64_t rows = (int64_t(1) << 32) + 5;
        CHECK(layer_norm_chunks(rows, 1) == R{{0, M}, {M, 2 * M}, {2 * M, rows}});
    }
    SECTION("rows of 3 elements: whole rows per chunk") {
        const int64_t rows = (int64_t(1) << 31) + 7, step = M / 3;  // 715827882 rows; 3 steps leave 9 rows
        CHECK(layer_norm_chunks(rows, 3) == R{{0, step}, {step, 2 * step}, {2 * step, 3 * step}, {3 * step, rows}});
    }
    SECTION("rows of 4096 elements, 2^31 + 4096 in all") {
        const int64_t rows = (int64_t(1) << 19) + 1, step = M / 4096;
        CHECK(layer_norm_chunks(rows, 4096) == R{{0, step}, {step, rows}});
    }
    SECTION("a call that fits is one call") { CHECK(layer_norm_chunks(1000, 4096) == R{{0, 1000}}); }
}

TEST_CASE("a scalar parameter is passed whole to every chunk (DyT's alpha)", "[run][chunks]") {
    FakeTouch quiet;
    const Registry::Kernel &k = kernel("dyt__f32__avx2__core");
    const int64_t rows = (int64_t(1) << 31) + 3;
    std::map<std::string, TensorView> t;
    uintptr_t at = 0;
    for (const KernelArg &a : k.args) {
        Shape s;
        for (const std::string &dim : a.dims) s.push_back(dim == "rows" ? rows : 1);
        t[a.name] = fake_view(at, s, a.dtype);
        at += 16;
    }
    g_calls.clear();
    call(k, t);
    REQUIRE(g_calls.size() == 2);
    int64_t total = 0;
    for (const RecordedCall &c : g_calls)
        for (size_t i = 0; i < k.args.size(); ++i) {
            const KernelArg &a = k.args[i];
            if (a.buffer_dims.empty()) {
                CHECK(c.bufs[i].dims.empty());  // the scalar, whole
                CHECK(c.bufs[i].host == t.at(a.name).data);
            } else if (a.name == "x") {
                total += c.bufs[i].dims.back().extent;
            }
        }
    CHECK(total == rows);
}

TEST_CASE("a call past 2^31 elements that no axis can split is refused, naming the axis", "[run][chunks]") {
    FakeTouch quiet;
    g_calls.clear();
    SECTION("one row of 2^31 elements") {
        const int64_t d = int64_t(1) << 31;
        const Registry::Kernel &k = kernel("layer_norm__f32__avx2__core");
        std::map<std::string, TensorView> t = {{"x", fake_view(0, {1, d})},
                                               {"weight", fake_view(16, {d})},
                                               {"bias", fake_view(32, {d})},
                                               {"y", fake_view(48, {1, d})}};
        CHECK_THAT(user_error_of([&] { call(k, t); }),
                   Catch::Contains("tensor 'x' has 2147483648 elements") &&
                       Catch::Contains("one unit of its outermost axis 'rows' holds 2147483648 elements of 'x'"));
        CHECK_THAT(user_error_of([&] { check_kernel_call(k, t); }), Catch::Contains("cannot be split"));
    }
    SECTION("a BatchNorm whose outermost axis n is reduced") {
        const Registry::Kernel &k = kernel("batch_norm_train__f32__avx2__core");
        const int64_t n = 1024, c = 64, hw = 32768;  // 2^31 elements
        std::map<std::string, TensorView> t;
        uintptr_t at = 0;
        for (const KernelArg &a : k.args) {
            Shape s;
            for (const std::string &dim : a.dims) s.push_back(dim == "n" ? n : dim == "c" ? c : dim == "h" ? hw / 128 : 128);
            t[a.name] = fake_view(at, s, a.dtype);
            at += 16;
        }
        CHECK_THAT(user_error_of([&] { call(k, t); }),
                   Catch::Contains("cannot be split") && Catch::Contains("its outermost axis 'n' is reduced by layer 'batch_norm_train'"));
    }
    CHECK(g_calls.empty());
}

// =============================================================================================
// Dispatch by shape class (Registry::select_for): the manifest's "tuned" entries, written by the
// generators from the tuning database, name the classes and CPUs each tuned kernel won.
namespace {

// A tuned rms_norm kernel won for rows x d on `cpu`; `streaming`: it needs 32-byte aligned
// outputs and d a multiple of 8.
json tuned_entry(const std::string &suffix, int64_t rows, int64_t d, const CpuFingerprint &cpu, bool streaming = false) {
    json e = entry("rms_norm", DType::F32, "avx2", false);
    e["function"] = e["function"].get<std::string>() + suffix;
    e["tuned_only"] = true;
    const NormSpec spec = load_norm_file(catalog_path("rms_norm"));
    const KernelPlan plan = make_plan(spec, DType::F32, Variant::Core);
    const ShapeClass cls = shape_class(spec, plan, extents_from_sizes(spec, {{"rows", rows}, {"d", d}}), cpu);
    e["tuned"] = json::array({{{"shape", cls.to_json()}, {"cpu", cpu.to_json()}, {"sizes", {{"rows", rows}, {"d", d}}}, {"gbps", 30.0},
                               {"frac", 0.9}, {"limit", "copy"}}});
    if (streaming) e["requires"] = {{"alignment", 32}, {"outputs", {"y"}}, {"multiple_of", {{"d", 8}}}};
    return e;
}

const Registry &tuned_registry() {
    static TempDir dir;
    CpuFingerprint elsewhere = this_cpu();
    elsewhere.isa = this_cpu().isa == "avx2" ? "avx512" : "avx2";  // another ISA tier: an unknown CPU
    static const Registry reg = load_json(dir, manifest({
                                                   entry("rms_norm", DType::F32, "avx2", false),
                                                   tuned_entry("__ta", 64, 256, this_cpu()),
                                                   tuned_entry("__tb", 64, 1024, this_cpu(), true),
                                                   tuned_entry("__tc", 64, 65536, elsewhere),
                                               }));
    return reg;
}

// rms_norm rows x d with 64-byte aligned tensors; `offset` shifts y's data by that many bytes.
struct AlignedRms {
    std::vector<float> x_, w_, y_;
    int64_t rows, d;
    size_t offset;
    AlignedRms(int64_t r, int64_t dd, size_t off = 0) : x_(r * dd + 16, 1.0f), w_(dd + 16, 1.0f), y_(r * dd + 32, 0.0f), rows(r), d(dd), offset(off) {}
    static void *aligned(std::vector<float> &v, size_t extra) {
        uintptr_t p = ((uintptr_t)v.data() + 63) / 64 * 64;
        return (void *)(p + extra);
    }
    std::map<std::string, TensorView> tensors() {
        return {{"x", TensorView{aligned(x_, 0), DType::F32, {rows, d}, {}}},
                {"weight", TensorView{aligned(w_, 0), DType::F32, {d}, {}}},
                {"y", TensorView{aligned(y_, offset), DType::F32, {rows, d}, {}}}};
    }
};

}  // namespace

TEST_CASE("select_for picks the kernel tuned for the call's shape class on this CPU", "[registry][dispatch]") {
    if (!this_cpu().isa.size() || this_cpu().isa == "none") return;
    const Registry &reg = tuned_registry();
    // select() never returns a kernel built for tuned classes only.
    CHECK(reg.select("rms_norm", DType::F32, false)->function == "rms_norm__f32__avx2__core");
    AlignedRms exact(64, 256);
    Registry::Selection s = reg.select_for("rms_norm", DType::F32, exact.tensors());
    REQUIRE(s.kernel);
    CHECK(s.kernel->function == "rms_norm__f32__avx2__core__ta");
    CHECK_THAT(s.why, Catch::StartsWith("tuned:") && Catch::Contains(s.shape.key()));
    // One octave away in d: the nearest tuned class still applies.
    AlignedRms near(64, 512);
    CHECK(reg.select_for("rms_norm", DType::F32, near.tensors()).kernel->function == "rms_norm__f32__avx2__core__ta");
    // Another alignment class (d = 250: m2) never takes a schedule tuned for m16.
    AlignedRms odd(64, 250);
    CHECK(reg.select_for("rms_norm", DType::F32, odd.tensors()).kernel->function == "rms_norm__f32__avx2__core");
}

TEST_CASE("select_for falls back to the default kernel on an unknown CPU", "[registry][dispatch]") {
    if (this_cpu().isa == "none") return;
    const Registry &reg = tuned_registry();
    // rows=64, d=65536 was tuned only on a CPU of another ISA tier: unknown here.
    Registry::Selection s = reg.select_for_sizes("rms_norm", DType::F32, {{"rows", 64}, {"d", 65536}});
    REQUIRE(s.kernel);
    CHECK(s.kernel->function == "rms_norm__f32__avx2__core");
    CHECK_THAT(s.why, Catch::StartsWith("default:") && Catch::Contains("no tuned schedule"));
}

TEST_CASE("a streaming-store kernel takes only aligned calls; the others get the next choice", "[registry][dispatch]") {
    if (this_cpu().isa == "none") return;
    const Registry &reg = tuned_registry();
    const Registry::Kernel *b = reg.find("rms_norm__f32__avx2__core__tb");
    REQUIRE(b);
    CHECK(b->requirement.alignment == 32);
    CHECK(b->requirement.multiple == 8);
    AlignedRms aligned(64, 1024);
    CHECK(reg.select_for("rms_norm", DType::F32, aligned.tensors()).kernel == b);
    // y 4 bytes off its alignment: the streaming kernel is skipped (the next choice is __ta, two
    // octaves away), and run_kernel refuses the streaming kernel itself, writing nothing.
    AlignedRms shifted(64, 1024, 4);
    Registry::Selection s = reg.select_for("rms_norm", DType::F32, shifted.tensors());
    REQUIRE(s.kernel);
    CHECK(s.kernel != b);
    CHECK_THAT(s.why, Catch::Contains("__tb skipped: output 'y' is not 32-byte aligned"));
    const size_t calls = g_calls.size();
    const std::vector<float> before = shifted.y_;
    CHECK_THAT(user_error_of([&] { call(*b, shifted.tensors()); }), Catch::Contains("streaming stores") && Catch::Contains("32-byte aligned"));
    CHECK(g_calls.size() == calls);
    CHECK(shifted.y_ == before);
    // By sizes alone, unaligned pointers assumed: the same skip.
    CHECK(reg.select_for_sizes("rms_norm", DType::F32, {{"rows", 64}, {"d", 1024}}, false, false).kernel != b);
}

TEST_CASE("a manifest's tuned and requires fields are checked", "[registry][dispatch]") {
    TempDir dir;
    json e = tuned_entry("__ta", 64, 256, this_cpu());
    e["requires"] = {{"alignment", 0}, {"outputs", {"y"}}, {"multiple_of", {{"d", 8}}}};
    CHECK_THAT(user_error_of([&] { load_json(dir, manifest({entry("rms_norm", DType::F32, "avx2", false), e})); }),
               Catch::Contains("'alignment' must be"));
    json t = tuned_entry("__ta", 64, 256, this_cpu());
    t["tuned"][0].erase("cpu");
    CHECK_THAT(user_error_of([&] { load_json(dir, manifest({entry("rms_norm", DType::F32, "avx2", false), t})); }),
               Catch::Contains("a 'tuned' entry"));
}

TEST_CASE("a kernel compiled for one extent takes only that extent", "[registry][dispatch]") {
    if (this_cpu().isa == "none") return;
    TempDir dir;
    json fixed = tuned_entry("__ta", 64, 256, this_cpu());
    fixed["requires"] = {{"extent", {{"d", 256}}}};
    const Registry reg = load_json(dir, manifest({entry("rms_norm", DType::F32, "avx2", false), fixed}));
    const Registry::Kernel *k = reg.find("rms_norm__f32__avx2__core__ta");
    REQUIRE(k);
    CHECK(k->requirement.fixed_extent == 256);
    CHECK(reg.select_for_sizes("rms_norm", DType::F32, {{"rows", 64}, {"d", 256}}).kernel == k);
    // d = 255 is in the same class bucket (2^8) but not the kernel's extent: the default.
    Registry::Selection s = reg.select_for_sizes("rms_norm", DType::F32, {{"rows", 64}, {"d", 240}});
    CHECK(s.kernel != k);
    AlignedRms other(64, 240);
    CHECK_THAT(user_error_of([&] { call(*k, other.tensors()); }), Catch::Contains("compiled for 256 only"));
}
