#!/usr/bin/env bash
# Verifies with dpkg-query that every Debian package the build and tests need
# is installed, so a fresh machine names what is missing instead of failing
# later inside CMake. On success prints one line and exits 0; otherwise prints
# ONE line naming every missing package and exits 1 (2: unreadable list, no dpkg).
# Usage: scripts/check-packages.sh [--print-missing] [LIST]
#   LIST defaults to $KVEVAL_PACKAGES_FILE, else scripts/packages.txt
#   (one package per line, '#' starts a comment).
#   --print-missing: print the missing names (space-separated, maybe nothing) on stdout and exit 0.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
print_missing=0
if [ "${1:-}" = --print-missing ]; then print_missing=1; shift; fi
list=${1:-${KVEVAL_PACKAGES_FILE:-$here/packages.txt}}
if [ ! -r "$list" ] || [ -d "$list" ]; then
  echo "check-packages: $list: cannot read the package list" >&2
  exit 2
fi
if ! command -v dpkg-query >/dev/null; then
  echo "check-packages: dpkg-query not found: this set-up expects Debian 12" >&2
  exit 2
fi
packages=()
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
  lineno=$((lineno + 1))
  line=${line%%#*}
  read -r -a fields <<<"$line" || true
  ((${#fields[@]})) || continue
  if ((${#fields[@]} > 1)); then
    echo "check-packages: $list:$lineno: one package per line, got '${fields[*]}'" >&2
    exit 2
  fi
  packages+=("${fields[0]}")
done <"$list"
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((print_missing)); then
  echo "${missing[*]}"
  exit 0
fi
if ((${#missing[@]})); then
  echo "check-packages: missing Debian packages (${#missing[@]} of ${#packages[@]} in $list): ${missing[*]}; install them with: sudo apt-get install --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
echo "check-packages: all ${#packages[@]} packages of $list are installed" >&2
