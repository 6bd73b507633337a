#!/usr/bin/env bash
# The GPU pack: scripts/gpu-pack.sh [--build-dir DIR] [--out DIR]
#   Builds (if needed) and gathers into one folder (default build/gpu-pack, at most 60 MiB) all a
#   GPU machine needs to verify and time normgen's CUDA kernels, with nothing to compile there:
#     bin/normgen-cuda      the runner (Halide's CUDA kernels linked in, the float64 reference,
#                           libstdc++ static; libcuda loaded at run time)
#     manifest_cuda.json    the CUDA kernels of both backends, every catalog layer, forward and
#                           backward, f32 / bf16 / f16
#     kernels/*.cubin       the mlir-cuda kernels (sm_90)
#     torch_bench.py        torch eager and torch.compile on the same cases, and the report
#     gpu.sh                the one call to make there: gpu.sh OUTDIR (scripts/gpu.sh)
#   Copy the folder to the GPU machine and run `./gpu.sh results/`; `gpu.sh --dry-run` checks the
#   pack on a machine without a GPU (CI does).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-pack.sh: unknown option '$1' (--help)" >&2; exit 1 ;;
  esac
done
out="${out:-$build/gpu-pack}"
if [ ! -f "$build/CMakeCache.txt" ]; then scripts/build.sh; fi
cmake_bin=cmake
[ -x .venv/bin/cmake ] && cmake_bin=.venv/bin/cmake
echo "gpu-pack: building normgen-cuda and the CUDA kernels' manifest"
"$cmake_bin" --build "$build" --target normgen-cuda -- -j2 >/dev/null
manifest="$build/generated/manifest_cuda.json"
[ -f "$manifest" ] || { echo "gpu-pack.sh: $manifest is missing (a build with NORMGEN_GPU_KERNELS=ON)" >&2; exit 1; }

# A folder of a pack (or a new one) only: never empty someone else's folder.
if [ -e "$out" ] && [ ! -f "$out/.normgen-gpu-pack" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "gpu-pack.sh: $out exists and is not a GPU pack; give another --out" >&2; exit 1
fi
rm -rf "$out"
mkdir -p "$out/bin" "$out/kernels"
touch "$out/.normgen-gpu-pack"
strip -o "$out/bin/normgen-cuda" "$build/bin/normgen-cuda"
cp "$manifest" "$out/manifest_cuda.json"
# The mlir-cuda kernels' images (the Halide kernels' PTX is inside the runner).
python3 - "$manifest" "$build/generated" "$out" <<'PY'
import json, os, shutil, sys
manifest, src, out = sys.argv[1:4]
n = 0
for k in json.load(open(manifest))["kernels"]:
    if k.get("backend") == "mlir" and k.get("cubin"):
        shutil.copy(os.path.join(src, k["cubin"]), os.path.join(out, k["cubin"]))
        n += 1
print(f"gpu-pack: {n} mlir-cuda cubins")
PY
cp bench/gpu/torch_bench.py "$out/torch_bench.py"
cp scripts/gpu.sh "$out/gpu.sh"
chmod +x "$out/gpu.sh" "$out/torch_bench.py"
size=$(du -sm "$out" | cut -f1)
echo "gpu-pack: $out, ${size} MiB"
if [ "$size" -gt 60 ]; then echo "gpu-pack.sh: the pack is ${size} MiB, over 60 MiB" >&2; exit 1; fi
