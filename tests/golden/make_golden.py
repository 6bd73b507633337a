#!/usr/bin/env python3
"""Makes normgen's golden cases: expected outputs and gradients computed by PyTorch in float64.

    /usr/bin/python3 tests/golden/make_golden.py            # rewrite the committed files here
    /usr/bin/python3 tests/golden/make_golden.py --check    # regenerate into a temporary folder and
                                                            # compare with the committed files
    /usr/bin/python3 tests/golden/make_golden.py --out DIR  # write somewhere else

Needs PyTorch and NumPy (Debian's python3-torch and python3-numpy; scripts/install-deps.sh installs
them). Every layer is computed by PyTorch's own operators where it has them (F.layer_norm,
F.batch_norm, F.group_norm, F.instance_norm, torch.nn.utils.weight_norm) and otherwise by its formula
written out in plain tensor operations, all in float64; gradients by autograd. normgen's code is not
used: this is the oracle the float64 interpreter and every backend are checked against.

Inputs are drawn in float32 by NumPy's legacy RandomState (a stream NumPy keeps fixed across
versions), seeded by the case's name; a case named "..._bf16_inputs" rounds its inputs to bfloat16
(to nearest even), so they are exact in f32 and bf16. --check regenerates every file and requires
the inputs to be bit for bit the committed ones and every computed value to be within 1e-12
(relative, absolute below 1) of them: float64 sums in another order (another CPU's vector width,
another PyTorch) move the last bits only. See README.md beside this script.
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import zlib

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
TOLERANCE = 1e-12
UPSTREAM_NOTE = "upstream gradients d_<output> are inputs; d_<input> are the expected gradients"


# ---- values ------------------------------------------------------------------------------------


def round_bf16(a):
    """Rounds float64 values to bfloat16 (8 significant bits) to nearest, ties to even, as float64.
    Correct from float64 directly (torch's double -> bfloat16 goes through float32: two roundings)."""
    a = np.asarray(a, dtype=np.float64)
    m, e = np.frexp(a)  # a = m * 2^e, 0.5 <= |m| < 1
    return np.ldexp(np.round(m * 256.0), e - 8)  # np.round: half to even


class Draw:
    """Random float32 inputs for one case, seeded by its name (and a salt)."""

    def __init__(self, name, salt=0):
        self.rs = np.random.RandomState((zlib.crc32(name.encode()) + 7919 * salt) % 2**32)

    def normal(self, shape, mean=0.0, std=1.0):
        return (mean + std * self.rs.standard_normal(shape)).astype(np.float32).astype(np.float64)

    def uniform(self, shape, lo, hi):
        return self.rs.uniform(lo, hi, shape).astype(np.float32).astype(np.float64)


def t64(a):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))


def rms(v, eps, dims=-1):
    return v * torch.rsqrt((v * v).mean(dim=dims, keepdim=True) + eps)


def bf16_straight_through(v):
    """v rounded to bfloat16 in the forward, the gradient passed through unchanged in the backward:
    what `hidden.to(torch.bfloat16)` is in a bf16 model (autograd casts the gradient back)."""
    return v + (t64(round_bf16(v.detach().numpy())) - v).detach()


# ---- the cases ---------------------------------------------------------------------------------
#
# Each maker returns (inputs, consts, forward): inputs a dict name -> float64 array (already exact
# in float32 or bf16), forward(tensors) -> dict of outputs, differentiable by autograd.


def layer_norm_case(name, rows, d, affine=True, bf16=False, mean=0.0):
    g = Draw(name)
    x = g.normal((rows, d), mean=mean, std=1.0 if mean else 1.7)
    inputs = {"x": round_bf16(x) if bf16 else x}
    if affine:
        inputs["weight"] = g.normal((d,), 1.0, 0.4)
        inputs["bias"] = g.normal((d,), 0.0, 0.5)
    eps = 1e-5

    def forward(t):
        return {"y": F.layer_norm(t["x"], (d,), t.get("weight"), t.get("bias"), eps)}

    return inputs, {"eps": eps}, forward


def layer_norm_last_two_axes(name):
    g = Draw(name)
    inputs = {"x": g.normal((3, 6, 10), 0.3, 1.5), "weight": g.normal((6, 10), 1.0, 0.4), "bias": g.normal((6, 10), 0.0, 0.5)}
    eps = 1e-5
    return inputs, {"eps": eps}, lambda t: {"y": F.layer_norm(t["x"], (6, 10), t["weight"], t["bias"], eps)}


