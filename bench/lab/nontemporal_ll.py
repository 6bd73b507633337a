#!/usr/bin/env python3
"""Marks a Halide kernel's unmasked vector stores to one buffer as non-temporal, in LLVM assembly.

Lab use only (bench/lab/): Halide 21 has no directive for streaming stores (stream_stores() came
with halide/Halide#9207), so to measure what they would buy, the lab compiles the production
schedule to LLVM assembly, tags the stores to the output with !nontemporal, raises their alignment
to 64 bytes (true for the lab's shapes: rows of a multiple of 16 floats in 2 MiB aligned buffers;
NOT true in general) and compiles the result with llc.

    nontemporal_ll.py IN.ll OUT.ll BUFFER
"""
import re
import sys


def main():
    src, dst, buf = sys.argv[1], sys.argv[2], sys.argv[3]
    text = open(src).read().split("\n")
    # TBAA type nodes of the buffer: !K = !{!"y$1", ...} or !{!"y$1.width16.base0", ...}
    name_re = re.compile(r'^!(\d+) = !\{!"' + re.escape(buf) + r'(\$\d+)?(\.[^"]*)?"')
    types = {m.group(1) for line in text if (m := name_re.match(line))}
    # Access tags that use them: !T = !{!K, !K, i64 0}
    tag_re = re.compile(r"^!(\d+) = !\{!(\d+), !(\d+), i64 \d+\}")
    tags = {m.group(1) for line in text if (m := tag_re.match(line)) and m.group(2) in types}
    if not tags:
        sys.exit(f"nontemporal_ll.py: no TBAA tag for buffer '{buf}' in {src}")
    ids = [int(m.group(1)) for line in text if (m := re.match(r"^!(\d+) = ", line))]
    nt = max(ids) + 1
    store_re = re.compile(r"^(\s*store <\d+ x (?:float|i16|i32)> .*, align )\d+(, !tbaa !(\d+))$")
    count = 0
    for i, line in enumerate(text):
        m = store_re.match(line)
        if m and m.group(3) in tags:
            text[i] = f"{m.group(1)}64{m.group(2)}, !nontemporal !{nt}"
            count += 1
    if count == 0:
        sys.exit(f"nontemporal_ll.py: no unmasked vector store to '{buf}' in {src}")
    text.append(f"!{nt} = !{{i32 1}}")
    open(dst, "w").write("\n".join(text))
    print(f"nontemporal_ll.py: {count} store(s) to '{buf}' marked non-temporal")


if __name__ == "__main__":
    main()
