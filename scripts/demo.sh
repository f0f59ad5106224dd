#!/usr/bin/env bash
# The main job from a fresh machine: set-up, then `kveval run tasks/demo.json`
# on the real model. Extra arguments go to `kveval run`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
scripts/setup.sh >&2
exec "${KVEVAL_BUILD_DIR:-build}/kveval" run tasks/demo.json "$@"
