// normgen-big-check: one real call past 2^31 elements (scripts/big.sh; not a CTest: it needs about
// 8 GiB and a minute). A row layer's kernel (default: RMSNorm, bf16) runs on ROWS x D elements,
// which the runtime cuts into chunks of at most 2^31-1 elements (runtime/run.h); then sampled rows
// (the first and last, both sides of every chunk boundary, and random ones) are checked against the
// float64 reference evaluated on that row alone. Outputs are poisoned with NaN beforehand, so a
// row a chunk missed fails. Exit 0 when every sampled row passes, 1 on a mismatch, 2 on bad usage.
#include "kernel_test_util.h"
#include "runtime/errors.h"
#include "runtime/manifest_schema.h"
#include "runtime/random_inputs.h"
#include "runtime/reference/interpreter.h"
#include "runtime/registry.h"
#include "runtime/run.h"
#include "runtime/storage.h"
#include "runtime/verify.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace normgen;

namespace {

const char kUsage[] =
    "usage: normgen-big-check [--layer NAME] [--dtype bf16|f16|f32] [--backend halide|mlir]\n"
    "                         [--rows R] [--d D] [--samples N] [--seed S]\n"
    "Runs one kernel of a row layer (its first input [rows, d]) on R x D elements, by default\n"
    "rms_norm in bf16 on 2^19 + 1 rows of 4096 = 2^31 + 4096 elements (about 4 GiB in and 4 GiB out),\n"
    "and checks the first and last rows, both sides of every 2^31-element chunk boundary and N random\n"
    "rows (default 64) against the float64 reference.\n";

// A fast deterministic value per element: N(0,1)-like (sum of uniforms) plus a per-row offset, never 0.
double element(uint64_t seed, int64_t row, int64_t j) {
    uint64_t z = seed ^ ((uint64_t)row * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)j * 0xbf58476d1ce4e5b9ull);
    double s = 0;
    for (int k = 0; k < 3; ++k) {
        z ^= z >> 31;
        z *= 0x94d049bb133111ebull;
        z ^= z >> 29;
        s += (double)(z >> 11) * 0x1.0p-53;
    }
    double v = (s - 1.5) * 2.0 + 0.25 * (double)(row % 7);
    return v == 0 ? 0.5 : v;
}

}  // namespace

