#!/usr/bin/env bash
# Rebuilds kernels/cuda with -Xptxas -v and writes perf/gpu/ptxas-report.txt: registers,
# stack frame, spills per kernel and architecture, and each kernel's dynamic shared memory.
# Needs nvcc only (no GPU). Usage: bash perf/gpu/ptxas_report.sh [build-dir]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-/tmp/kattn-ptxas}
GENERATOR=()
command -v ninja > /dev/null && GENERATOR=(-G Ninja)
cmake -S "$ROOT/kernels/cuda" -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release -DKATTN_CUDA_PTXAS_REPORT=ON \
  -DKATTN_CUDA_TESTS=OFF -DKATTN_CUDA_BENCH=OFF > /dev/null
nice cmake --build "$BUILD" --clean-first -j "${JOBS:-2}" > "$BUILD/ptxas-raw.txt" 2>&1
python3 "$ROOT/perf/gpu/ptxas_summary.py" "$BUILD/ptxas-raw.txt" "$(nvcc --version | tail -1)" > "$ROOT/perf/gpu/ptxas-report.txt"
cat "$ROOT/perf/gpu/ptxas-report.txt"
