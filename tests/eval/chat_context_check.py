#!/usr/bin/env python3
"""kveval's prompts under --apply-chat-template against an independent re-implementation of lm-eval's.

The re-implementation below follows lm-eval's main branch as written there
(lm_eval/api/task.py, lm_eval/api/utils.py, lm_eval/models/huggingface.py):
ConfigurableTask.fewshot_context (system prompt = maybe_delimit(system_instruction,
resolve_field(doc, description), fewshot_delimiter); each few-shot example and then
the evaluated document as build_qa_turn's Messages, the examples with their own
gen_prefix, the document with its answer left out; joined by requires_delimiter /
maybe_delimit; rendered as plain text, as to_dict() turns (multi-turn) or
through multiturn_to_singleturn), ContextSampler's draw (random.Random(seed).sample
of num_fewshot + 1 documents, the evaluated one dropped), construct_requests
(multiple_choice continuations keep target_delimiter under a chat template only
after a gen_prefix that does not end in whitespace, ends_with_whitespace) and
HFLM.apply_chat_template (add_generation_prompt unless a gen_prefix ends the
chat, continue_final_message = not add_generation_prompt as transformers cuts
it, the chat rendered once more without system messages when the template
raises). Templates render with Debian's python3-jinja2 in Hugging Face's chat
environment (hf_chat_check.py); the task's own templates with jinja2 as lm-eval's
utils.apply_template sets it up.

kveval runs the task folder tests/data/chat_task (multiple_choice and
generate_until, with and without description and gen_prefix, 0 and 2 shots)
with stories260K over several chat templates, with and without a system
instruction, single-turn and multi-turn, and without a chat template; every
sample's arguments (context and continuation) must equal the re-implementation's
byte for byte, and the results file must carry lm-eval's chat keys.

Usage: chat_context_check.py KVEVAL SOURCE_DIR MODEL   (exit 77 without the model)
"""
import ast
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile

import jinja2
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "template"))
from hf_chat_check import compile_template  # noqa: E402  (Hugging Face's chat environment)

TASKS = ["quiz_mc", "quiz_mc_desc", "quiz_mc_prefix", "quiz_gen", "quiz_gen_prefix"]
SHOTS = [0, 2]
LIMIT = 3
SEED = 1234
SYSTEM = "You are a quiz bot.\nBe brief."


