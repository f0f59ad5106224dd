#pragma once
// `kveval run --output-path DIR`: lm-eval's EvaluationTracker file layout
// (lm_eval/loggers/evaluation_tracker.py save_results_aggregated,
// save_results_samples): DIR/<model name sanitised>/results_<date id>.json and
// samples_<task>_<date id>.jsonl per task.
#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kveval::cli {

/// lm-eval's sanitize_model_name (lm_eval/utils.py): each run of the characters
/// " < > : / | \ ? * [ ] replaced by "__" ("models/m.gguf" -> "models__m.gguf").
std::string sanitize_model_name(const std::string& model);

/// lm-eval's date id: datetime.now().isoformat() with ':' replaced by '-', in
/// local time ("2026-12-06T08-41-07.123456"; no fraction when the microseconds are 0).
std::string lm_eval_date_id(std::chrono::system_clock::time_point t);

/// The files of one run under `dir` for `model`: "DIR/<model>/results_<id>.json".
std::string results_path(const std::string& dir, const std::string& model, const std::string& date_id);
/// "DIR/<model>/samples_<task>_<id>.jsonl".
std::string samples_path(const std::string& dir, const std::string& model, const std::string& task, const std::string& date_id);

/// Writes the results document and, when `samples` is not null, one samples file
/// per task (records grouped by their "task"), each atomically, creating
/// DIR/<model>. Throws IoError naming the path.
void write_output_path(const std::string& dir, const std::string& model, const std::string& date_id,
                       const nlohmann::ordered_json& results, const std::vector<nlohmann::ordered_json>* samples);

}  // namespace kveval::cli
