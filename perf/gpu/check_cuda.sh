#!/usr/bin/env bash
# GPU check of kattn's CUDA kernels, for an H200 (or any sm_90 / sm_80 machine).
#   1. configure + build kernels/cuda standalone (Release, ninja, -Xptxas -v report)
#   2. SASS check: HGMMA / UTMALDG in the sm90 objects, no local memory (LDL/STL)
#   3. tests: float64 references on fresh random inputs, outputs poisoned first; the
#      forward test once per kernel family; the build traps sm90 pipeline waits > ~10 s
#      (KATTN_CUDA_TRAP_HANGS), so a deadlock shows as a launch error, not a hang
#   4. timing: bench_cuda (kattn) and sdpa_bench.py (PyTorch SDPA, each backend)
#   5. compute-sanitizer memcheck + racecheck on small shapes (time-boxed)
#   6. report.py: the short table, printed last
# Logs go to $OUT (or perf/gpu/out). Every step has a timeout; the whole script is
# budgeted for under 8 minutes. Usage: bash perf/gpu/check_cuda.sh [--quick]
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/perf/gpu/out}
BUILD=${BUILD:-/tmp/kattn-build-cuda}
QUICK=""
[ "${1:-}" = "--quick" ] && QUICK="--quick"
mkdir -p "$OUT"
START=$(date +%s)
log() { echo "[check_cuda +$(( $(date +%s) - START ))s] $*"; }
left() { echo $(( 470 - ($(date +%s) - START) )); }  # seconds left of the 8-minute budget (10 s margin)
step_timeout() {  # min(wanted, time left)
  local want=$1 l
  l=$(left)
  [ "$l" -lt "$want" ] && want=$l
  [ "$want" -lt 5 ] && want=5
  echo "$want"
}
export PATH=/usr/local/cuda/bin:$PATH

log "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total --format=csv 2>&1 | tee "$OUT/nvidia-smi.txt"
nvcc --version | tail -2

log "configure + build ($BUILD)"
timeout 60 cmake -S "$ROOT/kernels/cuda" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DKATTN_CUDA_PTXAS_REPORT=ON -DKATTN_CUDA_TRAP_HANGS=ON -DKATTN_CUDA_BENCH=ON -DBUILD_TESTING=ON > "$OUT/configure.log" 2>&1 \
  || { log "configure FAILED"; tail -30 "$OUT/configure.log"; }
timeout "$(step_timeout 240)" cmake --build "$BUILD" -j "$(nproc)" > "$OUT/build.log" 2>&1
BUILD_RC=$?
log "build rc=$BUILD_RC"
[ $BUILD_RC -ne 0 ] && tail -40 "$OUT/build.log"
grep -E "Compiling entry|registers|spill|C75" "$OUT/build.log" > "$OUT/ptxas.txt" 2>/dev/null

log "SASS check"
: > "$OUT/sass_summary.txt"
if command -v cuobjdump > /dev/null; then
  for o in "$BUILD"/CMakeFiles/kattn_cuda.dir/src/sm90/fwd_sm90_d*.cu.o "$BUILD"/CMakeFiles/kattn_cuda.dir/src/decode/decode.cu.o; do
    [ -f "$o" ] || continue
    cuobjdump --dump-sass "$o" > "$OUT/$(basename "$o").sass" 2>&1
    s="$OUT/$(basename "$o").sass"
    echo "$(basename "$o"): HGMMA $(grep -c HGMMA "$s") UTMALDG $(grep -c UTMALDG "$s") LDGSTS.128 $(grep -c 'LDGSTS.*128' "$s") LDL $(grep -c 'LDL' "$s") STL $(grep -c 'STL' "$s")" >> "$OUT/sass_summary.txt"
  done
  cat "$OUT/sass_summary.txt"
else
  echo "cuobjdump not found" | tee "$OUT/sass_summary.txt"
fi

run_test() {  # name, timeout, args...: one test executable, its log and exit code
  local name=$1 want=$2 exe="$BUILD/tests/kattn_cuda_test_${1%%_*}"
  shift 2
  log "test $name"
  if [ -x "$exe" ]; then
    timeout "$(step_timeout "$want")" "$exe" "$@" > "$OUT/test_$name.log" 2>&1
    echo $? > "$OUT/test_$name.rc"
    grep -E "FAIL|passed, |SKIP" "$OUT/test_$name.log" | tail -4
  else
    echo "missing" > "$OUT/test_$name.rc"
  fi
}
run_test host 20
run_test decode 90 $QUICK
run_test graphs 60
# One forward family per process: a failure or hang of one leaves the others' results.
for be in sm80 sm90 sm90v2 sm90v1 auto; do run_test "forward_$be" 60 --backend "$be" $QUICK; done

log "bench_cuda"
timeout "$(step_timeout 120)" "$BUILD/kattn_cuda_bench" $QUICK > "$OUT/bench_cuda.log" 2>&1
log "bench_cuda rc=$?"; grep -v '^JSON' "$OUT/bench_cuda.log" | tail -14

log "PyTorch SDPA"
PYTHONUNBUFFERED=1 timeout "$(step_timeout 120)" python3 "$ROOT/perf/gpu/sdpa_bench.py" $QUICK > "$OUT/sdpa.log" 2>&1
log "sdpa rc=$?"

if command -v compute-sanitizer > /dev/null; then
  for spec in "memcheck forward" "memcheck decode" "memcheck graphs" "racecheck forward" "racecheck decode"; do
    set -- $spec
    l=$(left)
    if [ "$l" -lt 25 ]; then echo "timed out: no time left" > "$OUT/sanitizer_${1}_${2}.log"; continue; fi
    log "compute-sanitizer $1 $2 (--quick)"
    args="--quick"; [ "$2" = graphs ] && args=""
    timeout "$(step_timeout 60)" compute-sanitizer --tool "$1" --error-exitcode 99 "$BUILD/tests/kattn_cuda_test_$2" $args \
      > "$OUT/sanitizer_${1}_${2}.log" 2>&1
    rc=$?
    [ $rc -eq 124 ] && echo "timed out" >> "$OUT/sanitizer_${1}_${2}.log"
    echo "rc=$rc" >> "$OUT/sanitizer_${1}_${2}.log"
  done
fi

log "done"
python3 "$ROOT/perf/gpu/report.py" "$OUT"
