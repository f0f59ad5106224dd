# Few-shot and filter hooks of the eval.fewshot_hooks and eval.filter_hooks test
# tasks, in the style of lm-eval's task utils.py files. LastWord subclasses
# lm-eval's Filter (kveval's stand-in when lm_eval is not installed).
from lm_eval.api.filter import Filter


def shot_docs():
    return [
        {"city": "Oslo", "country": "Norway"},
        {"city": "Bern", "country": "Switzerland"},
        {"city": "Kyiv", "country": "Ukraine"},
    ]


def shot_text(doc):
    return doc["city"] + " lies in"


def shot_target(doc):
    return doc["country"]


class LastWord(Filter):
    """Each response's last word, without the characters of `strip` around it."""

    def __init__(self, strip="", **kwargs):
        super().__init__(**kwargs)
        self.strip = strip

    def apply(self, resps, docs):
        return [[(r.split() or [""])[-1].strip(self.strip) for r in group] for group in resps]


def keep_if_ending(resps, docs):
    return map(lambda pair: [r if r in pair[1]["endings"] else "[other]" for r in pair[0]], zip(resps, docs))


class Drops(Filter):
    def apply(self, resps, docs):
        return []


class SeenDocs(Filter):
    """Each response followed by "|<documents this call received>|<this call's number>":
    what the filter saw, for the count of calls per pipeline."""

    calls = 0

    def apply(self, resps, docs):
        SeenDocs.calls += 1
        return [[f"{r}|{len(docs)}|{SeenDocs.calls}" for r in group] for group in resps]


def keep_if_four_docs(resps, docs):
    return [group if len(docs) == 4 else [f"[saw {len(docs)}]" for r in group] for group in resps]
