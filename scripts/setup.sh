#!/usr/bin/env bash
# Set-up on a fresh Debian 12 machine: installs missing packages (when root),
# configures and builds a Release tree in build/, and places the model in models/.
# Usage: scripts/setup.sh            (idempotent; fast when already done)
# Env:   KVEVAL_BUILD_DIR (default build), KVEVAL_JOBS (default nproc)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

packages=(g++ cmake make pkg-config git ca-certificates curl libdnnl-dev ocl-icd-opencl-dev libcli11-dev nlohmann-json3-dev
          libfmt-dev doctest-dev libssl-dev libpcre2-dev libyaml-cpp-dev libicu-dev libutf8proc-dev libopenmpi-dev openmpi-bin
          clang libclang-rt-14-dev tmux python3 python3-numpy python3-matplotlib python3-jsonschema)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" -eq 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "setup: missing packages and not root; run: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

build=${KVEVAL_BUILD_DIR:-build}
jobs=${KVEVAL_JOBS:-$(nproc)}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$jobs"

scripts/fetch-model.sh || echo "setup: warning: no model file; the tests that need it will report SKIPPED" >&2
