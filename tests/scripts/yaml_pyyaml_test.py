#!/usr/bin/python3
"""eval.yaml_pyyaml: every value of every tests/data/yaml_corpus/*.yaml file as
kveval's YAML loader reads it (dumped as JSON by the doctest case "the corpus as
JSON for eval.yaml_pyyaml") equals PyYAML's (Debian's python3-yaml,
yaml.safe_load), types included (an int is not a float, a bool not an int).

Usage: yaml_pyyaml_test.py TEST_EVAL_BINARY SOURCE_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

import yaml


def same(a, b, path, problems):
    if type(a) is not type(b):
        problems.append(f"{path}: kveval {a!r} ({type(a).__name__}), PyYAML {b!r} ({type(b).__name__})")
    elif isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                problems.append(f"{path}.{k}: only in {'kveval' if k in a else 'PyYAML'}")
            else:
                same(a[k], b[k], f"{path}.{k}", problems)
    elif isinstance(a, list):
        if len(a) != len(b):
            problems.append(f"{path}: {len(a)} items in kveval, {len(b)} in PyYAML")
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]", problems)
    elif a != b:
        problems.append(f"{path}: kveval {a!r}, PyYAML {b!r}")


def main():
    binary, source = sys.argv[1], sys.argv[2]
    corpus = os.path.join(source, "tests", "data", "yaml_corpus")
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, KVEVAL_YAML_DUMP=out, KVEVAL_SOURCE_DIR=source)
        r = subprocess.run([binary, "-tc=the corpus as JSON for eval.yaml_pyyaml*"], env=env, capture_output=True,
                           text=True)
        if r.returncode != 0 or "test cases: 1 | 1 passed" not in r.stdout:
            print(r.stdout + r.stderr)
            return 1
        problems, n = [], 0
        for name in sorted(os.listdir(corpus)):
            if not name.endswith(".yaml"):
                continue
            with open(os.path.join(corpus, name), encoding="utf-8") as f:
                want = yaml.safe_load(f)
            with open(os.path.join(out, name[:-5] + ".json"), encoding="utf-8") as f:
                got = json.load(f)
            same(got, want, name, problems)
            n += 1
    for p in problems:
        print(p)
    print(f"yaml_pyyaml: {n} files, {len(problems)} difference(s) from PyYAML {yaml.__version__}")
    return 1 if problems or n == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
