#!/usr/bin/env python3
"""The GPU pack's PyTorch side: torch eager and torch.compile on the pack's cases, then the report.

  torch_bench.py time CASES.json OUT.json [--budget-s S] [--reps N]
      For each case of `normgen-cuda cases` (layer, storage type, sizes, bytes): the layer written
      as PyTorch users write it (F.layer_norm, F.rms_norm, F.group_norm, F.batch_norm; the Llama /
      Gemma RMSNorm, fused add + RMSNorm and DyT as their formulas), eager and torch.compile'd,
      forward, or a backward case's backward alone (autograd.grad of a recorded forward); CUDA
      events, the median of N timings. torch.compile is skipped (and says so) once S seconds have
      passed, so the pack's run stays inside its time.
  torch_bench.py report NORMGEN.json TORCH.json VERIFY.json OUTDIR
      Merges the runner's timings, torch's and the verification into OUTDIR/bench.json (Google
      Benchmark rows as bench/normgen_bench writes them: `normgen report` reads it) and
      OUTDIR/report.md (the README's GPU table, the issue's targets met / not met).
  torch_bench.py check
      Imports and builds every case's callables on the CPU at a tiny size (CI's dry run).
"""
import json
import math
import os
import statistics
import sys
import time


def _torch():
    import torch
    import torch.nn.functional as F
    return torch, F


# ---- the layers, as PyTorch writes them ---------------------------------------------------------
# Module-level functions (one code object each, no captured shapes): torch.compile compiles each
# once per storage type (dynamic=True), not once per case.

def _rms_norm(x, w, eps):
    torch, F = _torch()
    if hasattr(F, "rms_norm"):  # torch >= 2.4; older ones (the CPU check here) get the formula
        return F.rms_norm(x, x.shape[-1:], w, eps)
    return (x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).to(x.dtype)) * w


def f_layer_norm(x, w, b):
    return _torch()[1].layer_norm(x, x.shape[-1:], w, b, 1e-5)


def f_rms_norm(x, w):
    return _rms_norm(x, w, 1e-6)


def f_rms_norm_llama(x, w):  # HF Llama: normalize in f32, round to x's type, then the weight
    torch = _torch()[0]
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def f_rms_norm_gemma(x, w):  # Gemma: (1 + weight), in f32
    torch = _torch()[0]
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + w.float())).to(x.dtype)


def f_fused_add_rms_norm(x, r, w):
    h = x + r
    return h, _rms_norm(h, w, 1e-6)


def f_dyt(x, a, w, b):
    return w * _torch()[0].tanh(a * x) + b


def f_group_norm(x, w, b):
    return _torch()[1].group_norm(x, 32, w, b, 1e-5)


def f_batch_norm_train(x, rm, rv, w, b):
    return _torch()[1].batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)


def f_batch_norm_eval(x, rm, rv, w, b):
    return _torch()[1].batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5)


def make_case(case, device, dtype_name):
    """(fn, inputs, differentiable): fn(*inputs) -> the output tensor(s) in the case's storage type;
    differentiable[i]: whether a backward case takes the gradient of inputs[i]."""
    torch, _ = _torch()
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype_name]
    s = case["sizes"]
    layer = case["forward_layer"]
    g = torch.Generator(device=device).manual_seed(0)

    def rnd(*shape, mean=0.0, dtype=dt):
        return (torch.randn(*shape, generator=g, device=device, dtype=torch.float32) + mean).to(dtype)

    if layer in ("layer_norm", "rms_norm", "rms_norm_llama", "rms_norm_gemma", "fused_add_rms_norm", "dyt"):
        rows, d = s["rows"], s["d"]
        x, w, b = rnd(rows, d, mean=1.0), rnd(d), rnd(d)
        if layer == "layer_norm":
            return f_layer_norm, [x, w, b], [True, True, True]
        if layer == "fused_add_rms_norm":
            return f_fused_add_rms_norm, [x, rnd(rows, d), w], [True, True, True]
        if layer == "dyt":
            return f_dyt, [x, torch.full((), 0.5, device=device, dtype=dt), w, b], [True, True, True, True]
        return globals()["f_" + layer], [x, w], [True, True]
    if layer in ("group_norm_nchw", "group_norm_nhwc"):
        if s["g"] != 32:
            raise ValueError("the torch side takes GroupNorm with 32 groups")
        c = s["g"] * s["cg"]
        x = rnd(s["n"], c, s["h"], s["w"], mean=1.0)
        if layer == "group_norm_nhwc":
            x = x.contiguous(memory_format=torch.channels_last)
        return f_group_norm, [x, rnd(c), rnd(c)], [True, True, True]
    if layer in ("batch_norm_train", "batch_norm_eval"):
        c = s["c"]
        x = rnd(s["n"], c, s["h"], s["w"], mean=1.0)
        rm = torch.zeros(c, device=device, dtype=torch.float32)
        rv = torch.ones(c, device=device, dtype=torch.float32)
        # cuDNN's batch norm keeps its parameters and running statistics in f32 (as the catalog's).
        return globals()["f_" + layer], [x, rm, rv, rnd(c, dtype=torch.float32), rnd(c, dtype=torch.float32)], [True, False, False, True, True]
    raise ValueError("no PyTorch form for layer " + layer)


