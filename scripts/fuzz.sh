#!/usr/bin/env bash
# Builds the three libFuzzer targets of tests/fuzz/ (GGUF reader, spec/JSONL
# loader, tokenizer) with clang, AddressSanitizer and UBSan in build-fuzz/,
# writes their seed corpora (tasks/, models/, tests/data/ and generated
# files), and runs each for SECONDS. Inputs that once crashed live in
# tests/fuzz/regressions/<target>/ and are replayed first. New interesting
# inputs accumulate in build-fuzz/corpus/<target>/; a crash leaves its input in
# build-fuzz/artifacts/ and makes this script exit 1.
# Usage: scripts/fuzz.sh [SECONDS]            (default 60; 0 builds and replays the seeds only)
# Env:   KVEVAL_FUZZ_RUNS=N   run N executions per target instead of SECONDS
#        KVEVAL_FUZZ_JOBS=N   targets fuzzed at the same time (default: all three)
#        KVEVAL_FUZZ_BUILD_DIR (default build-fuzz)
#        KVEVAL_SHARED_DIR    read-only fixtures (default ../shared): the tokenizer target
#                             also fuzzes the vocabularies of its tokenizers/ when present
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
seconds=${1:-60}
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "fuzz: SECONDS must be a non-negative integer, got '$seconds'" >&2; exit 2; }
build=${KVEVAL_FUZZ_BUILD_DIR:-build-fuzz}
jobs=${KVEVAL_FUZZ_JOBS:-3}
targets=(gguf spec tokenizer)

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
CXX=clang++ cmake -S tests/fuzz -B "$build" "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)"

# Seed corpora, rewritten on every run.
seeds=$build/seeds
rm -rf "$seeds"
mkdir -p "$seeds"/{gguf,spec,tokenizer} "$build"/artifacts
for t in "${targets[@]}"; do mkdir -p "$build/corpus/$t"; done
"$build"/make_seeds "$seeds/gguf"
# Vocabularies of the tokenizer target: the real model's, then ../shared's (llama.cpp's test vocabularies).
shared=${KVEVAL_SHARED_DIR:-$root/../shared}
vocabs=()
[ -f models/stories260K.gguf ] && vocabs+=("$root/models/stories260K.gguf")
for v in "$shared"/tokenizers/ggml-vocab-*.gguf; do [ -f "$v" ] && vocabs+=("$(cd "$(dirname "$v")" && pwd)/$(basename "$v")"); done
export KVEVAL_FUZZ_VOCABS
KVEVAL_FUZZ_VOCABS=$(IFS=:; echo "${vocabs[*]}")
if [ -f models/stories260K.gguf ]; then  # the real model's metadata (its tensors are cut off)
  head -c 16384 models/stories260K.gguf >"$seeds/gguf/stories260K_head.gguf"
