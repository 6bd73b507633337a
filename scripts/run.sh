#!/usr/bin/env bash
# The README's run command: install what is missing, build, then run the main job on the built-in
# catalog (dsl/catalog/*.norm): check every declaration, evaluate each with the float64 reference
# on random inputs, and print the table of what each layer is.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
echo
echo "== normgen check dsl/catalog/*.norm"
build/bin/normgen check dsl/catalog/*.norm && echo "all $(ls dsl/catalog/*.norm | wc -l) declarations are valid"
echo
echo "== normgen catalog dsl/catalog/*.norm"
build/bin/normgen catalog dsl/catalog/*.norm
