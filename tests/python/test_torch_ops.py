"""The PyTorch operators (python/normgen_torch_ops.cpp, python/normgen/torch.py) from Python.

Every catalog layer is compared with an eager PyTorch version written from its formula (in float64)
on fresh random inputs with a large mean: the forward in f32, bf16 and f16, the backward (the generated
backward kernel through autograd) in f32 against autograd of the eager version. Then the error
types, the modules and the seeds' check [d] with torch.nn.Linear and the generated LayerNorm.

Run by CTest ("torch operators (pytest)") with NORMGEN_TORCH_OPS set to the operator library.
"""

import zlib
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import normgen.torch as ngt


@pytest.fixture(scope="module")
def lib():
    return ngt.load(os.environ["NORMGEN_TORCH_OPS"])


def rms(x, eps, dims):
    return x * torch.rsqrt((x * x).mean(dim=dims, keepdim=True) + eps)


def group_norm_nhwc(x, w, b, eps):
    return F.group_norm(x.permute(0, 3, 1, 2), 32, w, b, eps).permute(0, 2, 3, 1)


# layer -> (sizes of its axes, eager forward from the formula: dict of tensors -> dict of outputs)
EAGER = {
    "layer_norm": (dict(rows=7, d=33), lambda t, c: {"y": F.layer_norm(t["x"], (t["x"].shape[-1],), t["weight"], t["bias"], c["eps"])}),
    "layer_norm_no_affine": (dict(rows=5, d=64), lambda t, c: {"y": F.layer_norm(t["x"], (t["x"].shape[-1],), None, None, c["eps"])}),
    "layer_norm_weight_only": (dict(rows=5, d=31), lambda t, c: {"y": F.layer_norm(t["x"], (t["x"].shape[-1],), t["weight"], None, c["eps"])}),
    "rms_norm": (dict(rows=6, d=40), lambda t, c: {"y": rms(t["x"], c["eps"], -1) * t["weight"]}),
    "dyt": (dict(rows=4, d=17), lambda t, c: {"y": t["weight"] * torch.tanh(t["alpha"] * t["x"]) + t["bias"]}),
    "fused_add_rms_norm": (
        dict(rows=3, d=48),
        lambda t, c: {"h": t["x"] + t["residual"], "y": rms(t["x"] + t["residual"], c["eps"], -1) * t["weight"]},
    ),
    "qk_norm": (dict(b=2, t=3, heads=4, dh=16), lambda t, c: {"y": rms(t["q"], c["eps"], -1) * t["weight"]}),
    "instance_norm": (dict(n=2, c=3, h=5, w=6), lambda t, c: {"y": F.instance_norm(t["x"], eps=c["eps"])}),
    "group_norm_nchw": (dict(n=2, c=64, h=3, w=5), lambda t, c: {"y": F.group_norm(t["x"], 32, t["weight"], t["bias"], c["eps"])}),
    "group_norm_nhwc": (dict(n=2, h=3, w=4, c=64), lambda t, c: {"y": group_norm_nhwc(t["x"], t["weight"], t["bias"], c["eps"])}),
    "deepnorm": (
        dict(rows=5, d=24),
        lambda t, c: {"y": F.layer_norm(c["alpha"] * t["x"] + t["f"], (t["x"].shape[-1],), t["weight"], t["bias"], c["eps"])},
    ),
    "layer_norm_eps_outside_root": (
        dict(rows=4, d=19),
        lambda t, c: {
            "y": (t["x"] - t["x"].mean(-1, keepdim=True)) / (t["x"].var(-1, unbiased=False, keepdim=True).sqrt() + c["eps"]) * t["weight"]
            + t["bias"]
        },
    ),
    "layer_norm_last_two_axes": (
        dict(n=3, s=4, d=9),
        lambda t, c: {"y": F.layer_norm(t["x"], tuple(t["x"].shape[-2:]), t["weight"], t["bias"], c["eps"])},
    ),
    "poly_norm": (
        dict(rows=4, d=16, k=3, one=1),
        lambda t, c: {
            "y": t["weight"][0] * rms(t["x"] ** 3, c["eps"], -1)
            + t["weight"][1] * rms(t["x"] ** 2, c["eps"], -1)
            + t["weight"][2] * rms(t["x"], c["eps"], -1)
            + t["bias"][0]
        },
    ),
    "rms_norm_gemma": (dict(rows=3, d=32), lambda t, c: {"y": rms(t["x"], c["eps"], -1) * (1 + t["weight"])}),
    "rms_norm_llama": (dict(rows=3, d=32), lambda t, c: {"y": t["weight"] * rms(t["x"], c["eps"], -1)}),
    "sandwich_norm": (
        dict(rows=3, d=20),
        lambda t, c: {
            "h": t["x"] + rms(t["f"], c["eps"], -1) * t["post_weight"],
            "y": rms(t["x"] + rms(t["f"], c["eps"], -1) * t["post_weight"], c["eps"], -1) * t["pre_weight"],
        },
    ),
    "scale_norm": (dict(rows=4, d=25), lambda t, c: {"y": t["g"] * t["x"] / torch.clamp(t["x"].norm(dim=-1, keepdim=True), min=c["eps"])}),
    "weight_norm": (dict(o=6, i=10), lambda t, c: {"w": t["g"][:, None] * t["v"] / t["v"].norm(dim=1, keepdim=True)}),
    "batch_norm_eval": (
        dict(n=3, c=4, h=5, w=2),
        lambda t, c: {"y": F.batch_norm(t["x"], t["running_mean"], t["running_var"], t["weight"], t["bias"], False, 0.0, c["eps"])},
    ),
}