def layer_norm_eps_outside_root(name):
    g = Draw(name)
    inputs = {"x": g.normal((6, 17), 0.2, 0.3), "weight": g.normal((17,), 1.0, 0.4), "bias": g.normal((17,), 0.0, 0.5)}
    eps = 1e-2

    def forward(t):
        x = t["x"]
        mu = x.mean(-1, keepdim=True)
        sd = x.var(-1, unbiased=False, keepdim=True).sqrt()
        return {"y": (x - mu) / (sd + eps) * t["weight"] + t["bias"]}

    return inputs, {"eps": eps}, forward


def rms_norm(name):
    g = Draw(name)
    inputs = {"x": g.normal((6, 129), 0.5, 1.3), "weight": g.normal((129,), 1.0, 0.4)}
    eps = 1e-6
    return inputs, {"eps": eps}, lambda t: {"y": rms(t["x"], eps) * t["weight"]}


def rms_norm_gemma_bf16_inputs(name):
    g = Draw(name)
    inputs = {"x": round_bf16(g.normal((4, 96), 0.0, 2.0)), "weight": round_bf16(g.normal((96,), 0.0, 0.3))}
    eps = 1e-6
    return inputs, {"eps": eps}, lambda t: {"y": rms(t["x"], eps) * (1 + t["weight"])}


def rms_norm_llama_bf16_inputs(name):
    """Hugging Face's LlamaRMSNorm on a bf16 model: hidden.to(float32), normalized, .to(bf16), then
    weight * that in bf16. Here in float64 with the one declared rounding (to bf16, to nearest even)
    where the model casts; the final product's rounding is the kernel's store."""
    g = Draw(name)
    inputs = {"x": round_bf16(g.normal((5, 80), 0.0, 1.5)), "weight": round_bf16(g.normal((80,), 1.0, 0.3))}
    eps = 1e-6
    return inputs, {"eps": eps}, lambda t: {"y": t["weight"] * bf16_straight_through(rms(t["x"], eps))}


def fused_add_rms_norm(name):
    g = Draw(name)
    inputs = {"x": g.normal((5, 48), 0.0, 1.2), "residual": g.normal((5, 48), 0.4, 1.0), "weight": g.normal((48,), 1.0, 0.4)}
    eps = 1e-6

    def forward(t):
        h = t["x"] + t["residual"]
        return {"h": h, "y": rms(h, eps) * t["weight"]}

    return inputs, {"eps": eps}, forward


def qk_norm(name):
    g = Draw(name)
    inputs = {"q": g.normal((2, 5, 4, 16), 0.2, 1.4), "weight": g.normal((16,), 1.0, 0.4)}
    eps = 1e-6
    return inputs, {"eps": eps}, lambda t: {"y": rms(t["q"], eps) * t["weight"]}


def deepnorm(name):
    g = Draw(name)
    inputs = {"x": g.normal((4, 40), 0.0, 1.0), "f": g.normal((4, 40), 0.1, 0.8), "weight": g.normal((40,), 1.0, 0.4),
              "bias": g.normal((40,), 0.0, 0.5)}
    eps, alpha = 1e-5, (2 * 12) ** 0.25
    return inputs, {"eps": eps, "alpha": alpha}, lambda t: {
        "y": F.layer_norm(alpha * t["x"] + t["f"], (40,), t["weight"], t["bias"], eps)}


def scale_norm(name):
    g = Draw(name)
    x = g.normal((7, 33), 0.0, 1.5)
    x[2, :] = 0.0  # the max(norm, eps) clamp
    inputs = {"x": x, "g": np.array([1.75])}
    eps = 1e-5

    def forward(t):
        norm = torch.linalg.vector_norm(t["x"], dim=-1, keepdim=True)
        return {"y": t["g"] * t["x"] / torch.clamp(norm, min=eps)}

    return inputs, {"eps": eps}, forward


def batch_norm_case(name, shape, training):
    g = Draw(name)
    c = shape[1]
    inputs = {"x": g.normal(shape, 0.7, 1.6), "weight": g.normal((c,), 1.0, 0.4), "bias": g.normal((c,), 0.0, 0.5),
              "running_mean": g.normal((c,), 0.0, 0.5), "running_var": g.uniform((c,), 0.5, 2.0)}
    eps, momentum = 1e-5, 0.1
    consts = {"eps": eps, "momentum": momentum} if training else {"eps": eps}

    def forward(t):
        rm, rv = t["running_mean"].detach().clone(), t["running_var"].detach().clone()
        y = F.batch_norm(t["x"], rm, rv, t["weight"], t["bias"], training, momentum, eps)
        out = {"y": y}
        if training:  # F.batch_norm updated rm, rv in place: unbiased variance, momentum
            out.update(running_mean_out=rm, running_var_out=rv)
        return out

    return inputs, consts, forward


