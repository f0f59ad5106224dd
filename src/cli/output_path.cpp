#include "cli/output_path.hpp"

#include <ctime>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "eval/report.hpp"
#include "util/error.hpp"

namespace kveval::cli {

namespace fs = std::filesystem;

std::string sanitize_model_name(const std::string& model) {
  static const std::string bad = "\"<>:/|\\?*[]";
  std::string out;
  bool in_run = false;
  for (char c : model) {
    if (bad.find(c) != std::string::npos) {
      if (!in_run) out += "__";
      in_run = true;
    } else {
      out += c;
      in_run = false;
    }
  }
  return out;
}

std::string lm_eval_date_id(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  ::localtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H-%M-%S", &tm);
  std::string id = buf;
  if (micros > 0) id += fmt::format(".{:06d}", micros);
  return id;
}

std::string results_path(const std::string& dir, const std::string& model, const std::string& date_id) {
  return (fs::path(dir) / sanitize_model_name(model) / fmt::format("results_{}.json", date_id)).string();
}

std::string samples_path(const std::string& dir, const std::string& model, const std::string& task, const std::string& date_id) {
  return (fs::path(dir) / sanitize_model_name(model) / fmt::format("samples_{}_{}.jsonl", task, date_id)).string();
}

void write_output_path(const std::string& dir, const std::string& model, const std::string& date_id,
                       const nlohmann::ordered_json& results, const std::vector<nlohmann::ordered_json>* samples) {
  const fs::path sub = fs::path(dir) / sanitize_model_name(model);
  std::error_code ec;
  fs::create_directories(sub, ec);
  if (ec) throw IoError(fmt::format("--output-path: {}: cannot create: {}", sub.string(), ec.message()));
  // samples first, results last: a results file never stands beside samples it does not describe
  if (samples) {
    std::map<std::string, std::vector<nlohmann::ordered_json>> by_task;
    std::vector<std::string> order;
    for (const auto& s : *samples) {
      const std::string task = s.value("task", std::string());
      if (!by_task.count(task)) order.push_back(task);
      by_task[task].push_back(s);
    }
    for (const auto& task : order) eval::write_jsonl(samples_path(dir, model, task, date_id), by_task[task]);
  }
  eval::write_json(results_path(dir, model, date_id), results);
}

}  // namespace kveval::cli
