#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang under AddressSanitizer + UBSan and runs
# each for a bounded time, starting from the seed corpus in tests/fuzz/corpus/<target>/.
#   scripts/fuzz.sh [BUILD_DIR] [SECONDS_PER_TARGET]      (defaults: build-fuzz, 60)
# A finding stops the script with the input saved as BUILD_DIR/fuzz-artifacts/<target>/crash-*;
# reproduce it with BUILD_DIR/tests/fuzz/kattn_fuzz_<target> FILE, fix it, and add the file to
# tests/fuzz/corpus/<target>/ so the replay tests (fuzz.<target>.replay, every build) keep it.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
seconds=${2:-60}
bash scripts/install-deps.sh fuzz
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKATTN_ENABLE_FUZZERS=ON \
  -DKATTN_SANITIZE=address,undefined -DKATTN_ENABLE_CUDA=OFF -DKATTN_ENABLE_MPI=OFF -DKATTN_WERROR=ON > /dev/null
cmake --build "$build" -j "$(nproc)" --target kattn_fuzz_npy kattn_fuzz_layout
export OMP_PROC_BIND=false
for t in npy layout; do
  found=$build/fuzz-corpus/$t        # inputs libFuzzer adds; the seeds in tests/ stay untouched
  artifacts=$build/fuzz-artifacts/$t
  mkdir -p "$found" "$artifacts"
  dict=()
  [ -f tests/fuzz/$t.dict ] && dict=(-dict=tests/fuzz/$t.dict)
  echo "== fuzz $t for ${seconds}s =="
  "$build/tests/fuzz/kattn_fuzz_$t" "${dict[@]}" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" "$found" "tests/fuzz/corpus/$t"
done