def group_norm_case(name, nhwc):
    g = Draw("group_norm")  # both layouts hold the same values
    x = g.normal((3, 12, 5, 4), -0.4, 1.3)
    inputs = {"x": x.transpose(0, 2, 3, 1) if nhwc else x, "weight": g.normal((12,), 1.0, 0.4), "bias": g.normal((12,), 0.0, 0.5)}
    eps, groups = 1e-5, 4

    def forward(t):
        xx = t["x"].permute(0, 3, 1, 2) if nhwc else t["x"]
        y = F.group_norm(xx, groups, t["weight"], t["bias"], eps)
        return {"y": y.permute(0, 2, 3, 1) if nhwc else y}

    return inputs, {"eps": eps, "groups": groups}, forward


def instance_norm(name):
    g = Draw(name)
    inputs = {"x": g.normal((2, 3, 9, 7), 0.6, 1.4)}
    eps = 1e-5
    return inputs, {"eps": eps}, lambda t: {"y": F.instance_norm(t["x"], eps=eps)}


def dyt(name):
    g = Draw(name)
    inputs = {"x": g.normal((4, 50), 0.0, 2.0), "alpha": np.array([0.625]), "weight": g.normal((50,), 1.0, 0.4),
              "bias": g.normal((50,), 0.0, 0.5)}
    return inputs, {}, lambda t: {"y": t["weight"] * torch.tanh(t["alpha"] * t["x"]) + t["bias"]}


def weight_norm(name):
    """torch.nn.utils.weight_norm of an nn.Linear(i, o) (dim 0: one length per output row)."""
    g = Draw(name)
    o, i = 6, 11
    inputs = {"v": g.normal((o, i), 0.1, 0.8), "g": g.normal((o,), 1.0, 0.5)}

    def forward(t):
        lin = torch.nn.Linear(i, o, bias=False).double()
        lin = torch.nn.utils.weight_norm(lin, name="weight", dim=0)
        del lin.weight_g, lin.weight_v  # the Parameters, replaced by the case's (autograd) tensors
        lin.weight_g = t["g"].reshape(o, 1)
        lin.weight_v = t["v"]
        lin(torch.zeros(1, i, dtype=torch.float64))  # the forward pre-hook computes lin.weight
        return {"w": lin.weight}

    return inputs, {}, forward


def poly_norm(name):
    """PolyNorm (Zhuo et al. 2024) written out: w0 rms(x^3) + w1 rms(x^2) + w2 rms(x) + b."""
    g = Draw(name)
    inputs = {"x": g.normal((4, 30), 0.2, 1.1), "weight": g.normal((3,), 0.5, 0.3), "bias": g.normal((1,), 0.0, 0.5)}
    eps = 1e-6

    def forward(t):
        x, w = t["x"], t["weight"]
        return {"y": w[0] * rms(x ** 3, eps) + w[1] * rms(x ** 2, eps) + w[2] * rms(x, eps) + t["bias"][0]}

    return inputs, {"eps": eps}, forward


