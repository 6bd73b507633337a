// The benchmark shapes, named after the models they come from: one place, used by the benchmark
// (bench/normgen_bench.cpp) and by the tests (tests/bench/grid_test.cpp verifies every layer of the
// grid on the grid's own shapes, scaled down where a shape is too big for a unit test).
#pragma once

#include "dsl/norm_spec.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace normgen::bench {

struct GridCase {
    std::string layer;                     // catalog layer, e.g. "layer_norm"
    std::string model;                     // where the shape comes from, e.g. "llama3-8b"
    DType dtype = DType::F32;
    std::map<std::string, int64_t> sizes;  // extent of each atomic axis of the layer, by name
    std::string shape;                     // the tensor's shape as the model sees it, e.g. "4096x4096"
    // A case bigger than the last-level cache: x + y in f32 of at least 4 x the L3 this machine
    // reports (model_grid() adds a "<model>-dram" case to every layer that has none).
    bool dram = false;
    // When the reference check must evaluate the whole tensor (statistics reduce over the
    // outermost axis: BatchNorm training).
    bool full_reference = false;
    // The backward layer (`normgen grad` of `layer`, registered as <layer>_grad): x and the
    // upstream gradients in, d_x and the parameter gradients out (backward_grid()).
    bool grad = false;
    std::string name() const;              // "layer_norm/llama3-8b/f32/4096x4096" ("layer_norm_grad/..." when grad)
    int64_t elements() const;              // elements of x
};

// Every case of the full grid, in the order the benchmark runs them (by layer, then by size).
//   LayerNorm, RMSNorm: LLaMA-3 8B / 70B (d = 4096 / 8192; tokens 1, 8, 512, 4096, 16384), BERT-base
//     (32 x 512 tokens, d = 768), ViT-L (64 x 197 tokens, d = 1024), wide rows (d = 65536, 262144),
//     bf16 at LLaMA shapes; LayerNorm without shift (oneDNN's no-shift form) at LLaMA-3 8B;
//   BatchNorm train / eval: ResNet-50's stages at batch 32 ([32, C, H, W]);
//   GroupNorm NCHW / NHWC: Stable-Diffusion UNet blocks ([2..8, 320..1280, 64^2..8^2], 32 groups);
//   InstanceNorm: the same UNet activations;
//   DyT: ViT-B (64 x 197 tokens x 768) and LLaMA-3 8B;
//   and per layer (and storage type) at least one DRAM-sized case (dram = true, x + y >= 4 x the L3
//   this machine reports): the largest case with its outermost axis doubled when none is.
std::vector<GridCase> model_grid();

// The short grid of the README's run command (about two minutes with every implementation): one
// cache-resident and one DRAM-sized case per headline layer.
std::vector<GridCase> short_grid();

// The backward cases (grad = true): the layers oneDNN and ATen have a backward for (LayerNorm with
// scale and shift, with scale only and with neither; BatchNorm training; GroupNorm NCHW and NHWC;
// InstanceNorm) and RMSNorm, DyT and the fused residual RMSNorm (ATen compositions), on the model
// shapes, plus one DRAM-sized case per headline layer sized from this machine's last-level cache
// (x + d_y + d_x >= 4 x L3, dram = true). Every backward case checks its outputs against the whole
// float64 reference (the parameter gradients reduce over every row).
std::vector<GridCase> backward_grid();
// Two backward cases for the README's run command: LayerNorm and RMSNorm at LLaMA-3 8B, 4096 tokens.
std::vector<GridCase> short_backward_grid();

// The last-level cache this machine reports (sysfs, else sysconf), in bytes; 32 MiB when unknown.
int64_t last_level_cache_bytes();

}  // namespace normgen::bench
