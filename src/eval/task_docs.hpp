#pragma once
// Internal to src/eval: the documents of one task (dataset_path or inline
// docs), rendered through the task's mappings, with few-shot examples.
#include <string>

#include <nlohmann/json.hpp>

#include "eval/spec.hpp"
#include "eval/spec_check.hpp"

namespace kveval::eval {

struct DocKeyOrder;  // eval/lm_eval_yaml.hpp

/// Reads (or takes inline) the task's documents, renders every one of them
/// (also those past `limit`, so all data are validated), and fills `t.docs`
/// (after `limit`) and `t.n_docs_total`. `tj` is the task's JSON object, `w`
/// its place in the spec; `order` (may be null) the key order of tj's inline
/// `docs` / `fewshot_docs`, which the samples' `doc` and process_docs then keep
/// (without it their keys are sorted). Throws SpecError.
void build_task_docs(TaskSpec& t, const nlohmann::json& tj, const Where& w, const std::string& base_dir,
                     const EvalSpec& spec, const DocKeyOrder* order = nullptr);

}  // namespace kveval::eval