def apply_template(source, doc):
    """lm-eval's utils.apply_template."""
    env = jinja2.Environment(loader=jinja2.BaseLoader(), undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(source).render(**doc)


def requires_delimiter(prefix, suffix):
    """lm_eval/api/utils.py (main branch), as written there."""
    if prefix == "":
        return False
    return not (prefix[-1].isspace() or suffix[0].isspace())


def maybe_delimit(prefix, suffix, delimiter=" "):
    """lm_eval/api/utils.py (main branch), as written there."""
    if not prefix:
        return suffix or ""
    if not suffix:
        return prefix or ""
    return prefix + delimiter + suffix if not (prefix[-1].isspace() or suffix[0].isspace()) else prefix + suffix


class Task:
    """The parts of lm-eval's ConfigurableTask these tasks use."""

    def __init__(self, path, docs):
        with open(path, encoding="utf-8") as f:
            self.cfg = yaml.safe_load(f)
        self.docs = docs
        self.target_delimiter = self.cfg.get("target_delimiter", " ")
        self.fewshot_delimiter = self.cfg.get("fewshot_delimiter", "\n\n")

    def doc_to_text(self, doc):
        return apply_template(self.cfg["doc_to_text"], doc)

    def doc_to_target(self, doc):
        t = self.cfg["doc_to_target"]
        return doc[t] if t in doc else apply_template(t, doc)

    def doc_to_choice(self, doc):
        return ast.literal_eval(apply_template(self.cfg["doc_to_choice"], doc))

    def target_text(self, doc):
        """build_qa_turn's answer text of a target: a choice's text for an index."""
        t = self.doc_to_target(doc)
        return t if isinstance(t, str) else str(self.doc_to_choice(doc)[t])

    def gen_prefix(self, doc):
        p = self.cfg.get("gen_prefix")
        return None if p is None else (doc[p] if p in doc else apply_template(p, doc))

    def resolve_field(self, doc, field):
        """ConfigurableTask.resolve_field."""
        if field:
            return doc[field] if field in doc else apply_template(field, doc)
        return None

    def build_qa_turn(self, q, a, p, tgt_delim, few_delim):
        """ConfigurableTask.build_qa_turn: [(role, content, delimiter)]; `a` "" or None is no answer."""
        has_answer = a is not None and a != ""
        turn = [("user", q, tgt_delim if has_answer and not p else tgt_delim if p and requires_delimiter(q, p) else "")]
        if has_answer:
            turn.append(("assistant", maybe_delimit(p, a), few_delim))
        elif p:
            turn.append(("assistant", p, ""))
        return turn

    def qa_turn(self, d):
        """A few-shot example's build_qa_turn, its gen_prefix resolved against the example's document."""
        return self.build_qa_turn(self.doc_to_text(d), self.target_text(d), self.gen_prefix(d), self.target_delimiter,
                                  self.fewshot_delimiter)

    def fewshot_context(self, doc, selected, num_fewshot, system_instruction, chat_template, multiturn):
        gen_prefix = self.gen_prefix(doc)
        description = self.resolve_field(doc, self.cfg.get("description")) or ""
        system_prompt = maybe_delimit(system_instruction, description, self.fewshot_delimiter)
        messages = [("system", system_prompt, "")] if system_prompt else []
        if num_fewshot > 0:
            for d in selected:
                messages += self.qa_turn(d)
        # the evaluated document: build_qa_turn(q, c, gen_prefix, tgt_delim=target_delimiter, few_delim=""), no answer
        messages += self.build_qa_turn(self.doc_to_text(doc), None, gen_prefix, self.target_delimiter, "")
        if chat_template is None:
            return "".join(c + dl for _, c, dl in messages)
        chat = [{"role": r, "content": c} for r, c, _ in messages] if multiturn else multiturn_to_singleturn(messages)
        return chat_template(chat, add_generation_prompt=not gen_prefix)

    def continuation_delimiter(self, chat):
        """construct_requests' target_delimiter of multiple_choice continuations (the task's gen_prefix as written)."""
        if not chat:
            return self.target_delimiter
        p = self.cfg.get("gen_prefix")
        return self.target_delimiter if p and not p[-1].isspace() else ""


def multiturn_to_singleturn(messages):
    """lm_eval/api/utils.py: the system message, one user message of every other message's text (the last
    user message's delimiter dropped), and the final assistant message when the chat ends with one."""
    system, rest = (messages[0], messages[1:]) if messages[0][0] == "system" else (None, messages)
    final = rest[-1] if rest[-1][0] == "assistant" else None
    user = rest[:-1] if final else rest
    user = user[:-1] + [(user[-1][0], user[-1][1], "")]
    res = [{"role": "user", "content": "".join(c + dl for _, c, dl in user)}]
    if final:
        res.append({"role": "assistant", "content": final[1]})
    return ([{"role": "system", "content": system[1]}] if system else []) + res


def hf_apply_chat_template(template, bos, eos):
    """HFLM.apply_chat_template over transformers' rendering with continue_final_message."""

    def render(chat, add_generation_prompt):
        text = template.render(messages=chat, tools=None, documents=None, add_generation_prompt=add_generation_prompt,
                               bos_token=bos, eos_token=eos)
        if not add_generation_prompt:  # continue_final_message
            final = chat[-1]["content"]
            if final.strip() not in text:
                raise ValueError("continue_final_message: the final message is not in the chat")
            loc = text.rindex(final.strip())
            if text[loc:loc + len(final.lstrip())] == final:
                text = text[:loc + len(final.lstrip())]
            else:
                text = text[:loc + len(final.strip())]
        return text

    def apply(chat, add_generation_prompt=True):
        try:
            return render(chat, add_generation_prompt)
        except jinja2.exceptions.TemplateError:
            return render([m for m in chat if m["role"] != "system"], add_generation_prompt)

    return apply


def expected_samples(src, system_instruction, chat_template, multiturn):
    """{(task name, doc_id): (context, [continuations])} as lm-eval builds them."""
    folder = os.path.join(src, "tests", "data", "chat_task")
    with open(os.path.join(folder, "quiz.jsonl"), encoding="utf-8") as f:
        docs = [json.loads(line) for line in f if line.strip()]
    out = {}
    for base in TASKS:
        task = Task(os.path.join(folder, base + ".yaml"), docs)
        for shots in SHOTS:
            rnd = random.Random(SEED)  # one sampler per task, consumed document after document
            for i, doc in enumerate(docs[:LIMIT]):
                selected = []
                if shots > 0:  # fewshot_split == test_split: num_fewshot + 1 drawn, the document dropped
                    selected = [x for x in rnd.sample(docs, shots + 1) if x != doc][:shots]
                ctx = task.fewshot_context(doc, selected, shots, system_instruction, chat_template, multiturn)
                conts = []
                if task.cfg["output_type"] == "multiple_choice":
                    delim = task.continuation_delimiter(chat_template is not None)
                    conts = [delim + c for c in task.doc_to_choice(doc)]
                out[(f"{base}_{shots}", i)] = (ctx, conts)
    return out


def run_kveval(kveval, src, model, tmp, chat_file, system_instruction, multiturn, via_spec):
    folder = os.path.join(src, "tests", "data", "chat_task")
    spec = {"model": model, "limit": LIMIT, "seed": SEED,
            "tasks": [{"lm_eval_yaml": os.path.join(folder, b + ".yaml"), "name": f"{b}_{n}", "num_fewshot": n}
                      for b in TASKS for n in SHOTS]}
    args = []
    if via_spec:
        if chat_file:
            spec["apply_chat_template"] = chat_file
        if system_instruction is not None:
            spec["system_instruction"] = system_instruction
        if multiturn:
            spec["fewshot_as_multiturn"] = True
    else:
        if chat_file:
            args.append(f"--apply_chat_template={chat_file}")
        if system_instruction is not None:
            args += ["--system-instruction", system_instruction]
        if multiturn:
            args.append("--fewshot-as-multiturn")
    spec_path, samples, results = (os.path.join(tmp, n) for n in ("spec.json", "samples.jsonl", "results.json"))
    with open(spec_path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    cmd = [kveval, "run", spec_path, "--quiet", "--log-samples", samples, "-o", results] + args
    p = subprocess.run(cmd, capture_output=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.decode('utf-8', 'replace')}")
    got = {}
    with open(samples, encoding="utf-8") as f:
        for line in f:
            s = json.loads(line)
            args_ = [s["arguments"][k] for k in sorted(s["arguments"], key=lambda k: int(k.split("_")[-1]))]
            conts = [a["arg_1"] for a in args_ if isinstance(a["arg_1"], str)]
            got[(s["task"], s["doc_id"])] = (args_[0]["arg_0"], conts)
    with open(results, encoding="utf-8") as f:
        return got, json.load(f)


def check_results_keys(res, chat_source, system_instruction, multiturn):
    sha = lambda s: hashlib.sha256(s.encode("utf-8")).hexdigest()  # noqa: E731  (lm-eval's hash_string)
    want = {"system_instruction": system_instruction,
            "system_instruction_sha": sha(system_instruction) if system_instruction else None,
            "fewshot_as_multiturn": multiturn,
            "chat_template": chat_source,
            "chat_template_sha": sha(chat_source) if chat_source else None}
    return [f"results {k}: {res.get(k, '<missing>')!r}, want {v!r}" for k, v in want.items() if res.get(k, "<missing>") != v]


def main():
    kveval, src, model = sys.argv[1], sys.argv[2], sys.argv[3]
    if not os.path.isfile(model):
        print(f"SKIP: no model at {model}")
        return 77
    templates = [os.path.join(src, "tests", "data", "chat_templates", n)
                 for n in ("im-think.jinja", "inst-alternate.jinja", "turn-model.jinja")]
    templates.append(os.path.join(src, "tests", "data", "chat_task", "no-system.jinja"))
    runs = [(None, si, False) for si in (None, SYSTEM)]
    for t in templates:
        runs += [(t, None, False), (t, SYSTEM, False), (t, SYSTEM, True)]
    failures, compared = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for k, (chat_file, si, mt) in enumerate(runs):
            source, apply = None, None
            if chat_file:
                with open(chat_file, encoding="utf-8") as f:
                    source = f.read()
                apply = hf_apply_chat_template(compile_template(source), "<s>", "</s>")  # stories260K's BOS/EOS texts
            want = expected_samples(src, si, apply, mt)
            got, res = run_kveval(kveval, src, model, tmp, chat_file, si, mt, via_spec=k % 2 == 1)
            name = f"template={os.path.basename(chat_file) if chat_file else None} system={si is not None} multiturn={mt}"
            if set(got) != set(want):
                failures.append(f"{name}: samples {sorted(got)} != {sorted(want)}")
                continue
            for key in sorted(want):
                compared += 1
                if got[key] != want[key]:
                    failures.append(f"{name} {key}:\n  want {want[key]!r}\n  got  {got[key]!r}")
            failures += [f"{name}: {m}" for m in check_results_keys(res, source, si, mt)]
    for f in failures:
        print("FAIL", f)
    print(f"{compared - len(failures)}/{compared} prompts identical to lm-eval's construction ({len(runs)} runs)")
    return 1 if failures or compared == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
