#!/usr/bin/env python3
"""kveval chat-template against Debian's python3-jinja2 in Hugging Face's chat environment.

The environment is set up as transformers' _compile_jinja_template does:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[AssistantTracker, loopcontrols]), its tojson filter and the globals
raise_exception and strftime_now; render() gets messages, tools=None,
documents=None, add_generation_prompt, bos_token and eos_token as
apply_chat_template passes them. Every template in tests/data/chat_templates
(or the files given with --templates) is rendered over a set of
conversations (with and without a system message, one and several turns,
with and without the generation prompt) and compared byte for byte with
`kveval chat-template --template FILE`. A template that raises must make
kveval exit 2 with one line naming the message.

Usage: hf_chat_check.py KVEVAL SOURCE_DIR [--templates FILE...]
"""
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %} tag: the body renders as it is."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def compile_template(source):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


SYSTEM = {"role": "system", "content": "You are a careful assistant.\nAnswer briefly."}
TURNS = [
    {"role": "user", "content": "What is 2 + 2?"},
    {"role": "assistant", "content": "  4 \n"},
    {"role": "user", "content": "And ünïcode «quotes» \"x\" \\ done?\t"},
    {"role": "assistant", "content": "<think>\nsum\n</think>\n\nYes."},
    {"role": "user", "content": "Last question:\n\n- a\n- b"},
]
CONVERSATIONS = {
    "one_turn": TURNS[:1],
    "system_one_turn": [SYSTEM] + TURNS[:1],
    "multi_turn": TURNS[:3],
    "system_multi_turn": [SYSTEM] + TURNS,
    "ends_with_assistant": [SYSTEM] + TURNS[:2],
    "two_users": [TURNS[0], TURNS[2]],
}
TOKENS = [("<s>", "</s>"), ("", "")]


def run_kveval(kveval, template, messages, gen, bos, eos):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(messages, f, ensure_ascii=False)
        path = f.name
    try:
        cmd = [kveval, "chat-template", "--template", template, "--messages", path]
        if bos:  # empty: the default with --template
            cmd += ["--bos-token", bos]
        if eos:
            cmd += ["--eos-token", eos]
        if gen:
            cmd.append("--add-generation-prompt")
        return subprocess.run(cmd, capture_output=True, timeout=30)
    finally:
        os.unlink(path)


def main():
    kveval, src = sys.argv[1], sys.argv[2]
    if "--templates" in sys.argv:
        files = sys.argv[sys.argv.index("--templates") + 1:]
    else:
        d = os.path.join(src, "tests", "data", "chat_templates")
        files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".jinja"))
    failures, checked = 0, 0
    for path in files:
        with open(path, encoding="utf-8") as f:
            tpl = compile_template(f.read())
        for conv_name, messages in CONVERSATIONS.items():
            for gen in (False, True):
                for bos, eos in TOKENS:
                    try:
                        want = tpl.render(messages=messages, tools=None, documents=None, add_generation_prompt=gen,
                                          bos_token=bos, eos_token=eos).encode("utf-8")
                        want_error = None
                    except jinja2.exceptions.TemplateError as e:
                        want, want_error = None, str(e)
                    got = run_kveval(kveval, path, messages, gen, bos, eos)
                    checked += 1
                    where = f"{os.path.basename(path)} {conv_name} gen={gen} bos={bos!r}"
                    if want_error is not None:
                        err = got.stderr.decode("utf-8", "replace")
                        if got.returncode != 2 or want_error not in err or err.count("\n") != 1:
                            failures += 1
                            print(f"FAIL {where}: jinja2 raised {want_error!r}; kveval exit {got.returncode}, stderr {err!r}")
                    elif got.returncode != 0 or got.stdout != want:
                        failures += 1
                        print(f"FAIL {where}: exit {got.returncode}\n  want {want!r}\n  got  {got.stdout!r}\n  "
                              f"stderr {got.stderr.decode('utf-8', 'replace')!r}")
    print(f"{checked - failures}/{checked} renderings identical to python3-jinja2 ({len(files)} templates)")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
