#!/usr/bin/env bash
# Places stories260K.gguf in models/: from ../shared/ when present, else
# downloaded from its public home. The sha256 is checked either way. Nothing
# here is ever committed (models/ is git-ignored). The reference values the
# tests compare with are in the repository (tests/data/).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
mkdir -p models
sha=270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d
url=https://huggingface.co/ggml-org/tiny-llamas/resolve/main/stories260K.gguf
shared=${KVEVAL_SHARED_DIR:-$root/../shared}
dst=models/stories260K.gguf

check() { echo "$sha  $1" | sha256sum -c --status; }

if [ -f "$dst" ] && check "$dst"; then
  :
elif [ -f "$shared/models/stories260K.gguf" ]; then
  cp "$shared/models/stories260K.gguf" "$dst.tmp" && mv "$dst.tmp" "$dst"
else
  echo "fetch-model: downloading $url"
  curl -fsSL --retry 3 -o "$dst.tmp" "$url"
  mv "$dst.tmp" "$dst"
fi
if ! check "$dst"; then
  echo "fetch-model: $dst: sha256 mismatch (expected $sha)" >&2
  rm -f "$dst"
  exit 1
fi
echo "fetch-model: $dst ok"
