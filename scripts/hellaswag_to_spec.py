#!/usr/bin/python3
"""HellaSwag in llama.cpp's text layout as a kveval spec, for side-by-side timings
with `llama-perplexity --hellaswag` on the same tasks (docs/bench.md).

The input holds 6 lines per task, as `llama-perplexity --hellaswag` reads it
(tools/perplexity/perplexity.cpp, hellaswag_score): the context (already
preprocessed as lm-eval's hellaswag task does), the gold ending's index, then
the four endings. llama-perplexity scores each ending as the tokens of
context + " " + ending after the common prefix; the spec does the same in
lm-eval's terms: a multiple_choice task with the context as doc_to_text, the
endings as choices, target_delimiter " ", metrics acc and acc_norm.

Writes OUTDIR/hellaswag.json (the spec) and OUTDIR/hellaswag.jsonl (one document
per task: context, endings, gold) into a folder outside the repository.

Usage:
    scripts/hellaswag_to_spec.py ../shared/bench/hellaswag-val-1000-1099.txt OUTDIR \\
        [--limit N] [--model FILE] [--batch-size B]

Exit status: 0, or 1 with one line on stderr for a malformed input or an
output folder inside the repository.
"""
import argparse
import json
import os
import sys

REPO = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def fail(msg):
    sys.stderr.write(f"hellaswag_to_spec: {msg}\n")
    sys.exit(1)


def outside_repo(path):
    """The real path of `path`; fails when it lies inside the repository."""
    real = os.path.realpath(path)
    if real == REPO or real.startswith(REPO + os.sep):
        fail(f"{path}: inside the repository ({REPO}); write the spec to a folder outside it")
    return real


def read_tasks(path, limit):
    """The tasks of a 6-lines-per-task file as dicts (context, endings, gold)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    while lines and lines[-1] == "":
        lines.pop()
    if len(lines) % 6 != 0 or not lines:
        fail(f"{path}: {len(lines)} lines, not a positive multiple of 6 (context, gold, 4 endings per task)")
    docs = []
    for t in range(len(lines) // 6):
        block = lines[6 * t:6 * t + 6]
        try:
            gold = int(block[1])
        except ValueError:
            fail(f"{path}:{6 * t + 2}: gold index {block[1]!r} is not an integer")
        if not 0 <= gold < 4:
            fail(f"{path}:{6 * t + 2}: gold index {gold} outside [0, 4)")
        docs.append({"context": block[0], "endings": block[2:6], "gold": gold})
        if limit and len(docs) == limit:
            break
    return docs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input", help="llama.cpp HellaSwag text file (6 lines per task)")
    ap.add_argument("outdir", help="folder for hellaswag.json and hellaswag.jsonl (outside the repository)")
    ap.add_argument("--limit", type=int, default=0, help="first N tasks only (default all)")
    ap.add_argument("--model", default="", help="the spec's model field (default none: pass -m to kveval run)")
    ap.add_argument("--batch-size", type=int, default=8)
    a = ap.parse_args()
    if a.limit < 0 or a.batch_size < 1:
        fail("--limit must be >= 0 and --batch-size >= 1")
    out = outside_repo(a.outdir)
    docs = read_tasks(a.input, a.limit)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "hellaswag.jsonl"), "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    spec = {"batch_size": a.batch_size, "tasks": [{
        "name": "hellaswag",
        "output_type": "multiple_choice",
        "dataset_path": "hellaswag.jsonl",
        "doc_to_text": "context",
        "doc_to_choice": "endings",
        "doc_to_target": "gold",
        "target_delimiter": " ",
        "metric_list": ["acc", "acc_norm"],
    }]}
    if a.model:
        spec["model"] = os.path.abspath(a.model)
    with open(os.path.join(out, "hellaswag.json"), "w", encoding="utf-8") as f:
        json.dump(spec, f, indent=2)
        f.write("\n")
    print(f"{len(docs)} tasks: {os.path.join(out, 'hellaswag.json')}")


if __name__ == "__main__":
    main()
