#!/usr/bin/env bash
# ctest "scripts.check-packages": the package check names every missing package
# in one line and exits non-zero, and scripts/test.sh stops there (before CMake).
# A bogus package name stands for a package that is not installed.
# Usage: check_packages_test.sh SOURCE_DIR
set -uo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# a present package, comments, blank lines and two absent packages
printf '%s\n' 'dpkg            # present on every Debian system' '' '   # only a comment' \
  'kveval-no-such-package-1   # bogus' 'kveval-no-such-package-2' >"$tmp/list.txt"

# 1. by argument: one line, names both missing packages, not the present one, exit 1
"$src/scripts/check-packages.sh" "$tmp/list.txt" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] || fail "exit $rc, expected 1"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "expected one line, got: $(cat "$tmp/err")"
grep -q 'kveval-no-such-package-1' "$tmp/err" || fail "missing package 1 not named: $(cat "$tmp/err")"
grep -q 'kveval-no-such-package-2' "$tmp/err" || fail "missing package 2 not named: $(cat "$tmp/err")"
grep -q '(2 of 3 ' "$tmp/err" || fail "counts wrong: $(cat "$tmp/err")"
grep -qw 'dpkg' "$tmp/err" && fail "the installed package is named as missing: $(cat "$tmp/err")"

# 2. the same through the environment variable, and --print-missing
KVEVAL_PACKAGES_FILE="$tmp/list.txt" "$src/scripts/check-packages.sh" 2>"$tmp/err2"
[ $? -eq 1 ] || fail "KVEVAL_PACKAGES_FILE: expected exit 1"
grep -q 'kveval-no-such-package-1' "$tmp/err2" || fail "KVEVAL_PACKAGES_FILE: not named"
[ "$("$src/scripts/check-packages.sh" --print-missing "$tmp/list.txt")" = "kveval-no-such-package-1 kveval-no-such-package-2" ] ||
  fail "--print-missing"

# 3. only installed packages: exit 0
printf 'dpkg\n' >"$tmp/ok.txt"
"$src/scripts/check-packages.sh" "$tmp/ok.txt" 2>/dev/null || fail "an installed package reported missing"

# 4. a malformed list and an unreadable one: exit 2 naming the file
printf 'dpkg bash\n' >"$tmp/bad.txt"
"$src/scripts/check-packages.sh" "$tmp/bad.txt" 2>"$tmp/err3"
[ $? -eq 2 ] && grep -q 'bad.txt:1' "$tmp/err3" || fail "two names on one line: $(cat "$tmp/err3")"
"$src/scripts/check-packages.sh" "$tmp/nowhere.txt" 2>"$tmp/err4"
[ $? -eq 2 ] && grep -q 'nowhere.txt' "$tmp/err4" || fail "missing list: $(cat "$tmp/err4")"

# 5. scripts/test.sh on a machine missing a package: the package is named and
#    nothing is configured (no CMake error, no build tree)
KVEVAL_NO_INSTALL=1 KVEVAL_PACKAGES_FILE="$tmp/list.txt" KVEVAL_BUILD_DIR="$tmp/build" \
  "$src/scripts/test.sh" >"$tmp/tout" 2>"$tmp/terr"
rc=$?
[ "$rc" -ne 0 ] || fail "scripts/test.sh exited 0 with a missing package"
grep -q 'kveval-no-such-package-1' "$tmp/terr" || fail "scripts/test.sh did not name the package: $(cat "$tmp/terr")"
grep -qi 'cmake' "$tmp/tout" && fail "scripts/test.sh ran CMake: $(cat "$tmp/tout")"
[ ! -e "$tmp/build" ] || fail "scripts/test.sh configured a build tree"

# 6. the real list is what this machine has (the suite is running, so the build worked)
"$src/scripts/check-packages.sh" 2>"$tmp/err5" || fail "the project's own list: $(cat "$tmp/err5")"
echo "check-packages: all cases passed"
