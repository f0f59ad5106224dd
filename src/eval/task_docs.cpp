#include "eval/task_docs.hpp"

#include <algorithm>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "eval/json_input.hpp"
#include "eval/mapping.hpp"
#include "util/error.hpp"

namespace kveval::eval {

namespace fs = std::filesystem;

namespace {

struct RawDoc {
  std::string origin;
  json doc;
};

/// Renders text/target/choices/gold of one raw document (no few-shot yet).
Doc render_doc(const TaskSpec& t, const RawDoc& rd) {
  Doc d;
  d.origin = rd.origin;
  auto text_of = [&](const std::string& mapping, const char* key) {
    return value_text(resolve_mapping(rd.doc, mapping, rd.origin, key), rd.origin, key);
  };
  if (!t.doc_to_text.empty()) d.context = text_of(t.doc_to_text, "doc_to_text");
  json target_raw;
  if (!t.doc_to_target.empty()) {
    target_raw = resolve_mapping(rd.doc, t.doc_to_target, rd.origin, "doc_to_target");
    d.target = value_text(target_raw, rd.origin, "doc_to_target");
    d.has_target = true;
  }
  if (t.output_type == OutputType::MultipleChoice) {
    json choices;
    if (t.doc_to_choice.is_array()) {
      choices = json::array();
      for (const auto& c : t.doc_to_choice) {
        std::string m = c.get<std::string>();
        // a literal choice without "{{" is text, not a field name
        choices.push_back(m.find("{{") == std::string::npos ? json(m) : resolve_mapping(rd.doc, m, rd.origin, "doc_to_choice"));
      }
    } else {
      choices = resolve_mapping(rd.doc, t.doc_to_choice.get<std::string>(), rd.origin, "doc_to_choice");
    }
    if (!choices.is_array() || choices.empty())
      throw SpecError(fmt::format("{}: doc_to_choice: expected a non-empty list of strings, got {}", rd.origin, json_excerpt(choices)));
    for (size_t i = 0; i < choices.size(); ++i) {
      if (!choices[i].is_string())
        throw SpecError(fmt::format("{}: doc_to_choice[{}]: expected a string, got {} (choices must be a list of strings)",
                                    rd.origin, i, json_excerpt(choices[i])));
      std::string c = value_text(choices[i], rd.origin, fmt::format("doc_to_choice[{}]", i));
      if (c.empty()) throw SpecError(fmt::format("{}: doc_to_choice[{}]: empty choice", rd.origin, i));
      d.choices.push_back(std::move(c));
    }
    // gold: an integer index, a string of digits (an index, as lm-eval), or the gold choice's text
    int64_t gold = -1;
    if (target_raw.is_number_integer()) {
      gold = target_raw.get<int64_t>();
    } else if (!d.target.empty() && std::all_of(d.target.begin(), d.target.end(), ::isdigit) && d.target.size() < 10) {
      gold = std::stoll(d.target);
    } else {
      auto it = std::find(d.choices.begin(), d.choices.end(), d.target);
      if (it == d.choices.end())
        throw SpecError(fmt::format("{}: doc_to_target: \"{}\" is neither a choice index nor one of the {} choices",
                                    rd.origin, d.target, d.choices.size()));
      gold = it - d.choices.begin();
    }
    if (gold < 0 || gold >= static_cast<int64_t>(d.choices.size()))
      throw SpecError(fmt::format("{}: doc_to_target: gold index {} out of range [0, {})", rd.origin, gold,
                                  d.choices.size()));
    d.gold = static_cast<int>(gold);
    d.target = d.choices[static_cast<size_t>(d.gold)];
  }
  return d;
}

std::vector<RawDoc> load_docs_file(const std::string& path) {
  std::vector<RawDoc> out;
  for (auto& [line, j] : read_jsonl(path)) out.push_back({fmt::format("{}:{}", path, line), std::move(j)});
  if (out.empty()) throw SpecError(fmt::format("{}: no documents (the file is empty or blank)", path));
  return out;
}

/// Deterministic choice of `k` distinct indices out of [0, n) minus `exclude`:
/// partial Fisher-Yates driven by std::mt19937_64 (whose output the C++
/// standard fixes), so every platform picks the same examples.
std::vector<size_t> sample_indices(size_t n, size_t k, long exclude, uint64_t seed) {
  std::vector<size_t> pool;
  for (size_t i = 0; i < n; ++i)
    if (static_cast<long>(i) != exclude) pool.push_back(i);
  std::mt19937_64 rng(seed);
  k = std::min(k, pool.size());
  for (size_t i = 0; i < k; ++i) {
    size_t j = i + static_cast<size_t>(rng() % (pool.size() - i));
    std::swap(pool[i], pool[j]);
  }
  pool.resize(k);
  return pool;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

void build_task_docs(TaskSpec& t, const json& tj, const Where& w, const std::string& base_dir, const EvalSpec& spec) {
  std::vector<RawDoc> raw;
  bool has_path = tj.contains("dataset_path"), has_docs = tj.contains("docs");
  if (has_path == has_docs) w.fail("give exactly one of 'dataset_path' (a JSONL file) or 'docs' (inline list)");
  if (has_path) {
    std::string p = expect_path(tj["dataset_path"], w.key("dataset_path"));
    t.dataset_path = resolve_path(base_dir, p);
    std::error_code ec;
    if (!fs::is_regular_file(t.dataset_path, ec))
      w.key("dataset_path").fail(fmt::format("data file \"{}\" not found", t.dataset_path));
    raw = load_docs_file(t.dataset_path);
  } else {
    const json& d = tj["docs"];
    if (!d.is_array()) w.key("docs").fail(fmt::format("expected a list of objects, got {}", json_excerpt(d)));
    for (size_t i = 0; i < d.size(); ++i) {
      Where dw = w.key("docs").index(i);
      expect_object(d[i], dw);
      raw.push_back({fmt::format("{}: {}", dw.origin, dw.path), d[i]});
    }
  }
  t.n_docs_total = static_cast<int>(raw.size());
  std::optional<int> limit = t.limit ? t.limit : spec.limit;

  // render every document (all data are validated, also those past `limit`)
  std::vector<Doc> rendered;
  rendered.reserve(raw.size());
  for (const auto& rd : raw) rendered.push_back(render_doc(t, rd));

  // few-shot examples: from fewshot_split, else the task's own documents (excluding the doc itself)
  std::vector<Doc> shots_own;
  const std::vector<Doc>* shots = &rendered;
  if (!t.fewshot_split.empty()) {
    std::error_code ec;
    if (!fs::is_regular_file(t.fewshot_split, ec))
      w.key("fewshot_split").fail(fmt::format("data file \"{}\" not found", t.fewshot_split));
    for (const auto& rd : load_docs_file(t.fewshot_split)) shots_own.push_back(render_doc(t, rd));
    shots = &shots_own;
  } else if (tj.contains("fewshot_split")) {
    w.key("fewshot_split").fail("empty path");
  }
  if (t.num_fewshot > 0) {
    size_t avail = shots->size() - (shots == &rendered ? 1 : 0);
    if (shots->size() == 0 || avail < static_cast<size_t>(t.num_fewshot))
      w.key("num_fewshot").fail(fmt::format("{} examples requested but only {} available", t.num_fewshot, avail));
  }

  size_t n_use = limit ? std::min<size_t>(rendered.size(), static_cast<size_t>(*limit)) : rendered.size();
  for (size_t i = 0; i < n_use; ++i) {
    Doc d = rendered[i];
    if (t.output_type == OutputType::LoglikelihoodRolling) {
      // lm-eval scores doc_to_target for rolling tasks; doc_to_text when no target mapping is given
      if (!d.has_target) d.target = d.context, d.has_target = true;
      d.context.clear();
    } else {
      std::string prefix = t.description;
      if (t.num_fewshot > 0) {
        uint64_t seed = spec.seed ^ fnv1a(t.name) ^ (0x9E3779B97F4A7C15ull * (i + 1));
        long excl = shots == &rendered ? static_cast<long>(i) : -1;
        for (size_t k : sample_indices(shots->size(), static_cast<size_t>(t.num_fewshot), excl, seed)) {
          const Doc& s = (*shots)[k];
          prefix += s.context + t.target_delimiter + s.target + t.fewshot_delimiter;
        }
      }
      d.context = prefix + d.context;
    }
    t.docs.push_back(std::move(d));
  }
}

}  // namespace kveval::eval
