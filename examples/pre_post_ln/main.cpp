// normgen-pre-post-ln: the seeds' check [d] on normgen's kernels. The model of model.h (48 residual
// blocks of width 64, batch 16, Pre-LN and Post-LN, PyTorch's weights from
// tests/golden/backward/pre_post_ln/) with every LayerNorm run by the generated f32 kernels: the
// forward's full kernel (it writes the saved mu and rstd) and the backward kernel `normgen grad`
// derived from the same declaration (Registry::select_grad). Linear stays in float64 loops.
// Prints each block's weight-gradient norm beside PyTorch's and the last/first ratios (PyTorch:
// Pre-LN 0.4015, Post-LN 2.3457). Exit 0 when every block is within 1e-3 relative, 1 otherwise.
//
//   normgen-pre-post-ln [GOLDEN_DIR] [--backend halide|mlir]   (default: the build's golden folder)
#include "examples/pre_post_ln/model.h"
#include "runtime/errors.h"
#include "runtime/kernel_table.h"
#include "runtime/npy.h"
#include "runtime/registry.h"
#include "runtime/run.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

using namespace normgen;
using namespace normgen::example;

namespace {

std::vector<float> to_f32(const Mat &m) { return std::vector<float>(m.begin(), m.end()); }
Mat to_f64(const std::vector<float> &v) { return Mat(v.begin(), v.end()); }

}  // namespace

int main(int argc, char **argv) {
    std::string dir = NORMGEN_GOLDEN_DIR "/backward/pre_post_ln";
    Backend backend = Backend::Halide;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--help" || a == "-h") {
            std::printf("usage: normgen-pre-post-ln [GOLDEN_DIR] [--backend halide|mlir]\n"
                        "The seeds' check [d] on the generated LayerNorm forward and backward kernels (f32).\n");
            return 0;
        } else if (a == "--backend" && i + 1 < argc) {
            std::string b = argv[++i];
            if (b != "halide" && b != "mlir") {
                std::fprintf(stderr, "normgen-pre-post-ln: --backend takes halide or mlir, not '%s'\n", b.c_str());
                return 2;
            }
            backend = b == "mlir" ? Backend::Mlir : Backend::Halide;
        } else if (!a.empty() && a[0] == '-') {
            std::fprintf(stderr, "normgen-pre-post-ln: unknown option '%s' (--help)\n", a.c_str());
            return 2;
        } else {
            dir = a;
        }
    }
    try {
        const HostTensor x = read_npy(dir + "/x.npy"), W = read_npy(dir + "/lin_weight.npy"), B = read_npy(dir + "/lin_bias.npy");
        const HostTensor HW = read_npy(dir + "/head_weight.npy"), HB = read_npy(dir + "/head_bias.npy");
        Weights w;
        w.rows = (int)x.shape.at(0);
        w.n = (int)x.shape.at(1);
        w.depth = (int)W.shape.at(0);
        w.lin_w = W.data.data();
        w.lin_b = B.data.data();
        w.head_w = HW.data.data();
        w.head_b = HB.data.data();
        const int64_t rows = w.rows, n = w.n;

        Registry reg = Registry::load(default_manifest_path(), kKernelTable, kKernelTableSize);
        const Registry::Kernel *fwd = reg.select("layer_norm", DType::F32, true, std::nullopt, backend);
        const Registry::Kernel *bwd = reg.select_grad("layer_norm", DType::F32, std::nullopt, backend);
        if (!fwd || !bwd) throw UserError("no f32 layer_norm forward (full) and backward kernels of this backend in " + reg.path());
        std::printf("kernels: %s, %s\n", fwd->function.c_str(), bwd->function.c_str());

        std::vector<float> ones((size_t)n, 1.0f), zeros((size_t)n, 0.0f);
        LayerNormOps ops;
        ops.forward = [&](const Mat &h, std::vector<Mat> &saved) {
            std::vector<float> xin = to_f32(h), y((size_t)(rows * n)), mu((size_t)rows), rstd((size_t)rows);
            run_kernel(*fwd, {{"x", TensorView{xin.data(), DType::F32, {rows, n}, {}}},
                              {"weight", TensorView{ones.data(), DType::F32, {n}, {}}},
                              {"bias", TensorView{zeros.data(), DType::F32, {n}, {}}},
                              {"y", TensorView{y.data(), DType::F32, {rows, n}, {}}},
                              {"mu", TensorView{mu.data(), DType::F32, {rows}, {}}},
                              {"rstd", TensorView{rstd.data(), DType::F32, {rows}, {}}}});
            saved = {to_f64(mu), to_f64(rstd)};
            return to_f64(y);
        };
        ops.backward = [&](const Mat &h, const std::vector<Mat> &saved, const Mat &dy) {
            std::vector<float> xin = to_f32(h), mu = to_f32(saved[0]), rstd = to_f32(saved[1]), g = to_f32(dy);
            std::vector<float> dx((size_t)(rows * n)), dw((size_t)n), db((size_t)n);
            run_kernel(*bwd, {{"x", TensorView{xin.data(), DType::F32, {rows, n}, {}}},
                              {"mu", TensorView{mu.data(), DType::F32, {rows}, {}}},
                              {"rstd", TensorView{rstd.data(), DType::F32, {rows}, {}}},
                              {"d_y", TensorView{g.data(), DType::F32, {rows, n}, {}}},
                              {"weight", TensorView{ones.data(), DType::F32, {n}, {}}},
                              {"d_x", TensorView{dx.data(), DType::F32, {rows, n}, {}}},
                              {"d_weight", TensorView{dw.data(), DType::F32, {n}, {}}},
                              {"d_bias", TensorView{db.data(), DType::F32, {n}, {}}}});
            return to_f64(dx);
        };

        int bad = 0;
        for (bool pre : {true, false}) {
            const char *name = pre ? "Pre-LN" : "Post-LN";
            std::vector<double> norms = weight_grad_norms(pre, x.data, w, ops);
            const HostTensor want = read_npy(dir + "/" + (pre ? "pre" : "post") + "_weight_grad_norms.npy");
            if (want.data.size() != norms.size()) throw UserError("the golden norms have " + std::to_string(want.data.size()) + " blocks");
            double worst = 0;
            for (size_t k = 0; k < norms.size(); ++k) {
                const double rel = std::fabs(norms[k] - want.data[k]) / want.data[k];
                worst = std::max(worst, rel);
                if (rel > 1e-3) {
                    ++bad;
                    std::printf("  %s block %zu: %.6g, PyTorch %.6g (%.2g relative) FAIL\n", name, k, norms[k], want.data[k], rel);
                }
            }
            std::printf("%-8s last/first %.4f (PyTorch %.4f); block 1 %.6g, block %d %.6g; worst block %.2g relative\n", name,
                        norms.back() / norms.front(), want.data.back() / want.data.front(), norms.front(), w.depth, norms.back(), worst);
        }
        std::printf(bad ? "normgen-pre-post-ln: %d blocks differ from PyTorch by more than 1e-3\n" : "normgen-pre-post-ln: every block within 1e-3 of PyTorch\n", bad);
        return bad ? 1 : 0;
    } catch (const UserError &e) {
        std::fprintf(stderr, "normgen-pre-post-ln: error: %s\n", e.what());
        return 2;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "normgen-pre-post-ln: internal error: %s\n", e.what());
        return 2;
    }
}