int main(int argc, char **argv) {
    std::string layer = "rms_norm", dtype_s = "bf16", backend_s = "halide";
    int64_t rows = (int64_t(1) << 19) + 1, d = 4096;
    int samples = 64;
    uint64_t seed = normgen::test::test_seed();
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "normgen-big-check: %s needs a value\n%s", a.c_str(), kUsage);
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--help" || a == "-h") {
            std::fputs(kUsage, stdout);
            return 0;
        } else if (a == "--layer") layer = value();
        else if (a == "--dtype") dtype_s = value();
        else if (a == "--backend") backend_s = value();
        else if (a == "--rows") rows = std::stoll(value());
        else if (a == "--d") d = std::stoll(value());
        else if (a == "--samples") samples = std::stoi(value());
        else if (a == "--seed") seed = std::stoull(value());
        else {
            std::fprintf(stderr, "normgen-big-check: unknown argument '%s'\n%s", a.c_str(), kUsage);
            return 2;
        }
    }
    try {
        const std::optional<DType> parsed = parse_dtype(dtype_s);
        if (!parsed || *parsed == DType::F64) throw UserError("--dtype: '" + dtype_s + "' is not one of bf16, f16, f32");
        const DType dtype = *parsed;
        if (backend_s != "halide" && backend_s != "mlir") throw UserError("--backend: '" + backend_s + "' is not halide or mlir");
        const Backend backend = backend_s == "mlir" ? Backend::Mlir : Backend::Halide;
        const Registry &reg = normgen::test::registry();
        const Registry::Kernel *k = reg.select(layer, dtype, false, std::nullopt, backend);
        if (!k) throw UserError("no " + backend_s + " kernel of layer '" + layer + "' in " + dtype_s + " runs on this CPU");
        const NormSpec &spec = *k->spec;
        const AxisId row_axis = spec.memory_atoms(spec.tensors.front().dims).front();
        const std::string rname = spec.axes[row_axis].name;
        std::printf("normgen-big-check: %s (%s, %s), %lld x %lld = %lld elements per [%s, ...] tensor, seed %llu\n",
                    k->function.c_str(), backend_name(k->backend), dtype_s.c_str(), (long long)rows, (long long)d,
                    (long long)(rows * d), rname.c_str(), (unsigned long long)seed);

        // Parameters (and anything without the row axis) from the usual generator on one row; the
        // tensors with the row axis are filled here, directly in their storage type.
        std::map<std::string, int64_t> one_row;
        for (const Axis &a : spec.axes)
            if (!a.is_split() && !a.fixed_extent) one_row[a.name] = a.name == rname ? 1 : d;
        AxisExtents ext1 = choose_extents(spec, one_row, d);
        TensorMap small = random_inputs(spec, ext1, RandomInputOptions{0, seed});
        std::map<std::string, std::vector<uint8_t>> mem;
        std::map<std::string, TensorView> views;
        std::set<std::string> per_row;
        const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
        auto t0 = std::chrono::steady_clock::now();
        for (const KernelArg &a : k->args) {
            const std::vector<AxisId> atoms = [&] {
                std::vector<AxisId> v;
                for (const std::string &n : a.dims) {
                    std::vector<AxisId> m = spec.memory_atoms({spec.find_axis(n)});
                    v.insert(v.end(), m.begin(), m.end());
                }
                return v;
            }();
            const bool has_rows = !atoms.empty() && atoms.front() == row_axis;
            std::vector<int64_t> shape;
            for (const std::string &n : a.dims) shape.push_back(spec.find_axis(n) == row_axis ? rows : d);
            if (!has_rows) {
                if (a.role == KernelArg::Output) throw UserError("output '" + a.name + "' lacks the row axis: not a row layer");
                mem[a.name] = encode(small.at(a.name).data, a.dtype);
                views[a.name] = TensorView{mem[a.name].data(), a.dtype, small.at(a.name).shape, {}};
                continue;
            }
            if ((int64_t)atoms.size() != 2) throw UserError("tensor '" + a.name + "' is not [" + rname + ", d]: not a row layer");
            per_row.insert(a.name);
            const size_t es = dtype_size(a.dtype);
            std::vector<uint8_t> &bytes = mem[a.name];
            bytes.resize((size_t)(rows * d) * es);
            if (a.role == KernelArg::Output) {
                std::memset(bytes.data(), 0xff, bytes.size());  // NaN: a row no chunk wrote fails
            } else {
                const uint64_t tseed = seed ^ std::hash<std::string>{}(a.name);
                std::vector<std::thread> pool;
                for (unsigned t = 0; t < threads; ++t)
                    pool.emplace_back([&, t] {
                        std::vector<double> row((size_t)d);
                        for (int64_t r = t; r < rows; r += threads) {
                            for (int64_t j = 0; j < d; ++j) row[(size_t)j] = element(tseed, r, j);
                            std::vector<uint8_t> b = encode(row, a.dtype);
                            std::memcpy(bytes.data() + (size_t)(r * d) * es, b.data(), b.size());
                        }
                    });
                for (auto &th : pool) th.join();
            }
            views[a.name] = TensorView{bytes.data(), a.dtype, shape, {}};
        }
        auto t1 = std::chrono::steady_clock::now();
        std::printf("  inputs filled in %.1f s\n", std::chrono::duration<double>(t1 - t0).count());

        run_kernel(*k, views);
        auto t2 = std::chrono::steady_clock::now();
        double secs = std::chrono::duration<double>(t2 - t1).count();
        double bytes_moved = 0;
        for (const auto &[n, v] : views) bytes_moved += (double)v.numel() * (double)dtype_size(v.dtype);
        std::printf("  kernel call (chunked by the runtime): %.2f s, %.1f GB/s\n", secs, bytes_moved / secs / 1e9);

        // The rows to check.
        std::set<int64_t> check = {0, rows - 1};
        const int64_t step = INT32_MAX / d;  // rows per chunk, as the runtime cuts them
        for (int64_t b = step; b < rows; b += step) check.insert({b - 1, b});
        std::mt19937_64 rng(seed);
        for (int i = 0; i < samples; ++i) check.insert((int64_t)(rng() % (uint64_t)rows));
        std::printf("  checking %zu rows (chunks of %lld rows: boundaries at", check.size(), (long long)step);
        for (int64_t b = step; b < rows; b += step) std::printf(" %lld", (long long)b);
        std::printf(")\n");

        const OutputBound bound = spot_check_bound(spec);
        int failed = 0;
        double worst = 0, worst_abs = 0;
        for (int64_t r : check) {
            TensorMap in;
            for (const KernelArg &a : k->args) {
                if (a.role == KernelArg::Output) continue;
                const TensorView &v = views.at(a.name);
                if (per_row.count(a.name)) {
                    const uint8_t *p = (const uint8_t *)v.data + (size_t)(r * d) * dtype_size(a.dtype);
                    in[a.name] = HostTensor{{1, d}, decode(p, (size_t)d, a.dtype)};
                } else {
                    in[a.name] = HostTensor{v.shape, decode((const uint8_t *)v.data, (size_t)v.numel(), a.dtype)};
                }
            }
            TensorMap ref = evaluate_reference(spec, in, {}, {k->storage()});
            for (const KernelArg &a : k->args) {
                if (a.role != KernelArg::Output) continue;
                const uint8_t *p = (const uint8_t *)views.at(a.name).data + (size_t)(r * d) * dtype_size(a.dtype);
                HostTensor got{{1, d}, decode(p, (size_t)d, a.dtype)};
                OutputCheck c = compare_output(a.name, got, ref.at(a.name), a.dtype, bound);
                if (c.max_err > worst) worst = c.max_err, worst_abs = c.worst_abs;
                if (!c.pass) {
                    if (++failed <= 10) std::printf("  FAIL row %lld: %s\n", (long long)r, mismatch_text(c).c_str());
                }
            }
        }
        if (failed) {
            std::printf("normgen-big-check: %d sampled rows FAIL\n", failed);
            return 1;
        }
        std::printf("normgen-big-check: all %zu sampled rows pass (worst error %.3g, %.3g of the bound)\n", check.size(), worst_abs, worst);
        return 0;
    } catch (const UserError &e) {
        std::fprintf(stderr, "normgen-big-check: error: %s\n", e.what());
        return 2;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "normgen-big-check: internal error: %s\n", e.what());
        return 2;
    }
}