# ---- timing ----------------------------------------------------------------------------------------------

def time_ms(fn, reps):
    torch, _ = _torch()
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        fn()
    stop.record()
    stop.synchronize()
    one = start.elapsed_time(stop) / 3
    calls = max(3, min(200, int(2.0 / max(one, 1e-4))))
    t = []
    for _ in range(reps):
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()
        t.append(start.elapsed_time(stop) / calls)
    return statistics.median(t)


def timed_call(case, fn, inputs, differentiable):
    """The forward call, or for a backward case the backward alone of a recorded forward."""
    torch, _ = _torch()
    if not case["grad"]:
        return lambda: fn(*inputs)
    leaves = [t.detach().requires_grad_(d) for t, d in zip(inputs, differentiable)]
    out = fn(*leaves)
    outs = list(out) if isinstance(out, tuple) else [out]
    ups = [torch.randn_like(o) for o in outs]
    wrt = [t for t in leaves if t.requires_grad]
    return lambda: torch.autograd.grad(outs, wrt, ups, retain_graph=True)


def cmd_time(cases_path, out_path, budget_s, reps):
    torch, _ = _torch()
    if not torch.cuda.is_available():
        print("torch_bench: no CUDA device: torch.cuda.is_available() is False", file=sys.stderr)
        return 77
    cases = json.load(open(cases_path))["cases"]
    t0 = time.time()
    rows = []
    dev = torch.cuda.get_device_name(0)
    print(f"torch_bench: torch {torch.__version__} on {dev}, {len(cases)} cases, compile budget {budget_s:.0f} s", flush=True)
    compiled = {}
    for case in cases:
        row = {"name": case["name"], "impls": {}}
        fn, inputs, diff = make_case(case, "cuda", case["dtype"])
        for impl in ("torch", "torch_compile"):
            try:
                f = fn
                if impl == "torch_compile":
                    if time.time() - t0 > budget_s:
                        row["impls"][impl] = {"error": "skipped: the run's torch.compile budget was spent"}
                        continue
                    if fn not in compiled:  # one per function: its storage types and shapes are its recompiles
                        compiled[fn] = torch.compile(fn, dynamic=True)
                    f = compiled[fn]
                ms = time_ms(timed_call(case, f, inputs, diff), reps)
                row["impls"][impl] = {"us": ms * 1e3, "GBps": case["bytes"] / (ms * 1e-3) / 1e9}
            except Exception as e:  # one case's failure is a row of the report, not the end of the run
                row["impls"][impl] = {"error": (type(e).__name__ + ": " + str(e)).splitlines()[0][:300]}
            r = row["impls"][impl]
            print(f"{case['name']:48s} {impl:14s} " + (f"{r['us']:10.1f} us {r['GBps']:9.1f} GB/s" if "us" in r else r["error"]), flush=True)
        rows.append(row)
        torch.cuda.empty_cache()
        # After every case: a run cut short by its time limit keeps what it measured.
        json.dump({"torch": torch.__version__, "device": dev, "cases": rows}, open(out_path, "w"), indent=1)
    return 0