def make_inputs(layer, sizes, dtype, seed):
    """Random inputs with a large mean on the activations (cancellation), positive variances."""
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for t in layer.info["tensors"]:
        shape = [sizes[d] for d in t["dims"]]
        v = torch.randn(shape, generator=g, dtype=torch.float64)
        if t["role"] == "input" and "var" not in t["name"] and "mean" not in t["name"]:
            v = v + 20.0  # a large mean (a bf16 value near 20 keeps 3 significant digits)
        if "var" in t["name"]:
            v = v.abs() + 0.5
        if t["name"] == "alpha":
            v = torch.tensor(0.05, dtype=torch.float64)
        tensors[t["name"]] = v
    # The activations in the kernel's dtype, the parameters and statistics in f32 (as the catalog
    # stores them); the eager version sees the same (rounded) values in float64.
    cast = {}
    for t in layer.info["tensors"]:
        v = tensors[t["name"]]
        follows = t["follows_dtype"] and "running" not in t["name"]
        cast[t["name"]] = v.to(dtype if follows else torch.float32)
    return cast


@pytest.mark.parametrize("name", sorted(EAGER))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_forward_matches_eager(lib, name, dtype):
    layer = lib.layers[name]
    sizes, eager = EAGER[name]
    if dtype != torch.float32 and all(t["role"] == "param" for t in layer.info["tensors"]):
        pytest.skip("parameters only: f32 storage")
    inputs = make_inputs(layer, sizes, dtype, seed=zlib.crc32(name.encode()) % 1000)
    got = layer(*[inputs[n] for n in layer.tensors])
    got = got if isinstance(got, tuple) else (got,)
    want = eager({k: v.double() for k, v in inputs.items()}, layer.info["consts"])
    assert len(got) == len(layer.returned)
    for out_name, y in zip(layer.returned, got):
        assert y.dtype == dtype
        w = want[out_name]
        assert y.shape == w.shape, out_name
        assert torch.isfinite(y).all()
        # f32: the verifier's scale of error; bf16 / f16: one rounding of the output (2^-8 / 2^-11
        # relative) plus the statistics' error on values near 20.
        rtol, atol = (1e-5, 1e-5) if dtype == torch.float32 else (1e-2, 3e-2)
        torch.testing.assert_close(y.double(), w, rtol=rtol, atol=atol, msg=f"{name} {out_name}")


