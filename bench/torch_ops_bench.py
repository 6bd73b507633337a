#!/usr/bin/env python3
"""The PyTorch operators (python/normgen/torch.py) against PyTorch's own, from Python.

    PYTHONPATH=python /usr/bin/python3 bench/torch_ops_bench.py [--ops build/python] [--quick] [--json OUT.json]

For a few grid shapes: forward (the raw operator torch.ops.normgen.<layer> vs F.layer_norm,
F.group_norm, F.batch_norm, the eager RMSNorm) and forward + backward (the normgen module through
autograd vs torch.nn's module or the eager composition), in GB/s of the case's floor traffic (x read
once, y written once, plus parameters; forward + backward: that plus d_y read and d_x written), and
the binding's cost: the operator's time against run_kernel's alone on the same tensors (the C++
API; `_kernel_seconds_<library>`), including one-token rows. Medians of torch.utils.benchmark
(blocked_autorange); threads = 2 unless --threads. Every normgen result is checked against PyTorch
before it is timed. Then strided inputs: a head sliced out of a fused QKV projection (passed to the
MLIR kernel with its strides) and a transposed input (copied to a contiguous temporary first), each
against the same call on a contiguous tensor. The CPU is named in the output.
"""

import argparse
import json
import os
import platform
import sys

import torch
import torch.nn.functional as F
from torch.utils import benchmark

import normgen.torch as ngt


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def median_seconds(fn, min_run_time):
    t = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return t.blocked_autorange(min_run_time=min_run_time).median


def rms_eager(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def cases(quick):
    """(name, layer, make(), torch forward, torch module or None, floor bytes of the forward)"""
    out = []
    shapes = [(1, 4096), (4096, 4096), (16384, 768)] if not quick else [(1, 4096), (2048, 4096)]
    for rows, d in shapes:
        out.append(("layer_norm %dx%d" % (rows, d), "layer_norm", (rows, d)))
        out.append(("rms_norm %dx%d" % (rows, d), "rms_norm", (rows, d)))
    out.append(("group_norm_nchw 8x320x64x64" if not quick else "group_norm_nchw 2x320x32x32", "group_norm_nchw",
                (8, 320, 64, 64) if not quick else (2, 320, 32, 32)))
    out.append(("batch_norm_train 32x64x56x56" if not quick else "batch_norm_train 8x64x28x28", "batch_norm_train",
                (32, 64, 56, 56) if not quick else (8, 64, 28, 28)))
    return out


def setup(layer, shape, lib):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g) + 3
    if layer in ("layer_norm", "rms_norm"):
        d = shape[-1]
        w, b = torch.rand(d, generator=g) + 0.5, torch.randn(d, generator=g)
        if layer == "layer_norm":
            ours = lambda: torch.ops.normgen.layer_norm(x, w, b)
            theirs = lambda: F.layer_norm(x, (d,), w, b, 1e-5)
            tensors = [x, w, b]
            mod, ref = lib.layer_norm(d), torch.nn.LayerNorm(d)
        else:
            ours = lambda: torch.ops.normgen.rms_norm(x, w)
            theirs = lambda: rms_eager(x, w)
            tensors = [x, w]
            mod, ref = lib.rms_norm(d), None
    elif layer == "group_norm_nchw":
        c = shape[1]
        w, b = torch.rand(c, generator=g) + 0.5, torch.randn(c, generator=g)
        ours = lambda: torch.ops.normgen.group_norm_nchw(x, w, b)
        theirs = lambda: F.group_norm(x, 32, w, b, 1e-5)
        tensors = [x, w, b]
        mod, ref = lib.group_norm_nchw(c=c), torch.nn.GroupNorm(32, c)
    else:
        c = shape[1]
        w, b = torch.rand(c, generator=g) + 0.5, torch.randn(c, generator=g)
        rm, rv = torch.zeros(c), torch.ones(c)
        ours = lambda: torch.ops.normgen.batch_norm_train(x, rm, rv, w, b)
        theirs = lambda: F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)
        tensors = [x, rm, rv, w, b]
        mod, ref = lib.batch_norm_train(c), torch.nn.BatchNorm2d(c)
    return x, ours, theirs, tensors, mod, ref


