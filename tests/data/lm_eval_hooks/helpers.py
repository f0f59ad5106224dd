# A hook module whose import fails: the module it needs is not installed.
import kveval_missing_module_for_tests  # noqa: F401


def process_docs(dataset):
    return dataset