def cmd_check():
    """Every case's callables built and run once on the CPU at a tiny size (no GPU needed)."""
    torch, _ = _torch()
    n = 0
    for layer, sizes in [("layer_norm", {"rows": 3, "d": 8}), ("rms_norm", {"rows": 3, "d": 8}), ("rms_norm_llama", {"rows": 3, "d": 8}),
                         ("rms_norm_gemma", {"rows": 3, "d": 8}), ("fused_add_rms_norm", {"rows": 3, "d": 8}), ("dyt", {"rows": 3, "d": 8}),
                         ("group_norm_nchw", {"n": 2, "g": 32, "cg": 2, "h": 3, "w": 3}),
                         ("group_norm_nhwc", {"n": 2, "g": 32, "cg": 2, "h": 3, "w": 3}),
                         ("batch_norm_train", {"n": 2, "c": 4, "h": 3, "w": 3}), ("batch_norm_eval", {"n": 2, "c": 4, "h": 3, "w": 3})]:
        for grad in (False, True):
            if grad and layer == "batch_norm_eval":
                continue
            case = {"forward_layer": layer, "layer": layer + ("_grad" if grad else ""), "grad": grad, "sizes": sizes, "dtype": "f32"}
            fn, inputs, diff = make_case(case, "cpu", "f32")
            timed_call(case, fn, inputs, diff)()
            n += 1
    print(f"torch_bench: {n} cases built and run on the CPU (torch {torch.__version__})")
    return 0


# ---- the report ---------------------------------------------------------------------------------------

def geomean(v):
    v = [x for x in v if x > 0]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