fi
/usr/bin/python3 - "$seeds" "$KVEVAL_FUZZ_VOCABS" <<'PY'
import json, os, sys
seeds = sys.argv[1]
vocabs = [v for v in sys.argv[2].split(":") if v] + ["synthetic"]  # the target's order; its first byte picks one
demo = json.load(open("tasks/demo.json"))
n = 0
def put(sub, text):
    global n
    n += 1
    with open(os.path.join(seeds, sub, f"seed{n:03}"), "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(text)
# spec: each demo task on a 6-line excerpt of its data ("d.jsonl"), then variants
for task in demo["tasks"]:
    lines = open(os.path.join("tasks", task["dataset_path"]), encoding="utf-8").read().splitlines()[:6]
    t = dict(task, dataset_path="d.jsonl")
    put("spec", json.dumps({"model": "m.gguf", "batch_size": 2, "max_length": 64, "tasks": [t]}, indent=1)
        + "\n#jsonl\n" + "\n".join(lines) + "\n")
    put("spec", "\n".join(lines) + "\n")
    for line in lines:
        put("tokenizer", chr(n % len(vocabs)) + line)
put("spec", open("tasks/demo.json").read())
put("spec", json.dumps({"model": "m.gguf", "seed": 7, "limit": 2, "tasks": [
    {"name": "mc", "output_type": "multiple_choice", "docs": [
        {"q": "Lily had a", "c": ["ball", "car"], "g": 0, "meta": {"t": "x"}},
        {"q": "Tom saw a", "c": ["dog", "cat"], "g": "cat", "meta": {"t": "y"}},
        {"q": "The sky is", "c": ["blue", "red"], "g": "1", "meta": {"t": "z"}}],
     "doc_to_text": "Q: {{q}} ({{meta.t}})\nA:", "doc_to_choice": "{{c}}", "doc_to_target": "g",
     "num_fewshot": 1, "fewshot_delimiter": "\n", "target_delimiter": " ", "description": "Stories.\n",
     "metric_list": [{"metric": "acc"}, "acc_norm"]},
    {"name": "gen", "output_type": "generate_until", "dataset_path": "d.jsonl", "doc_to_text": "prompt",
     "doc_to_target": "answer", "generation_kwargs": {"until": [".", "\n"], "max_gen_toks": 8,
                                                     "do_sample": False, "temperature": 0}},
    {"name": "roll", "output_type": "loglikelihood_rolling", "docs": [{"text": "a b", "n": 1.5, "b": True}],
     "doc_to_target": "{{text}} {{n}} {{b}}"},
    {"name": "ll", "output_type": "loglikelihood", "docs": [{"c": "x", "t": 5}], "doc_to_text": "c",
     "doc_to_target": "t", "fewshot_split": "d.jsonl", "num_fewshot": 0}]})
    + "\n#jsonl\n" + '{"prompt": "Once upon a time", "answer": "there"}\n\n{"prompt": "caf\\u00e9", "answer": 1}\n')
# tokenizer (first byte: the vocabulary): the reference texts, llama.cpp's test texts of each
# vocabulary (.inp files, split at "\n__ggml_vocab_test__\n"), some edge cases for every vocabulary
for c in json.load(open("tests/data/stories260K.reference.json"))["tokenize"]:
    put("tokenizer", "\x00" + c["text"])
for i, v in enumerate(vocabs):
    if os.path.isfile(v + ".inp"):
        for text in open(v + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")[:-1][:24]:
            put("tokenizer", chr(i) + text)
    for s in ["", " ", "  a  b  ", "\n\t\r", "caf\u00e9 \U0001F642 \u732b", "\u2581x", "a\x00b", "\ufffd",
              "x\udcff\udcfey", "<|endoftext|><s></s>[INST]"]:
        put("tokenizer", chr(i) + s)
PY

status=0
run_one() {  # target -> exit status of the fuzzer
  local t=$1 dirs=("$build/corpus/$1" "$seeds/$1")
  [ -d "tests/fuzz/regressions/$t" ] && dirs+=("tests/fuzz/regressions/$t")
  local limit=(-max_total_time="$seconds")
  [ -n "${KVEVAL_FUZZ_RUNS:-}" ] && limit=(-runs="$KVEVAL_FUZZ_RUNS")
  [ "$seconds" = 0 ] && [ -z "${KVEVAL_FUZZ_RUNS:-}" ] && limit=(-runs=0)
  "$build/fuzz_$t" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t-" "${dirs[@]}" >"$build/fuzz_$t.log" 2>&1
}
pids=()
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
  run_one "$t" &
  pids+=($!)
done
for i in "${!targets[@]}"; do
  t=${targets[$i]}
  if wait "${pids[$i]}"; then result=ok; else result=FAILED; status=1; fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build/fuzz_$t.log" | grep -o '[0-9]*$' || echo '?')
  corpus=$(find "$build/corpus/$t" -type f | wc -l)
  echo "fuzz: $t: $result, $execs executions, corpus $corpus files (log $build/fuzz_$t.log)"
  if [ $result = FAILED ]; then
    grep -E 'ERROR|SUMMARY|property failed|Test unit written|deadly|terminate' "$build/fuzz_$t.log" | head -20 >&2 || true
  fi
done
exit $status