@pytest.mark.parametrize("name", sorted(EAGER))
def test_backward_matches_autograd(lib, name):
    layer = lib.layers[name]
    sizes, eager = EAGER[name]
    inputs = make_inputs(layer, sizes, torch.float32, seed=1 + zlib.crc32(name.encode()) % 1000)
    differentiable = [n for n in layer.tensors if n not in layer.updated and "running" not in n]
    ours = {n: v.clone().requires_grad_(n in differentiable) for n, v in inputs.items()}
    ref = {n: v.double().clone().requires_grad_(n in differentiable) for n, v in inputs.items()}
    got = layer(*[ours[n] for n in layer.tensors])
    got = got if isinstance(got, tuple) else (got,)
    want = eager(ref, layer.info["consts"])
    g = torch.Generator().manual_seed(7)
    upstream = {o: torch.randn(want[o].shape, generator=g, dtype=torch.float64) for o in layer.returned}
    sum(((y.double() * upstream[o]).sum() for o, y in zip(layer.returned, got))).backward()
    sum(((want[o] * upstream[o]).sum() for o in layer.returned)).backward()
    for n in differentiable:
        assert ours[n].grad is not None, f"{name}: no gradient for {n}"
        scale = ref[n].grad.abs().max().item() + 1e-12
        torch.testing.assert_close(ours[n].grad.double(), ref[n].grad, rtol=1e-4, atol=2e-5 * scale, msg=f"{name} d_{n}")


def test_every_catalog_layer_is_covered(lib):
    assert set(lib.layers) == set(EAGER) | {"batch_norm_train"}


