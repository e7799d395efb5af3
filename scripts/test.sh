#!/usr/bin/env bash
# Builds kattn with its tests and the Python package (warnings are errors) and runs the whole suite
# with ctest.
#   scripts/test.sh [BUILD_DIR] [extra cmake arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
bash scripts/install-deps.sh
# Debian's interpreter, which has the python3-* packages above (another python3 may come first in PATH).
python=()
[ -x /usr/bin/python3 ] && python=(-DPython_EXECUTABLE=/usr/bin/python3)
cmake -S . -B "$build" -DKATTN_ENABLE_TESTS=ON -DKATTN_ENABLE_MPI=ON -DKATTN_ENABLE_PYTHON=ON -DKATTN_WERROR=ON \
      "${python[@]}" "$@"
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
