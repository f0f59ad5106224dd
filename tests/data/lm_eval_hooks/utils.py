# Hooks of the eval.python_hooks test tasks, in the style of lm-eval's task utils.py files.


def process_docs(dataset):
    def _process(doc):
        return {"query": "Q: " + doc["zeta"] + "?", "choices": [e.upper() for e in doc["endings"]], "gold": int(doc["label"])}

    return dataset.filter(lambda doc: doc["meta"]["ok"]).map(_process)


def doc_to_text(doc):
    types = ",".join(type(v).__name__ for v in doc["meta"].values())
    return doc["query"] + " keys=" + ",".join(doc.keys()) + " types=" + types


def doc_to_target(doc):
    return doc["gold"]


def doc_to_choice(doc):
    return doc["choices"]


def process_results(doc, results):
    lls, is_greedy = zip(*results)
    pred = max(range(len(lls)), key=lambda i: lls[i])
    gold = doc["gold"]
    others = [ll for i, ll in enumerate(lls) if i != gold]
    return {
        "acc": 1.0 if pred == gold else 0.0,
        "margin": lls[gold] - max(others),
        "ll_gold": lls[gold],
        "n_choices": len(results),
        "extra": "not in metric_list",
    }


def median_agg(items):
    s = sorted(items)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def contains_ref(references, predictions):
    return float(references[0].strip().lower() in predictions[0].lower())


def total(items):
    return sum(items)


def raises(doc):
    raise ValueError("no text for " + doc["zeta"])


def wrong_type(doc):
    return {"a", "b"}


def forever(dataset):
    while True:
        pass


def shuffles(dataset):
    return dataset.shuffle(seed=1)


def results_fail_on_rome(doc, results):
    if doc["zeta"].startswith("Rome"):
        raise KeyError("rome")
    return {"acc": 1.0}
