#include "eval/task_docs.hpp"

#include <algorithm>
#include <optional>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eval/chat_context.hpp"
#include "eval/data_files.hpp"
#include "eval/json_input.hpp"
#include "eval/lm_eval_yaml.hpp"
#include "eval/mapping.hpp"
#include "eval/task_hooks.hpp"
#include "util/error.hpp"
#include "util/number_format.hpp"
#include "util/py_random.hpp"

namespace kveval::eval {

namespace fs = std::filesystem;

namespace {

struct RawDoc {
  std::string origin;
  json doc;
  std::string text;  ///< its JSON text, keys as read (a JSONL line, a Hub row); "" when not known
};

/// Element `i` of `list` (an inline documents' DocKeyOrder list, may be null) as JSON text, keys in
/// their order; "" when there is none.
std::string ordered_text(const nlohmann::ordered_json* list, size_t i) {
  return list && list->is_array() && i < list->size() ? (*list)[i].dump() : std::string();
}

/// The task's doc_to_* mappings, compiled once.
struct Mappings {
  std::optional<Mapping> text, target, choice;
  std::vector<std::optional<Mapping>> choice_list;  ///< list doc_to_choice: nullopt = literal text
  std::vector<std::string> choice_literals;
};

/// `kind`'s mapping: the task's Python hook when it has one (only while `text` is still its placeholder).
std::optional<Mapping> hook_mapping(const TaskSpec& t, MappingKind kind, const std::string& text) {
  if (!t.hooks) return std::nullopt;
  const std::optional<PythonHook>& h = kind == MappingKind::Text     ? t.hooks->doc_to_text
                                       : kind == MappingKind::Target ? t.hooks->doc_to_target
                                                                     : t.hooks->doc_to_choice;
  if (!h || text != "!function " + h->name()) return std::nullopt;
  return Mapping::python(*h, kind);
}

Mappings compile_mappings(const TaskSpec& t, const Where& w) {
  Mappings m;
  bool has_choices = !t.doc_to_choice.is_null();
  m.text = hook_mapping(t, MappingKind::Text, t.doc_to_text);
  m.target = hook_mapping(t, MappingKind::Target, t.doc_to_target);
  m.choice = hook_mapping(t, MappingKind::Choice, t.doc_to_choice.is_string() ? t.doc_to_choice.get<std::string>() : "");
  if (!m.text && !t.doc_to_text.empty())
    m.text = Mapping::compile(t.doc_to_text, MappingKind::Text, w.key("doc_to_text").text(), has_choices);
  if (!m.target && !t.doc_to_target.empty())
    m.target = Mapping::compile(t.doc_to_target, MappingKind::Target, w.key("doc_to_target").text(), has_choices);
  if (m.choice) {
    // the Python hook
  } else if (t.doc_to_choice.is_string()) {
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

/// A list doc_to_target: generate_until's references (lm-eval multiple_target:
/// exact_match when any matches) or multiple_choice's gold indices (AGIEval: acc
/// when the prediction is any of them). `target` becomes lm-eval's few-shot text
/// of a list, str(doc_to_target[0]). Other output types refuse a list.
void set_target_list(const TaskSpec& t, const json& v, const std::string& origin, Doc& d) {
  if (v.empty()) throw SpecError(fmt::format("{}: doc_to_target: an empty list of targets", origin));
  if (t.output_type == OutputType::GenerateUntil) {
    for (size_t k = 0; k < v.size(); ++k)
      d.targets.push_back(value_text(v[k], origin, fmt::format("doc_to_target[{}]", k)));
    d.target = d.targets[0];
  } else if (t.output_type == OutputType::MultipleChoice) {
    for (size_t k = 0; k < v.size(); ++k) {
      if (!v[k].is_number_integer() || v[k].get<int64_t>() < 0 || v[k].get<int64_t>() > 1000000)
        throw SpecError(fmt::format("{}: doc_to_target[{}]: expected a choice index, got {} (a list target of "
                                    "multiple_choice lists gold indices)",
                                    origin, k, json_excerpt(v[k])));
      d.golds.push_back(static_cast<int>(v[k].get<int64_t>()));
    }
    d.target = std::to_string(d.golds[0]);
  } else {
    throw SpecError(fmt::format("{}: doc_to_target: a list of targets ({}) needs output_type generate_until or "
                                "multiple_choice",
                                origin, json_excerpt(v)));
  }
}

/// lm-eval's multiple_input (Winogrande; ConfigurableTask.process_results and
/// fewshot_context): doc_to_text's int is the gold index into the contexts that
/// doc_to_choice gave (d.choices), doc_to_target the text scored after each of them;
/// `context` becomes the gold context, which is what a few-shot example shows (c[q]).
void set_multiple_input(const json& text_raw, const json& target_raw, const std::string& origin, Doc& d) {
  if (!text_raw.is_number_integer())
    throw SpecError(fmt::format("{}: doc_to_text: expected a context index, got {} (the task's first document gave "
                                "an int, so it is a multiple-input task as in lm-eval: doc_to_choice gives the contexts)",
                                origin, json_excerpt(text_raw)));
  const int64_t gold = text_raw.get<int64_t>();
  if (gold < 0 || gold >= static_cast<int64_t>(d.choices.size()))
    throw SpecError(fmt::format("{}: doc_to_text: context index {} out of range [0, {})", origin, gold, d.choices.size()));
  if (!target_raw.is_string() && !target_raw.is_number())
    throw SpecError(fmt::format("{}: doc_to_target: expected the text scored after each context (a multiple-input "
                                "task), got {}", origin, json_excerpt(target_raw)));
  d.gold = static_cast<int>(gold);
  d.target = value_text(target_raw, origin, "doc_to_target");
  d.context = d.choices[static_cast<size_t>(gold)];
}

/// Renders text/target/choices/gold of one raw document (no few-shot yet), with
/// lm-eval's rules for the values (lm_eval/api/task.py process_results: an int
/// target is the gold index, a str target the gold choice's text; for a
/// multiple-input task, set_multiple_input).
Doc render_doc(const TaskSpec& t, const Mappings& m, const RawDoc& rd) {
  Doc d;
  d.origin = rd.origin;
  d.raw = rd.doc;
  d.raw_text = rd.text;
  json text_raw;
  if (m.text) text_raw = m.text->resolve(rd.doc, rd.origin, rd.text);
  if (m.text && !t.multiple_input) d.context = value_text(text_raw, rd.origin, "doc_to_text");
  json target_raw;
  if (m.target) {
    target_raw = m.target->resolve(rd.doc, rd.origin, rd.text);
    d.target_value = target_raw;
    if (target_raw.is_array()) {
      if (!t.multiple_input) set_target_list(t, target_raw, rd.origin, d);
    } else {
      d.target = value_text(target_raw, rd.origin, "doc_to_target");
    }
    d.has_target = true;
  }
  if (t.output_type == OutputType::MultipleChoice) {
    json choices;
    if (m.choice) {
      choices = m.choice->resolve(rd.doc, rd.origin, rd.text);
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
    if (t.multiple_input) {
      set_multiple_input(text_raw, target_raw, rd.origin, d);
      return d;
    }
    // gold: an int is an index; a str is the gold choice's text (lm-eval), or a string of digits (an index; kveval)
    int64_t gold = -1;
    if (!d.golds.empty()) {
      for (size_t k = 0; k < d.golds.size(); ++k)
        if (d.golds[k] >= static_cast<int64_t>(d.choices.size()))
          throw SpecError(fmt::format("{}: doc_to_target[{}]: gold index {} out of range [0, {})", rd.origin, k,
                                      d.golds[k], d.choices.size()));
      d.gold = d.golds[0];
      return d;  // target stays str(doc_to_target[0]): lm-eval's few-shot text for a list
    } else if (target_raw.is_number_integer()) {
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

/// A task-level template (description, gen_prefix), parsed once; errors name `w`.
tmpl::Template parse_template(const std::string& source, const Where& w) {
  try {
    return tmpl::Template::parse(source);
  } catch (const tmpl::TemplateError& e) {
    w.fail(fmt::format("template line {}, column {}: {}", e.line, e.column, e.message));
  }
}

/// lm-eval's utils.apply_template(template, doc); errors name the document and the key.
std::string render_template(const tmpl::Template& t, const json& doc, const std::string& origin, const char* key) {
  try {
    return t.render(doc);
  } catch (const tmpl::TemplateError& e) {
    throw SpecError(fmt::format("{}: {}: template line {}, column {}: {}", origin, key, e.line, e.column, e.message));
  }
}

/// lm-eval's doc_to_prefix: the document's field named `source` when it has one, else the template.
std::string field_or_template(const std::string& source, const tmpl::Template& t, const json& doc,
                              const std::string& origin, const char* key) {
  if (doc.is_object()) {
    auto it = doc.find(source);
    if (it != doc.end()) return value_text(*it, origin, key);
  }
  return render_template(t, doc, origin, key);
}

/// The documents of data files, one after the other (data_files.hpp: JSON Lines, a JSON array,
/// CSV, Parquet), as `datasets` concatenates a split's files; each must exist (`w`: the key naming
/// them), and together they hold at least one document.
std::vector<RawDoc> load_docs_files(const std::vector<std::string>& paths, const Where& w) {
  std::vector<RawDoc> out;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) w.fail(fmt::format("data file \"{}\" not found", path));
    for (DataRow& r : read_data_file(path)) out.push_back({std::move(r.origin), std::move(r.doc), std::move(r.text)});
  }
  if (out.empty())
    throw SpecError(fmt::format("{}: no documents (the file{} empty or blank)", fmt::join(paths, ", "),
                                paths.size() > 1 ? "s are" : " is"));
  return out;
}

/// Whether two lists of files are the same files in the same order (std::filesystem::equivalent:
/// "./x", symlinks and hard links count).
bool same_files(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  if (a.empty() || a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    std::error_code ec;
    if (!fs::equivalent(a[i], b[i], ec) || ec) return false;
  }
  return true;
}

/// lm-eval's process_docs over the documents read from `origin` (a data file or the inline docs);
/// the documents it returns keep their key order (the samples' `doc`). Without the hook: `raw`.
std::vector<RawDoc> processed(const TaskSpec& t, std::vector<RawDoc> raw, const std::string& origin) {
  if (!t.hooks || !t.hooks->process_docs) return raw;
  std::vector<nlohmann::ordered_json> docs;
  for (const RawDoc& r : raw) docs.push_back(ordered_doc(r.doc, r.text));
  std::vector<nlohmann::ordered_json> out = run_process_docs(*t.hooks->process_docs, std::move(docs), origin);
  std::vector<RawDoc> res;
  for (size_t i = 0; i < out.size(); ++i) {
    std::string text = out[i].dump();
    res.push_back({fmt::format("{}: process_docs document {}", origin, i), json::parse(text), std::move(text)});
  }
  return res;
}

/// The few-shot documents: fewshot_split, else the inline fewshot_docs (both through process_docs),
/// else fewshot_config.samples, else the task's own
/// documents (`own` = true). A fewshot_split that is the same files as dataset_path however they
/// are spelt (same_files) is the task's own.
std::vector<RawDoc> fewshot_source(const TaskSpec& t, const json& tj, const Where& w, const std::vector<RawDoc>& raw,
                                   const DocKeyOrder* order, bool& own) {
  std::vector<RawDoc> shot_raw;
  own = true;
  if (!t.fewshot_split.empty()) {
    const std::vector<std::string> files = t.fewshot_files.empty() ? std::vector<std::string>{t.fewshot_split} : t.fewshot_files;
    if (!same_files(files, t.dataset_files))
      shot_raw = processed(t, load_docs_files(files, w.key("fewshot_split")), fmt::format("{}", fmt::join(files, ", "))), own = false;
  } else if (tj.contains("fewshot_split")) {
    w.key("fewshot_split").fail("empty path");
  } else if (tj.contains("fewshot_docs")) {
    const json& d = tj["fewshot_docs"];
    if (!d.is_array()) w.key("fewshot_docs").fail(fmt::format("expected a list of objects, got {}", json_excerpt(d)));
    for (size_t i = 0; i < d.size(); ++i) {
      Where dw = w.key("fewshot_docs").index(i);
      expect_object(d[i], dw);
      shot_raw.push_back(
          {fmt::format("{}: {}", dw.origin, dw.path), d[i], ordered_text(order ? &order->fewshot_docs : nullptr, i)});
    }
    shot_raw = processed(t, std::move(shot_raw), w.key("fewshot_docs").text()), own = false;
  } else if (t.fewshot_samples.is_array()) {
    if (t.num_fewshot > 0 && t.fewshot_samples.empty()) w.key("fewshot_config").key("samples").fail("an empty list");
    for (size_t k = 0; k < t.fewshot_samples.size(); ++k) {
      Where sw = w.key("fewshot_config").key("samples").index(k);
      shot_raw.push_back({fmt::format("{}: {}", sw.origin, sw.path), t.fewshot_samples[k], ""});
    }
    own = false;
  }
  if (own) shot_raw = raw;
  return shot_raw;
}

/// lm-eval's ContextSampler draw for the document `doc`: `draw` examples (rnd.sample for
/// `default`, the first ones for `first_n`), those equal to `doc` dropped, the first
/// num_fewshot kept; their indices into `shot_raw`.
std::vector<size_t> draw_fewshot(const TaskSpec& t, const std::vector<RawDoc>& shot_raw, size_t draw, const json& doc,
                                 PyRandom& rnd) {
  const size_t n = static_cast<size_t>(t.num_fewshot);
  std::vector<size_t> drawn;
  if (t.fewshot_sampler == "first_n") {
    for (size_t k = 0; k < draw; ++k) drawn.push_back(k);
  } else {
    drawn = rnd.sample(shot_raw.size(), draw);
  }
  std::vector<size_t> kept;
  for (size_t k : drawn)
    if (shot_raw[k].doc != doc && kept.size() < n) kept.push_back(k);
  return kept;
}

/// The few-shot examples `kept` as lm-eval main's ConfigurableTask.fewshot_context builds them
/// (lm_eval/api/task.py): build_qa_turn of each example's doc_to_text, target and its own gen_prefix
/// (`prefixes`, resolved against the example's document); both delimiters are fewshot_config's when
/// it gives them, else the task's (lm-eval's FewshotConfig.from_dict, lm_eval/config/task.py).
std::vector<FewshotTurn> fewshot_turns(const TaskSpec& t, const std::vector<Doc>& shots,
                                       const std::vector<std::optional<std::string>>& prefixes,
                                       const std::vector<size_t>& kept) {
  const std::string target_delimiter = t.fewshot_target_delimiter.value_or(t.target_delimiter);
  const std::string fewshot_delimiter = t.fewshot_fewshot_delimiter.value_or(t.fewshot_delimiter);
  std::vector<FewshotTurn> out;
  for (size_t k : kept)
    out.push_back(fewshot_turn(shots[k].context, shots[k].target, prefixes[k], target_delimiter, fewshot_delimiter));
  return out;
}

/// The first `n` few-shot examples' gen_prefix (none when the source is absent or ""): fewshot_config.gen_prefix
/// when it is given, else the task's (lm-eval's FewshotConfig.from_dict inherits it), each resolved against the
/// example's own document (lm-eval main's fewshot_context: resolve_field(fs_doc, fewshot_cfg.gen_prefix)).
std::vector<std::optional<std::string>> shot_prefixes(const TaskSpec& t, const Where& w, const std::vector<RawDoc>& shot_raw,
                                                      size_t n) {
  std::vector<std::optional<std::string>> out(n);
  const bool own = t.fewshot_gen_prefix.has_value();
  const std::optional<std::string>& source = own ? t.fewshot_gen_prefix : t.gen_prefix;
  if (!source || source->empty()) return out;  // resolve_field: `if field:`
  const tmpl::Template tpl = parse_template(*source, own ? w.key("fewshot_config").key("gen_prefix") : w.key("gen_prefix"));
  const char* key = own ? "fewshot_config.gen_prefix" : "gen_prefix";
  for (size_t k = 0; k < n; ++k) out[k] = field_or_template(*source, tpl, shot_raw[k].doc, shot_raw[k].origin, key);
  return out;
}

/// The context of one (non-rolling) document: lm-eval main's ConfigurableTask.fewshot_context,
/// as text (system prompt + examples + the document's question_turn) or, with the spec's chat
/// template, rendered as a chat (chat_context.hpp).
std::string doc_context(const TaskSpec& t, const EvalSpec& spec, const std::string& description,
                        const std::vector<FewshotTurn>& turns, const std::string& question,
                        const std::optional<std::string>& gp, const std::string& where) {
  const std::string examples = fewshot_text(turns);
  const std::string system = system_prompt(spec.chat.system_instruction, description, t.fewshot_delimiter);
  if (!spec.chat.apply) return system + examples + fewshot_text({question_turn(question, gp, t.target_delimiter)});
  ChatPrompt p{system, t.num_fewshot > 0, turns, examples, question, gp};
  return chat_context(spec.chat, p, where);
}

/// lm-eval's test of the first document (ConfigurableTask.__init__): a multiple_choice
/// task whose doc_to_text gives an int is a multiple-input task.
bool is_multiple_input(const TaskSpec& t, const Mappings& m, const std::vector<RawDoc>& raw) {
  return t.output_type == OutputType::MultipleChoice && m.text && !raw.empty() &&
         m.text->resolve(raw[0].doc, raw[0].origin, raw[0].text).is_number_integer();
}

/// lm-eval's multiple_input_context: after `prefix` (description and few-shot examples), one
/// context per choice, then the gen_prefix without a delimiter; d.context keeps the prefix.
void set_multiple_input_contexts(const std::string& prefix, const std::optional<std::string>& gp, Doc& d) {
  d.context = prefix;
  for (const std::string& c : d.choices) d.contexts.push_back(prefix + c + gp.value_or(""));
}

/// The task's documents as given: the `dataset_path` file (t.dataset_path set) or the inline `docs` list,
/// before process_docs; `has_path` tells which.
std::vector<RawDoc> read_raw_docs(TaskSpec& t, const json& tj, const Where& w, const std::string& base_dir,
                                  const DocKeyOrder* order, bool& has_path) {
  std::vector<RawDoc> raw;
  has_path = tj.contains("dataset_path");
  const bool has_docs = tj.contains("docs");
  if (has_path == has_docs) w.fail("give exactly one of 'dataset_path' (a JSONL file) or 'docs' (inline list)");
  if (has_path) {
    t.dataset_files = expect_paths(tj["dataset_path"], w.key("dataset_path"), base_dir);
    t.dataset_path = t.dataset_files[0];
    raw = load_docs_files(t.dataset_files, w.key("dataset_path"));
  } else {
    const json& d = tj["docs"];
    if (!d.is_array()) w.key("docs").fail(fmt::format("expected a list of objects, got {}", json_excerpt(d)));
    if (d.empty()) w.key("docs").fail("no documents (an empty list)");  // as a dataset_path file with none
    for (size_t i = 0; i < d.size(); ++i) {
      Where dw = w.key("docs").index(i);
      expect_object(d[i], dw);
      raw.push_back({fmt::format("{}: {}", dw.origin, dw.path), d[i], ordered_text(order ? &order->docs : nullptr, i)});
    }
  }
  return raw;
}

}  // namespace

void build_task_docs(TaskSpec& t, const json& tj, const Where& w, const std::string& base_dir, const EvalSpec& spec,
                     const DocKeyOrder* order) {
  bool has_path = false;
  std::vector<RawDoc> raw = read_raw_docs(t, tj, w, base_dir, order, has_path);
  raw = processed(t, std::move(raw), has_path ? fmt::format("{}", fmt::join(t.dataset_files, ", ")) : w.key("docs").text());
  t.n_docs_total = static_cast<int>(raw.size());
  std::optional<int> limit = t.limit ? t.limit : spec.limit;

  // render every document (all data are validated, also those past `limit`); templates are parsed once
  Mappings maps = compile_mappings(t, w);
  t.multiple_input = is_multiple_input(t, maps, raw);
  std::vector<Doc> rendered;
  rendered.reserve(raw.size());
  for (const auto& rd : raw) rendered.push_back(render_doc(t, maps, rd));

  bool own_docs = true;
  std::vector<RawDoc> shot_raw = fewshot_source(t, tj, w, raw, order, own_docs);
  // lm-eval's ContextSampler: n + 1 drawn exactly when fewshot_split == test_split by name
  const bool extra = t.fewshot_same_split.value_or(own_docs);
  std::vector<Doc> shots;
  const size_t draw = static_cast<size_t>(t.num_fewshot) + (extra ? 1 : 0);
  if (t.num_fewshot > 0) {
    if (shot_raw.size() < draw)
      task_key_where(w, spec.set_by, "num_fewshot", t.name).fail(fmt::format("{} requested but only {} available{}", count_of(t.num_fewshot, "example"),
                                            extra ? shot_raw.size() - std::min<size_t>(shot_raw.size(), 1) : shot_raw.size(),
                                            extra ? " (a document is never its own example)" : ""));
    // the examples' own mappings: fewshot_config's doc_to_* overrides, else the task's
    TaskSpec ft = t;
    if (!t.fewshot_doc_to_text.empty()) ft.doc_to_text = t.fewshot_doc_to_text;
    if (!t.fewshot_doc_to_target.empty()) ft.doc_to_target = t.fewshot_doc_to_target;
    if (!t.fewshot_doc_to_choice.is_null()) ft.doc_to_choice = t.fewshot_doc_to_choice;
    if (t.hooks) ft.hooks = std::make_shared<const TaskHooks>(t.hooks->for_fewshot());
    Mappings fmaps = compile_mappings(ft, w.key("fewshot_config"));
    for (const auto& rd : shot_raw) shots.push_back(render_doc(ft, fmaps, rd));
  }
  std::optional<tmpl::Template> description, gen_prefix;
  if (!t.description.empty()) description = parse_template(t.description, w.key("description"));
  if (t.gen_prefix) gen_prefix = parse_template(*t.gen_prefix, w.key("gen_prefix"));
  const std::vector<std::optional<std::string>> prefixes = shot_prefixes(t, w, shot_raw, shots.size());

  size_t n_use = limit ? std::min<size_t>(rendered.size(), static_cast<size_t>(*limit)) : rendered.size();
  // lm-eval's samplers (lm_eval/api/samplers.py): one random.Random(seed) per task, consumed
  // document after document
  PyRandom rnd(spec.seed);
  t.chat_template = spec.chat.apply && t.output_type != OutputType::LoglikelihoodRolling;
  for (size_t i = 0; i < n_use; ++i) {
    Doc d = rendered[i];
    if (t.output_type == OutputType::LoglikelihoodRolling) {
      // lm-eval scores doc_to_target for rolling tasks; doc_to_text when no target mapping is given
      if (!d.has_target) d.target = d.context, d.has_target = true;
      d.context.clear();
    } else {
      const json& doc = raw[i].doc;
      // lm-eval main: resolve_field(doc, description), a field of that name or the template
      const std::string desc =
          description ? field_or_template(t.description, *description, doc, raw[i].origin, "description") : "";
      std::optional<std::string> gp;
      if (gen_prefix) gp = field_or_template(*t.gen_prefix, *gen_prefix, doc, raw[i].origin, "gen_prefix");
      std::vector<FewshotTurn> turns;
      if (t.num_fewshot > 0) turns = fewshot_turns(t, shots, prefixes, draw_fewshot(t, shot_raw, draw, doc, rnd));
      if (t.multiple_input) {
        if (spec.chat.apply)
          w.fail("a multiple-input task (doc_to_text gives the gold index) cannot run under --apply-chat-template");
        std::string prefix = system_prompt(spec.chat.system_instruction, desc, t.fewshot_delimiter);
        set_multiple_input_contexts(prefix + fewshot_text(turns), gp, d);
      } else {
        d.context = doc_context(t, spec, desc, turns, d.context, gp,
                                fmt::format("task '{}' document {} ({})", t.name, i, raw[i].origin));
      }
    }
    t.docs.push_back(std::move(d));
  }
}

}  // namespace kveval::eval
