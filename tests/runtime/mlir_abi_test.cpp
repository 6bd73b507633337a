// The MLIR kernel ABI (runtime/mlir_abi.h) with a fake kernel: the descriptors it receives describe
// the tensors exactly, and the chunks along the split axis cover it once, on every argument that
// has the axis, whatever the thread count.
#include "runtime/mlir_abi.h"

#include <catch2/catch.hpp>

#include <HalideRuntime.h>

#include <cmath>
#include <mutex>
#include <vector>

using namespace normgen;

namespace {

struct Seen {
    // per call: per argument (aligned pointer + offset, sizes, strides)
    struct Arg {
        intptr_t base = 0;
        int64_t offset = 0;
        std::vector<int64_t> sizes, strides;
    };
    std::vector<std::vector<Arg>> calls;
    std::mutex m;
};
Seen *g_seen = nullptr;
int g_rank[3] = {2, 1, 2};  // x [rows, d], w [d], y [rows, d]

void fake(void *x, void *w, void *y) {
    std::vector<Seen::Arg> args;
    void *ds[3] = {x, w, y};
    for (int a = 0; a < 3; ++a) {
        const int64_t *d = static_cast<const int64_t *>(ds[a]);
        Seen::Arg s;
        s.base = (intptr_t)d[1];
        s.offset = d[2];
        for (int k = 0; k < g_rank[a]; ++k) s.sizes.push_back(d[3 + k]);
        for (int k = 0; k < g_rank[a]; ++k) s.strides.push_back(d[3 + g_rank[a] + k]);
        args.push_back(s);
    }
    std::lock_guard<std::mutex> l(g_seen->m);
    g_seen->calls.push_back(args);
}

// A parallel-for that runs the tasks in reverse order (any order must do).
int reverse_par_for(void *uc, int (*task)(void *, int, uint8_t *), int min, int size, uint8_t *closure) {
    for (int i = min + size - 1; i >= min; --i)
        if (int rc = task(uc, i, closure)) return rc;
    return 0;
}

}  // namespace

TEST_CASE("mlir_run: chunks along rows cover every row once; w is passed whole", "[runtime][mlir]") {
    // rows is the only candidate: x dim 0, w has none (-1), y dim 0.
    const int split[] = {0, -1, 0};
    MlirKernelInfo info{3, 1, split, reinterpret_cast<void *>(&fake)};
    for (int64_t rows : {1, 2, 7, 1000, 4097}) {
        for (int64_t d : {1, 3, 4096, 70000}) {
            Seen seen;
            g_seen = &seen;
            std::vector<float> x(rows * d), w(d), y(rows * d);
            std::vector<MlirTensor> args{{x.data(), {rows, d}, 4}, {w.data(), {d}, 4}, {y.data(), {rows, d}, 4}};
            REQUIRE(mlir_run(info, args, reverse_par_for) == 0);
            INFO("rows " << rows << " d " << d << ": " << seen.calls.size() << " calls");
            std::vector<int> covered(rows, 0);
            for (const auto &c : seen.calls) {
                CHECK(c[0].base == (intptr_t)x.data());
                CHECK(c[0].strides == std::vector<int64_t>{d, 1});
                CHECK(c[0].sizes[1] == d);
                CHECK(c[1].offset == 0);
                CHECK(c[1].sizes == std::vector<int64_t>{d});
                CHECK(c[2].offset == c[0].offset);
                CHECK(c[2].sizes == c[0].sizes);
                REQUIRE(c[0].offset % d == 0);
                for (int64_t r = c[0].offset / d; r < c[0].offset / d + c[0].sizes[0]; ++r) covered[r]++;
                // A chunk is about kMlirChunkBytes of x and y (at least one row).
                CHECK((c[0].sizes[0] == 1 || c[0].sizes[0] * d * 8 <= kMlirChunkBytes));
            }
            for (int64_t r = 0; r < rows; ++r) REQUIRE(covered[r] == 1);
        }
    }
}