# name, layer, formula, maker, layout, note, storage (the kernel storage types a case stands for,
# where a declared rounding point depends on them)
CASES = [
    ("layer_norm", "LayerNorm", "(x - mean_d x) / sqrt(var_d x + eps) * weight + bias  (population variance)",
     lambda n: layer_norm_case(n, 5, 37), {}, None, {}),
    ("layer_norm_no_affine_bf16_inputs", "LayerNorm", "(x - mean_d x) / sqrt(var_d x + eps); x exactly representable in bf16",
     lambda n: layer_norm_case(n, 4, 64, affine=False, bf16=True), {}, None, {}),
    ("layer_norm_last_two_axes", "LayerNorm", "statistics over the last two axes; weight, bias have those two axes",
     layer_norm_last_two_axes, {}, None, {}),
    ("layer_norm_large_mean", "LayerNorm", "as layer_norm, no affine; x = mean 1e4 + N(0,1): one-pass variance cancels",
     lambda n: layer_norm_case(n, 4, 1000, affine=False, mean=1e4), {}, None, {}),
    ("layer_norm_eps_outside_root", "LayerNorm", "(x - mean) / (sqrt(var) + eps) * weight + bias",
     layer_norm_eps_outside_root, {}, "eps is deliberately large so its placement changes the result visibly", {}),
    ("rms_norm", "RMSNorm", "x * rsqrt(mean_d x^2 + eps) * weight", rms_norm, {}, None, {}),
    ("rms_norm_gemma_bf16_inputs", "RMSNorm", "x * rsqrt(mean_d x^2 + eps) * (1 + weight); x, weight exact in bf16",
     rms_norm_gemma_bf16_inputs, {}, None, {}),
    ("rms_norm_llama_bf16_inputs", "RMSNorm",
     "weight * bf16(x * rsqrt(mean_d x^2 + eps)): Hugging Face LlamaRMSNorm on a bf16 model, the normalized value rounded "
     "to bf16 (nearest even) before the weight multiply; x, weight exact in bf16",
     rms_norm_llama_bf16_inputs, {}, "the gradient passes the rounding unchanged, as autograd passes a cast",
     {"x": "bf16", "weight": "bf16", "y": "bf16"}),
    ("fused_add_rms_norm", "RMSNorm", "h = x + residual; y = h * rsqrt(mean_d h^2 + eps) * weight; both h and y are outputs",
     fused_add_rms_norm, {}, None, {}),
    ("qk_norm", "RMSNorm", "per head: q * rsqrt(mean_dh q^2 + eps) * weight over the last axis of [b, t, heads, dh]",
     qk_norm, {"q": "b t heads dh"}, None, {}),
    ("deepnorm", "LayerNorm", "LN(alpha * x + f) with alpha = (2N)^(1/4), N = 12", deepnorm, {}, None, {}),
    ("scale_norm", "ScaleNorm", "g * x / max(||x||_2 over d, eps); row 2 is all zeros", scale_norm, {}, None, {}),
    ("batch_norm_nchw_train", "BatchNorm",
     "batch statistics over all axes but c; running <- (1-momentum)*running + momentum*stat, running var unbiased",
     lambda n: batch_norm_case(n, (8, 5, 7, 3), True), {"x": "n c ..."}, None, {}),
    ("batch_norm_nchw_eval", "BatchNorm", "(x - running_mean) / sqrt(running_var + eps) * weight + bias",
     lambda n: batch_norm_case(n, (8, 5, 7, 3), False), {"x": "n c ..."}, None, {}),
    ("batch_norm_1d_train", "BatchNorm",
     "batch statistics over all axes but c; running <- (1-momentum)*running + momentum*stat, running var unbiased",
     lambda n: batch_norm_case(n, (16, 10), True), {"x": "n c ..."}, None, {}),
    ("batch_norm_1d_eval", "BatchNorm", "(x - running_mean) / sqrt(running_var + eps) * weight + bias",
     lambda n: batch_norm_case(n, (16, 10), False), {"x": "n c ..."}, None, {}),
    ("group_norm_nchw", "GroupNorm", "statistics per (n, group) over (c/G, h, w)",
     lambda n: group_norm_case(n, False), {"x": "n c h w"}, None, {}),
    ("group_norm_nhwc", "GroupNorm", "same values as group_norm_nchw, stored channels-last",
     lambda n: group_norm_case(n, True), {"x": "n h w c", "y": "n h w c"}, None, {}),
    ("instance_norm", "InstanceNorm", "statistics per (n, c) over (h, w), no affine", instance_norm, {"x": "n c h w"}, None, {}),
    ("dyt", "DyT", "weight * tanh(alpha * x) + bias, alpha a scalar", dyt, {}, None, {}),
    ("weight_norm", "WeightNorm", "w = g * v / ||v||_2 over each row (torch.nn.utils.weight_norm of nn.Linear, dim 0)",
     weight_norm, {}, "no activation input: the normalized tensor is the parameter v [o, i]", {}),
    ("poly_norm", "PolyNorm", "weight[0] rms(x^3) + weight[1] rms(x^2) + weight[2] rms(x) + bias[0], rms(v) = v rsqrt(mean_d v^2 + eps)",
     poly_norm, {}, None, {}),
]

# Inputs that are buffers, not differentiable (BatchNorm's running statistics).
BUFFERS = {"running_mean", "running_var"}
# Outputs that carry no gradient (BatchNorm's running statistics after the update).
NO_GRAD_OUTPUTS = {"running_mean_out", "running_var_out"}


