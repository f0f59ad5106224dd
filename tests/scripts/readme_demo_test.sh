#!/usr/bin/env bash
# ctest "scripts.readme_demo": the output block of README.md (between the
# <!-- demo-output:begin --> and <!-- demo-output:end --> markers) is what
# `kveval run tasks/demo.json` prints on stdout today, the command scripts/demo.sh
# runs after its set-up.
#
# Masked before comparing, because they vary from run to run and nothing else
# does: in the phase table (the one whose header starts `| phase`), the
# `seconds` and `tokens/s` cells of every row (wall times and rates; a `-` cell
# stays `-`). Cells are compared trimmed, and a table's `|---|` rule as `---`
# per column, so that column widths, which follow the widest (timing) value, do
# not matter. Everything else is compared exactly: the metrics table (values,
# stderrs, n, notes), the phase names and token counts, the cache-bytes line
# and the forward-pass counters.
# Usage: readme_demo_test.sh SOURCE_DIR KVEVAL_BIN MODEL
# Exit 0 when equal, 1 with a diff otherwise, 77 (skipped) when MODEL is absent.
set -uo pipefail
src=$1 bin=$2 model=$3
if [ ! -f "$model" ]; then
  echo "SKIPPED: model file $model not found (scripts/fetch-model.sh places it)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src" || exit 1
OMP_WAIT_POLICY=PASSIVE "$bin" run tasks/demo.json --model "$model" >"$tmp/out" 2>"$tmp/err" || {
  echo "FAIL: kveval run tasks/demo.json exited $?: $(tail -5 "$tmp/err")" >&2
  exit 1
}
exec /usr/bin/python3 - "$src/README.md" "$tmp/out" <<'PY'
import difflib, re, sys

readme, actual = open(sys.argv[1], encoding="utf-8").read(), open(sys.argv[2], encoding="utf-8").read()
m = re.search(r"<!-- demo-output:begin -->\n```[a-z]*\n(.*?)```\n<!-- demo-output:end -->", readme, re.S)
if not m:
    sys.exit("FAIL: README.md has no ```-fenced block between <!-- demo-output:begin --> and <!-- demo-output:end -->")
MASKED = {"seconds", "tokens/s"}  # phase-table columns that vary from run to run


def normalise(text):
    out, header = [], None
    for line in text.rstrip("\n").split("\n"):
        if not line.startswith("|"):
            header = None
            out.append(line.rstrip())
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if all(re.fullmatch(r"-+", c) for c in cells):
            out.append("|" + "|".join("---" for _ in cells) + "|")
            continue
        if header is None:
            header = cells
        elif header[0] == "phase":
            cells = ["<masked>" if h in MASKED and c != "-" else c for h, c in zip(header, cells)]
        out.append("|" + "|".join(cells) + "|")
    return out


want, got = normalise(m.group(1)), normalise(actual)
if want != got:
    sys.stdout.writelines(difflib.unified_diff([l + "\n" for l in want], [l + "\n" for l in got],
                                               "README.md demo output", "kveval run tasks/demo.json"))
    sys.exit("FAIL: README.md's demo output differs from what kveval prints (masked: phase seconds, tokens/s)")
print(f"readme_demo_test: README's demo output matches ({len(got)} lines; phase seconds and tokens/s masked)")
PY
