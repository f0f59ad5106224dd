#!/usr/bin/env bash
# The whole test suite from a fresh machine: set-up (packages installed and then
# checked by scripts/check-packages.sh BEFORE building, Release build, model), then ctest, then the GGUF reader's malformed-file tests under
# AddressSanitizer in a separate build tree (build-asan/).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
scripts/setup.sh
build=${KVEVAL_BUILD_DIR:-build}
jobs=${KVEVAL_JOBS:-$(nproc)}
ctest --test-dir "$build" --output-on-failure -j "$jobs"

echo "test: AddressSanitizer build of the model and util tests (build-asan/)"
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$jobs" --target test_model test_util
ctest --preset asan --output-on-failure -R '^(model|util)(\.stories260K)?$'