def test_batch_norm_train_updates_running_statistics_in_place(lib):
    layer = lib.layers["batch_norm_train"]
    x = torch.randn(4, 3, 5, 6, dtype=torch.float64) * 2 + 7
    w, b = torch.rand(3, dtype=torch.float64) + 0.5, torch.randn(3, dtype=torch.float64)
    rm, rv = torch.randn(3, dtype=torch.float64), torch.rand(3, dtype=torch.float64) + 0.5
    rm32, rv32 = rm.float(), rv.float()
    y = layer(x.float(), rm32, rv32, w.float(), b.float())
    rm_ref, rv_ref = rm.clone(), rv.clone()
    y_ref = F.batch_norm(x, rm_ref, rv_ref, w, b, True, 0.1, 1e-5)
    torch.testing.assert_close(y.double(), y_ref, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(rm32.double(), rm_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rv32.double(), rv_ref, rtol=1e-5, atol=1e-5)
    # Backward through autograd: the running statistics carry no gradient.
    xs = x.float().requires_grad_()
    ws = w.float().requires_grad_()
    out = layer(xs, rm32, rv32, ws, b.float().requires_grad_())
    out.sum().backward()
    assert xs.grad is not None and ws.grad is not None


def test_saved_statistics_on_request(lib):
    x = torch.randn(5, 16) + 3
    out = torch.ops.normgen.layer_norm(x, torch.ones(16), torch.zeros(16), saved=True)
    assert [tuple(t.shape) for t in out] == [(5, 16), (5,), (5,)]
    torch.testing.assert_close(out[1], x.mean(dim=1))
    assert len(torch.ops.normgen.layer_norm(x, torch.ones(16), torch.zeros(16))) == 1


def test_bad_calls_are_refused_by_name(lib):
    op = torch.ops.normgen.layer_norm
    x, w, b = torch.randn(4, 8), torch.ones(8), torch.zeros(8)
    with pytest.raises(RuntimeError, match="'weight'"):
        op(x, torch.ones(9), b)
    with pytest.raises(TypeError, match="'x'"):
        op(x.to(torch.int32), w, b)
    with pytest.raises(TypeError, match="'weight'.*expected"):
        op(x, w.double(), b)
    with pytest.raises(ValueError, match="eps"):
        op(x, w, b, eps=1e-3)
    out = op(x, w, b, eps=1e-5)  # the compiled value is accepted
    assert out[0].shape == x.shape


# ---- strided tensors: the result of the contiguous copy, forward and backward --------------------


def strided_vs_contiguous(layer, bases, make, eager, rtol=1e-5, atol=1e-5):
    """`make(bases)` takes strided views of the leaf tensors `bases` (a slice, a transpose, an
    expand). The layer on those views must give what it gives on their contiguous copies (within
    the f32 bound: a slice goes to the MLIR kernel, which sums in another order than the tuned
    Halide kernel a contiguous call gets), fresh contiguous outputs close to the eager float64
    version, and the gradients of the bases of the contiguous call and of eager autograd."""
    strided = [b.detach().clone().requires_grad_() for b in bases]
    dense = [b.detach().clone().requires_grad_() for b in bases]
    exact = [b.detach().double().requires_grad_() for b in bases]
    views = make(strided)
    assert any(not v.is_contiguous() for v in views)
    as_list = lambda y: list(y) if isinstance(y, (tuple, list)) else [y]
    got = as_list(layer(*views))
    ref = as_list(layer(*[v.contiguous() for v in make(dense)]))
    want = as_list(eager(*make(exact)))
    g = torch.Generator().manual_seed(3)
    up = [torch.randn(y.shape, generator=g, dtype=torch.float64) for y in got]
    for y, r, w in zip(got, ref, want):
        assert y.is_contiguous()
        torch.testing.assert_close(y, r, rtol=1e-5, atol=1e-5, msg="the strided and the contiguous call differ")
        torch.testing.assert_close(y.double(), w.detach(), rtol=rtol, atol=atol)
    for ys, leaves in ((got, strided), (ref, dense), (want, exact)):
        sum((y.double() * u).sum() for y, u in zip(ys, up)).backward()
    for s_, d_, e_ in zip(strided, dense, exact):
        scale = e_.grad.abs().max().item() + 1e-12
        torch.testing.assert_close(s_.grad, d_.grad, rtol=1e-4, atol=2e-5 * scale, msg="the strided and the contiguous call's gradients differ")
        torch.testing.assert_close(s_.grad.double(), e_.grad, rtol=1e-4, atol=2e-5 * scale)
    return got


def test_strided_qkv_slices_through_qk_norm_and_per_head_rms_norm(lib):
    """A fused QKV projection [b, t, 3 * heads * dh] with q and k sliced out as [b, t, heads, dh]
    views (strides not row-major) through QK-Norm; one head as a [rows, dh] column slice through
    RMSNorm (per-head RMSNorm); forward, and the gradient into the fused tensor."""
    b, t, heads, dh = 2, 5, 4, 16
    qkv = torch.randn(b, t, 3 * heads * dh) * 2 + 5
    w = torch.rand(dh) + 0.5
    eager = lambda x, weight: rms(x, 1e-6, -1) * weight
    for part in (0, 1):  # q, then k
        q = qkv.view(b, t, 3, heads, dh)[:, :, part]
        assert q.stride() == (t * 3 * heads * dh, 3 * heads * dh, dh, 1)
        strided_vs_contiguous(lib.functional.qk_norm, [qkv, w], lambda ts: [ts[0].view(b, t, 3, heads, dh)[:, :, part], ts[1]], eager)
    # Per-head RMSNorm: head 2 of k as a [b * t, dh] view, row stride 3 * heads * dh.
    head = lambda ts: [ts[0].view(b * t, 3 * heads, dh)[:, heads + 2], ts[1]]
    assert head([qkv, w])[0].stride() == (3 * heads * dh, 1)
    strided_vs_contiguous(lib.functional.rms_norm, [qkv, w], head, eager)
    # The bf16 kernel takes the same slices (one bf16 unit apart at most from the contiguous call).
    x16 = qkv.bfloat16().view(b * t, 3 * heads, dh)[:, heads + 2]
    y16, r16 = lib.functional.rms_norm(x16, w), lib.functional.rms_norm(x16.contiguous(), w)
    assert y16.dtype == torch.bfloat16 and y16.is_contiguous()
    torch.testing.assert_close(y16.float(), r16.float(), rtol=2 ** -7, atol=2 ** -7)


def test_transposed_input_through_layer_norm(lib):
    rows, d = 6, 40
    xt = torch.randn(d, rows) * 3 + 100  # stored transposed, a large mean
    assert xt.t().stride() == (1, rows)
    w, bias = torch.rand(d) + 0.5, torch.randn(d)
    eager = lambda x, weight, b: F.layer_norm(x, (d,), weight, b, 1e-5)
    strided_vs_contiguous(lib.functional.layer_norm, [xt, w, bias], lambda ts: [ts[0].t(), ts[1], ts[2]], eager, rtol=1e-4, atol=1e-4)


def test_expanded_parameter_and_strided_running_statistics(lib):
    x = torch.randn(5, 24) + 2
    scale = torch.tensor([1.5])
    eager = lambda xx, weight: rms(xx, 1e-6, -1) * weight
    strided_vs_contiguous(lib.functional.rms_norm, [x, scale], lambda ts: [ts[0], ts[1].expand(24)], eager)  # weight stride 0
    # BatchNorm's running statistics as every other element of a buffer: updated in place there.
    layer = lib.functional.batch_norm_train
    xb = torch.randn(4, 3, 5, 6) * 2 + 7
    buf_m, buf_v = torch.zeros(6), torch.ones(6)
    rm, rv = buf_m[::2], buf_v[::2]
    assert not rm.is_contiguous()
    y = layer(xb, rm, rv, torch.ones(3), torch.zeros(3))
    rm_ref, rv_ref = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    y_ref = F.batch_norm(xb.double(), rm_ref, rv_ref, None, None, True, 0.1, 1e-5)
    torch.testing.assert_close(y.double(), y_ref, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(buf_m[::2].double(), rm_ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(buf_v[::2].double(), rv_ref, rtol=1e-5, atol=1e-6)
    assert float(buf_m[1::2].abs().max()) == 0.0 and float((buf_v[1::2] - 1).abs().max()) == 0.0  # the others untouched


def test_modules(lib):
    norm = lib.rms_norm(64)
    assert isinstance(norm, torch.nn.Module)
    assert [n for n, _ in norm.named_parameters()] == ["weight"]
    torch.testing.assert_close(norm.weight.detach(), torch.ones(64))
    x = torch.randn(3, 64, requires_grad=True)
    y = norm(x)
    y.pow(2).sum().backward()
    assert x.grad is not None and norm.weight.grad is not None
    gn = lib.group_norm_nchw(c=64)
    assert gn.weight.shape == (64,) and float(gn.bias.abs().sum()) == 0.0
    dyt = lib.dyt(32)
    assert float(dyt.alpha) == 0.5
    bn = lib.batch_norm_train(8)
    assert sorted(n for n, _ in bn.named_buffers()) == ["running_mean", "running_var"]
    bn(torch.randn(2, 8, 3, 3) + 1)
    assert float(bn.running_mean.abs().sum()) > 0  # moved by momentum, in place
    with pytest.raises(TypeError, match="size"):
        lib.rms_norm()


def test_seed_check_d_pre_post_ln(lib):
    """The seeds' check [d]: 48 residual blocks of width 64, batch 16, torch.nn.Linear and the
    generated LayerNorm (forward and backward kernels); PyTorch gives last/first weight-gradient
    norm ratios 0.4015 (Pre-LN) and 2.3457 (Post-LN); every block within 1e-3 relative."""
    d = os.path.join(os.environ["NORMGEN_GOLDEN_DIR"], "backward", "pre_post_ln")
    assert os.path.isdir(d), f"no golden folder {d} (tests/golden/make_golden.py makes it)"
    load = lambda n: torch.from_numpy(np.load(os.path.join(d, n + ".npy"))).float()
    x, W, B, HW, HB = (load(n) for n in ("x", "lin_weight", "lin_bias", "head_weight", "head_bias"))
    ln = lib.functional.layer_norm
    n = x.shape[1]
    one, zero = torch.ones(n), torch.zeros(n)
    for pre, name in ((True, "pre"), (False, "post")):
        blocks = []
        for k in range(W.shape[0]):
            lin = torch.nn.Linear(n, n)
            with torch.no_grad():
                lin.weight.copy_(W[k])
                lin.bias.copy_(B[k])
            blocks.append(lin)
        head = torch.nn.Linear(n, n)
        with torch.no_grad():
            head.weight.copy_(HW)
            head.bias.copy_(HB)
        h = x.clone().requires_grad_(False)
        for lin in blocks:
            h = h + lin(ln(h, one, zero)) if pre else ln(h + lin(h), one, zero)
        out = head(h)
        (out * out).mean().backward()
        norms = np.array([float(lin.weight.grad.double().norm()) for lin in blocks])
        want = np.load(os.path.join(d, f"{name}_weight_grad_norms.npy"))
        rel = np.abs(norms - want) / want
        assert rel.max() < 1e-3, f"{name}: worst block {rel.max():.2g} relative"
        ratio = norms[-1] / norms[0]
        assert abs(ratio - want[-1] / want[0]) < 1e-3 * ratio
        assert round(ratio, 4) == {"pre": 0.4015, "post": 2.3457}[name]