TEST_CASE("mlir_argv: halide_buffer_t dims (innermost first) become memref dims (outermost first)", "[runtime][mlir]") {
    const int split[] = {0, -1, 0};
    MlirKernelInfo info{3, 1, split, reinterpret_cast<void *>(&fake)};
    Seen seen;
    g_seen = &seen;
    std::vector<uint16_t> x(5 * 9), y(5 * 9);
    std::vector<float> w(9);
    halide_dimension_t dx[2] = {{0, 9, 1}, {0, 5, 9}}, dw[1] = {{0, 9, 1}}, dy[2] = {{0, 9, 1}, {0, 5, 9}};
    halide_buffer_t bx{}, bw{}, by{};
    bx.host = (uint8_t *)x.data(), bx.type = halide_type_t(halide_type_bfloat, 16), bx.dimensions = 2, bx.dim = dx;
    bw.host = (uint8_t *)w.data(), bw.type = halide_type_t(halide_type_float, 32), bw.dimensions = 1, bw.dim = dw;
    by.host = (uint8_t *)y.data(), by.type = halide_type_t(halide_type_bfloat, 16), by.dimensions = 2, by.dim = dy;
    void *args[3] = {&bx, &bw, &by};
    REQUIRE(mlir_argv(info, args, serial_par_for) == 0);
    int64_t rows = 0;
    for (const auto &c : seen.calls) {
        CHECK(c[0].sizes[1] == 9);
        CHECK(c[0].strides == std::vector<int64_t>{9, 1});
        CHECK(c[1].sizes == std::vector<int64_t>{9});
        rows += c[0].sizes[0];
    }
    CHECK(rows == 5);
}

namespace {

// A kernel with a column output: dw[j] = sum over its rows of x[r, j] (f32), y = x.
int g_column_calls = 0;
void column_sum(void *x, void *dw, void *y) {
    const int64_t *dx = static_cast<const int64_t *>(x), *dd = static_cast<const int64_t *>(dw), *dy = static_cast<const int64_t *>(y);
    const float *xs = reinterpret_cast<const float *>(dx[1]) + dx[2];
    float *ws = reinterpret_cast<float *>(dd[1]) + dd[2], *ys = reinterpret_cast<float *>(dy[1]) + dy[2];
    const int64_t rows = dx[3], d = dx[4];
    for (int64_t j = 0; j < d; ++j) ws[j] = 0;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < d; ++j) {
            ws[j] += xs[r * dx[5] + j];
            ys[r * dy[5] + j] = xs[r * dx[5] + j];
        }
    __atomic_add_fetch(&g_column_calls, 1, __ATOMIC_RELAXED);
}

}  // namespace

TEST_CASE("mlir_run: a column output summed over the split rows is the sum of the chunks' sums", "[runtime][mlir]") {
    const int split[] = {0, kMlirColumnPartial, 0};
    MlirKernelInfo info{3, 1, split, reinterpret_cast<void *>(&column_sum)};
    for (int64_t rows : {1, 2, 7, 1000, 4097}) {
        for (int64_t d : {1, 3, 4096}) {
            std::vector<float> x(rows * d), dw(d, std::nanf("")), y(rows * d, std::nanf(""));
            for (int64_t i = 0; i < rows * d; ++i) x[i] = float((i * 7919) % 13) - 6.0f;  // small integers: every sum exact
            std::vector<MlirTensor> args{{x.data(), {rows, d}, 4}, {dw.data(), {d}, 4}, {y.data(), {rows, d}, 4}};
            g_column_calls = 0;
            REQUIRE(mlir_run(info, args, reverse_par_for) == 0);
            INFO("rows " << rows << " d " << d << ": " << g_column_calls << " calls");
            for (int64_t j = 0; j < d; ++j) {
                float want = 0;
                for (int64_t r = 0; r < rows; ++r) want += x[r * d + j];
                REQUIRE(dw[j] == want);
            }
            for (int64_t i = 0; i < rows * d; ++i) REQUIRE(y[i] == x[i]);
            if (rows * d * 8 > 4 * kMlirChunkBytes) CHECK(g_column_calls > 1);  // it was split
        }
    }
    SECTION("a bf16 column output takes no partials: one call over every row") {
        const int64_t rows = 4097, d = 4096;
        std::vector<float> x(rows * d, 1.0f), y(rows * d);
        std::vector<uint16_t> dw(2 * d);  // room for the fake kernel, which writes f32
        std::vector<MlirTensor> args{{x.data(), {rows, d}, 4}, {dw.data(), {d}, 2}, {y.data(), {rows, d}, 4}};
        g_column_calls = 0;
        REQUIRE(mlir_run(info, args, reverse_par_for) == 0);
        CHECK(g_column_calls == 1);
    }
}
