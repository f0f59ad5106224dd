#pragma once
// lm-evaluation-harness task YAMLs (lm_eval/tasks/_yaml_loader.py,
// lm_eval/config/task.py TaskConfig), read with yaml-cpp and turned into
// kveval's task JSON (the keys of a spec's task entry), so that one validator
// checks both. Scalars resolve as PyYAML's loader does (YAML 1.1: yes/no/on/off
// are booleans, 1e3 is a string, 1.0 a float). `include` is resolved relative
// to the including file, recursively, the including file's keys winning
// (a shallow merge, as lm-eval). Local data only: `dataset_path: json` with
// `dataset_kwargs.data_files`, or a JSONL file given in the spec entry.
// `!function module.name` hooks (process_docs, doc_to_*, process_results,
// metric_list's metric and aggregation) are imported from the YAML's folder
// (task_hooks.hpp); unknown keys are refused, naming the key and file:line.
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace kveval::eval {

struct TaskHooks;  // eval/task_hooks.hpp

/// The key order of a task's inline documents, which the task's nlohmann::json
/// (LmEvalTask::task) sorts: task["docs"] and task["fewshot_docs"] again as
/// ordered JSON, keys as read (a Hub dataset's rows in their column order); null
/// when the task has no such documents.
struct DocKeyOrder {
  nlohmann::ordered_json docs, fewshot_docs;
};

/// A task read from an lm-eval YAML.
struct LmEvalTask {
  nlohmann::json task;   ///< kveval task entry (name, output_type, doc_to_*, dataset_path, ...), paths resolved
  std::string file;      ///< the YAML file as given
  /// "file.yaml:LINE" of each top-level key of `task` (where the key was written,
  /// possibly in an included file), for messages.
  std::shared_ptr<const std::map<std::string, std::string>> where;
  /// lm-eval's few-shot rule: fewshot_split == test_split as names (both absent counts as equal).
  bool fewshot_same_split = true;
  /// The `!function` hooks, imported (null: none).
  std::shared_ptr<const TaskHooks> hooks;
  /// The Hub documents' key order (the samples' `doc` and doc_hash keep it).
  DocKeyOrder order;
};

/// Reads `path` (and its includes). `entry` holds the spec entry's own keys,
/// already checked (dataset_path / fewshot_split resolved paths, num_fewshot,
/// limit, name, task_alias) and overriding the YAML; `lm_eval_inline` (an object:
/// a group's inline task config, written in the group YAML `path`) replaces the
/// file's keys, and `lm_eval_overrides` (an object of task keys, from a dict in a
/// group's `task:` list) replaces single top-level keys. Throws SpecError "file:line: key: message".
LmEvalTask load_lm_eval_yaml(const std::string& path, const nlohmann::json& entry);

/// The top-level keys of the YAML at `path` with its includes merged (the same
/// reading as load_lm_eval_yaml, before any key is checked): what lm-eval's
/// TaskManager indexes (`task`, `tag`, `group`). Throws SpecError "file:line: ...".
nlohmann::json load_lm_eval_yaml_keys(const std::string& path);

/// Every value of the YAML file `path` as JSON, read as the task loader reads
/// them (PyYAML's scalars; no include, no task keys checked): for comparing the
/// loader with PyYAML (the eval.yaml_pyyaml test). Throws SpecError.
nlohmann::json yaml_file_values(const std::string& path);

/// True when `path` names a YAML file (.yaml or .yml).
bool is_yaml_path(const std::string& path);

}  // namespace kveval::eval
