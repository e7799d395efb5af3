#!/usr/bin/env bash
# Stages the sources that perf/gpu/check_kokkos_cuda.sh builds on the GPU machine (which has no
# Kokkos, no GoogleTest and no network) into the ignored folder .gpu-deps/, pruned of tests,
# examples and docs, so that the device tool can carry it (64 MiB for the whole working tree).
# Run it here, on the build machine; never commit what it writes.
#
#   bash perf/gpu/stage_deps.sh [DEST]          (DEST defaults to .gpu-deps in the repo root)
#
# Sources (directories or .tar.gz archives), from the environment:
#   KOKKOS_SRC    Kokkos 4.x             default /work/ext/src/kokkos-4.6.01 (pristine)
#   KOKKOS_PATCH  local fixes for nvcc 13 default /work/notes/kokkos-4.6.01-cuda13.patch; applied to
#                 Kokkos 4.6.x only (4.7.01+ has them upstream); set to "" to skip
#   KERNELS_SRC   Kokkos Kernels 4.x     default /work/ext/src/kokkos-kernels-4.7.00 (kattn links it;
#                 built header-only there, no explicit instantiation)
#   GTEST_SRC     GoogleTest             default /usr/src/googletest (Debian's googletest package)
#   BENCHMARK_SRC Google Benchmark       optional; not needed (bench_kokkos_gpu has its own timer)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST=${1:-$ROOT/.gpu-deps}
KOKKOS_SRC=${KOKKOS_SRC:-/work/ext/src/kokkos-4.6.01}
KOKKOS_PATCH=${KOKKOS_PATCH-/work/notes/kokkos-4.6.01-cuda13.patch}
KERNELS_SRC=${KERNELS_SRC:-/work/ext/src/kokkos-kernels-4.7.00}
GTEST_SRC=${GTEST_SRC:-/usr/src/googletest}
BENCHMARK_SRC=${BENCHMARK_SRC:-}
LIMIT_MIB=${LIMIT_MIB:-56}   # of the tool's 64 MiB, leaving room for the repository itself

# The folder must be ignored, or git (and the device tool) would treat it as part of the tree.
if git -C "$ROOT" rev-parse --git-dir > /dev/null 2>&1; then
  rel=${DEST#"$ROOT"/}
  if [ "$rel" != "$DEST" ] && ! git -C "$ROOT" check-ignore -q "$rel/x"; then
    echo "stage_deps: $rel is not ignored by git; add it to .gitignore first" >&2
    exit 1
  fi
fi

# copy SRC NAME EXCLUDES...: SRC (dir or .tar.gz) into DEST/NAME without the excluded paths.
copy() {
  local src=$1 name=$2
  shift 2
  local args=(--exclude=.git --exclude=.github --exclude=.gitlab-ci.yml --exclude=.jenkins)
  for e in "$@"; do args+=("--exclude=$e"); done
  rm -rf "${DEST:?}/$name"
  mkdir -p "$DEST/$name"
  if [ -d "$src" ]; then
    tar -C "$src" "${args[@]}" -cf - . | tar -C "$DEST/$name" -xf -
  elif [ -f "$src" ]; then
    tar -xzf "$src" -C "$DEST/$name" --strip-components=1 "${args[@]}"
  else
    echo "stage_deps: $name source '$src' not found" >&2
    exit 1
  fi
  echo "stage_deps: $name <- $src ($(du -sm "$DEST/$name" | cut -f1) MiB)"
}

mkdir -p "$DEST"

# Kokkos: unit and perf tests are entered only with Kokkos_ENABLE_TESTS; example/ and benchmarks/
# are always entered by its CMake (and are small), so they stay.
copy "$KOKKOS_SRC" kokkos ./core/unit_test ./core/perf_test ./containers/unit_tests \
  ./containers/performance_tests ./algorithms/unit_tests ./algorithms/perf_test ./simd/unit_tests \
  ./docs ./doc ./tpls/gtest ./tpls/desul/tests
version=$(sed -n 's/^ *set(Kokkos_VERSION_\(MAJOR\|MINOR\) \([0-9]*\)).*/\2/p' "$DEST/kokkos/CMakeLists.txt" | paste -sd. -)
echo "stage_deps: Kokkos version $version"
if [ "$version" = "4.6" ] && [ -n "$KOKKOS_PATCH" ]; then
  [ -f "$KOKKOS_PATCH" ] || { echo "stage_deps: Kokkos 4.6 needs the nvcc 13 fixes, $KOKKOS_PATCH missing" >&2; exit 1; }
  cp "$KOKKOS_PATCH" "$DEST/kokkos-nvcc13.patch"
  patch -d "$DEST/kokkos" -p1 --forward --quiet < "$DEST/kokkos-nvcc13.patch"
  echo "stage_deps: applied $(basename "$KOKKOS_PATCH") (nvcc 13 fixes, upstream in 4.7.01/4.7.02)"
fi

# Kokkos Kernels: its unit tests, perf tests, benchmarks and examples are entered only when enabled.
copy "$KERNELS_SRC" kokkos-kernels ./perf_test ./example ./docs ./benchmarks './*/unit_test' ./tpls/gtest \
  ./install_test ./scripts

copy "$GTEST_SRC" googletest ./googlemock/test ./googletest/test ./googletest/samples ./docs ./ci

if [ -n "$BENCHMARK_SRC" ]; then
  copy "$BENCHMARK_SRC" benchmark ./test ./docs ./bindings ./.github
fi

total=$(du -sm "$DEST" | cut -f1)
tree=$(git -C "$ROOT" ls-files -z | xargs -0 du -cm 2> /dev/null | tail -1 | cut -f1)
echo "stage_deps: $DEST holds $total MiB; the repository's tracked files ${tree} MiB (limit 64 MiB together)"
if [ "$total" -gt "$LIMIT_MIB" ]; then
  echo "stage_deps: over the $LIMIT_MIB MiB budget; prune more" >&2
  exit 1
fi
