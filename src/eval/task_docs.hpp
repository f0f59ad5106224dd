#pragma once
// Internal to src/eval: the documents of one task (dataset_path or inline
// docs), rendered through the task's mappings, with few-shot examples.
#include <string>

#include <nlohmann/json.hpp>

#include "eval/spec.hpp"
#include "eval/spec_check.hpp"

namespace kveval::eval {

/// Reads (or takes inline) the task's documents, renders every one of them
/// (also those past `limit`, so all data are validated), and fills `t.docs`
/// (after `limit`) and `t.n_docs_total`. `tj` is the task's JSON object, `w`
/// its place in the spec. Throws SpecError.
void build_task_docs(TaskSpec& t, const nlohmann::json& tj, const Where& w, const std::string& base_dir,
                     const EvalSpec& spec);

}  // namespace kveval::eval
