#!/usr/bin/env python3
"""Strong scaling of a distributed `kveval run`, and a model of larger runs.

Measures one rolling task (the paragraphs of README.md as documents, scored by a
random s15m-shape model) in one process and on 1..N MPI ranks of one thread each,
REPEATS times each, and prints the medians: log-likelihood phase wall seconds,
throughput ratio against one process, and load imbalance (max/mean of the ranks'
phase seconds, from the results file). Then it models 8 and 64 ranks from the
measured per-request token counts: the same longest-first balance kveval uses
(eval/shard.cpp), phase time = the busiest rank's cost / the measured rate, plus
a gather of every rank's outcomes to rank 0 (latency * log2(ranks) + bytes /
bandwidth, with the assumptions printed).

Usage: scripts/mpi_scaling.py [--ranks 2] [--repeats 3] [--kveval build/kveval]
Needs kveval built with MPI and `mpirun`; writes only to a temporary folder.
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

# s15m preset (src/model/random_model.cpp): n_embd 288, 6 layers, 6 heads, n_ff 768, vocab 32000
N_EMBD, N_LAYER, N_FF, N_VOCAB = 288, 6, 768, 32000
MATMUL_PARAMS = N_LAYER * (N_EMBD * 3 * N_EMBD + N_EMBD * N_EMBD + 3 * N_EMBD * N_FF) + N_EMBD * N_VOCAB


def forward_cost(n):
    """Same estimate as eval::forward_cost: 2*P*n + 2*n_layer*n_embd*n^2 FLOPs."""
    n = max(n, 0)
    return 2.0 * MATMUL_PARAMS * n + 2.0 * N_LAYER * N_EMBD * n * n


def balance(costs, size):
    """eval::balance_by_cost: longest first, to the least-loaded rank (lowest on ties)."""
    load = [0.0] * size
    for i in sorted(range(len(costs)), key=lambda i: -costs[i]):
        r = load.index(min(load))
        load[r] += costs[i]
    return load


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--kveval", default=os.path.join(root, "build", "kveval"))
    a = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_WAIT_POLICY="PASSIVE",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    with tempfile.TemporaryDirectory(prefix="kveval_scaling_") as tmp:
        model = os.path.join(tmp, "s15m.gguf")
        subprocess.run([a.kveval, "make-model", "--preset", "s15m", "-o", model], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        text = open(os.path.join(root, "README.md"), encoding="utf-8").read()
        paras = [p.strip() for p in re.split(r"\n\s*\n", text) if len(p.strip()) > 40]
        data = os.path.join(tmp, "docs.jsonl")
        with open(data, "w", encoding="utf-8") as f:
            for p in paras:
                f.write(json.dumps({"text": p}) + "\n")
        spec = os.path.join(tmp, "spec.json")
        json.dump({"model": model, "batch_size": 8, "tasks": [{"name": "readme", "output_type": "loglikelihood_rolling",
                                                               "dataset_path": data, "doc_to_text": "text"}]},
                  open(spec, "w"))

        def run(np, tag):
            out = os.path.join(tmp, tag + ".json")
            cmd = [a.kveval, "run", spec, "--threads", "1", "-q", "-o", out, "--log-samples", out + "l"]
            if np:
                cmd = ["mpirun", "--oversubscribe", "-np", str(np)] + cmd
            subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
            return json.load(open(out))

        def ll(r):
            return next(p for p in r["phases"] if p["name"] == "loglikelihood")

        rows = []
        singles = [ll(run(0, f"single{k}")) for k in range(a.repeats)]
        base = statistics.median(p["seconds"] for p in singles)
        tokens = singles[0]["tokens"]
        rows.append(("1 process", base, 1.0, None))
        for np in range(1, a.ranks + 1):
            rs = [run(np, f"np{np}_{k}") for k in range(a.repeats)]
            wall = statistics.median(ll(r)["seconds"] for r in rs)
            imb = [next(p for p in r["distributed"]["phases"] if p["name"] == "loglikelihood")["imbalance"]
                   for r in rs if "distributed" in r]
            rows.append((f"{np} rank{'s' if np > 1 else ''} x 1 thread", wall, base / wall,
                         statistics.median(imb) if imb else None))
        print(f"rolling task: {len(paras)} documents, {tokens} tokens, s15m shape, batch 8, medians of {a.repeats}")
        print("| run | loglikelihood s | tokens/s | speed-up | imbalance |")
        print("|---|---|---|---|---|")
        for name, wall, sp, imb in rows:
            print(f"| {name} | {wall:.3f} | {tokens / wall:.0f} | {sp:.2f}x | {'-' if imb is None else f'{imb:.3f}'} |")

        # model of larger runs from the measured per-request costs
        samples = [json.loads(l) for l in open(os.path.join(tmp, "single0.jsonl"), encoding="utf-8")]
        costs = []
        for s in samples:
            n = (s.get("n_context_tokens") or 0) + (s.get("tokens") or 0)
            costs.append(forward_cost(n))
        rate = sum(costs) / base  # cost units per second of one 1-thread rank
        latency, bandwidth, bytes_per_request = 20e-6, 1e9, 64
        print(f"\nmodel: the same {len(costs)} requests (and 8x, 64x as many) on N ranks; rate {rate:.3g} FLOP/s per rank "
              f"(measured); gather: {latency * 1e6:.0f} us x log2(N) + {bytes_per_request} B/request at "
              f"{bandwidth / 1e9:.0f} GB/s (assumed)")
        print("| requests | ranks | busiest rank s | imbalance | gather s | speed-up | efficiency |")
        print("|---|---|---|---|---|---|---|")
        for mult in (1, 8, 64):
            cs = costs * mult
            t1 = sum(cs) / rate
            for n in (8, 64):
                load = balance(cs, n)
                busiest = max(load) / rate
                imb = max(load) / (sum(load) / n)
                gather = latency * math.log2(n) + len(cs) * bytes_per_request / bandwidth
                t = busiest + gather
                print(f"| {len(cs)} | {n} | {busiest:.4f} | {imb:.3f} | {gather:.6f} | {t1 / t:.1f}x | {t1 / t / n:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
