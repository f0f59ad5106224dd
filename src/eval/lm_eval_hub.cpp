// Hugging Face Hub datasets of lm-eval task YAMLs, loaded with the `datasets` package of the
// embedded Python when it is importable (python_hooks.hpp load_hub_dataset).
#include <string>
#include <vector>

#include <fmt/format.h>

#include "eval/json_input.hpp"
#include "eval/lm_eval_task_keys.hpp"
#include "eval/lm_eval_yaml.hpp"
#include "eval/python_hooks.hpp"
#include "util/error.hpp"

namespace kveval::eval {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

void load_hub_docs(const TaskKeys& c, const std::string& eval_split, const std::string& fewshot_split, json& t,
                   DocKeyOrder& order) {
  const std::string path = c.at("dataset_path").get<std::string>();
  ojson name = nullptr, kwargs = ojson::object();
  if (c.has("dataset_name")) {
    if (!c.at("dataset_name").is_string())
      c.fail("dataset_name", fmt::format("expected a configuration name, got {}", json_excerpt(c.at("dataset_name"))));
    name = c.at("dataset_name").get<std::string>();
  }
  if (c.has("dataset_kwargs")) {
    if (!c.at("dataset_kwargs").is_object()) c.fail("dataset_kwargs", "expected a mapping");
    kwargs = ojson::parse(c.at("dataset_kwargs").dump());
  }
  if (!python_can_import("datasets"))
    c.fail("dataset_path",
           fmt::format("{} is not a local file, and loading it from the Hugging Face Hub needs the datasets package, "
                       "which kveval's embedded Python cannot import: install it for that Python (pip install datasets "
                       "for /usr/bin/python3; datasets then reads the HF cache and HF_DATASETS_OFFLINE), or give a local "
                       "copy of the split (JSON Lines, CSV or Parquet) as \"dataset_path\": \"docs.jsonl\" next to "
                       "\"lm_eval_yaml\" in the spec, or write dataset_path: json with dataset_kwargs.data_files",
                       path));
  if (eval_split.empty()) c.fail("dataset_path", "no test_split or validation_split names the documents to evaluate");
  std::vector<std::string> splits = {eval_split};
  if (!fewshot_split.empty()) splits.push_back(fewshot_split);
  ojson rows;
  try {
    rows = load_hub_dataset(path, name, kwargs, splits);
  } catch (const SpecError& e) {
    c.fail("dataset_path", fmt::format("{}: {}", path, e.what()));
  }
  if (rows.is_null()) c.fail("dataset_path", fmt::format("{}: the datasets package cannot be imported", path));
  // the rows as `datasets` gives them (dicts in column order): `order` keeps that order for the samples'
  // `doc` and doc_hash, the task's JSON (sorted keys) is what the spec checks read
  order.docs = std::move(rows[eval_split]);
  t["docs"] = json::parse(order.docs.dump());
  if (!fewshot_split.empty()) {
    order.fewshot_docs = std::move(rows[fewshot_split]);
    t["fewshot_docs"] = json::parse(order.fewshot_docs.dump());
  }
}

}  // namespace kveval::eval