def shapes(d):
    return {k: list(v.shape) for k, v in d.items()}


def entry(name, layer, formula, inputs, outputs, consts, layout, note, storage):
    e = {"name": name, "layer": layer, "formula": formula, "inputs": shapes(inputs), "outputs": shapes(outputs),
         "consts": consts, "layout": layout, "note": note}
    if storage:
        e["storage"] = storage
    return e


def make_forward_and_backward():
    """-> (forward entries, {case: {file: array}}), (backward entries, {case: {file: array}})"""
    fwd_entries, fwd_files, bwd_entries, bwd_files = [], {}, [], {}
    for name, layer, formula, maker, layout, note, storage in CASES:
        inputs, consts, forward = maker(name)
        with torch.no_grad():
            out = {k: v.numpy().copy() for k, v in forward({k: t64(v) for k, v in inputs.items()}).items()}
        fwd_entries.append(entry(name, layer, formula, inputs, out, consts, layout, note, storage))
        fwd_files[name] = {**inputs, **out}

        # Backward: one upstream gradient per differentiable output, drawn in float32.
        g = Draw(name, salt=1)
        leaves = {k: t64(v).requires_grad_(k not in BUFFERS) for k, v in inputs.items()}
        outs = forward(leaves)
        upstream = {"d_" + k: g.normal(tuple(v.shape)) for k, v in outs.items() if k not in NO_GRAD_OUTPUTS}
        loss = sum((outs[k[2:]] * t64(u)).sum() for k, u in upstream.items())
        loss.backward()
        grads = {"d_" + k: t.grad.numpy().copy() for k, t in leaves.items() if k not in BUFFERS}
        bwd_inputs = {**inputs, **upstream}
        bwd_entries.append(entry(name, layer, formula, bwd_inputs, grads, consts, layout,
                                 UPSTREAM_NOTE if note is None else note + "; " + UPSTREAM_NOTE, storage))
        bwd_files[name] = {**bwd_inputs, **grads}
    return (fwd_entries, fwd_files), (bwd_entries, bwd_files)


def make_pre_post_ln():
    """The seeds' check [d] (seeds/000, listing (b)): 48 residual blocks of width 64, batch 16,
    torch.manual_seed(0), PyTorch's default initialization of the modules in the listing's order
    (LayerNorms, Linears, head; then the input), the same weights for both placements; computed
    here in float64. -> (entry, files)"""
    depth, d, batch, eps = 48, 64, 16, 1e-5
    torch.manual_seed(0)
    _ = [torch.nn.LayerNorm(d) for _ in range(depth)]  # draws nothing; kept for the listing's order
    lins = [torch.nn.Linear(d, d) for _ in range(depth)]
    head = torch.nn.Linear(d, d)
    x = torch.randn(batch, d)
    files = {"x": x.double().numpy().copy(),
             "lin_weight": torch.stack([l.weight.detach() for l in lins]).double().numpy().copy(),
             "lin_bias": torch.stack([l.bias.detach() for l in lins]).double().numpy().copy(),
             "head_weight": head.weight.detach().double().numpy().copy(),
             "head_bias": head.bias.detach().double().numpy().copy()}
    for pre in (True, False):
        W = [t64(w).requires_grad_() for w in files["lin_weight"]]
        B = [t64(b) for b in files["lin_bias"]]
        h = t64(files["x"])
        ln = lambda v: F.layer_norm(v, (d,), None, None, eps)
        for w, b in zip(W, B):
            h = h + F.linear(ln(h), w, b) if pre else ln(h + F.linear(h, w, b))
        out = F.linear(h, t64(files["head_weight"]), t64(files["head_bias"]))
        out.pow(2).mean().backward()
        files[("pre" if pre else "post") + "_weight_grad_norms"] = np.array([float(w.grad.norm()) for w in W])
    ratio = lambda k: files[k][-1] / files[k][0]
    e = {"name": "pre_post_ln", "layer": "LayerNorm (seed check [d])",
         "formula": "48 blocks, d = 64, batch 16: Pre-LN h = h + Linear(LN(h)); Post-LN h = LN(h + Linear(h)); out = head(h); "
                    "loss = mean(out^2); LN weight 1, bias 0, eps 1e-5; Linear y = h @ W^T + b",
         "inputs": shapes({k: files[k] for k in ("x", "lin_weight", "lin_bias", "head_weight", "head_bias")}),
         "outputs": shapes({k: files[k] for k in ("pre_weight_grad_norms", "post_weight_grad_norms")}),
         "consts": {"depth": depth, "d": d, "batch": batch, "eps": eps}, "layout": {},
         "note": "ratio of the last to the first block's Linear weight-gradient norm: Pre-LN %.4f, Post-LN %.4f "
                 "(the seed reports 0.40 and 2.35)" % (ratio("pre_weight_grad_norms"), ratio("post_weight_grad_norms"))}
    return e, files


