#!/usr/bin/env python3
"""Instructions per element of a generated CPU kernel's inner loops, from its final object file.

The objects under build/generated/kernels/ are the ones linked into the kernels (for bf16 on
AVX512-BF16: after the LLVM 22 native-conversion step, so vcvtneps2bf16 shows where Halide's own
object would show the emulated rounding). This machine kind has no hardware counters in its VMs
(`perf stat` cannot count instructions) and valgrind cannot run AVX-512 code, so the count is
static: llvm-objdump's disassembly, each innermost loop (a backward branch that contains no other),
its instructions by kind, and the elements one iteration handles: the loop's step (add $imm, %r)
times the scale of a vector access indexed by %r, over the bytes of one of its 16 lanes (a widening
load reads 2 a lane, a zmm access 4); where no such access is found, 16 per widening, narrowing or
512-bit store. Loops with fewer than three zmm operands (scalar set-up, tails) and
the entry function's loops (argument checks) are left out.

usage: scripts/inner_loops.py KERNEL_OR_OBJECT... [--objdump llvm-objdump-22] [--markdown]
  KERNEL: a kernel function name (rms_norm__bf16__avx512__core), looked up in
  build/generated/kernels/; or a path to a .o file.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys

WIDEN = {"vpmovzxwd", "vcvtph2ps"}
NARROW = {"vcvtneps2bf16", "vcvtps2ph"}
MOVES = {"vmovups", "vmovaps", "vmovdqu64", "vmovdqa64", "vmovntps", "vmovdqu32", "vmovdqa32"}


def disassemble(objdump, path):
    out = subprocess.run([objdump, "-d", "--no-show-raw-insn", path], capture_output=True, text=True, check=True).stdout
    fn, funcs = None, collections.defaultdict(list)
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:", line)
        if m:
            fn = m.group(1)
            continue
        m = re.match(r"^\s+([0-9a-f]+):\s+(\S+)\s*(.*)", line)
        if m and fn:
            funcs[fn].append((int(m.group(1), 16), m.group(2), m.group(3)))
    return funcs


def inner_loops(body):
    loops = []
    for addr, op, arg in body:
        if not op.startswith("j"):
            continue
        m = re.match(r"(?:0x)?([0-9a-f]+)\b", arg)
        if m and int(m.group(1), 16) <= addr:
            start = int(m.group(1), 16)
            loops.append((start, addr, [x for x in body if start <= x[0] <= addr]))
    return [l for l in loops if not any(o is not l and l[0] <= o[0] and o[1] <= l[1] and (o[0], o[1]) != (l[0], l[1]) for o in loops)]


def access_bytes(op, arg):
    """Bytes one instruction reads or writes through its memory operand (16 lanes a vector)."""
    if "{1to" in arg:
        return None  # a broadcast scalar
    if op in WIDEN:
        return 32  # 16 halves
    for reg, n in (("zmm", 64), ("ymm", 32), ("xmm", 16)):
        if "%" + reg in arg:
            return n
    return None


def elements(ins):
    """Elements one iteration handles: from the induction step (add $imm, %r), through a vector
    access indexed by %r, as imm * scale / (bytes of one lane of that access); else estimated."""
    for _, op, arg in reversed(ins):
        m = re.match(r"\$0x([0-9a-f]+),\s*%(\w+)", arg) if op in ("add", "addq") else None
        if not m:
            continue
        step, reg = int(m.group(1), 16), m.group(2)
        for _, op2, arg2 in ins:
            a = re.search(r"\(%\w+,\s*%" + reg + r"(?:,\s*(\d))?\)|\(%" + reg + r"\)", arg2)
            n = access_bytes(op2, arg2) if a else None
            if n:
                scale = int(a.group(1)) if a.group(1) else 1
                return max(1, step * scale * 16 // n)
        break
    widen = sum(op in WIDEN for _, op, _ in ins)
    narrow = sum(op in NARROW for _, op, _ in ins)
    stores = sum(op in MOVES and "zmm" in arg and arg.endswith(")") for _, op, arg in ins)
    return 16 * max(widen, narrow, stores, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kernels", nargs="+")
    ap.add_argument("--objdump", default=shutil.which("llvm-objdump-22") or "llvm-objdump")
    ap.add_argument("--markdown", action="store_true", help="one table row per loop")
    a = ap.parse_args()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "generated", "kernels")
    if a.markdown:
        print("| kernel | loop | instructions | elements | instr/element | by kind |\n|---|---|---:|---:|---:|---|")
    for k in a.kernels:
        path = k if k.endswith(".o") else os.path.join(root, k + ".o")
        if not os.path.exists(path):
            sys.exit(f"inner_loops: {path}: no such object (build the kernels first: scripts/build.sh)")
        name = os.path.basename(path)[:-2]
        for fn, body in disassemble(a.objdump, path).items():
            if fn == name:
                continue  # the entry function: argument checks and the launch, no element loop
            for start, end, ins in inner_loops(body):
                if sum("zmm" in arg for _, _, arg in ins) < 3:
                    continue
                n = elements(ins)
                kinds = " ".join(f"{op} {c}" for op, c in collections.Counter(op for _, op, _ in ins).most_common(8))
                where = f"{fn[len(name):] or '(entry)'} {start:x}"
                if a.markdown:
                    print(f"| {name} | {where} | {len(ins)} | {n} | {len(ins) / n:.2f} | {kinds} |")
                else:
                    print(f"{name} {where}: {len(ins)} instructions for {n} elements = {len(ins) / n:.2f}/element; {kinds}")


if __name__ == "__main__":
    main()
