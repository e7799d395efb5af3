#!/usr/bin/env bash
# The main job: install what is missing, build, and compute exact attention on a long random
# sequence with the tiled algorithm, checked against the float64 textbook reference.
#   scripts/demo.sh [N] [D]      (defaults: 8192 tokens, head dim 128)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-8192}
d=${2:-128}
bash scripts/install-deps.sh
cmake -S . -B build -DKATTN_ENABLE_TESTS=OFF >/dev/null
cmake --build build -j "$(nproc)" --target kattn-cli
echo "== tiled forward, float32, N=$n, D=$d, 2 query heads sharing 1 KV head, causal =="
./build/bin/kattn run --random 1,"$n","$n",2,1,"$d" --causal --check
