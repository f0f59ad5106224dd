// Hugging Face Hub dataset_path in lm-eval YAMLs, loaded through the embedded Python's
// `datasets`. The cases with the stub package (tests/data/hub_stub/datasets, one fake dataset
// "kveval/fake_arc" whose rows are written there) run in the ctest `eval.hub_datasets`, which puts
// the stub on PYTHONPATH and sets KVEVAL_HUB_STUB; the case without it runs in the plain `eval`
// test, where `datasets` is not importable (Debian 12 has no package for it).
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/lm_eval_format.hpp"
#include "eval/runner.hpp"
#include "eval/spec.hpp"
#include "eval_test_util.hpp"
#include "util/error.hpp"

using kveval::eval::EvalSpec;
using kveval::test::TempDir;
using nlohmann::json;

namespace {

bool stub_on_path() { return std::getenv("KVEVAL_HUB_STUB") != nullptr; }

const char* const kHead =
    "task: hub\ndataset_path: kveval/fake_arc\noutput_type: loglikelihood\n"
    "doc_to_text: \"{{config}}: {{question}}\"\ndoc_to_target: \"{{answer}}\"\n";

EvalSpec load(const TempDir& d, const std::string& yaml_text) {
  d.write("t.yaml", yaml_text);
  return kveval::eval::parse_spec({{"model", "m.gguf"}, {"tasks", {{{"lm_eval_yaml", "t.yaml"}}}}}, "spec.json",
                                  d.path.string());
}

std::string error_of(const TempDir& d, const std::string& yaml_text) {
  return kveval::test::spec_error([&] { load(d, yaml_text); });
}

}  // namespace

