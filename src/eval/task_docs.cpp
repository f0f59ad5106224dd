#include "eval/task_docs.hpp"

#include <algorithm>
#include <optional>
#include <filesystem>

#include <fmt/format.h>

#include "eval/json_input.hpp"
#include "eval/mapping.hpp"
#include "util/error.hpp"
#include "util/py_random.hpp"

namespace kveval::eval {

namespace fs = std::filesystem;

namespace {

struct RawDoc {
  std::string origin;
  json doc;
};

/// The task's doc_to_* mappings, compiled once.
struct Mappings {
  std::optional<Mapping> text, target, choice;
  std::vector<std::optional<Mapping>> choice_list;  ///< list doc_to_choice: nullopt = literal text
  std::vector<std::string> choice_literals;
};

Mappings compile_mappings(const TaskSpec& t, const Where& w) {
  Mappings m;
  bool has_choices = !t.doc_to_choice.is_null();
  if (!t.doc_to_text.empty())
    m.text = Mapping::compile(t.doc_to_text, MappingKind::Text, w.key("doc_to_text").text(), has_choices);
  if (!t.doc_to_target.empty())
    m.target = Mapping::compile(t.doc_to_target, MappingKind::Target, w.key("doc_to_target").text(), has_choices);
  if (t.doc_to_choice.is_string()) {
    m.choice = Mapping::compile(t.doc_to_choice, MappingKind::Choice, w.key("doc_to_choice").text(), true);
  } else if (t.doc_to_choice.is_array()) {
    for (size_t i = 0; i < t.doc_to_choice.size(); ++i) {
      std::string c = t.doc_to_choice[i].get<std::string>();
      bool tmpl = c.find("{{") != std::string::npos || c.find("{%") != std::string::npos || c.find("{#") != std::string::npos;
      // a literal choice is text, not a field name; a templated one renders to text
      m.choice_list.push_back(tmpl ? std::optional<Mapping>(Mapping::compile(c, MappingKind::Text,
                                                                             w.key("doc_to_choice").index(i).text(), false))
                                   : std::nullopt);
      m.choice_literals.push_back(c);
    }
  }
  return m;
}

/// Renders text/target/choices/gold of one raw document (no few-shot yet), with
/// lm-eval's rules for the values (lm_eval/api/task.py process_results: an int
/// target is the gold index, a str target the gold choice's text).
Doc render_doc(const TaskSpec& t, const Mappings& m, const RawDoc& rd) {
  Doc d;
  d.origin = rd.origin;
  d.raw = rd.doc;
  if (m.text) d.context = value_text(m.text->resolve(rd.doc, rd.origin), rd.origin, "doc_to_text");
  json target_raw;
  if (m.target) {
    target_raw = m.target->resolve(rd.doc, rd.origin);
    if (target_raw.is_array())
      throw SpecError(fmt::format("{}: doc_to_target: a list of targets ({}) is not supported (one gold answer per document)",
                                  rd.origin, json_excerpt(target_raw)));
    d.target = value_text(target_raw, rd.origin, "doc_to_target");
    d.has_target = true;
  }
  if (t.output_type == OutputType::MultipleChoice) {
    json choices;
    if (m.choice) {
      choices = m.choice->resolve(rd.doc, rd.origin);
    } else {
      choices = json::array();
      for (size_t i = 0; i < m.choice_list.size(); ++i)
        choices.push_back(m.choice_list[i] ? m.choice_list[i]->resolve(rd.doc, rd.origin) : json(m.choice_literals[i]));
    }
    if (!choices.is_array() || choices.empty())
      throw SpecError(fmt::format("{}: doc_to_choice: expected a non-empty list of strings, got {}", rd.origin, json_excerpt(choices)));
    for (size_t i = 0; i < choices.size(); ++i) {
      if (!choices[i].is_string())
        throw SpecError(fmt::format("{}: doc_to_choice[{}]: expected a string, got {} (choices must be a list of strings)",
                                    rd.origin, i, json_excerpt(choices[i])));
      std::string c = choices[i].get<std::string>();
      if (c.empty()) throw SpecError(fmt::format("{}: doc_to_choice[{}]: empty choice", rd.origin, i));
      d.choices.push_back(std::move(c));
    }
    // gold: an int is an index; a str is the gold choice's text (lm-eval), or a string of digits (an index; kveval)
    int64_t gold = -1;
    if (target_raw.is_number_integer()) {
      gold = target_raw.get<int64_t>();
    } else if (target_raw.is_string()) {
      auto it = std::find(d.choices.begin(), d.choices.end(), d.target);
      if (it != d.choices.end()) {
        gold = it - d.choices.begin();
      } else if (!d.target.empty() && std::all_of(d.target.begin(), d.target.end(), ::isdigit) && d.target.size() < 10) {
        gold = std::stoll(d.target);
      } else {
        throw SpecError(fmt::format("{}: doc_to_target: {} is neither a choice index nor one of the {} choices",
                                    rd.origin, json_excerpt(d.target), d.choices.size()));
      }
    } else {
      throw SpecError(fmt::format("{}: doc_to_target: expected a choice index or a choice's text, got {}", rd.origin,
                                  json_excerpt(target_raw)));
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
    if (d.empty()) w.key("docs").fail("no documents (an empty list)");  // as a dataset_path file with none
    for (size_t i = 0; i < d.size(); ++i) {
      Where dw = w.key("docs").index(i);
      expect_object(d[i], dw);
      raw.push_back({fmt::format("{}: {}", dw.origin, dw.path), d[i]});
    }
  }
  t.n_docs_total = static_cast<int>(raw.size());
  std::optional<int> limit = t.limit ? t.limit : spec.limit;

  // render every document (all data are validated, also those past `limit`); templates are parsed once
  Mappings maps = compile_mappings(t, w);
  std::vector<Doc> rendered;
  rendered.reserve(raw.size());
  for (const auto& rd : raw) rendered.push_back(render_doc(t, maps, rd));

  // Few-shot examples: from fewshot_split, else the task's own documents.
  // A fewshot_split that is the same file as dataset_path however it is spelt
  // (std::filesystem::equivalent: "./x", symlinks and hard links count) is the
  // same split: its examples are the task's own documents, so the scored
  // document is dropped from them as lm-eval does for the same split (below).
  std::vector<Doc> shots_own;
  const std::vector<Doc>* shots = &rendered;
  if (!t.fewshot_split.empty()) {
    std::error_code ec;
    if (!fs::is_regular_file(t.fewshot_split, ec))
      w.key("fewshot_split").fail(fmt::format("data file \"{}\" not found", t.fewshot_split));
    const bool same_file = !t.dataset_path.empty() && fs::equivalent(t.fewshot_split, t.dataset_path, ec) && !ec;
    if (!same_file) {
      for (const auto& rd : load_docs_file(t.fewshot_split)) shots_own.push_back(render_doc(t, maps, rd));
      shots = &shots_own;
    }
  } else if (tj.contains("fewshot_split")) {
    w.key("fewshot_split").fail("empty path");
  }
  const bool own_docs = shots == &rendered;
  if (t.num_fewshot > 0) {
    size_t avail = shots->size() - (own_docs ? 1 : 0);
    if (shots->size() == 0 || avail < static_cast<size_t>(t.num_fewshot))
      w.key("num_fewshot").fail(fmt::format("{} examples requested but only {} available{}", t.num_fewshot, avail,
                                            own_docs ? " (a document is never its own example)" : ""));
  }

  size_t n_use = limit ? std::min<size_t>(rendered.size(), static_cast<size_t>(*limit)) : rendered.size();
  // lm-eval's default sampler (lm_eval/api/samplers.py ContextSampler): one random.Random(seed) per
  // task, consumed document after document; from the task's own documents it draws n + 1 and drops
  // the document being scored (by equality, as rm_eval_doc), so an example never contains its own answer
  PyRandom rnd(spec.seed);
  for (size_t i = 0; i < n_use; ++i) {
    Doc d = rendered[i];
    if (t.output_type == OutputType::LoglikelihoodRolling) {
      // lm-eval scores doc_to_target for rolling tasks; doc_to_text when no target mapping is given
      if (!d.has_target) d.target = d.context, d.has_target = true;
      d.context.clear();
    } else {
      std::string prefix = t.description;
      if (t.num_fewshot > 0) {
        const bool same = shots == &rendered;
        const size_t n = static_cast<size_t>(t.num_fewshot);
        std::vector<size_t> picks;
        if (t.fewshot_sampler == "first_n") {
          // lm-eval FirstNSampler: the first n documents in order (the document itself left out)
          for (size_t k = 0; k < shots->size() && picks.size() < n; ++k)
            if (!same || (*shots)[k].raw != rendered[i].raw) picks.push_back(k);
        } else {
          for (size_t k : rnd.sample(shots->size(), same ? n + 1 : n))
            if ((!same || (*shots)[k].raw != rendered[i].raw) && picks.size() < n) picks.push_back(k);
        }
        for (size_t k : picks) {
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
