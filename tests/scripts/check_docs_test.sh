#!/usr/bin/env bash
# ctest "scripts.check_docs": the documentation passes scripts/check-docs.sh,
# and the check fails, naming the place, on each defect it exists for: a link
# to a missing file, an anchor that names no heading, a README over its line
# budget, a work-log term, a footnote label defined twice or used without a
# definition, and a doctest suite in tests/ that docs/testing.md does not name;
# a copy with a valid cross-page anchor passes.
# Usage: check_docs_test.sh SOURCE_DIR
set -uo pipefail
src=$1
check=$src/scripts/check-docs.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# 1. The tree as it is passes.
out=$(bash "$check" "$src" 2>&1) || fail "check-docs fails on the tree: $out"
echo "$out"

# A fresh copy of README.md and docs/ for each broken case.
copy() { rm -rf "$tmp/r" && mkdir -p "$tmp/r" && cp "$src/README.md" "$tmp/r/" && cp -r "$src/docs" "$tmp/r/"; }
# expect_fail NAME PATTERN: check-docs on the copy exits 1 and prints PATTERN.
expect_fail() {
  local rc
  out=$(bash "$check" "$tmp/r" 2>&1)
  rc=$?
  [ "$rc" -eq 1 ] || fail "$1: exit $rc, expected 1: $out"
  grep -qE "$2" <<<"$out" || fail "$1: no line matching '$2': $out"
}

# 2. A valid link to another page's heading passes (anchors of other files are read).
copy
printf '\nSee [the metrics](docs/spec.md#metrics) and [models](docs/models.md#adding-a-tensor-type).\n' >>"$tmp/r/README.md"
out=$(bash "$check" "$tmp/r" 2>&1) || fail "valid cross-page anchors refused: $out"

# 3. A link to a file that does not exist.
copy
printf '\nSee [nowhere](docs/no-such-page.md).\n' >>"$tmp/r/docs/cli.md"
expect_fail "missing file" "docs/cli.md:[0-9]+: broken link 'docs/no-such-page.md'"

# 4. An anchor that names no heading, in another page and in the same page.
copy
printf '\nSee [x](spec.md#no-such-heading).\n' >>"$tmp/r/docs/engine.md"
expect_fail "missing anchor" "docs/engine.md:[0-9]+: broken anchor 'spec.md#no-such-heading'"
copy
printf '\nSee [x](#not-here).\n' >>"$tmp/r/README.md"
expect_fail "missing own anchor" "README.md:[0-9]+: broken anchor '#not-here'"

# 5. A README over 350 lines.
copy
for _ in $(seq 360); do echo "filler" >>"$tmp/r/README.md"; done
expect_fail "README length" "README.md: [0-9]+ lines, over the budget of 350"

# 6. A work-log term (built here so that this file does not contain it).
copy
printf '\nMeasured at %s %d.\n' "st""op" 12 >>"$tmp/r/docs/bench.md"
expect_fail "history term" "docs/bench.md:[0-9]+: history term"

# 7. A footnote label defined twice, and one used without a definition.
copy
printf '\nA note[^dup].\n\n[^dup]: one\n[^dup]: two\n' >>"$tmp/r/docs/cli.md"
expect_fail "footnote defined twice" "docs/cli.md:[0-9]+: footnote \\[\\^dup\\] defined twice"
copy
printf '\nA note[^nowhere].\n' >>"$tmp/r/docs/engine.md"
expect_fail "footnote undefined" "docs/engine.md:[0-9]+: footnote \\[\\^nowhere\\] used without a definition"

# 8. A doctest suite in tests/ that docs/testing.md does not list.
copy
mkdir -p "$tmp/r/tests/util"
printf 'TEST_SUITE("util.not_in_docs") {\n}\n' >"$tmp/r/tests/util/test_not_in_docs.cpp"
expect_fail "suite not listed" "docs/testing.md: suite .util\\.not_in_docs. \\(tests/util/test_not_in_docs.cpp\\) not listed"

# 9. Links inside code are not links.
copy
printf '\n```\n[x](missing.md)\n```\n\nInline `[y](missing.md)`.\n' >>"$tmp/r/docs/cli.md"
out=$(bash "$check" "$tmp/r" 2>&1) || fail "a link inside code was checked: $out"
echo "check_docs_test: all cases pass"
