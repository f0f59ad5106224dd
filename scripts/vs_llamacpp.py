#!/usr/bin/python3
"""Prefill and decode throughput of kveval against llama.cpp's llama-bench on the
same GGUF files, run back to back, as a markdown table (docs/bench.md).

For every file and thread count it runs
    llama-bench -m FILE -p P -n N -r R -t T -o json
    kveval bench -m FILE -t T --dtype f32,bf16[,q8_0|q4_0] --tests pp,tg -p P -n N -r R -o json
and compares llama-bench's pp P / tg N (mean tok/s) with kveval's `ppP last`
(logits at the last position only, as llama-bench's pp) and `tgN` (median
tok/s). kveval's block dtype (q8_0, q4_0) is added when the file holds tensors
of that type. llama.cpp is not part of kveval: build it in a scratch folder
outside the repository and pass its llama-bench binary.

Usage:
    scripts/vs_llamacpp.py --llama-bench /scratch/llama.cpp/build/bin/llama-bench \\
        [--kveval build/kveval] [-t 1,2] [-p 512] [-n 128] [-r 3] [--json-out F] FILE [FILE ...]

Exit status: 0, or 1 with one line on stderr when a run fails or prints no result.
"""
import argparse
import json
import os
import subprocess
import sys


def run_json(cmd):
    """Runs cmd, returns its stdout parsed as JSON; exits 1 with one line on failure."""
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        return json.loads(out)
    except (OSError, subprocess.CalledProcessError, json.JSONDecodeError) as e:
        err = getattr(e, "stderr", "") or str(e)
        sys.exit(f"vs_llamacpp: {' '.join(cmd)} failed: {err.strip().splitlines()[-1] if err.strip() else e}")


def llama_bench(binary, path, threads, p, n, r):
    """{'pp': tok/s, 'tg': tok/s, 'commit': str} from llama-bench's JSON (mean of r runs)."""
    rows = run_json([binary, "-m", path, "-p", str(p), "-n", str(n), "-r", str(r), "-t", str(threads), "-o", "json"])
    res = {"commit": rows[0].get("build_commit", "?") if rows else "?"}
    for row in rows:
        if row.get("n_prompt") == p and row.get("n_gen") == 0:
            res["pp"] = row["avg_ts"]
        elif row.get("n_prompt") == 0 and row.get("n_gen") == n:
            res["tg"] = row["avg_ts"]
    if "pp" not in res or "tg" not in res:
        sys.exit(f"vs_llamacpp: llama-bench printed no pp{p} or tg{n} row for {path}")
    return res


def kveval_bench(binary, path, threads, p, n, r):
    """{dtype: {'pp': tok/s, 'tg': tok/s}} from kveval bench's JSON (medians), and its git hash."""
    probe = run_json([binary, "bench", "-m", path, "--tests", "load", "-r", "1", "-o", "json"])
    types = probe["meta"]["model"].get("tensor_types", {})
    dtypes = ["f32", "bf16"] + [b for b in ("q8_0", "q4_0") if b.upper() in types]
    rep = run_json([binary, "bench", "-m", path, "-t", str(threads), "--dtype", ",".join(dtypes), "--tests", "pp,tg",
                    "-p", str(p), "-n", str(n), "-r", str(r), "-o", "json"])
    res = {}
    for row in rep["results"]:
        d = res.setdefault(row["dtype"], {})
        if row["test"] == "pp" and row["name"] == f"pp{p} last":
            d["pp"] = row["median"]
        elif row["test"] == "tg" and row["name"] == f"tg{n}":
            d["tg"] = row["median"]
    for d in dtypes:
        if "pp" not in res.get(d, {}) or "tg" not in res.get(d, {}):
            sys.exit(f"vs_llamacpp: kveval bench printed no pp{p} last or tg{n} row for {path} --dtype {d}")
    return res, rep["meta"].get("git_hash", "?")


def fmt(v):
    """Tokens/s as the README's performance table prints them: whole numbers from 100, else 3 significant digits."""
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-bench", required=True, help="llama.cpp's llama-bench binary")
    ap.add_argument("--kveval", default=os.path.join(os.path.dirname(__file__), "..", "build", "kveval"),
                    help="kveval binary (default: build/kveval beside this script)")
    ap.add_argument("-t", "--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("-p", type=int, default=512, help="prompt tokens (pp)")
    ap.add_argument("-n", type=int, default=128, help="generated tokens (tg)")
    ap.add_argument("-r", type=int, default=3, help="repetitions")
    ap.add_argument("--json-out", help="also write every measurement to this JSON file")
    ap.add_argument("files", nargs="+", help="GGUF files")
    a = ap.parse_args()
    try:
        threads = [int(t) for t in a.threads.split(",")]
    except ValueError:
        sys.exit(f"vs_llamacpp: -t {a.threads!r}: expected comma-separated integers")
    for f in a.files:
        if not os.path.isfile(f):
            sys.exit(f"vs_llamacpp: {f}: no such file")
    head = ("| file | threads | pp: llama.cpp | kveval f32 | bf16 | blocks | bf16/f32 | best/llama.cpp "
            f"| tg{a.n}: llama.cpp | kveval f32 | bf16 | blocks | bf16/f32 | best/llama.cpp |")
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    dump = []
    commits = set()
    for f in a.files:
        for t in threads:
            lc = llama_bench(a.llama_bench, f, t, a.p, a.n, a.r)
            kv, kv_hash = kveval_bench(a.kveval, f, t, a.p, a.n, a.r)
            commits.add((lc["commit"], kv_hash))
            dump.append({"file": f, "threads": t, "llama.cpp": lc, "kveval": kv})
            cells = [os.path.basename(f), str(t)]
            for test in ("pp", "tg"):
                blocks = next((kv[b][test] for b in ("q8_0", "q4_0") if b in kv), None)
                best = max(v[test] for v in kv.values())
                cells += [fmt(lc[test]), fmt(kv["f32"][test]), fmt(kv["bf16"][test]),
                          fmt(blocks) if blocks is not None else "–",
                          f"{kv['bf16'][test] / kv['f32'][test]:.2f}×", f"**{best / lc[test]:.2f}×**"]
            lines.append("| " + " | ".join(cells) + " |")
            print(lines[-1], file=sys.stderr, flush=True)
    print(f"llama.cpp / kveval commits: {', '.join(f'{c} / {k}' for c, k in sorted(commits))}; "
          f"pp{a.p} (kveval: `pp{a.p} last`) and tg{a.n}; llama-bench mean, kveval median of {a.r}; tok/s\n")
    print("\n".join(lines))
    if a.json_out:
        tmp = a.json_out + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({"p": a.p, "n": a.n, "r": a.r, "rows": dump}, fh, indent=1)
        os.replace(tmp, a.json_out)


if __name__ == "__main__":
    main()
