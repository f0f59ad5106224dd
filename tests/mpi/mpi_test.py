#!/usr/bin/env python3
"""MPI tests, run by ctest when kveval is built with MPI.

- `mpirun -np 2` and `-np 3` on tasks/demo.json give results and samples
  byte-identical to the one-process run, timings excluded ("date",
  "total_evaluation_time_seconds", and "phases", "cache", "instrumentation",
  "memory" (but its weight bytes) and "distributed" under "kveval" hold timings
  and per-rank figures;
  everything else must be equal, and the samples file byte for byte);
- sampled generation (--gen-kwargs do_sample=true) gives the same samples with
  -np 2 as with one process;
- a rank that throws, or is killed, mid-run ends every rank with a non-zero exit
  and a clear message within 10 s;
- a rank that fails at load names itself and its host; the exit code of rank 0
  (here 3, a baseline regression) is every rank's;
- ranks compare what they read before any work: a rank whose `m.gguf` is
  another file (same path, another working directory) stops every rank with
  exit 2 and one line naming the rank, its host, the file and both sha256; the
  results of an agreeing run list the hashes every rank read.
Usage: mpi_test.py KVEVAL_BIN SOURCE_DIR MODEL MPIRUN. Exit 77 (skipped) without the model.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    kveval, src, model, mpirun = sys.argv[1:5]
    kveval = os.path.abspath(kveval)  # the ranks below start in other working directories
    if not os.path.exists(model):
        print(f"skipped: model not found at {model} (run scripts/fetch-model.sh)")
        return SKIP
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none", OMP_WAIT_POLICY="PASSIVE")
    env.pop("KVEVAL_FAULT_INJECT", None)
    spec = os.path.abspath(os.path.join(src, "tasks", "demo.json"))
    failures = []

    def check(cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            failures.append(what)

    def run(np, tmp, tag, extra=(), fault=None, timeout=120):
        out = os.path.join(tmp, tag + ".json")
        samples = os.path.join(tmp, tag + ".jsonl")
        cmd = [kveval, "run", spec, "--model", model, "--threads", "1", "-q", "-o", out, "--log-samples", samples]
        cmd += list(extra)
        if np:
            cmd = [mpirun, "--oversubscribe", "-np", str(np)] + cmd
        e = dict(env)
        if fault:
            e["KVEVAL_FAULT_INJECT"] = fault
        t0 = time.monotonic()
        p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)
        return p, time.monotonic() - t0, out, samples

    with tempfile.TemporaryDirectory(prefix="kveval_mpi_") as tmp:
        p, _, out1, samples1 = run(0, tmp, "single")
        check(p.returncode == 0, f"one process exits 0 (got {p.returncode}: {p.stderr.strip()[-300:]})")
        r1 = json.load(open(out1))
        s1 = open(samples1, "rb").read()
        for np in (2, 3):
            p, secs, out, samples = run(np, tmp, f"np{np}")
            check(p.returncode == 0, f"-np {np} exits 0 (got {p.returncode}: {p.stderr.strip()[-300:]})")
            if p.returncode != 0:
                continue
            r = json.load(open(out))
            check(open(samples, "rb").read() == s1, f"-np {np}: samples byte-identical to one process")
            # per-rank figures: timings, each rank's cache shape, forward passes (more ranks, more batches)
            timing_keys = {"date", "total_evaluation_time_seconds"}
            kveval_timing_keys = {"phases", "cache", "distributed", "instrumentation", "samples", "memory"}
            same = {k: r1[k] == r.get(k) for k in r1 if k not in timing_keys | {"kveval"}}
            same.update({"kveval." + k: r1["kveval"][k] == r["kveval"].get(k) for k in r1["kveval"]
                         if k not in kveval_timing_keys})
            check(all(same.values()), f"-np {np}: results identical except timings ({[k for k, v in same.items() if not v]})")
            # each rank plans and measures its own memory; the weights are the same on every rank
            same_weights = r1["kveval"]["memory"]["resident_weight_bytes"] == r["kveval"]["memory"]["resident_weight_bytes"]
            check(same_weights, f"-np {np}: the same resident weight bytes as one process")
            # each results file names its own samples file; the bytes, and so the sha256, are the same
            check(r["kveval"]["samples"] == {"path": samples, "sha256": r1["kveval"]["samples"]["sha256"]},
                  f"-np {np}: results name the samples file and its sha256")
            ins = r["kveval"].get("instrumentation", {})
            check(ins.get("loglikelihood_forward_with_cache_setup") == 0 and ins.get("loglikelihood_forward_cached") == 0
                  and ins.get("loglikelihood_forward_calls", 0) > 0,
                  f"-np {np}: no log-likelihood pass ran with a cache on any rank")
            d = r["kveval"].get("distributed", {})
            check(d.get("ranks") == np and len(d.get("hosts", [])) == np,
                  f"-np {np}: results name {np} ranks and their hosts")
            files = {i.get("file"): i for i in d.get("inputs", [])}
            model_in = files.get("the model file", {})
            check(model_in.get("sha256") == r["kveval"]["model"]["sha256"] == sha256(model)
                  and model_in.get("bytes") == os.path.getsize(model)
                  and files.get("the spec file", {}).get("sha256") == sha256(spec),
                  f"-np {np}: results record the model's and the spec's hashes every rank agreed on")
            ll = [ph for ph in d.get("phases", []) if ph["name"] == "loglikelihood"]
            check(len(ll) == 1 and len(ll[0]["rank_seconds"]) == np and ll[0]["imbalance"] is not None
                  and ll[0]["cpu_seconds"] >= ll[0]["wall_seconds"] > 0,
                  f"-np {np}: per-rank loglikelihood seconds, CPU sum >= wall, imbalance present")

        # sampling: draws are keyed by the global request index, so the rank count does not change them
        gk = ("--gen-kwargs", "do_sample=true,temperature=1.2,top_k=0,seed=5")
        p, _, _, sampled1 = run(0, tmp, "sampled_single", gk)
        check(p.returncode == 0, f"sampled one process exits 0 (got {p.returncode}: {p.stderr.strip()[-300:]})")
        p2, _, _, sampled2 = run(2, tmp, "sampled_np2", gk)
        check(p.returncode == 0 and p2.returncode == 0
              and open(sampled2, "rb").read() == open(sampled1, "rb").read() != s1,
              "-np 2 sampled (--gen-kwargs do_sample=true): samples byte-identical to one process, not the greedy ones")

        # failures: a throwing or killed rank ends the whole run quickly
        for action in ("throw", "kill"):
            p, secs, _, _ = run(3, tmp, "fault_" + action, fault=f"1:loglikelihood:{action}", timeout=60)
            check(p.returncode != 0, f"rank 1 {action}s mid-run: non-zero exit (got {p.returncode})")
            check(secs < 10, f"rank 1 {action}s mid-run: all ranks end within 10 s (took {secs:.1f} s)")
            if action == "throw":
                check("rank 1 (" in p.stderr and "injected fault in phase loglikelihood" in p.stderr,
                      "the throwing rank's message names rank, host and error")
        p, secs, _, _ = run(2, tmp, "fault_load", fault="1:load:throw", timeout=60)
        host = os.uname().nodename
        check(p.returncode == 1 and f"rank 1 ({host}): error: injected fault in phase load" in p.stderr,
              f"a rank failing at load: exit 1 and its rank and host named (got {p.returncode}: {p.stderr.strip()[:300]})")
        check(p.stderr.count("injected fault") == 1, "the load failure is reported once")
        check(secs < 10, f"load failure ends all ranks within 10 s (took {secs:.1f} s)")

        # rank 0's exit code is every rank's: a baseline regression (exit 3)
        worse = dict(r1)
        worse["results"] = json.loads(json.dumps(r1["results"]))
        task = next(t for t, m in worse["results"].items() if isinstance(m.get("acc,none"), (int, float)))
        worse["results"][task]["acc,none"] = 2.0
        base = os.path.join(tmp, "baseline.json")
        json.dump(worse, open(base, "w"))
        p, _, _, _ = run(2, tmp, "regress", extra=["--baseline", base])
        check(p.returncode == 3 and "regression:" in p.stderr and p.stderr.count("regression:") == 1,
              f"-np 2 with a worse baseline: exit 3, reported once (got {p.returncode})")


        # the same path names another file on rank 1: every rank stops before any work
        dirs = [os.path.join(tmp, "host_a"), os.path.join(tmp, "host_b")]
        for dname in dirs:
            os.makedirs(dname)
        os.symlink(os.path.abspath(model), os.path.join(dirs[0], "m.gguf"))
        other = os.path.join(dirs[1], "m.gguf")
        shutil.copyfile(model, other)
        with open(other, "ab") as f:
            f.write(b"\0")  # one byte past the data section: same tensors, another file
        p1 = subprocess.run([kveval, "run", spec, "--model", other, "--threads", "1", "-q", "--limit", "1"], env=env,
                            capture_output=True, text=True, timeout=120)
        check(p1.returncode == 0, f"the other file alone loads and runs (got {p1.returncode}: {p1.stderr.strip()[-300:]})")
        cmd = [mpirun, "--oversubscribe"]
        for i, dname in enumerate(dirs):
            cmd += ([":"] if i else []) + ["-np", "1", "-wdir", dname, kveval, "run", spec, "--model", "m.gguf",
                                            "--threads", "1", "-q", "-o", os.path.join(tmp, "differ.json")]
        t0 = time.monotonic()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        secs = time.monotonic() - t0
        lines = [ln for ln in p.stderr.splitlines() if "differs between ranks" in ln]
        check(p.returncode == 2, f"rank 1 reads another model file: exit 2 (got {p.returncode}: {p.stderr.strip()[-400:]})")
        check(len(lines) == 1 and lines[0].startswith(f"kveval: rank 1 ({host}): error: the model file m.gguf")
              and sha256(model) in lines[0] and sha256(other) in lines[0]
              and str(os.path.getsize(model)) in lines[0] and str(os.path.getsize(other)) in lines[0],
              f"one line names the rank, host, file and both hashes (got {lines or p.stderr.strip()[-400:]})")
        check(not os.path.exists(os.path.join(tmp, "differ.json")), "no results file is written")
        check(secs < 30, f"the disagreement ends all ranks quickly (took {secs:.1f} s)")

        # the same spec path, a data file that differs on rank 1 (one more empty line): stopped before the model loads
        for dname in dirs:
            shutil.copytree(os.path.join(src, "tasks"), os.path.join(dname, "tasks"))
        data = os.path.join(dirs[1], "tasks", "story_cloze.jsonl")
        with open(data, "a") as f:
            f.write("\n")
        cmd = [mpirun, "--oversubscribe"]
        for i, dname in enumerate(dirs):
            cmd += ([":"] if i else []) + ["-np", "1", "-wdir", dname, kveval, "run", os.path.join("tasks", "demo.json"),
                                            "--model", os.path.abspath(model), "--threads", "1", "-q"]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        lines = [ln for ln in p.stderr.splitlines() if "differs between ranks" in ln]
        check(p.returncode == 2 and len(lines) == 1 and f"rank 1 ({host}): error: dataset_path of task " in lines[0]
              and sha256(data) in lines[0] and sha256(os.path.join(dirs[0], "tasks", "story_cloze.jsonl")) in lines[0],
              f"rank 1 reads another data file: exit 2, one line with both hashes (got {p.returncode}: {lines or p.stderr.strip()[-400:]})")

    n_fail = len(failures)
    print(f"mpi: {n_fail} failed" if n_fail else "mpi: all checks passed")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
