#pragma once
// Internal to src/eval: validation helpers shared by the spec and the task
// builders. A `Where` names the place in the spec (origin file + JSON path) and
// turns a problem into one SpecError line.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "eval/json_input.hpp"
#include "util/error.hpp"

namespace kveval::eval {

using nlohmann::json;

/// Where in the spec we are: the origin (file) and the JSON path. `lines`
/// (tasks read from lm-eval YAML) maps a top-level key to the "file:line" it
/// was written at, which then replaces `origin` in messages.
struct Where {
  std::string origin;
  std::string path;
  std::shared_ptr<const std::map<std::string, std::string>> lines = {};
  Where key(std::string_view k) const { return {origin, path.empty() ? std::string(k) : path + "." + std::string(k), lines}; }
  Where index(size_t i) const { return {origin, fmt::format("{}[{}]", path, i), lines}; }
  /// "origin: path" (or "file:line: path" for a YAML key), the prefix of messages.
  std::string text() const {
    std::string o = origin;
    if (lines) {
      auto it = lines->find(path.substr(0, path.find_first_of(".[")));
      if (it != lines->end()) o = it->second;
    }
    return path.empty() ? o : fmt::format("{}: {}", o, path);
  }
  [[noreturn]] void fail(const std::string& msg) const { throw SpecError(fmt::format("{}: {}", text(), msg)); }
};

/// The keys a spec's top-level object may have.
inline const std::vector<std::string>& spec_top_keys() {
  static const std::vector<std::string> keys = {"model", "threads", "dtype", "kv_cache_dtype", "batch_size",
                                                "max_length", "seed", "limit", "bootstrap_iters", "tasks",
                                                "include_path", "apply_chat_template", "system_instruction",
                                                "fewshot_as_multiturn", "mmap"};
  return keys;
}

/// Where the value of a task's key `key` (its Where `w`) is reported: the option
/// that set it on every task, as "--num-fewshot: task 'NAME'", when `set_by`
/// (EvalSpec::set_by) has the key, else the task's key ("spec.json: tasks[0].num_fewshot").
inline Where task_key_where(const Where& w, const std::map<std::string, std::string>& set_by, const std::string& key,
                            const std::string& task) {
  const auto it = set_by.find(key);
  return it == set_by.end() ? w.key(key) : Where{fmt::format("{}: task '{}'", it->second, task), ""};
}

inline void check_keys(const json& obj, const Where& w, const std::vector<std::string>& allowed) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (std::find(allowed.begin(), allowed.end(), it.key()) != allowed.end()) continue;
    std::string hint = closest(it.key(), allowed);
    w.key(it.key()).fail(hint.empty() ? std::string("unknown key") : fmt::format("unknown key (did you mean '{}'?)", hint));
  }
}

inline const json& expect_object(const json& v, const Where& w) {
  if (!v.is_object()) w.fail(fmt::format("expected an object, got {}", json_excerpt(v)));
  return v;
}

inline std::string expect_string(const json& v, const Where& w) {
  if (!v.is_string()) w.fail(fmt::format("expected a string, got {}", json_excerpt(v)));
  return v.get<std::string>();
}

inline int64_t expect_int(const json& v, const Where& w, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) w.fail(fmt::format("expected an integer, got {}", json_excerpt(v)));
  int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                  ? std::numeric_limits<int64_t>::max()
                  : v.get<int64_t>();
  if (x < lo || x > hi) w.fail(fmt::format("expected an integer in [{}, {}], got {}", lo, hi, v.dump()));  // as written
  return x;
}

/// A spec's `limit` (top level, a task's or a task YAML entry's): documents per task, an integer in [1, 2^30].
/// 0 is refused as `--limit 0` is (lm-eval fails on it); a fraction in (0, 1) is accepted only as `--limit`.
inline int expect_limit(const json& v, const Where& w) {
  if (v.is_number() && v.get<double>() == 0)
    w.fail(fmt::format("{} leaves no document to evaluate (lm-eval fails on it too); give N >= 1, or no limit for "
                       "every document",
                       v.dump()));
  if (v.is_number_float() && v.get<double>() > 0 && v.get<double>() < 1)
    w.fail(fmt::format("{}: a fraction of each task's documents is accepted only on the command line (--limit {}); "
                       "give an integer >= 1 here",
                       v.dump(), v.dump()));
  return static_cast<int>(expect_int(v, w, 1, 1 << 30));
}

/// A file path from the spec: a string without NUL bytes (which the OS would silently cut at).
inline std::string expect_path(const json& v, const Where& w) {
  std::string p = expect_string(v, w);
  if (p.find('\0') != std::string::npos) w.fail("path contains a NUL byte");
  return p;
}

inline std::string resolve_path(const std::string& base_dir, const std::string& p) {
  if (p.empty() || std::filesystem::path(p).is_absolute() || base_dir.empty()) return p;
  return (std::filesystem::path(base_dir) / p).lexically_normal().string();
}

/// A data file or a non-empty list of them (the files of one split, read in order), each
/// resolved against `base_dir`.
inline std::vector<std::string> expect_paths(const json& v, const Where& w, const std::string& base_dir) {
  std::vector<std::string> out;
  if (!v.is_array()) return {resolve_path(base_dir, expect_path(v, w))};
  if (v.empty()) w.fail("expected a file or a non-empty list of files, got []");
  for (size_t i = 0; i < v.size(); ++i) out.push_back(resolve_path(base_dir, expect_path(v[i], w.index(i))));
  return out;
}

}  // namespace kveval::eval
