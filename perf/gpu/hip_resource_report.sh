#!/usr/bin/env bash
# Builds kattn's library for an AMD GPU with hipcc and writes perf/gpu/hip-resource-report.txt:
# VGPRs, AGPRs, spills and scratch per Kokkos kernel (clang's kernel-resource-usage remarks).
# Needs hipcc and a Kokkos built for HIP (no GPU). docs/gpu.md#hip says how to build that Kokkos.
#   bash perf/gpu/hip_resource_report.sh <kokkos-hip-prefix> [build-dir]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
KOKKOS=${1:?usage: hip_resource_report.sh <kokkos-hip-prefix> [build-dir]}
BUILD=${2:-/tmp/kattn-hip-resources}
GENERATOR=()
command -v ninja > /dev/null && GENERATOR=(-G Ninja)
cmake -S "$ROOT" -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_CXX_COMPILER=hipcc -DKokkos_ROOT="$KOKKOS" \
  -DKATTN_ENABLE_TESTS=OFF -DKATTN_ENABLE_PYTHON=OFF -DKATTN_ENABLE_CUDA=OFF -DKATTN_ENABLE_MPI=ON \
  -DCMAKE_CXX_FLAGS=-Rpass-analysis=kernel-resource-usage > /dev/null
# The library and the MPI layer hold every kernel; --clean-first so each one's remarks are printed.
nice cmake --build "$BUILD" --clean-first --target kattn kattn_dist -j "${JOBS:-2}" > "$BUILD/resources-raw.txt" 2>&1
# The report's heading: the compiler, the GPU architecture and the Kokkos it was built against.
HIP=$(hipcc --version 2>/dev/null | grep -m1 'HIP version' || true)
CLANG=$(hipcc --version 2>/dev/null | grep -m1 'clang version' || true)
ARCH=$(sed -n 's/^#define KOKKOS_ARCH_AMD_\(GFX[0-9A-Z]*\).*/\1/p' "$KOKKOS/include/KokkosCore_config.h" | tr 'A-Z' 'a-z' | head -1)
KOKKOS_VERSION=$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")/\1/p' "$KOKKOS"/lib*/cmake/Kokkos/KokkosConfigVersion.cmake | head -1)
python3 "$ROOT/perf/gpu/hip_resource_summary.py" "$BUILD/resources-raw.txt" \
  "$HIP, $CLANG, ${ARCH:-unknown arch}, Kokkos ${KOKKOS_VERSION:-unknown}" > "$ROOT/perf/gpu/hip-resource-report.txt"
cat "$ROOT/perf/gpu/hip-resource-report.txt"
