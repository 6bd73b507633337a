#!/usr/bin/env python3
"""Fit the rational tanh of the Halide lowering (codegen/halide/lower.cpp, tanh_f32).

tanh(x) ~= x P(t) / Q(t), t = x^2, x clamped to [-C, C]; P of degree M and Q of degree N in t,
Q(0) = 1. The fit minimizes the relative error of tanh(x) / x on Chebyshev nodes of [0, C] by
linearized least squares (P - g Q, divided by g times the previous Q) with Lawson's reweighting,
which drives it towards the minimax fit. It prints the error in exact arithmetic, the
coefficients as f32 literals (highest degree first, the order lower.cpp evaluates them in) and the
worst error of a float32 evaluation with FMAs (the kernel evaluates with separate multiplies and
adds; tests/halide/vector_math_test.cpp measures that one against libm).

usage: scripts/fit_tanh.py [M N C]     (default: 6 3 9.0; about 30 s)
Needs mpmath (python3-mpmath).
"""
import math
import struct
import sys

import mpmath as mp


def f32(v):
    return struct.unpack("f", struct.pack("f", float(v)))[0]


def horner(coeffs, t):  # coeffs lowest degree first
    r = mp.mpf(0)
    for c in reversed(coeffs):
        r = r * t + c
    return r


def fit(m, n, c, nodes=600, iterations=60):
    xs = [mp.mpf(c) * (1 - mp.cos(mp.pi * (i + 0.5) / nodes)) / 2 for i in range(nodes)]
    xs = [x for x in xs if x > 1e-6]
    ts = [x * x for x in xs]
    gs = [mp.tanh(x) / x for x in xs]
    weights = [mp.mpf(1)] * len(xs)
    q_prev = [mp.mpf(1)] * len(xs)
    for _ in range(iterations):
        rows, rhs = [], []
        for t, g, q, w in zip(ts, gs, q_prev, weights):
            s = mp.sqrt(w) / (g * q)
            rows.append([s * t**j for j in range(m + 1)] + [-s * g * t**j for j in range(1, n + 1)])
            rhs.append(s * g)
        sol = mp.qr_solve(mp.matrix(rows), mp.matrix(rhs))[0]
        p = [sol[j] for j in range(m + 1)]
        q = [mp.mpf(1)] + [sol[m + j] for j in range(1, n + 1)]
        q_prev = [horner(q, t) for t in ts]
        errs = [abs(horner(p, t) / horner(q, t) / g - 1) for t, g in zip(ts, gs)]
        worst = max(errs)
        weights = [w * e / worst for w, e in zip(weights, errs)]
        total = sum(weights)
        weights = [w / total * len(weights) for w in weights]
    return p, q, worst


def main():
    m, n, c = (int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])) if len(sys.argv) == 4 else (6, 3, 9.0)
    mp.mp.dps = 40
    p, q, worst = fit(m, n, c)
    print(f"degrees {m}/{n}, clamp {c}: max relative error in exact arithmetic {mp.nstr(worst, 4)} "
          f"({float(worst) * 2**23:.3f} x 2^-23)")
    pf, qf = [f32(v) for v in p], [f32(v) for v in q]
    print("P (highest first):", ", ".join(f"{v:.9e}f" for v in reversed(pf)))
    print("Q (highest first):", ", ".join(f"{v:.9e}f" for v in reversed(qf)))

    def tanh32(x):
        xc = min(max(x, -c), c)
        t = f32(xc * xc)
        num, den = pf[-1], qf[-1]
        for k in reversed(pf[:-1]):
            num = f32(num * t + k)
        for k in reversed(qf[:-1]):
            den = f32(den * t + k)
        return f32(f32(xc * num) / den)

    worst32, at = 0.0, 0.0
    for x in [f32(i * 2e-4) for i in range(1, 60000)] + [f32(10.0**-k) for k in range(1, 30)]:
        e = abs(tanh32(x) - math.tanh(x)) / math.tanh(x) * 2**23
        if e > worst32:
            worst32, at = e, x
    print(f"float32 evaluation (FMA): worst {worst32:.3f} x 2^-23 relative, at x = {at}")


if __name__ == "__main__":
    main()
