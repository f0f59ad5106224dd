#!/usr/bin/env bash
# Checks the documentation: README.md and docs/**/*.md.
#   - every relative link [text](path#anchor) names a file or directory that
#     exists, and an anchor names a heading of the target (GitHub's anchors:
#     lower case, punctuation dropped, spaces to hyphens, -1, -2 for repeats);
#   - README.md has at most KVEVAL_README_MAX_LINES lines (default 350);
#   - no history terms (the pattern below): the tree says what the code does now;
#   - every footnote label [^x] is defined once ([^x]: ...) and every use has a definition;
#   - every doctest suite named in tests/ (TEST_SUITE("x") or TEST_SUITE_BEGIN("x"))
#     appears as `x` in docs/testing.md (checked when ROOT has a tests/ directory).
# Links inside fenced code blocks and inline code are not links. External
# links (http:, https:, mailto:) are not fetched.
# Usage: scripts/check-docs.sh [ROOT]   (ROOT: the repository, default this script's parent)
# Exit 0 when everything holds, 1 with one line per problem otherwise.
set -euo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
exec /usr/bin/python3 - "$root" "${KVEVAL_README_MAX_LINES:-350}" <<'PY'
import os, re, sys, unicodedata

root, max_lines = sys.argv[1], int(sys.argv[2])
# Work-log terms (a numbered work session or issue, a benchmark session); written with [] so this file does not match.
HISTORY = re.compile(r"[s]top [0-9]+|[s]itting|[i]ssue [0-9]+", re.IGNORECASE)
LINK = re.compile(r"(?<!\\)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[(?!\^)[^\]]+\]:\s*(\S+)")  # [name]: target (not a [^footnote]:)
FENCE = re.compile(r"^\s{0,3}(```+|~~~+)")
FOOTDEF = re.compile(r"^\s{0,3}\[\^([^\]\s]+)\]:")
FOOTUSE = re.compile(r"\[\^([^\]\s]+)\](?!:)")
SUITE = re.compile(r"\bTEST_SUITE(?:_BEGIN)?\(\s*\"([^\"]+)\"")
problems = []


def md_files():
    files = [os.path.join(root, "README.md")]
    for d, _, names in os.walk(os.path.join(root, "docs")):
        files += [os.path.join(d, n) for n in sorted(names) if n.endswith(".md")]
    return [f for f in files if os.path.isfile(f)]


def prose_lines(text):
    """(line number, line) outside fenced code blocks, inline code removed."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if m:
            mark = m.group(1)
            if fence is None:
                fence = mark[0] * len(mark)
            elif mark.startswith(fence):
                fence = None
            continue
        if fence is None:
            yield n, re.sub(r"(`+)(?:(?!\1).)+?\1", "", line)


def slug(heading):
    """GitHub's heading anchor."""
    s = re.sub(r"<[^>]+>", "", heading.strip().lower())
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s)  # a link in a heading keeps its text
    out = []
    for ch in s:
        cat = unicodedata.category(ch)
        if ch in " -_" or cat[0] in "LN" or cat == "Mn":
            out.append("-" if ch == " " else ch)
    return "".join(out)


anchor_cache = {}


def anchors(path):
    if path not in anchor_cache:
        seen, result = {}, set()
        fence = None
        for line in open(path, encoding="utf-8").read().split("\n"):
            m = FENCE.match(line)
            if m:
                mark = m.group(1)
                if fence is None:
                    fence = mark[0] * len(mark)
                elif mark.startswith(fence):
                    fence = None
                continue
            h = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line) if fence is None else None
            if h:
                base = slug(h.group(1))
                k = seen.get(base, 0)
                seen[base] = k + 1
                result.add(base if k == 0 else f"{base}-{k}")
            for a in re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", line):
                result.add(a)
        anchor_cache[path] = result
    return anchor_cache[path]


def check_link(src, n, target):
    if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
        return
    path, _, frag = target.partition("#")
    dest = os.path.normpath(os.path.join(os.path.dirname(src), path)) if path else src
    rel = os.path.relpath(src, root)
    if not os.path.exists(dest):
        problems.append(f"{rel}:{n}: broken link '{target}': {os.path.relpath(dest, root)} does not exist")
        return
    if frag and dest.endswith(".md") and os.path.isfile(dest) and frag not in anchors(dest):
        problems.append(f"{rel}:{n}: broken anchor '{target}': no heading '#{frag}' in {os.path.relpath(dest, root)}")


def check_footnotes(rel, text):
    """A footnote label defined twice, or used without a definition."""
    defined, used = {}, {}
    for n, line in prose_lines(text):
        m = FOOTDEF.match(line)
        if m:
            label = m.group(1)
            if label in defined:
                problems.append(f"{rel}:{n}: footnote [^{label}] defined twice (first on line {defined[label]})")
            else:
                defined[label] = n
            line = line[m.end():]
        for u in FOOTUSE.finditer(line):
            used.setdefault(u.group(1), n)
    for label, n in used.items():
        if label not in defined:
            problems.append(f"{rel}:{n}: footnote [^{label}] used without a definition")


def check_suites():
    """Every doctest suite named in tests/ appears as `suite` in docs/testing.md."""
    tests = os.path.join(root, "tests")
    if not os.path.isdir(tests):
        return
    doc = os.path.join(root, "docs", "testing.md")
    text = open(doc, encoding="utf-8").read() if os.path.isfile(doc) else ""
    suites = {}
    for d, _, names in os.walk(tests):
        for name in sorted(names):
            if name.endswith((".cpp", ".hpp", ".h")):
                path = os.path.join(d, name)
                for m in SUITE.finditer(open(path, encoding="utf-8", errors="replace").read()):
                    suites.setdefault(m.group(1), os.path.relpath(path, root))
    for suite, where in sorted(suites.items()):
        if f"`{suite}`" not in text:
            problems.append(f"docs/testing.md: suite `{suite}` ({where}) not listed")


for f in md_files():
    text = open(f, encoding="utf-8").read()
    rel = os.path.relpath(f, root)
    check_footnotes(rel, text)
    for n, line in enumerate(text.split("\n"), 1):
        if HISTORY.search(line):
            problems.append(f"{rel}:{n}: history term '{HISTORY.search(line).group(0)}' (say what the code does now)")
    for n, line in prose_lines(text):
        for m in LINK.finditer(line):
            check_link(f, n, m.group(2))
        m = REFDEF.match(line)
        if m:
            check_link(f, n, m.group(1))

check_suites()

readme = os.path.join(root, "README.md")
if os.path.isfile(readme):
    lines = open(readme, encoding="utf-8").read().count("\n")
    if lines > max_lines:
        problems.append(f"README.md: {lines} lines, over the budget of {max_lines}")
else:
    problems.append("README.md: missing")

for p in problems:
    print(f"check-docs: {p}")
if problems:
    print(f"check-docs: {len(problems)} problem(s)")
    sys.exit(1)
print(f"check-docs: {len(md_files())} files, links, anchors, footnotes, suites, length and history terms fine")
PY
