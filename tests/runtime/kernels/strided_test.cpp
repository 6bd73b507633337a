// Strided inputs (runtime/run.h): the MLIR CPU kernels take their inputs and parameters as strided
// memrefs with a contiguous innermost axis, so run_kernel passes a slice (rows of a larger tensor,
// a head of a fused QKV projection) or a view with its outer axes permuted through as it is; the
// result must be the dense call's, bit for bit, on every forward and backward layer of the catalog
// with an MLIR kernel. A non-unit innermost stride is refused naming the tensor, as is any strided
// input to a Halide kernel (dense buffers); nothing is written.
//
// The inputs are drawn from a seed printed with every failure; set NORMGEN_TEST_SEED to replay one.
#include "kernel_test_util.h"
#include "runtime/errors.h"
#include "runtime/random_inputs.h"
#include "runtime/registry.h"
#include "runtime/run.h"
#include "runtime/storage.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <set>
#include <string>
#include <vector>

using namespace normgen;
using normgen::test::registry;
using normgen::test::test_seed;
using Shape = std::vector<int64_t>;

namespace {

constexpr uint8_t kPoison = 0xff;  // NaN in every storage type

// How a strided copy lays a tensor out.
enum class Layout {
    Padded,         // every axis padded by 3 (rows of a larger tensor: a slice of a fused QKV projection)
    OuterReversed,  // the outer axes' strides in reverse order, the innermost contiguous ([t, b, d] read as [b, t, d])
};
const char *layout_name(Layout l) { return l == Layout::Padded ? "padded" : "outer axes reversed"; }

struct Strided {
    test::AlignedBytes bytes;
    TensorView view;
};

// The dense bytes `dense` of a tensor of `shape` copied into a strided layout (the gaps poisoned).
Strided strided_copy(const std::vector<uint8_t> &dense, const Shape &shape, DType t, Layout l) {
    const size_t rank = shape.size(), es = dtype_size(t);
    Shape padded = shape, strides(rank);
    if (l == Layout::Padded)
        for (int64_t &n : padded) n += 3;
    int64_t step = 1;
    if (l == Layout::OuterReversed && rank) {
        strides[rank - 1] = 1;
        step = padded[rank - 1];
        for (size_t i = 0; i + 1 < rank; ++i) strides[i] = step, step *= padded[i];
    } else {
        for (size_t i = rank; i-- > 0;) strides[i] = step, step *= padded[i];
    }
    Strided s;
    s.bytes.assign((size_t)step * es, kPoison);
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    for (int64_t i = 0; i < n; ++i) {
        int64_t rem = i, off = 0;
        for (size_t d = rank; d-- > 0;) {
            off += (rem % shape[d]) * strides[d];
            rem /= shape[d];
        }
        std::memcpy(s.bytes.data() + off * es, dense.data() + i * es, es);
    }
    s.view = TensorView{s.bytes.data(), t, shape, strides};
    return s;
}

// Runs `k` on random inputs at `sizes`, dense and with every rank >= 1 input in layout `l`: the
// outputs must agree bit for bit. Returns the number of strided inputs passed.
int check_strided(const Registry::Kernel &k, const std::map<std::string, int64_t> &sizes, Layout l, uint64_t salt) {
    const NormSpec &spec = *k.spec;
    AxisExtents ext = choose_extents(spec, sizes, 4);
    TensorMap in = random_inputs(spec, ext, RandomInputOptions{0, test_seed() ^ salt});
    std::map<std::string, test::AlignedBytes> dense_store, out_dense, out_strided;
    std::vector<Strided> strided_store;
    std::map<std::string, TensorView> dense, strided;
    int passed = 0;
    for (const KernelArg &a : k.args) {
        if (a.role == KernelArg::Output) {
            if (a.optional) continue;
            std::vector<AxisId> dims = spec.find_output(a.name)->dims;
            Shape shape = physical_shape(spec, dims, ext);
            int64_t n = 1;
            for (int64_t e : shape) n *= e;
            out_dense[a.name].assign((size_t)n * dtype_size(a.dtype), kPoison);
            out_strided[a.name].assign((size_t)n * dtype_size(a.dtype), kPoison);
            dense[a.name] = TensorView{out_dense[a.name].data(), a.dtype, shape, {}};
            strided[a.name] = TensorView{out_strided[a.name].data(), a.dtype, shape, {}};
            continue;
        }
        const HostTensor &h = in.at(a.name);
        std::vector<uint8_t> bytes = encode(h.data, a.dtype);
        dense_store[a.name] = test::aligned_bytes(bytes);
        dense[a.name] = TensorView{dense_store[a.name].data(), a.dtype, h.shape, {}};
        if (h.shape.empty()) {
            strided[a.name] = dense[a.name];
            continue;
        }
        strided_store.push_back(strided_copy(bytes, h.shape, a.dtype, l));
        strided[a.name] = strided_store.back().view;
        ++passed;
    }
    run_kernel(k, dense);
    run_kernel(k, strided);
    for (const auto &[name, bytes] : out_dense) {
        INFO(k.function << " output " << name << ", " << layout_name(l) << " inputs, seed " << test_seed());
        CHECK(bytes == out_strided.at(name));
        bool poisoned = true;
        for (uint8_t b : bytes) poisoned = poisoned && b == kPoison;
        CHECK_FALSE(poisoned);
    }
    return passed;
}

}  // namespace