def cmd_report(normgen_path, torch_path, verify_path, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    ng = json.load(open(normgen_path))
    tr = json.load(open(torch_path)) if os.path.exists(torch_path) else {"cases": []}
    vf = json.load(open(verify_path)) if os.path.exists(verify_path) else None
    torch_rows = {r["name"]: r["impls"] for r in tr["cases"]}
    bench_rows = []
    lines = []
    lines.append("# normgen on the GPU: the device pack's report\n")
    lines.append(f"Device: {ng['device']} ({ng['sms']} SMs, L2 {ng['l2_bytes'] >> 20} MiB); torch {tr.get('torch', 'not run')}. "
                 "Generated by the pack's `gpu.sh` (`bench/gpu/torch_bench.py report`).\n")
    lines.append("torch.compile: `torch.compile(fn, dynamic=True)` of the same function, one per layer (compiled "
                 "once per storage type, not per shape).\n")
    lines.append("GB/s count every argument read or written once (the same bytes for every implementation); `copy`: a "
                 "device-to-device copy of the same bytes measured in the same run; medians of CUDA-event timings. "
                 "`normgen`: the faster of the Halide and MLIR CUDA kernels; `vs eager` / `vs compile`: normgen's time "
                 "against torch's.\n")
    if vf:
        ks = vf["kernels"]
        bad = [k for k in ks if not k["pass"]]
        lines.append(f"Verification ({vf['sweep']} sweep, float64 reference): {len(ks) - len(bad)} of {len(ks)} CUDA kernels pass"
                     + ("." if not bad else "; failing: " + ", ".join(k["function"] for k in bad[:20]))
                     + ("" if vf.get("complete", True) else " The run was cut short by its time limit: the other kernels were not checked.") + "\n")
    lines.append("| case | halide-cuda GB/s | mlir-cuda GB/s | torch eager | torch.compile | copy GB/s | normgen % of copy | normgen us | vs eager | vs compile |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    vs_eager, vs_compile, slower, bf16_headline, single_row, wide = [], [], [], [], [], []
    for c in ng["cases"]:
        im = c["impls"]
        t = torch_rows.get(c["name"], {})

        def gb(d, k):
            return d.get(k, {}).get("GBps", 0.0)

        best = max(gb(im, "halide-cuda"), gb(im, "mlir-cuda"))
        us = c["bytes"] / (best * 1e9) * 1e6 if best > 0 else float("nan")
        frac = best / c["copy_GBps"] if c["copy_GBps"] else 0
        e, k = gb(t, "torch"), gb(t, "torch_compile")
        re = best / e if e and best else None
        rc = best / k if k and best else None
        if re:
            vs_eager.append(re)
            if re < 1:
                slower.append(f"{c['name']} ({re:.2f}x)")
        if rc:
            vs_compile.append(rc)
        s = c["sizes"]
        if c["dtype"] == "bf16" and not c["grad"] and c["forward_layer"] in ("layer_norm", "rms_norm") and s.get("d", 0) >= 4096 and s.get("rows", 0) >= 1024:
            bf16_headline.append((c["name"], frac))
        if s.get("rows") == 1 and not c["grad"]:
            single_row.append((c["name"], us))
        if s.get("d", 0) >= 262144:
            wide.append((c["name"], best > 0))

        def cell(v, fmt="{:.1f}"):
            return fmt.format(v) if v else "-"
        lines.append(f"| {c['name']} | {cell(gb(im, 'halide-cuda'))} | {cell(gb(im, 'mlir-cuda'))} | {cell(e)} | {cell(k)} | "
                     f"{c['copy_GBps']:.0f} | {100 * frac:.0f}% | {us:.1f} | {cell(re, '{:.2f}x')} | {cell(rc, '{:.2f}x')} |")
        for impl, d in list(im.items()) + list(t.items()):
            if "GBps" not in d:
                continue
            name = "normgen" if impl == "halide-cuda" else "mlir" if impl == "mlir-cuda" else impl
            ms = d["us"] * 1e-3
            bench_rows.append({"name": f"{c['name']}/{name}/real_time_median", "run_name": f"{c['name']}/{name}/real_time",
                               "run_type": "aggregate", "aggregate_name": "median", "real_time": ms, "time_unit": "ms",
                               "GBps": d["GBps"], "bytes_per_second": d["GBps"] * 1e9, "limit_GBps": c["copy_GBps"],
                               "copy_frac": d["GBps"] / c["copy_GBps"] if c["copy_GBps"] else 0})
    lines.append("\n## Targets\n")

    def verdict(ok, measured):
        return ("met" if ok else "not met") if measured else "not measured"
    if vf:
        lines.append(f"- every CUDA kernel of both backends passes the float64 check: {verdict(not bad and vf.get('complete', True), True)}")
    lines.append("- bf16 LayerNorm and RMSNorm forward, d >= 4096, >= 1024 rows, >= 85 % of copy: "
                 + verdict(all(f >= 0.85 for _, f in bf16_headline), bool(bf16_headline))
                 + (" (" + ", ".join(f"{n} {100 * f:.0f}%" for n, f in bf16_headline) + ")" if bf16_headline else ""))
    lines.append(f"- no case slower than torch eager: {verdict(not slower, bool(vs_eager))}"
                 + (" (slower: " + "; ".join(slower) + ")" if slower else ""))
    lines.append(f"- geo-mean vs torch.compile >= 1: {verdict(geomean(vs_compile) >= 1, bool(vs_compile))} "
                 f"({geomean(vs_compile):.2f}x over {len(vs_compile)} cases; vs eager {geomean(vs_eager):.2f}x)")
    lines.append(f"- widths to 262144 in one call: {verdict(all(ok for _, ok in wide), bool(wide))}")
    lines.append("- single-row calls <= 10 us: " + verdict(all(u <= 10 for _, u in single_row), bool(single_row))
                 + (" (" + ", ".join(f"{n} {u:.1f} us" for n, u in single_row) + ")" if single_row else ""))
    open(os.path.join(out_dir, "report.md"), "w").write("\n".join(lines) + "\n")
    ctx = {"host_name": ng["device"], "device": ng["device"], "torch": tr.get("torch", ""), "grid": "gpu-pack"}
    json.dump({"context": ctx, "benchmarks": bench_rows}, open(os.path.join(out_dir, "bench.json"), "w"), indent=1)
    print("\n".join(lines))
    return 0


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 1
    cmd, rest = argv[1], argv[2:]
    opts = {"--budget-s": 180.0, "--reps": 7}
    pos = []
    i = 0
    while i < len(rest):
        if rest[i] in opts and i + 1 < len(rest):
            opts[rest[i]] = type(opts[rest[i]])(rest[i + 1])
            i += 2
        else:
            pos.append(rest[i])
            i += 1
    if cmd == "time" and len(pos) == 2:
        return cmd_time(pos[0], pos[1], opts["--budget-s"], opts["--reps"])
    if cmd == "report" and len(pos) == 4:
        return cmd_report(*pos)
    if cmd == "check" and not pos:
        return cmd_check()
    print(__doc__, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
