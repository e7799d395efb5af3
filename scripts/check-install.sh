#!/usr/bin/env bash
# Installs kattn into fresh prefixes and uses it the way users do, twice:
#   1. static (the default build): `cmake --install`, then tests/consumer configured with only
#      the kattn prefix on the search path (no system paths: tests/consumer/CMakeLists.txt),
#      built and run, and the installed `kattn` program;
#   2. shared (BUILD_SHARED_LIBS=ON; library and program only), built against the Kokkos and
#      Kokkos Kernels of step 1 reached through a prefix each (spack's layout), with the system
#      copy still on kattn's search path: the consumer must find exactly those two prefixes;
#      the installed program must run without LD_LIBRARY_PATH, also after its prefix moved.
#   scripts/check-install.sh [WORK_DIR] [extra cmake arguments for kattn...]
# e.g. scripts/check-install.sh /tmp/kattn-k4 -DKokkos_ROOT=$HOME/opt/kokkos
# KATTN_BUILD=DIR installs from that already configured build in step 1 (CI: its test build);
# KATTN_CHECK_SHARED=0 skips step 2.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-build-install}
shift || true
mkdir -p "$work"
work=$(cd "$work" && pwd)
bash scripts/install-deps.sh
export OMP_PROC_BIND=${OMP_PROC_BIND:-false}
jobs=$(nproc)

# cache_value BUILD NAME: NAME's value in BUILD's CMakeCache.txt.
cache_value() { sed -n "s/^$2:[A-Z]*=//p" "$1/CMakeCache.txt"; }

# install_and_consume BUILD PREFIX: install BUILD into PREFIX, build tests/consumer against it
# with the same compiler and nothing else on its search path, run both.
install_and_consume() {
  local build=$1 prefix=$2 consumer=$2-consumer
  rm -rf "$prefix" "$consumer"
  cmake --install "$build" --prefix "$prefix"
  echo "-- tests/consumer against $prefix only"
  cmake -S tests/consumer -B "$consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER="$(cache_value "$build" CMAKE_CXX_COMPILER)"
  cmake --build "$consumer" -j "$jobs"
  env -u LD_LIBRARY_PATH "$consumer/consumer"
  echo "-- the installed kattn program"
  env -u LD_LIBRARY_PATH "$prefix/bin/kattn" --version
  env -u LD_LIBRARY_PATH "$prefix/bin/kattn" run --random 1,256,256,4,4,64 --check --json
  echo "-- the installed scaling study"
  env -u LD_LIBRARY_PATH "$prefix/bin/kattn-scale" model --anchor meta-cp-1m --max-ranks 4
  local site py
  site=$(cache_value "$build" KATTN_PYTHON_INSTALL_DIR)
  py=$(cache_value "$build" Python_EXECUTABLE)
  [ -n "$py" ] || py=$(cache_value "$build" _Python_EXECUTABLE)
  if [ "$(cache_value "$build" KATTN_ENABLE_PYTHON)" = ON ] && [ -n "$site" ]; then
    echo "-- the installed Python package"
    (cd / && env -u LD_LIBRARY_PATH PYTHONPATH="$prefix/$site" "$py" -c \
      'import numpy as np, kattn; q = np.ones((1, 4, 2, 8)); print("kattn", kattn.version(), kattn.attention(q, q, q).shape)
import importlib.util
if importlib.util.find_spec("torch"):
    import torch, kattn.torch
    t = torch.ones(1, 2, 4, 8, dtype=torch.float64, requires_grad=True)
    kattn.torch.attention(t, t, t, layout="bhnd").sum().backward()
    print("kattn.torch", tuple(t.grad.shape))')
  fi
}

# relay_config NAME CONFIG_DIR PREFIX: a package config in PREFIX/lib/cmake/NAME that loads the
# one in CONFIG_DIR, so that NAME is found in a prefix of its own (spack's layout).
relay_config() {
  local name=$1 dir=$2 dest=$3/lib/cmake/$1 f
  mkdir -p "$dest"
  for f in "$dir/${name}Config.cmake" "$dir/${name}ConfigVersion.cmake"; do
    if [ -f "$f" ]; then echo "include(\"$f\")" > "$dest/$(basename "$f")"; fi
  done
}

echo "== 1. static: build and install kattn, tests/consumer against that prefix only =="
build=${KATTN_BUILD:-$work/kattn}
if [ -z "${KATTN_BUILD:-}" ]; then
  cmake -S . -B "$build" -DKATTN_ENABLE_TESTS=OFF -DKATTN_WERROR=ON "$@"
fi
cmake --build "$build" -j "$jobs"
install_and_consume "$build" "$work/prefix"

if [ "${KATTN_CHECK_SHARED:-1}" = 0 ]; then
  echo "check-install: ok (static only)"
  exit 0
fi

echo "== 2. shared: Kokkos and Kokkos Kernels in prefixes of their own =="
kokkos_dir=$(cache_value "$build" Kokkos_DIR)
kernels_dir=$(cache_value "$build" KokkosKernels_DIR)
deps=$work/deps
rm -rf "$deps"
relay_config Kokkos "$kokkos_dir" "$deps/kokkos"
kernels=(-DKATTN_ENABLE_KOKKOSKERNELS=OFF)
if [ "$(cache_value "$build" KATTN_ENABLE_KOKKOSKERNELS)" = ON ] && [ -d "$kernels_dir" ]; then
  relay_config KokkosKernels "$kernels_dir" "$deps/kokkos-kernels"
  kernels=(-DKATTN_ENABLE_KOKKOSKERNELS=ON -DKokkosKernels_ROOT="$deps/kokkos-kernels")
fi
shared=$work/kattn-shared
# The same options as step 1 ("$@" first: the relayed dependencies win), no CUDA kernels.
cmake -S . -B "$shared" "$@" -DBUILD_SHARED_LIBS=ON -DKATTN_ENABLE_TESTS=OFF -DKATTN_ENABLE_CUDA=OFF \
  -DKATTN_WERROR=ON -DKATTN_ENABLE_MPI="$(cache_value "$build" KATTN_ENABLE_MPI)" \
  -DCMAKE_CXX_COMPILER="$(cache_value "$build" CMAKE_CXX_COMPILER)" \
  -DKokkos_ROOT="$deps/kokkos" "${kernels[@]}"
cmake --build "$shared" -j "$jobs"
install_and_consume "$shared" "$work/prefix-shared"

echo "-- the installed program links the shared libkattn and finds it through its RPATH"
readelf -d "$work/prefix-shared/bin/kattn" | grep -E 'NEEDED.*libkattn|R(UN)?PATH'
readelf -d "$work/prefix-shared/bin/kattn" | grep -q 'NEEDED.*libkattn\.so'
rm -rf "$work/prefix-moved"
mv "$work/prefix-shared" "$work/prefix-moved"
env -u LD_LIBRARY_PATH "$work/prefix-moved/bin/kattn" --version | head -1
echo "check-install: ok"
