#pragma once
// Internal to src/eval: the checked top-level keys of one lm-eval task YAML
// (lm_eval_yaml.cpp) and the local data files they name (lm_eval_data_files.cpp).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/error.hpp"

namespace kveval::eval {

struct DocKeyOrder;  // eval/lm_eval_yaml.hpp

/// The checked top-level keys of one task YAML (includes merged), with where
/// each was written, and the "file:line: key: message" errors naming them.
struct TaskKeys {
  std::string path;                    ///< the YAML file
  std::map<std::string, nlohmann::json> values;  ///< key -> value
  std::shared_ptr<std::map<std::string, std::string>> where = std::make_shared<std::map<std::string, std::string>>();

  /// "file:line" of key `k`, else the file.
  std::string w(const std::string& k) const { return where->count(k) ? where->at(k) : path; }
  [[noreturn]] void fail(const std::string& k, const std::string& msg) const {
    throw SpecError(fmt::format("{}: {}: {}", w(k), k, msg));
  }
  /// Present and not null.
  bool has(const std::string& k) const {
    auto it = values.find(k);
    return it != values.end() && !it->second.is_null();
  }
  /// The value of a key that is present.
  const nlohmann::json& at(const std::string& k) const { return values.at(k); }
};

/// dataset_path json, csv or parquet (a local-file builder of `datasets`).
bool is_local_builder(const TaskKeys& c);

/// dataset_path json, csv or parquet with dataset_kwargs.data_files (a file or pattern, a list of
/// them, or a mapping of split to either; a bare file or list is the "train" split, as in
/// `datasets`) and optional data_dir: each split's files in order, each relative entry looked
/// for in data_dir, else next to the YAML, then in the working directory; a pattern's matches
/// sorted (glob_data_files). Throws SpecError "file:line: dataset_kwargs: ..." (a missing file,
/// a URL, an extension that does not pick dataset_path's reader, an unsupported key).
std::map<std::string, std::vector<std::string>> local_data_files(const TaskKeys& c);

/// A Hugging Face Hub dataset_path (lm-eval's Task.download: datasets.load_dataset(path=dataset_path,
/// name=dataset_name, **dataset_kwargs) in the embedded Python): the rows of `eval_split` become
/// t["docs"] and, when `fewshot_split` is not empty, its rows t["fewshot_docs"], both also into `order`
/// with their keys in the dataset's column order. Throws SpecError
/// "file:line: dataset_path: ..." when `datasets` is not importable (naming both ways out: install
/// it, or give a local copy), when eval_split is empty (no test_split or validation_split), or
/// when load_dataset raises (offline, no such dataset) or lacks a split.
void load_hub_docs(const TaskKeys& c, const std::string& eval_split, const std::string& fewshot_split, nlohmann::json& t,
                   DocKeyOrder& order);

}  // namespace kveval::eval
