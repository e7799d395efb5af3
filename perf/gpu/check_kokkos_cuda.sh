#!/usr/bin/env bash
# GPU check of kattn's portable (Kokkos) kernels with Kokkos' CUDA backend, for an H200 (sm_90):
#   1. build Kokkos 4.x for CUDA (Hopper90) + Kokkos Kernels (headers only, no instantiation)
#      + GoogleTest from the sources perf/gpu/stage_deps.sh staged in .gpu-deps/ (the machine
#      has nvcc, CMake and ninja, no Kokkos, no GoogleTest, no network)
#   2. build kattn (library, CLI) against it, install it, build perf/gpu/bench_kokkos_gpu
#   3. time kattn forward (float32, float64; B=1 H=16 N=16384 D=128, non-causal) and split-KV
#      decode (batch 1, 32 query / 8 KV heads, 128K keys), and the device copy bandwidth, while
#      the tests compile on the CPUs
#   4. ctest: the whole suite, device kernels on the GPU against the float64 reference
#   5. PyTorch SDPA on the same shapes (sdpa_fp_bench.py: MATH for float64, every backend that
#      takes float32); it runs on the GPU while steps 1-2 compile on the CPUs (compiles are niced)
#   6. a tile-size sweep of the forward at N = 4096 if time is left (for detail/tuning.hpp)
#   7. report_kokkos.py: $OUT/summary.md, printed last
# Logs go to $OUT (the device tool's output folder) or perf/gpu/out-kokkos. Every step has a
# timeout; the whole script stays under 9.5 minutes (BUDGET seconds).
#
#   bash perf/gpu/check_kokkos_cuda.sh [--quick]        (deps: GPU_DEPS, default <repo>/.gpu-deps)
# With the device tool: run(command="bash perf/gpu/check_kokkos_cuda.sh", carry=[".gpu-deps"], timeout_s=600)
# A rerun on the same warm machine reuses the dependencies built in $WORK (REBUILD_DEPS=1 to redo);
# DEPS_PREFIX=<prefix> uses an existing Kokkos + Kernels (+ GoogleTest) install instead.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/perf/gpu/out-kokkos}
DEPS=${GPU_DEPS:-$ROOT/.gpu-deps}
WORK=${WORK:-/tmp/kattn-kokkos-cuda}
BUDGET=${BUDGET:-560}
JOBS=${JOBS:-$(nproc)}
ARCH=${KOKKOS_ARCH:-HOPPER90}
QUICK=""
[ "${1:-}" = "--quick" ] && QUICK="--quick"
mkdir -p "$OUT" "$WORK"
START=$(date +%s)
log() { echo "[check_kokkos_cuda +$(( $(date +%s) - START ))s] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
step_timeout() {  # min(wanted, time left), at least 5
  local want=$1 l
  l=$(left)
  [ "$l" -lt "$want" ] && want=$l
  [ "$want" -lt 5 ] && want=5
  echo "$want"
}
fail() { log "FAILED: $*"; python3 "$ROOT/perf/gpu/report_kokkos.py" "$OUT"; exit 1; }
export PATH=/usr/local/cuda/bin:$PATH
command -v nvcc > /dev/null || fail "nvcc not on PATH"
GEN=(); command -v ninja > /dev/null && GEN=(-G Ninja)

log "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total --format=csv 2>&1 | tee "$OUT/nvidia-smi.txt"
nvcc --version | tail -2
[ -d "$DEPS/kokkos" ] && [ -d "$DEPS/kokkos-kernels" ] && [ -d "$DEPS/googletest" ] \
  || fail "$DEPS must hold kokkos, kokkos-kernels, googletest (bash perf/gpu/stage_deps.sh here, carry .gpu-deps)"

# PyTorch on the GPU while the CPUs compile (no GPU work in the build).
log "PyTorch SDPA (background)"
PYTHONUNBUFFERED=1 timeout "$(step_timeout 300)" python3 "$ROOT/perf/gpu/sdpa_fp_bench.py" $QUICK > "$OUT/sdpa_fp.log" 2>&1 &
SDPA_PID=$!

P=${DEPS_PREFIX:-$WORK/prefix}
NICE="nice -n 10"
if [ -n "${DEPS_PREFIX:-}" ] || { [ -f "$WORK/deps.done" ] && [ "${REBUILD_DEPS:-0}" != 1 ]; }; then
  # A second run on a still-warm machine (or a prefix given): Kokkos, Kernels, GoogleTest are there.
  log "dependencies: reusing $P"
else
  # Sources into $WORK: the carried copy may be read-only or lose its modes.
  rm -rf "$WORK/src" && mkdir -p "$WORK/src"
  cp -r "$DEPS/kokkos" "$DEPS/kokkos-kernels" "$DEPS/googletest" "$WORK/src/"
  chmod +x "$WORK/src/kokkos/bin/"*

  log "GoogleTest (background)"
  ( cmake -S "$WORK/src/googletest" -B "$WORK/build-gtest" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
      -DCMAKE_INSTALL_PREFIX="$P" -DCMAKE_CXX_STANDARD=17 \
    && $NICE cmake --build "$WORK/build-gtest" -j 4 && cmake --install "$WORK/build-gtest" ) > "$OUT/gtest.log" 2>&1 &
  GTEST_PID=$!

  log "Kokkos ($ARCH)"
  timeout "$(step_timeout 200)" bash -c "
    cmake -S '$WORK/src/kokkos' -B '$WORK/build-kokkos' ${GEN[*]} -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_COMPILER='$WORK/src/kokkos/bin/nvcc_wrapper' -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF \
      -DCMAKE_INSTALL_PREFIX='$P' -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_CUDA=ON -DKokkos_ARCH_$ARCH=ON \
      -DKokkos_ENABLE_TESTS=OFF -DKokkos_ENABLE_EXAMPLES=OFF -DKokkos_ENABLE_BENCHMARKS=OFF \
    && $NICE cmake --build '$WORK/build-kokkos' -j $JOBS && cmake --install '$WORK/build-kokkos'" > "$OUT/kokkos.log" 2>&1 \
    || { tail -30 "$OUT/kokkos.log"; fail "Kokkos build"; }
  log "Kokkos installed"

  # Kokkos Kernels: kattn links Kokkos::kokkoskernels; nothing pre-instantiated, no TPLs.
  log "Kokkos Kernels (headers, no instantiation)"
  KK_OFF=()
  for f in ETI_ONLY ADD_DEFAULT_ETI ENABLE_TESTS ENABLE_EXAMPLES ENABLE_PERFTESTS ENABLE_BENCHMARKS ENABLE_DOCS \
           INST_DOUBLE INST_FLOAT INST_HALF INST_BHALF INST_COMPLEX_DOUBLE INST_COMPLEX_FLOAT INST_ORDINAL_INT \
           INST_ORDINAL_INT64_T INST_OFFSET_INT INST_OFFSET_SIZE_T INST_LAYOUTLEFT INST_LAYOUTRIGHT \
           INST_EXECSPACE_CUDA INST_EXECSPACE_SERIAL INST_MEMSPACE_CUDASPACE INST_MEMSPACE_CUDAUVMSPACE \
           INST_MEMSPACE_HOSTSPACE ENABLE_TPL_BLAS ENABLE_TPL_LAPACK ENABLE_TPL_CBLAS ENABLE_TPL_LAPACKE \
           ENABLE_TPL_MKL ENABLE_TPL_CUBLAS ENABLE_TPL_CUSPARSE ENABLE_TPL_CUSOLVER; do
    KK_OFF+=("-DKokkosKernels_$f=OFF")
  done
  timeout "$(step_timeout 120)" bash -c "
    cmake -S '$WORK/src/kokkos-kernels' -B '$WORK/build-kernels' ${GEN[*]} -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_COMPILER='$P/bin/nvcc_wrapper' -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF \
      -DCMAKE_INSTALL_PREFIX='$P' -DKokkos_ROOT='$P' -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF ${KK_OFF[*]} \
    && $NICE cmake --build '$WORK/build-kernels' -j $JOBS && cmake --install '$WORK/build-kernels'" > "$OUT/kernels.log" 2>&1 \
    || { tail -30 "$OUT/kernels.log"; fail "Kokkos Kernels build"; }
  wait $GTEST_PID || { tail -20 "$OUT/gtest.log"; fail "GoogleTest build"; }
  log "Kokkos Kernels, GoogleTest installed"
  touch "$WORK/deps.done"
fi

log "kattn: configure + build (library, CLI), install, bench_kokkos_gpu"
B="$WORK/build-kattn"
timeout "$(step_timeout 60)" cmake -S "$ROOT" -B "$B" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$P/bin/nvcc_wrapper" -DKokkos_ROOT="$P" -DKokkosKernels_ROOT="$P" -DGTest_ROOT="$P" \
  -DCMAKE_PREFIX_PATH="$P" -DKATTN_ENABLE_TESTS=ON -DKATTN_ENABLE_MPI=OFF -DKATTN_ENABLE_CUDA=OFF \
  -DKATTN_ENABLE_BENCHMARKS=OFF -DCMAKE_INSTALL_PREFIX="$WORK/kattn" > "$OUT/kattn-configure.log" 2>&1 \
  || { tail -30 "$OUT/kattn-configure.log"; fail "kattn configure"; }
timeout "$(step_timeout 240)" $NICE cmake --build "$B" -j "$JOBS" --target kattn kattn-cli > "$OUT/kattn-build.log" 2>&1 \
  || { grep -E "error|Error" "$OUT/kattn-build.log" | head -30; fail "kattn build"; }
cmake --install "$B" > "$OUT/kattn-install.log" 2>&1 || fail "kattn install"
timeout "$(step_timeout 90)" bash -c "
  cmake -S '$ROOT/perf/gpu' -B '$WORK/build-bench' ${GEN[*]} -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER='$P/bin/nvcc_wrapper' -DCMAKE_PREFIX_PATH='$WORK/kattn;$P' \
  && cmake --build '$WORK/build-bench' -j $JOBS" > "$OUT/bench-build.log" 2>&1 \
  || { tail -30 "$OUT/bench-build.log"; fail "bench_kokkos_gpu build"; }
log "kattn built and installed"

# The tests compile on the CPUs while the GPU runs the timings (whose work is all on the GPU).
log "kattn tests: build (background)"
timeout "$(step_timeout 330)" $NICE cmake --build "$B" -j "$JOBS" > "$OUT/kattn-tests-build.log" 2>&1 &
TESTS_PID=$!

log "waiting for PyTorch SDPA"
wait $SDPA_PID
log "sdpa rc=$?"; grep -E "^torch|JSON" "$OUT/sdpa_fp.log" | cut -c1-200

log "bench_kokkos_gpu"
timeout "$(step_timeout 200)" "$WORK/build-bench/bench_kokkos_gpu" $QUICK --budget 15 > "$OUT/bench_kokkos.log" 2>&1
log "bench rc=$?"; cut -c1-300 "$OUT/bench_kokkos.log"

log "waiting for the tests' build"
if wait $TESTS_PID; then
  log "tests built ($(grep -c 'warning' "$OUT/kattn-tests-build.log") warning lines)"
  log "ctest"
  timeout "$(step_timeout 150)" ctest --test-dir "$B" -j 8 --timeout 120 --output-on-failure > "$OUT/ctest.log" 2>&1
  log "ctest rc=$?"; grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest.log" | tail -15
else
  log "tests' build FAILED or timed out"; grep -E "error|Error" "$OUT/kattn-tests-build.log" | head -30
fi

if [ "$(left)" -gt 45 ]; then
  log "bench_kokkos_gpu --only sweep (tile sizes, N = 4096)"
  timeout "$(step_timeout 60)" "$WORK/build-bench/bench_kokkos_gpu" $QUICK --only sweep --budget 2 --reps 3 \
    > "$OUT/bench_sweep.log" 2>&1
  log "sweep rc=$?"
fi

log "done"
python3 "$ROOT/perf/gpu/report_kokkos.py" "$OUT"
