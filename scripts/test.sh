#!/usr/bin/env bash
# The whole test suite from a fresh machine: set-up (packages installed and then
# checked by scripts/check-packages.sh BEFORE building, Release build, model), then ctest, then every suite and the kveval binary again under
# AddressSanitizer + UBSan (-O1, build-asan/), then the libFuzzer targets
# (scripts/fuzz.sh, build-fuzz/) for KVEVAL_FUZZ_SECONDS each (default 60; 0 skips them).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
scripts/setup.sh
build=${KVEVAL_BUILD_DIR:-build}
jobs=${KVEVAL_JOBS:-$(nproc)}
ctest --test-dir "$build" --output-on-failure -j "$jobs"

echo "test: AddressSanitizer + UBSan build of every suite and the kveval binary (build-asan/)"
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$jobs"
ctest --preset asan -j "$jobs"

fuzz_seconds=${KVEVAL_FUZZ_SECONDS:-60}
if [ "$fuzz_seconds" != 0 ]; then
  echo "test: fuzz targets, $fuzz_seconds s each (KVEVAL_FUZZ_SECONDS=0 skips)"
  scripts/fuzz.sh "$fuzz_seconds"
fi
