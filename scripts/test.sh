#!/usr/bin/env bash
# Builds kattn with its tests (warnings are errors) and runs the whole suite with ctest.
#   scripts/test.sh [BUILD_DIR] [extra cmake arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
bash scripts/install-deps.sh
cmake -S . -B "$build" -DKATTN_ENABLE_TESTS=ON -DKATTN_ENABLE_MPI=ON -DKATTN_WERROR=ON "$@"
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