def write(out_dir):
    (fwd, fwd_files), (bwd, bwd_files) = make_forward_and_backward()
    pre_post, pre_post_files = make_pre_post_ln()
    bwd.append(pre_post)
    bwd_files["pre_post_ln"] = pre_post_files
    version = "PyTorch %s, float64" % torch.__version__
    for sub, entries, files, generator in (("", fwd, fwd_files, version), ("backward", bwd, bwd_files, version + ", autograd")):
        root = os.path.join(out_dir, sub)
        os.makedirs(root, exist_ok=True)
        with open(os.path.join(root, "cases.json"), "w") as f:
            json.dump({"generator": generator + " (tests/golden/make_golden.py)", "cases": entries}, f, indent=1)
            f.write("\n")
        for case, arrays in files.items():
            folder = os.path.join(root, case)
            if os.path.isdir(folder):
                shutil.rmtree(folder)
            os.makedirs(folder)
            for k, v in arrays.items():
                a = np.ascontiguousarray(v, dtype="<f8")
                assert np.all(np.isfinite(a)), (case, k)
                np.save(os.path.join(folder, k + ".npy"), a, allow_pickle=False)


def compare(committed, fresh):
    """Lists the differences between two golden folders: files present in one only, shapes, inputs
    not bit-identical, computed values beyond TOLERANCE. -> list of strings"""
    problems = []

    def files(root):
        found = set()
        for d, _, names in os.walk(root):
            for n in names:
                found.add(os.path.relpath(os.path.join(d, n), root))
        return found

    a, b = files(committed), files(fresh)
    data = lambda s: {f for f in s if f.endswith(".npy") or f.endswith("cases.json")}
    for f in sorted(data(a) - data(b)):
        problems.append(f"{f}: committed, not made by the script")
    for f in sorted(data(b) - data(a)):
        problems.append(f"{f}: made by the script, not committed")
    computed = set()
    for sub in ("", "backward"):
        with open(os.path.join(fresh, sub, "cases.json")) as f:
            for c in json.load(f)["cases"]:
                computed.update(os.path.join(sub, c["name"], o + ".npy") for o in c["outputs"])
    for f in sorted(data(a) & data(b)):
        if f.endswith(".json"):
            ja, jb = (json.load(open(os.path.join(r, f))) for r in (committed, fresh))
            ja.pop("generator", None), jb.pop("generator", None)
            if ja != jb:
                problems.append(f"{f}: differs")
            continue
        x, y = np.load(os.path.join(committed, f)), np.load(os.path.join(fresh, f))
        if x.shape != y.shape:
            problems.append(f"{f}: shape {x.shape} committed, {y.shape} made")
        elif f not in computed:
            if not np.array_equal(x, y):
                problems.append(f"{f}: an input, not bit for bit the committed one")
        else:
            err = np.max(np.abs(x - y) / np.maximum(1.0, np.abs(x)), initial=0.0)
            if not err <= TOLERANCE:
                problems.append(f"{f}: {err:.3g} from the committed values (tolerance {TOLERANCE:g})")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Without options: rewrites the golden files beside this script.")
    ap.add_argument("--out", default=HERE, help="folder to write (default: %(default)s)")
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temporary folder and compare with the files in --out; exit 1 on any difference")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.check:
        if not os.path.isfile(os.path.join(args.out, "cases.json")):
            sys.exit(f"make_golden.py: no golden files in {args.out} to check")
        with tempfile.TemporaryDirectory() as tmp:
            write(tmp)
            problems = compare(args.out, tmp)
        for p in problems:
            print("make_golden.py: " + p, file=sys.stderr)
        if problems:
            sys.exit(f"make_golden.py: {len(problems)} difference(s) from {args.out}")
        print(f"make_golden.py: {args.out} reproduced (inputs bit for bit, outputs within {TOLERANCE:g})")
        return
    write(args.out)
    n = sum(1 for _ in CASES)
    print(f"make_golden.py: {n} forward cases, {n} backward cases and pre_post_ln written to {args.out}")


if __name__ == "__main__":
    main()