TEST_CASE("MLIR kernels take strided inputs and give the dense call's outputs bit for bit", "[kernels][strided]") {
    const Registry &reg = registry();
    std::set<std::string> layers;
    for (const Registry::Kernel *k : reg.kernels())
        if (k->device == Device::Cpu && k->backend == Backend::Mlir) layers.insert(k->layer);
    REQUIRE(layers.size() >= 30);  // the catalog's forward and backward layers
    int calls = 0;
    for (const std::string &layer : layers)
        for (DType t : {DType::F32, DType::BF16}) {
            const Registry::Kernel *k = reg.select(layer, t, false, std::nullopt, Backend::Mlir);
            if (!k) continue;
            // Odd sizes (no axis a multiple of a vector), several rows per split chunk.
            const std::map<std::string, int64_t> sizes{{"rows", 7}, {"d", 37}, {"n", 3}, {"c", 6}, {"h", 5}, {"w", 3}, {"cg", 3},
                                                       {"b", 2},    {"t", 3},  {"heads", 3}, {"dh", 19}, {"s", 4}, {"o", 5}, {"i", 13}};
            for (Layout l : {Layout::Padded, Layout::OuterReversed}) {
                check_strided(*k, sizes, l, (uint64_t)calls);
                ++calls;
            }
        }
    CHECK(calls >= 100);
}

TEST_CASE("a Halide kernel refuses strided inputs naming the tensor, and writes nothing", "[kernels][strided]") {
    const Registry::Kernel *k = registry().select("layer_norm", DType::F32, false, std::nullopt, Backend::Halide);
    REQUIRE(k);
    const int64_t rows = 4, d = 9;
    std::vector<float> x((size_t)rows * (d + 3), 1.5f), w(d, 1.0f), b(d, 0.0f);
    test::AlignedBytes y((size_t)rows * d * 4, kPoison);
    std::map<std::string, TensorView> t{{"x", TensorView{x.data(), DType::F32, {rows, d}, {d + 3, 1}}},
                                        {"weight", TensorView{w.data(), DType::F32, {d}, {}}},
                                        {"bias", TensorView{b.data(), DType::F32, {d}, {}}},
                                        {"y", TensorView{y.data(), DType::F32, {rows, d}, {}}}};
    std::string msg;
    try {
        run_kernel(*k, t);
    } catch (const UserError &e) {
        msg = e.what();
    }
    CHECK(msg.find("tensor 'x': strides [12, 1] for shape [4, 9] are not contiguous row-major (expected [9, 1])") != std::string::npos);
    CHECK(msg.find("(Halide) takes contiguous row-major tensors, the MLIR kernels take strided inputs") != std::string::npos);
    bool untouched = true;
    for (uint8_t v : y) untouched = untouched && v == kPoison;
    CHECK(untouched);
    // An MLIR kernel refuses a non-unit innermost stride, a strided output, and a negative stride.
    const Registry::Kernel *m = registry().select("layer_norm", DType::F32, false, std::nullopt, Backend::Mlir);
    REQUIRE(m);
    auto t1 = t;
    t1["x"] = TensorView{x.data(), DType::F32, {rows, d}, {1, rows}};  // a transpose
    CHECK_THROWS_WITH(run_kernel(*m, t1), Catch::Contains("tensor 'x': strides [1, 4] for shape [4, 9]: its innermost axis 'd' has stride 4") &&
                                              Catch::Contains("innermost axis is contiguous (stride 1)"));
    auto t2 = t;
    t2["x"].strides = {};
    t2["y"].strides = {1, rows};
    CHECK_THROWS_WITH(run_kernel(*m, t2), Catch::Contains("tensor 'y'") && Catch::Contains("outputs are contiguous row-major"));
    auto t3 = t;
    t3["x"].strides = {-(d + 3), 1};
    CHECK_THROWS_WITH(run_kernel(*m, t3), Catch::Contains("strides must be in [0, 2^31)"));
    for (uint8_t v : y) untouched = untouched && v == kPoison;
    CHECK(untouched);
}
