#!/usr/bin/python3
"""Chart of `kveval bench --output json`: cached vs uncached tokens/s against
generated length (from the "speedup" rows), one line pair per (threads, batch,
prompt), log-scaled y axis, with the speedup and its ideal printed per point.

Usage: scripts/plot_bench.py BENCH.json [BENCH2.json ...] -o chart.svg|chart.png

Needs Debian's python3-matplotlib (runs on /usr/bin/python3). Exits with 2 and
a one-line message when the input has no "speedup" rows or is not bench JSON.
"""
import argparse
import json
import os
import sys


def load_rows(path):
    """The speedup rows of one bench JSON file, each tagged with the model path."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"plot_bench: {path}: cannot read bench JSON ({e})")
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise SystemExit(f"plot_bench: {path}: not `kveval bench --output json` output (no results array)")
    model = os.path.basename(str(doc.get("meta", {}).get("model", {}).get("path", path)))
    rows = []
    for i, r in enumerate(doc["results"]):
        if r.get("test") != "speedup":
            continue
        for key in ("threads", "batch", "n_prompt", "n_gen", "cached_tok_s", "uncached_tok_s", "median"):
            if not isinstance(r.get(key), (int, float)):
                raise SystemExit(f"plot_bench: {path}: results[{i}].{key} missing or not a number")
        rows.append(dict(r, model=model))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", help="kveval bench --output json files")
    ap.add_argument("-o", "--output", required=True, help="chart path (.svg or .png)")
    ap.add_argument("--title", default="kveval bench: cached vs uncached greedy generation")
    args = ap.parse_args(argv)
    ext = os.path.splitext(args.output)[1].lower()
    if ext not in (".svg", ".png"):
        raise SystemExit(f"plot_bench: --output must end in .svg or .png, got '{args.output}'")

    rows = [r for p in args.inputs for r in load_rows(p)]
    if not rows:
        print("plot_bench: no 'speedup' rows (run the bench with --tests tg,tg-nocache)", file=sys.stderr)
        return 2

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = {}
    for r in rows:
        key = (r["model"], int(r["threads"]), int(r["batch"]), int(r["n_prompt"]))
        groups.setdefault(key, []).append(r)

    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (key, rs) in enumerate(sorted(groups.items())):
        rs.sort(key=lambda r: r["n_gen"])
        model, threads, batch, prompt = key
        label = f"{model} t={threads} b={batch} p={prompt}"
        g = [r["n_gen"] for r in rs]
        color = colors[i % len(colors)]
        ax.plot(g, [r["cached_tok_s"] for r in rs], "-o", color=color, label=f"{label} cached")
        ax.plot(g, [r["uncached_tok_s"] for r in rs], "--s", color=color, label=f"{label} uncached")
        for r in rs:
            note = f"{r['median']:.1f}x"
            if isinstance(r.get("ideal_ratio"), (int, float)):
                note += f" (ideal {r['ideal_ratio']:.1f}x)"
            ax.annotate(note, (r["n_gen"], r["uncached_tok_s"]), textcoords="offset points", xytext=(4, -12),
                        fontsize=7, color=color)
    ax.set_xscale("log", base=2)
    ticks = sorted({int(r["n_gen"]) for r in rows})
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_yscale("log")
    ax.set_xlabel("generated tokens per row (G)")
    ax.set_ylabel("generated tokens/s (prefill + decode)")
    ax.set_title(args.title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.output)
    print(f"plot_bench: wrote {args.output} ({len(rows)} points)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
