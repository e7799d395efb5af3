#!/usr/bin/env bash
# Installs kattn into a fresh prefix and uses it from another CMake project the way users do:
# build + `cmake --install`, then tests/consumer configured with find_package(kattn) against
# that prefix only, built and run; finally the installed `kattn` program.
#   scripts/check-install.sh [WORK_DIR] [extra cmake arguments for kattn and the consumer...]
# e.g. scripts/check-install.sh /tmp/kattn-k4 -DKokkos_ROOT=/opt/kokkos4-omp
# KATTN_BUILD=DIR installs from that already configured build instead (CI: its test build).
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-build-install}
shift || true
mkdir -p "$work"
work=$(cd "$work" && pwd)
prefix=$work/prefix
bash scripts/install-deps.sh

echo "== build and install kattn into $prefix =="
rm -rf "$prefix" "$work/consumer"
build=${KATTN_BUILD:-$work/kattn}
if [ -z "${KATTN_BUILD:-}" ]; then
  cmake -S . -B "$build" -DKATTN_ENABLE_TESTS=OFF -DKATTN_WERROR=ON "$@"
fi
cmake --build "$build" -j "$(nproc)"
cmake --install "$build" --prefix "$prefix"

echo "== tests/consumer against the installed kattn =="
cmake -S tests/consumer -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$work/consumer" -j "$(nproc)"
export OMP_PROC_BIND=${OMP_PROC_BIND:-false}
"$work/consumer/consumer"

echo "== the installed kattn program =="
"$prefix/bin/kattn" --version
"$prefix/bin/kattn" run --random 1,256,256,4,4,64 --check --json
echo "check-install: ok"
