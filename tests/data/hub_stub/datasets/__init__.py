"""A stand-in for Hugging Face's `datasets` package, for kveval's tests only (tests/eval/test_hub_datasets.cpp):
load_dataset knows one fake dataset, "kveval/fake_arc", and raises ValueError for any other path. Each row it
returns records the call: `config` is the name it was given, `load_kwargs` the other keyword arguments.
Dataset is the little of datasets.Dataset that kveval (from_list, to_list) and the tests' process_docs (filter) use."""


_ROWS = {
    "train": [{"question": "T1?", "answer": "t1", "id": 1}, {"question": "T2?", "answer": "t2", "id": 2}],
    "validation": [{"question": "V1?", "answer": "v1", "id": 3}],
    "test": [{"question": "Q1?", "answer": "a1", "id": 4}, {"question": "Q2?", "answer": "a2", "id": 5},
             {"question": "Q3?", "answer": "a3", "id": 6}],
}


class Dataset(list):
    @classmethod
    def from_list(cls, rows):
        return cls(rows)

    def filter(self, function):
        return Dataset(r for r in self if function(r))

    def to_list(self):
        return list(self)


def load_dataset(path, name=None, **kwargs):
    if path != "kveval/fake_arc":
        raise ValueError(f"Dataset '{path}' doesn't exist on the Hub or cannot be accessed.")
    return {split: [dict(r, config=name, load_kwargs=kwargs) for r in rows] for split, rows in _ROWS.items()}
