#!/usr/bin/env python3
"""Progress of `kveval run` as a person and a CI log see it.

- In a terminal (tmux, capture-pane): the loglikelihood progress line appears
  within 1 s of the phase's start (its own elapsed field reads <= 1.0 s when
  first seen), is redrawn in place (one line, not a scroll of lines), and ends
  in its final state "N/N (100%)".
- Not a terminal: a plain line when the phase starts, heartbeat lines every
  --progress-interval seconds, and the final state; --quiet prints none.
Usage: progress_test.py KVEVAL_BIN MODEL. Exit 77 (skipped) without the model or tmux.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

N_DOCS = 500


def main():
    kveval, model = sys.argv[1:3]
    if not os.path.exists(model):
        print(f"skipped: model not found at {model}")
        return 77
    failures = []

    def check(cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            failures.append(what)

    story = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
             "One day, she saw a big red ball and she ran to get it. ")
    with tempfile.TemporaryDirectory(prefix="kveval_progress_") as tmp:
        with open(os.path.join(tmp, "data.jsonl"), "w") as f:
            for i in range(N_DOCS):
                f.write(json.dumps({"text": f"{i}. " + story}) + "\n")
        spec = os.path.join(tmp, "spec.json")
        json.dump({"model": os.path.abspath(model), "threads": 1, "batch_size": 8,
                   "tasks": [{"name": "roll", "output_type": "loglikelihood_rolling", "dataset_path": "data.jsonl",
                              "doc_to_text": "text"}]}, open(spec, "w"))
        env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")

        # not a terminal: heartbeat lines
        p = subprocess.run([kveval, "run", spec, "--progress-interval", "0.1"], capture_output=True, text=True, env=env)
        check(p.returncode == 0, f"non-TTY run exits 0 ({p.returncode}: {p.stderr[-200:]})")
        lines = [l for l in p.stderr.splitlines() if re.match(rf"kveval: loglikelihood: \d+/{N_DOCS} \(\d+%\)", l)]
        check(len(lines) >= 3, f"non-TTY: start, heartbeat and final lines ({len(lines)} lines)")
        check(bool(lines) and lines[-1].startswith(f"kveval: loglikelihood: {N_DOCS}/{N_DOCS} (100%)"),
              "non-TTY: the last line is the final state")
        check(any("req/s" in l and "tok/s" in l and "ETA" in l for l in lines), "non-TTY: rates and ETA shown")
        check(lines[0].startswith(f"kveval: loglikelihood: 0/{N_DOCS} (0%)") if lines else False,
              "non-TTY: the first line is the phase's start with its total")
        check("M req/s" not in p.stderr and "/0 (" not in p.stderr, "non-TTY: no line mixes two phases' counts")
        q = subprocess.run([kveval, "run", spec, "--progress-interval", "0.2", "-q"], capture_output=True, text=True,
                           env=env)
        check(q.returncode == 0 and "loglikelihood:" not in q.stderr, "--quiet prints no progress")

        # a terminal: tmux
        if not shutil.which("tmux"):
            print("skipped: tmux not installed (the set-up installs it)")
            return 77 if not failures else 1
        sock = os.path.join(tmp, "tmux.sock")
        done_flag = os.path.join(tmp, "done")
        cmd = f"{kveval} run {spec}; touch {done_flag}; sleep 60"
        subprocess.run(["tmux", "-S", sock, "new-session", "-d", "-x", "150", "-y", "40", cmd], check=True, env=env)
        try:
            first_elapsed, t0 = None, time.monotonic()
            while time.monotonic() - t0 < 120 and not os.path.exists(done_flag):
                pane = subprocess.run(["tmux", "-S", sock, "capture-pane", "-p"], capture_output=True, text=True).stdout
                m = re.search(r"loglikelihood: \d+/\d+ \(\d+%\).*\| (\d+\.\d) s", pane)
                if m and first_elapsed is None:
                    first_elapsed = float(m.group(1))
                time.sleep(0.05)
            pane = subprocess.run(["tmux", "-S", sock, "capture-pane", "-p"], capture_output=True, text=True).stdout
            check(first_elapsed is not None and first_elapsed <= 1.0,
                  f"TTY: the progress line is first seen within 1 s of the phase start ({first_elapsed} s)")
            check(f"loglikelihood: {N_DOCS}/{N_DOCS} (100%)" in pane, "TTY: the line ends in its final state")
            check(pane.count("loglikelihood:") == 1, "TTY: one line redrawn in place, not a scroll")
            check("| phase" in pane, "TTY: the tables follow")
        finally:
            subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True)
    print(f"progress: {len(failures)} failed" if failures else "progress: all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
