# Hooks of the winogrande_like test tasks: each option is put in the blank, the
# part after the blank is what is scored (lm-eval's multiple-input tasks).


def gold_option(doc):
    return {"1": 0, "2": 1}[doc["answer"]]


def after_blank(doc):
    cut = doc["sentence"].index("_") + 1
    return doc["sentence"][cut:].strip()


def filled_starts(doc):
    cut = doc["sentence"].index("_")
    return [doc["sentence"][:cut] + opt for opt in (doc["option1"], doc["option2"])]
