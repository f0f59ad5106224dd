#!/usr/bin/env python3
"""Checks kveval's results and samples files against lm-evaluation-harness's formats.

1. Both validate against tests/data/results.schema.json and samples.schema.json (python3-jsonschema).
2. lm-eval's table printer works on the results file: make_table() below is lm_eval/utils.py
   make_table's logic (its reads of "results", "versions", "n-shot", "higher_is_better",
   "group_subtasks", the "metric,filter" split, the "N/A" stderr), printing plain Markdown rows
   instead of pytablewriter's.
3. Samples: one line per (task, filter, document); each metric named in "metrics" has a value; the
   hashes are SHA-256 of what lm-eval hashes (prompt: arguments.gen_args_0.arg_0; target: str(target)).
4. The schema can fail: a results file with a null stderr (lm-eval's table printer would crash
   on it) or without "versions" is rejected.
Usage: check_lm_eval_format.py RESULTS SAMPLES SCHEMA_DIR
   or: check_lm_eval_format.py --run KVEVAL_BIN SOURCE_DIR MODEL (runs tasks/demo.json and
       tasks/lm_eval/all.json first;
       exit 77 = skipped when the model is absent)
"""
import copy
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import jsonschema

HIGHER_IS_BETTER_SYMBOLS = {True: "↑", False: "↓"}


def make_table(result_dict, column="results"):
    rows = []
    for k in result_dict[column].keys():
        dic = dict(result_dict[column][k])
        version = result_dict["versions"].get(k, "    N/A")
        n = str(result_dict.get("n-shot", " ").get(k, " "))
        higher_is_better = result_dict.get("higher_is_better", {}).get(k, {})
        display_name = dic.pop("alias", k)
        dic.pop("name", None)
        dic.pop("sample_len", None)
        dic.pop("sample_count", None)
        k = display_name
        for mf, v in sorted(dic.items()):
            m, _, f = mf.partition(",")
            if m.endswith("_stderr"):
                continue
            hib = HIGHER_IS_BETTER_SYMBOLS.get(higher_is_better.get(m), "")
            v = f"{v:.4f}" if isinstance(v, float) else v
            if m + "_stderr" + "," + f in dic:
                se = dic[m + "_stderr" + "," + f]
                se = "   N/A" if se == "N/A" else f"{se:.4f}"
                rows.append([k, version, f, n, m, hib, v, "±", se])
            else:
                rows.append([k, version, f, n, m, hib, v, "", ""])
            k = ""
            version = ""
    head = ["Tasks", "Version", "Filter", "n-shot", "Metric", "", "Value", "", "Stderr"]
    return "\n".join("|" + "|".join(str(c) for c in r) + "|" for r in [head] + rows)


def main():
    if sys.argv[1] == "--run":
        kveval, src, model = sys.argv[2:5]
        if not os.path.exists(model):
            print(f"skipped: model not found at {model} (run scripts/fetch-model.sh)")
            return 77
        # the demo, and the lm-eval YAML fixtures (filters: one sample per filter and document)
        for spec in (os.path.join(src, "tasks", "demo.json"), os.path.join(src, "tasks", "lm_eval", "all.json")):
            with tempfile.TemporaryDirectory(prefix="kveval_lmeval_") as tmp:
                r, s = os.path.join(tmp, "results.json"), os.path.join(tmp, "samples.jsonl")
                subprocess.run([kveval, "run", spec, "--model", model, "-q", "-o", r, "--log-samples", s], check=True,
                               stdout=subprocess.DEVNULL)
                check(r, s, os.path.join(src, "tests", "data"))
        return 0
    return check(*sys.argv[1:4])


def check(results_path, samples_path, schema_dir):
    results = json.load(open(results_path, encoding="utf-8"))
    samples = [json.loads(l) for l in open(samples_path, encoding="utf-8") if l.strip()]
    rs = json.load(open(f"{schema_dir}/results.schema.json", encoding="utf-8"))
    ss = json.load(open(f"{schema_dir}/samples.schema.json", encoding="utf-8"))
    jsonschema.validate(results, rs)
    for s in samples:
        jsonschema.validate(s, ss)
    # the results name the samples file they describe, by the sha256 of its bytes
    link = results["kveval"]["samples"]
    assert link["path"] == samples_path, f"results name samples {link['path']}"
    assert link["sha256"] == hashlib.sha256(open(samples_path, "rb").read()).hexdigest(), "samples sha256 differs"
    for broken in ("null stderr", "no versions"):
        bad = copy.deepcopy(results)
        if broken == "null stderr":
            task = next(iter(bad["results"].values()))
            key = next(k for k in task if "_stderr," in k)
            task[key] = None
        else:
            del bad["versions"]
        try:
            jsonschema.validate(bad, rs)
            raise AssertionError(f"the schema accepted a results file with {broken}")
        except jsonschema.ValidationError:
            pass
    table = make_table(results)
    print(table)
    n_rows = table.count("\n")
    assert n_rows >= len(results["results"]), "make_table printed fewer rows than tasks"
    # one sample per (task, filter, document), documents in order
    per_task = {}
    for s in samples:
        per_task.setdefault((s["task"], s["filter"]), []).append(s["doc_id"])
        for m in s["metrics"]:
            assert m in s, f"{s['task']} doc {s['doc_id']}: metric {m} named but missing"
        assert s["prompt_hash"] == hashlib.sha256(s["arguments"]["gen_args_0"]["arg_0"].encode()).hexdigest()
        assert s["target_hash"] == hashlib.sha256(str(s["target"]).encode()).hexdigest()
    for (task, filt), ids in per_task.items():
        assert ids == list(range(len(ids))), f"{task} {filt}: doc ids {ids}"
        assert len(ids) == results["n-samples"][task]["effective"], f"{task}: {len(ids)} samples"
        assert any(k.endswith("," + filt) for k in results["results"][task]), f"{task}: no metric of filter {filt}"
    assert {t for t, _ in per_task} == set(results["results"]), "samples and results name different tasks"
    print(f"lm_eval format: 1 passed, 0 failed ({len(samples)} samples, {len(results['results'])} tasks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