def strided_cases(quick, min_time):
    """Strided inputs (python/normgen_torch_ops.cpp): a slice with a contiguous innermost axis goes
    to the MLIR kernel with its strides; a transpose is copied into a contiguous temporary first.
    The same call on the strided view and on a contiguous tensor of the same values (the tuned
    kernel), beside PyTorch on the strided view; GB/s of the floor traffic (x read, y written).
    -> rows"""
    b, t, heads, dh = (1, 512, 32, 128) if quick else (4, 2048, 32, 128)
    rows, d = (2048, 1024) if quick else (8192, 4096)
    g = torch.Generator().manual_seed(1)
    qkv = torch.randn(b, t, 3 * heads * dh, generator=g) + 3
    q = qkv.view(b, t, 3, heads, dh)[:, :, 0]
    w = torch.rand(dh, generator=g) + 0.5
    xt = torch.randn(d, rows, generator=g) + 3
    lw, lb = torch.rand(d, generator=g) + 0.5, torch.randn(d, generator=g)
    cases = [
        ("qk_norm: q sliced from a fused QKV [%d, %d, %d]" % (b, t, 3 * heads * dh), q,
         lambda x: torch.ops.normgen.qk_norm(x, w)[0], lambda x: rms_eager(x, w)),
        ("layer_norm: a transposed [%d, %d]" % (rows, d), xt.t(),
         lambda x: torch.ops.normgen.layer_norm(x, lw, lb)[0], lambda x: F.layer_norm(x, (d,), lw, lb, 1e-5)),
    ]
    print()
    print("Strided inputs (a slice: the MLIR kernel with its strides; a transpose: copied to a contiguous temporary):")
    print("| case | strided GB/s | contiguous GB/s | strided / contiguous time | torch on the strided view GB/s |")
    print("|---|---:|---:|---:|---:|")
    out = []
    for name, x, ours, theirs in cases:
        dense = x.contiguous()
        torch.testing.assert_close(ours(x), theirs(x), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(ours(x), ours(dense), rtol=1e-5, atol=1e-5)
        floor = 2 * x.numel() * x.element_size()
        ts, tc, tt = (median_seconds(f, min_time) for f in (lambda: ours(x), lambda: ours(dense), lambda: theirs(x)))
        row = dict(case=name, strided_gbps=floor / ts / 1e9, contiguous_gbps=floor / tc / 1e9, torch_strided_gbps=floor / tt / 1e9)
        out.append(row)
        print(f"| {name} | {row['strided_gbps']:.2f} | {row['contiguous_gbps']:.2f} | {ts / tc:.2f}x | {row['torch_strided_gbps']:.2f} |", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default=os.environ.get("NORMGEN_TORCH_OPS", "build/python"), help="the operator library (folder or .so)")
    ap.add_argument("--quick", action="store_true", help="small shapes, short timings (CI)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the results as JSON here")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    os.environ.setdefault("HL_NUM_THREADS", str(a.threads))
    lib = ngt.load(a.ops)
    min_time = 0.05 if a.quick else 0.3
    print(f"# normgen PyTorch operators vs PyTorch {torch.__version__}: {cpu_name()}, {a.threads} threads")
    print("| case | fwd normgen GB/s | fwd torch GB/s | ratio | fwd+bwd normgen GB/s | fwd+bwd torch GB/s | ratio | op us | run_kernel us | binding us |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    results = []
    for name, layer, shape in cases(a.quick):
        x, ours, theirs, tensors, mod, ref = setup(layer, shape, lib)
        if layer != "batch_norm_train":  # the running statistics move on every call
            torch.testing.assert_close(ours()[0], theirs(), rtol=1e-4, atol=1e-4)
        elem = x.element_size()
        fwd_bytes = 2 * x.numel() * elem
        t_ours, t_theirs = median_seconds(ours, min_time), median_seconds(theirs, min_time)
        t_kernel = lib.kernel_seconds(layer, tensors, False, 20 if x.numel() > 1 << 20 else 2000)
        # Forward + backward: upstream gradient of ones-like random, d_x and the parameter grads.
        dy = torch.randn_like(x)
        xs = x.clone().requires_grad_()

        def step(m):
            def f():
                m.zero_grad(set_to_none=True)
                xs.grad = None
                y = m(xs)
                (y if isinstance(y, torch.Tensor) else y[0]).backward(dy)
            return f

        if ref is None:
            w = torch.ones(shape[-1], requires_grad=True)

            def eager():
                xs.grad = None
                w.grad = None
                rms_eager(xs, w).backward(dy)
            theirs_step = eager
        else:
            theirs_step = step(ref)
        fb_bytes = 4 * x.numel() * elem
        t_fb_ours, t_fb_theirs = median_seconds(step(mod), min_time), median_seconds(theirs_step, min_time)
        row = dict(case=name, fwd_normgen_gbps=fwd_bytes / t_ours / 1e9, fwd_torch_gbps=fwd_bytes / t_theirs / 1e9,
                   fb_normgen_gbps=fb_bytes / t_fb_ours / 1e9, fb_torch_gbps=fb_bytes / t_fb_theirs / 1e9,
                   op_us=t_ours * 1e6, kernel_us=t_kernel * 1e6)
        results.append(row)
        print(f"| {name} | {row['fwd_normgen_gbps']:.2f} | {row['fwd_torch_gbps']:.2f} | {t_theirs / t_ours:.2f}x "
              f"| {row['fb_normgen_gbps']:.2f} | {row['fb_torch_gbps']:.2f} | {t_fb_theirs / t_fb_ours:.2f}x "
              f"| {t_ours * 1e6:.1f} | {t_kernel * 1e6:.1f} | {(t_ours - t_kernel) * 1e6:.1f} |", flush=True)
    strided = strided_cases(a.quick, min_time)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(cpu=cpu_name(), threads=a.threads, torch=torch.__version__, results=results, strided=strided), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