TEST_SUITE("eval.hub_datasets") {
  TEST_CASE("the test split's rows are the documents; dataset_name and dataset_kwargs reach load_dataset") {
    if (!stub_on_path()) return;  // runs in the ctest eval.hub_datasets
    TempDir d;
    const EvalSpec s = load(d, std::string(kHead) +
                                   "dataset_name: ARC-Fake\ndataset_kwargs:\n  revision: r1\n  trust_remote_code: true\n"
                                   "training_split: train\nvalidation_split: validation\ntest_split: test\n"
                                   "num_fewshot: 2\nfewshot_config:\n  sampler: first_n\n");
    const auto& t = s.tasks.at(0);
    REQUIRE(t.docs.size() == 3);
    // the stub's test rows in order; the few-shot examples are its train rows (first_n)
    const std::string shots = "ARC-Fake: T1? t1\n\nARC-Fake: T2? t2\n\n";
    CHECK(t.docs[0].context == shots + "ARC-Fake: Q1?");
    CHECK(t.docs[1].context == shots + "ARC-Fake: Q2?");
    CHECK(t.docs[2].context == shots + "ARC-Fake: Q3?");
    CHECK(t.docs[2].target == "a3");
    // the stub's row records load_dataset's name and keyword arguments
    CHECK(t.docs[2].raw == json{{"question", "Q3?"},
                                {"answer", "a3"},
                                {"id", 6},
                                {"config", "ARC-Fake"},
                                {"load_kwargs", {{"revision", "r1"}, {"trust_remote_code", true}}}});
  }

  TEST_CASE("the samples' doc keeps the Hub row's column order, and its doc_hash is lm-eval's") {
    if (!stub_on_path()) return;
    TempDir d;
    const EvalSpec s = load(d, std::string(kHead) + "test_split: test\n");
    kveval::eval::RunResult r;
    r.docs = {{}};
    r.metrics = {{}};
    r.task_errors = {0};
    r.chunked.resize(1);
    const auto samples = kveval::eval::sample_records(s, r);
    REQUIRE(samples.size() == 3);
    // the stub's first test row, dict(r, config=None, load_kwargs={}): its keys in that order, not sorted
    std::vector<std::string> keys;
    for (auto it = samples[0]["doc"].begin(); it != samples[0]["doc"].end(); ++it) keys.push_back(it.key());
    CHECK(keys == std::vector<std::string>{"question", "answer", "id", "config", "load_kwargs"});
    // lm-eval's evaluator: hash_string(json.dumps(doc, indent=2, default=handle_non_serializable, ensure_ascii=False)),
    // hash_string = hashlib.sha256(s.encode("utf-8")).hexdigest(); computed with CPython 3.11 over
    // {"question": "Q1?", "answer": "a1", "id": 4, "config": None, "load_kwargs": {}} (the same keys sorted give 04ea5db3...)
    CHECK(samples[0]["doc_hash"] == "08778ab8e68e5a968d6045ad231fbff5efebb6756c5df9df2515f650a2d4c71d");
    // process_docs sees the same order: it writes each row's keys, joined, into the row
    d.write("hub_keys.py", "def keys(ds):\n    return ds.from_list([dict(r, keys=','.join(r)) for r in ds])\n");
    const EvalSpec k = load(d, std::string(kHead) + "test_split: test\nprocess_docs: !function hub_keys.keys\n");
    CHECK(k.tasks.at(0).docs.at(0).raw.at("keys") == "question,answer,id,config,load_kwargs");
  }

  TEST_CASE("without test_split the validation split is evaluated; no dataset_name passes None") {
    if (!stub_on_path()) return;
    TempDir d;
    const EvalSpec s = load(d, std::string(kHead) + "validation_split: validation\n");
    const auto& t = s.tasks.at(0);
    REQUIRE(t.docs.size() == 1);
    CHECK(t.docs[0].context == "None: V1?");  // the stub's config column is the name it was given
  }

  TEST_CASE("a missing split and a raising load_dataset are one line naming the YAML and dataset_path") {
    if (!stub_on_path()) return;
    TempDir d;
    const std::string f = d.file("t.yaml");
    CHECK(error_of(d, std::string(kHead) + "test_split: nope\n") ==
          f + ":2: dataset_path: kveval/fake_arc: the dataset has no split 'nope' (splits: train, validation, test)");
    CHECK(error_of(d, "task: hub\ndataset_path: kveval/absent\noutput_type: loglikelihood\ndoc_to_text: q\n"
                      "doc_to_target: a\ntest_split: test\n") ==
          f + ":2: dataset_path: kveval/absent: datasets.load_dataset raised ValueError: Dataset 'kveval/absent' "
              "doesn't exist on the Hub or cannot be accessed.");
  }

  TEST_CASE("process_docs runs on the Hub documents and on a distinct few-shot split; no split evaluated is one line") {
    if (!stub_on_path()) return;
    TempDir d;
    d.write("hub_utils.py", "def keep_even(ds):\n    return ds.filter(lambda r: r['id'] % 2 == 0)\n");
    const EvalSpec s = load(d, std::string(kHead) + "process_docs: !function hub_utils.keep_even\n"
                                                    "training_split: train\ntest_split: test\nnum_fewshot: 1\n"
                                                    "fewshot_config:\n  sampler: first_n\n");
    const auto& t = s.tasks.at(0);
    REQUIRE(t.docs.size() == 2);  // test ids 4, 5, 6 -> 4, 6; train ids 1, 2 -> 2
    CHECK(t.docs[0].context == "None: T2? t2\n\nNone: Q1?");
    CHECK(t.docs[1].context == "None: T2? t2\n\nNone: Q3?");
    CHECK(error_of(d, std::string(kHead) + "training_split: train\n") ==
          d.file("t.yaml") + ":2: dataset_path: no test_split or validation_split names the documents to evaluate");
  }

  TEST_CASE("without the datasets package the message names both ways: install datasets, or a local copy") {
    if (stub_on_path()) return;  // runs in the plain eval test, where datasets is not importable
    TempDir d;
    const std::string e = error_of(d, std::string(kHead) + "test_split: test\n");
    CHECK(e.rfind(d.file("t.yaml") + ":2: dataset_path: kveval/fake_arc is not a local file", 0) == 0);
    CHECK(e.find("pip install datasets for /usr/bin/python3") != std::string::npos);
    CHECK(e.find("give a local copy of the split") != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);
  }
}
