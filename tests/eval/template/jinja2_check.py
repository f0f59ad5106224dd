#!/usr/bin/env python3
"""ctest "eval.template_jinja2": every rendering case of tests/data/template_cases.json
rendered by Debian's python3-jinja2 with lm-eval's environment (lm_eval/utils.py
apply_template: BaseLoader, StrictUndefined, keep_trailing_newline=True, the
regex_replace filter) gives the case's `expected` text, the text kveval's own
engine must give too (tests/eval/template/test_template.cpp). A case marked
"jinja2_differs": "<reason>" must differ from jinja2 (so the mark cannot go stale).

Usage: jinja2_check.py SOURCE_DIR
Exit 0: all agree; 1: a case disagrees, the file is malformed or short, or jinja2 is missing.
"""
import json
import os
import re
import sys

# A truncated or emptied case file fails instead of passing with fewer cases
# (test_template.cpp checks the same minimum).
MIN_CASES = 96


def regex_replace(string, pattern, repl, count=0):
    """lm_eval/utils.py's regex_replace filter: re.sub."""
    return re.sub(pattern, repl, string, count=count)


def main():
    if len(sys.argv) != 2:
        print("usage: jinja2_check.py SOURCE_DIR", file=sys.stderr)
        return 1
    try:
        import jinja2
    except ImportError:
        print("FAIL: python3-jinja2 is not installed (scripts/packages.txt lists it: "
              "apt-get install --no-install-recommends python3-jinja2)", file=sys.stderr)
        return 1
    path = os.path.join(sys.argv[1], "tests", "data", "template_cases.json")
    with open(path, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    if len(cases) < MIN_CASES:
        print(f"FAIL: {path}: {len(cases)} cases, expected at least {MIN_CASES}", file=sys.stderr)
        return 1

    env = jinja2.Environment(loader=jinja2.BaseLoader(), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    env.filters["regex_replace"] = regex_replace
    failures = 0
    for n, case in enumerate(cases):
        template, context, expected = case["template"], case["context"], case["expected"]
        if not (isinstance(template, str) and isinstance(context, dict) and isinstance(expected, str)):
            print(f"FAIL: {path}: cases[{n}]: needs template (string), context (object), expected (string)",
                  file=sys.stderr)
            failures += 1
            continue
        try:
            got = env.from_string(template).render(**context)
        except Exception as e:  # a failing render is a disagreement like any other
            got = f"<{type(e).__name__}: {e}>"
        differs = case.get("jinja2_differs")
        if differs is None and got != expected:
            print(f"FAIL: cases[{n}] ({case.get('topic', '')}) {template!r}\n"
                  f"  jinja2:   {got!r}\n  expected: {expected!r}", file=sys.stderr)
            failures += 1
        elif differs is not None and got == expected:
            print(f"FAIL: cases[{n}] {template!r} is marked jinja2_differs ({differs}) but jinja2 agrees",
                  file=sys.stderr)
            failures += 1
        elif differs is not None:
            print(f"known difference: cases[{n}] {template!r}: {differs}")
    print(f"jinja2 {jinja2.__version__}: {len(cases) - failures} of {len(cases)} cases agree")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
