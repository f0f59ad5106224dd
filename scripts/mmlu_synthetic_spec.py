#!/usr/bin/python3
"""An MMLU-shaped synthetic multiple_choice spec for benchmarking log-likelihood
scoring (docs/bench.md): every document is a few-shot prompt of `--shots`
solved questions and one open question, about `--context-words` words in all
(~600 tokens with a Llama 3 vocabulary at the default 450 words), and four
one-token choices " A", " B", " C", " D", as lm-eval's mmlu tasks ask
("Answer:" + " A"...). The words are drawn from a fixed list with a seeded
random generator, so the same arguments give the same files. With
--shared-shots every document gets the same solved questions (lm-eval's
first_n sampler over a dev split: every document of an MMLU subject has the
same five shots), so the documents share a prefix of ~500 tokens; without it
each document draws its own. The numbers it measures are time and tokens;
accuracies are meaningless.

Writes OUTDIR/mmlu_synthetic.json and OUTDIR/mmlu_synthetic.jsonl into a folder
outside the repository.

Usage:
    scripts/mmlu_synthetic_spec.py OUTDIR [--docs 8] [--shots 5] [--context-words 450]
        [--seed 1] [--model FILE] [--batch-size B] [--shared-shots]

Exit status: 0, or 1 with one line on stderr for bad arguments or an output
folder inside the repository.
"""
import argparse
import json
import os
import random
import sys

REPO = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
WORDS = ("the of and to in is was for that with as by on are from at which be this an has or were its it can "
         "energy cell market law theory river state number system force value model group process change "
         "temperature pressure reaction protein economy court policy language history culture equation "
         "function matrix vector graph signal current voltage mass velocity acid enzyme gene species").split()


def fail(msg):
    sys.stderr.write(f"mmlu_synthetic_spec: {msg}\n")
    sys.exit(1)


def sentence(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize()


def question(rng, words, answer):
    """One question block of about `words` words; with answer, solved."""
    stem = sentence(rng, max(4, words - 4 * 5)) + "?"
    opts = "\n".join(f"{l}. {sentence(rng, 5)}" for l in "ABCD")
    return f"{stem}\n{opts}\nAnswer:" + (f" {answer}\n\n" if answer else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--docs", type=int, default=8)
    ap.add_argument("--shots", type=int, default=5)
    ap.add_argument("--context-words", type=int, default=450)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", default="")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--shared-shots", action="store_true")
    a = ap.parse_args()
    if a.docs < 1 or a.shots < 0 or a.context_words < 40 or a.batch_size < 1:
        fail("--docs >= 1, --shots >= 0, --context-words >= 40 and --batch-size >= 1 are needed")
    out = os.path.realpath(a.outdir)
    if out == REPO or out.startswith(REPO + os.sep):
        fail(f"{a.outdir}: inside the repository ({REPO}); write the spec to a folder outside it")
    rng = random.Random(a.seed)
    per_q = a.context_words // (a.shots + 1)
    os.makedirs(out, exist_ok=True)
    head = "The following are multiple choice questions (with answers).\n\n"
    draw_shots = lambda: "".join(question(rng, per_q, rng.choice("ABCD")) for _ in range(a.shots))
    shared = draw_shots() if a.shared_shots else None
    with open(os.path.join(out, "mmlu_synthetic.jsonl"), "w", encoding="utf-8") as f:
        for _ in range(a.docs):
            shots = shared if shared is not None else draw_shots()
            f.write(json.dumps({"question": head + shots + question(rng, per_q, None),
                                "choices": [" A", " B", " C", " D"], "answer": rng.randrange(4)}) + "\n")
    spec = {"batch_size": a.batch_size, "tasks": [{
        "name": "mmlu_synthetic", "output_type": "multiple_choice", "dataset_path": "mmlu_synthetic.jsonl",
        "doc_to_text": "question", "doc_to_choice": "choices", "doc_to_target": "answer",
        "target_delimiter": "", "metric_list": ["acc"]}]}
    if a.model:
        spec["model"] = os.path.abspath(a.model)
    with open(os.path.join(out, "mmlu_synthetic.json"), "w", encoding="utf-8") as f:
        json.dump(spec, f, indent=2)
        f.write("\n")
    print(f"{a.docs} documents: {os.path.join(out, 'mmlu_synthetic.json')}")


if __name__ == "__main__":
    main()
