#include "bench/shape_grids.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>

namespace normgen::bench {

std::string GridCase::name() const { return layer + (grad ? "_grad" : "") + "/" + model + "/" + dtype_name(dtype) + "/" + shape; }

int64_t last_level_cache_bytes() {
    static const int64_t bytes = [] {
        int64_t best = 0;
        for (int i = 0; i < 8; ++i) {
            std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
            std::string s;
            if (!(f >> s) || s.empty()) continue;
            int64_t v = 0;
            size_t k = 0;
            while (k < s.size() && s[k] >= '0' && s[k] <= '9') v = v * 10 + (s[k++] - '0');
            if (k < s.size() && (s[k] == 'K' || s[k] == 'k')) v <<= 10;
            if (k < s.size() && (s[k] == 'M' || s[k] == 'm')) v <<= 20;
            best = std::max(best, v);
        }
#ifdef _SC_LEVEL3_CACHE_SIZE
        if (best <= 0) best = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
        return best > 0 ? best : int64_t(32) << 20;
    }();
    return bytes;
}

int64_t GridCase::elements() const {
    int64_t n = 1;
    for (const auto &[axis, e] : sizes) n *= e;
    // group_norm_* declare c as (g, cg) with g = 32 fixed: the sizes name cg only.
    if (layer.rfind("group_norm", 0) == 0) n *= 32;
    return n;
}

namespace {

// x + y of at least 4 x the last-level cache this machine reports: a DRAM-sized case (32 MiB and
// 260 MiB of L3 have both been seen on this project's machines).
int64_t dram_bytes() { return 4 * last_level_cache_bytes(); }
int64_t storage_bytes(DType t) { return t == DType::F32 ? 4 : 2; }

GridCase rows(const std::string &layer, const std::string &model, int64_t tokens, int64_t d, DType t = DType::F32) {
    GridCase c;
    c.layer = layer;
    c.model = model;
    c.dtype = t;
    c.sizes = {{"rows", tokens}, {"d", d}};
    c.shape = std::to_string(tokens) + "x" + std::to_string(d);
    c.dram = 2 * storage_bytes(t) * tokens * d >= dram_bytes();
    return c;
}

std::string nchw_label(int64_t n, int64_t c, int64_t h, int64_t w) {
    return std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
}

// [n, c, h, w] activations for BatchNorm, InstanceNorm and GroupNorm; the label is always NCHW
// order for NCHW layers and NHWC order for *_nhwc layers.
GridCase image(const std::string &layer, const std::string &model, int64_t n, int64_t c, int64_t h, int64_t w) {
    GridCase g;
    g.layer = layer;
    g.model = model;
    const bool grouped = layer.rfind("group_norm", 0) == 0;
    g.sizes = {{"n", n}, {"h", h}, {"w", w}};
    if (grouped)
        g.sizes["cg"] = c / 32;
    else
        g.sizes["c"] = c;
    const bool nhwc = layer.size() > 5 && layer.compare(layer.size() - 5, 5, "_nhwc") == 0;
    g.shape = nhwc ? nchw_label(n, h, w, c) : nchw_label(n, c, h, w);
    g.dram = 2 * 4 * n * c * h * w >= dram_bytes();
    g.full_reference = layer == "batch_norm_train";
    return g;
}

void add_transformer(std::vector<GridCase> &out, const std::string &layer) {
    for (int64_t t : {1, 8, 512, 4096, 16384}) out.push_back(rows(layer, "llama3-8b", t, 4096));
    for (int64_t t : {1, 8, 512, 4096, 16384, 32768}) out.push_back(rows(layer, "llama3-70b", t, 8192));
    out.push_back(rows(layer, "bert-base", 32 * 512, 768));
    out.push_back(rows(layer, "vit-l", 64 * 197, 1024));
    out.push_back(rows(layer, "wide", 64, 65536));
    out.push_back(rows(layer, "wide", 16, 262144));
    out.push_back(rows(layer, "llama3-8b", 4096, 4096, DType::BF16));
    out.push_back(rows(layer, "llama3-70b", 4096, 8192, DType::BF16));
    out.push_back(rows(layer, "llama3-70b", 16384, 8192, DType::BF16));
}

// ResNet-50 at batch 32: the activations each stage normalizes (conv1 and the 1x1/3x3 widths of
// stages 1-4), and a batch-128 stage-1 tensor past the L3.
void add_resnet(std::vector<GridCase> &out, const std::string &layer) {
    out.push_back(image(layer, "resnet50", 32, 64, 112, 112));
    out.push_back(image(layer, "resnet50", 32, 256, 56, 56));
    out.push_back(image(layer, "resnet50", 32, 512, 28, 28));
    out.push_back(image(layer, "resnet50", 32, 1024, 14, 14));
    out.push_back(image(layer, "resnet50", 32, 2048, 7, 7));
    out.push_back(image(layer, "resnet50-b128", 128, 256, 56, 56));
}

// Stable Diffusion's UNet (512 px: latents 64^2 down to 8^2; batch 2 = one prompt with
// classifier-free guidance, batch 8 = four), and SDXL-size 128^2 latents (batch 16) past the L3.
void add_unet(std::vector<GridCase> &out, const std::string &layer) {
    out.push_back(image(layer, "sd-unet", 2, 320, 64, 64));
    out.push_back(image(layer, "sd-unet", 8, 320, 64, 64));
    out.push_back(image(layer, "sd-unet", 8, 640, 32, 32));
    out.push_back(image(layer, "sd-unet", 8, 1280, 16, 16));
    out.push_back(image(layer, "sd-unet", 8, 1280, 8, 8));
    out.push_back(image(layer, "sdxl-unet", 16, 320, 128, 128));
}

// The case itself when x + y reach 4 x the L3, else it with its outermost axis doubled until they
// do ("<model>-dram"); either way marked DRAM-sized.
GridCase at_dram_size(GridCase c) {
    const std::string outer = c.sizes.count("rows") ? "rows" : "n";
    if (2 * storage_bytes(c.dtype) * c.elements() < dram_bytes()) {
        while (2 * storage_bytes(c.dtype) * c.elements() < dram_bytes()) c.sizes[outer] *= 2;
        c.model += "-dram";
        c.shape = std::to_string(c.sizes[outer]) + c.shape.substr(c.shape.find('x'));  // the label starts with the outermost axis
    }
    c.dram = true;
    return c;
}

// Every layer gets a DRAM-sized case in f32 and in bf16 on this machine: where its largest case
// of that type is not DRAM-sized, that case (the f32 one for a layer without bf16 cases) with its
// outermost axis doubled until x + y reach 4 x the L3 ("<model>-dram").
void add_dram_cases(std::vector<GridCase> &g) {
    std::map<std::string, size_t> largest;  // layer|dtype -> index of its largest case
    std::set<std::string> has_dram, layers;
    for (size_t i = 0; i < g.size(); ++i) {
        const std::string key = g[i].layer + "|" + dtype_name(g[i].dtype);
        layers.insert(g[i].layer);
        if (g[i].dram) has_dram.insert(key);
        auto it = largest.find(key);
        if (it == largest.end() || g[i].elements() > g[it->second].elements()) largest[key] = i;
    }
    std::vector<GridCase> more;
    for (const std::string &layer : layers)
        for (DType t : {DType::F32, DType::BF16}) {
            const std::string key = layer + "|" + dtype_name(t);
            if (has_dram.count(key)) continue;
            auto from = largest.find(key);
            if (from == largest.end()) from = largest.find(layer + "|f32");
            GridCase c = g[from->second];
            c.dtype = t;
            more.push_back(at_dram_size(c));
        }
    // Each after the last case of its layer, so the benchmark still runs layer by layer.
    for (const GridCase &c : more) {
        size_t at = 0;
        for (size_t i = 0; i < g.size(); ++i)
            if (g[i].layer == c.layer) at = i + 1;
        g.insert(g.begin() + (long)at, c);
    }
}

}  // namespace

std::vector<GridCase> model_grid() {
    std::vector<GridCase> g;
    add_transformer(g, "layer_norm");
    add_transformer(g, "rms_norm");
    g.push_back(rows("layer_norm_weight_only", "llama3-8b", 4096, 4096));
    g.push_back(rows("layer_norm_weight_only", "llama3-70b", 16384, 8192));
    g.push_back(rows("dyt", "vit-b", 64 * 197, 768));
    g.push_back(rows("dyt", "llama3-8b", 4096, 4096));
    g.push_back(rows("dyt", "llama3-70b", 16384, 8192));
    g.push_back(rows("fused_add_rms_norm", "llama3-8b", 4096, 4096));
    g.push_back(rows("fused_add_rms_norm", "llama3-70b", 16384, 8192));
    // Rounding orders (Llama rounds before the weight multiply, Gemma once) and PolyNorm's three statistics.
    g.push_back(rows("rms_norm_llama", "llama3-70b", 16384, 8192));
    g.push_back(rows("rms_norm_gemma", "llama3-70b", 16384, 8192));
    g.push_back(rows("poly_norm", "llama3-70b", 16384, 8192));
    add_resnet(g, "batch_norm_train");
    add_resnet(g, "batch_norm_eval");
    add_unet(g, "group_norm_nchw");
    add_unet(g, "group_norm_nhwc");
    g.push_back(image("instance_norm", "sd-unet", 8, 320, 64, 64));
    g.push_back(image("instance_norm", "sdxl-unet", 16, 320, 128, 128));
    add_dram_cases(g);
    return g;
}

namespace {

GridCase backward(GridCase g) {
    g.grad = true;
    g.full_reference = true;
    g.dram = false;
    return g;
}

// Rows of d (a power of two, at least 1024) such that x + d_y + d_x in f32 reach 4 x the L3.
int64_t dram_rows(int64_t d) {
    int64_t rows = 1024;
    while (rows * d * 12 < 4 * last_level_cache_bytes()) rows *= 2;
    return rows;
}

// Batch of an [n, c, h, w] activation the same way.
int64_t dram_batch(int64_t c, int64_t h, int64_t w) {
    int64_t n = 2;
    while (n * c * h * w * 12 < 4 * last_level_cache_bytes()) n *= 2;
    return n;
}

GridCase dram_backward(GridCase g) {
    g = backward(g);
    g.dram = true;
    g.model += "-dram";
    return g;
}

}  // namespace

std::vector<GridCase> backward_grid() {
    std::vector<GridCase> g;
    for (const char *l : {"layer_norm", "rms_norm"}) {
        g.push_back(backward(rows(l, "llama3-8b", 512, 4096)));
        g.push_back(backward(rows(l, "llama3-8b", 4096, 4096)));
        g.push_back(backward(rows(l, "llama3-70b", 4096, 8192)));
        g.push_back(backward(rows(l, "bert-base", 32 * 512, 768)));
        g.push_back(backward(rows(l, "llama3-8b", 4096, 4096, DType::BF16)));
        g.push_back(dram_backward(rows(l, "llama3-70b", dram_rows(8192), 8192)));
    }
    g.push_back(backward(rows("layer_norm_weight_only", "llama3-8b", 4096, 4096)));
    g.push_back(backward(rows("layer_norm_no_affine", "llama3-8b", 4096, 4096)));
    g.push_back(dram_backward(rows("layer_norm_no_affine", "llama3-70b", dram_rows(8192), 8192)));
    g.push_back(backward(rows("dyt", "vit-b", 64 * 197, 768)));
    g.push_back(backward(rows("dyt", "llama3-8b", 4096, 4096)));
    g.push_back(dram_backward(rows("dyt", "llama3-70b", dram_rows(8192), 8192)));
    g.push_back(backward(rows("fused_add_rms_norm", "llama3-8b", 4096, 4096)));
    g.push_back(backward(image("batch_norm_train", "resnet50", 32, 64, 112, 112)));
    g.push_back(backward(image("batch_norm_train", "resnet50", 32, 256, 56, 56)));
    g.push_back(backward(image("batch_norm_train", "resnet50", 32, 2048, 7, 7)));
    g.push_back(dram_backward(image("batch_norm_train", "resnet50", dram_batch(256, 56, 56), 256, 56, 56)));
    for (const char *l : {"group_norm_nchw", "group_norm_nhwc"}) {
        g.push_back(backward(image(l, "sd-unet", 8, 320, 64, 64)));
        g.push_back(backward(image(l, "sd-unet", 8, 1280, 8, 8)));
        g.push_back(dram_backward(image(l, "sd-unet", dram_batch(320, 64, 64), 320, 64, 64)));
    }
    g.push_back(backward(image("instance_norm", "sd-unet", 8, 320, 64, 64)));
    return g;
}

std::vector<GridCase> short_backward_grid() {
    return {backward(rows("layer_norm", "llama3-8b", 4096, 4096)), backward(rows("rms_norm", "llama3-8b", 4096, 4096))};
}

std::vector<GridCase> short_grid() {
    std::vector<GridCase> g;
    for (const char *l : {"layer_norm", "rms_norm"}) {
        g.push_back(rows(l, "llama3-8b", 4096, 4096));
        // The full grid's first DRAM-sized LLaMA-3 70B case on this machine: 16384 rows at a 32 MiB L3, 32768 at 480 MiB.
        GridCase big = rows(l, "llama3-70b", 16384, 8192);
        if (!big.dram) big = at_dram_size(rows(l, "llama3-70b", 32768, 8192));
        g.push_back(big);
    }
    g.push_back(rows("dyt", "vit-b", 64 * 197, 768));
    g.push_back(image("batch_norm_train", "resnet50", 32, 256, 56, 56));
    g.push_back(image("group_norm_nchw", "sd-unet", 8, 320, 64, 64));
    return g;
}

}  // namespace normgen::bench
