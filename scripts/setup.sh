#!/usr/bin/env bash
# Set-up on a fresh Debian 12 machine: installs missing packages (when root),
# configures and builds a Release tree in build/, and places the model in models/.
# Usage: scripts/setup.sh            (idempotent; fast when already done)
# Env:   KVEVAL_BUILD_DIR (default build), KVEVAL_JOBS (default nproc),
#        KVEVAL_PACKAGES_FILE (default scripts/packages.txt), KVEVAL_NO_INSTALL=1 (only check packages)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# The package list is scripts/packages.txt (KVEVAL_PACKAGES_FILE overrides it).
# Missing packages are installed when root (unless KVEVAL_NO_INSTALL=1); then
# check-packages.sh names any that are still missing and stops before CMake.
read -r -a missing <<<"$(scripts/check-packages.sh --print-missing)"
if ((${#missing[@]})) && [ "$(id -u)" -eq 0 ] && [ "${KVEVAL_NO_INSTALL:-0}" != 1 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || true
  apt-get install -y -qq --no-install-recommends "${missing[@]}" || true
fi
scripts/check-packages.sh

build=${KVEVAL_BUILD_DIR:-build}
jobs=${KVEVAL_JOBS:-$(nproc)}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$jobs"

scripts/fetch-model.sh || echo "setup: warning: no model file; the tests that need it will report SKIPPED" >&2
