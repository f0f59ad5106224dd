#include "eval/spec.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "eval/json_input.hpp"
#include "eval/spec_check.hpp"
#include "eval/task_docs.hpp"
#include "util/error.hpp"

namespace kveval::eval {

namespace fs = std::filesystem;


const char* to_string(OutputType t) {
  switch (t) {
    case OutputType::Loglikelihood: return "loglikelihood";
    case OutputType::MultipleChoice: return "multiple_choice";
    case OutputType::LoglikelihoodRolling: return "loglikelihood_rolling";
    case OutputType::GenerateUntil: return "generate_until";
  }
  return "?";
}

const std::vector<std::string>& metrics_for(OutputType t) {
  static const std::vector<std::string> ll = {"acc", "perplexity"};
  static const std::vector<std::string> mc = {"acc", "acc_norm"};
  static const std::vector<std::string> roll = {"word_perplexity", "byte_perplexity", "bits_per_byte",
                                                "token_perplexity"};
  static const std::vector<std::string> gen = {"exact_match"};
  switch (t) {
    case OutputType::Loglikelihood: return ll;
    case OutputType::MultipleChoice: return mc;
    case OutputType::LoglikelihoodRolling: return roll;
    case OutputType::GenerateUntil: return gen;
  }
  return ll;
}

namespace {

TaskSpec parse_task(const json& tj, const Where& w, const std::string& base_dir, const EvalSpec& spec) {
  expect_object(tj, w);
  static const std::vector<std::string> keys = {
      "name", "output_type", "dataset_path", "docs", "doc_to_text", "doc_to_target", "doc_to_choice",
      "target_delimiter", "description", "generation_kwargs", "metric_list", "num_fewshot", "fewshot_split",
      "fewshot_delimiter", "limit"};
  check_keys(tj, w, keys);
  TaskSpec t;
  if (!tj.contains("name")) w.fail("missing required key 'name'");
  t.name = expect_string(tj["name"], w.key("name"));
  if (t.name.empty()) w.key("name").fail("must not be empty");
  for (unsigned char c : t.name)
    if (c < 0x20 || c == 0x7F || c == '|')
      w.key("name").fail(fmt::format("{} (task names are printable text without '|', they head table rows)",
                                     c == '|' ? std::string("contains '|'") : fmt::format("contains control byte 0x{:02x}", c)));
  if (!tj.contains("output_type"))
    w.fail("missing required key 'output_type' (one of loglikelihood, multiple_choice, loglikelihood_rolling, generate_until)");
  {
    std::string ot = expect_string(tj["output_type"], w.key("output_type"));
    std::vector<std::string> names;
    bool found = false;
    for (OutputType o : {OutputType::Loglikelihood, OutputType::MultipleChoice, OutputType::LoglikelihoodRolling,
                         OutputType::GenerateUntil}) {
      names.push_back(to_string(o));
      if (ot == to_string(o)) t.output_type = o, found = true;
    }
    if (!found) {
      std::string hint = closest(ot, names);
      w.key("output_type").fail(fmt::format("unknown output_type \"{}\"{}; expected one of loglikelihood, multiple_choice, loglikelihood_rolling, generate_until",
                                            ot, hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
    }
  }
  auto opt_string = [&](const char* k, std::string& dst) {
    if (tj.contains(k)) dst = expect_string(tj[k], w.key(k));
  };
  opt_string("doc_to_text", t.doc_to_text);
  opt_string("doc_to_target", t.doc_to_target);
  opt_string("target_delimiter", t.target_delimiter);
  opt_string("description", t.description);
  opt_string("fewshot_delimiter", t.fewshot_delimiter);
  if (tj.contains("doc_to_choice")) {
    const json& c = tj["doc_to_choice"];
    if (c.is_array()) {
      if (c.empty()) w.key("doc_to_choice").fail("expected a non-empty list");
      for (size_t i = 0; i < c.size(); ++i) expect_string(c[i], w.key("doc_to_choice").index(i));
    } else {
      expect_string(c, w.key("doc_to_choice"));
    }
    t.doc_to_choice = c;
  }
  if (tj.contains("limit")) t.limit = static_cast<int>(expect_int(tj["limit"], w.key("limit"), 0, 1 << 30));
  if (tj.contains("num_fewshot"))
    t.num_fewshot = static_cast<int>(expect_int(tj["num_fewshot"], w.key("num_fewshot"), 0, 1 << 20));
  if (tj.contains("fewshot_split")) {
    std::string p = expect_path(tj["fewshot_split"], w.key("fewshot_split"));
    t.fewshot_split = resolve_path(base_dir, p);
  }

  // required mappings per output type
  switch (t.output_type) {
    case OutputType::Loglikelihood:
      if (t.doc_to_text.empty()) w.fail("loglikelihood task needs 'doc_to_text' (the context)");
      if (t.doc_to_target.empty()) w.fail("loglikelihood task needs 'doc_to_target' (the continuation)");
      break;
    case OutputType::MultipleChoice:
      if (t.doc_to_text.empty()) w.fail("multiple_choice task needs 'doc_to_text'");
      if (t.doc_to_choice.is_null()) w.fail("multiple_choice task needs 'doc_to_choice'");
      if (t.doc_to_target.empty()) w.fail("multiple_choice task needs 'doc_to_target' (gold index or gold choice)");
      break;
    case OutputType::LoglikelihoodRolling:
      if (t.doc_to_target.empty() && t.doc_to_text.empty())
        w.fail("loglikelihood_rolling task needs 'doc_to_target' (the text to score; lm-eval convention) or 'doc_to_text'");
      if (t.num_fewshot > 0) w.key("num_fewshot").fail("loglikelihood_rolling tasks take no few-shot examples");
      break;
    case OutputType::GenerateUntil:
      if (t.doc_to_text.empty()) w.fail("generate_until task needs 'doc_to_text' (the prompt)");
      break;
  }
  if (!t.doc_to_choice.is_null() && t.output_type != OutputType::MultipleChoice)
    w.key("doc_to_choice").fail(fmt::format("only multiple_choice tasks take choices (this task is {})", to_string(t.output_type)));

  if (tj.contains("generation_kwargs")) {
    Where gw = w.key("generation_kwargs");
    if (t.output_type != OutputType::GenerateUntil) gw.fail("only generate_until tasks take generation_kwargs");
    const json& g = expect_object(tj["generation_kwargs"], gw);
    check_keys(g, gw, {"until", "max_gen_toks", "do_sample", "temperature"});
    if (g.contains("until")) {
      const json& u = g["until"];
      if (u.is_string()) {
        if (u.get<std::string>().empty()) gw.key("until").fail("empty stop string");
        t.generation_kwargs.until.push_back(u.get<std::string>());
      } else {
        if (!u.is_array()) gw.key("until").fail(fmt::format("expected a list of strings, got {}", json_excerpt(u)));
        for (size_t i = 0; i < u.size(); ++i) {
          std::string s = expect_string(u[i], gw.key("until").index(i));
          if (s.empty()) gw.key("until").index(i).fail("empty stop string");
          t.generation_kwargs.until.push_back(s);
        }
      }
    }
    if (g.contains("max_gen_toks")) {
      int64_t hi = spec.max_length ? *spec.max_length - 1 : (1 << 24);
      const json& m = g["max_gen_toks"];
      if (m.is_number_integer() && spec.max_length && m.get<int64_t>() >= *spec.max_length)
        gw.key("max_gen_toks").fail(fmt::format("{} tokens do not fit max_length {} (the prompt needs at least BOS)",
                                                m.get<int64_t>(), *spec.max_length));
      t.generation_kwargs.max_gen_toks = static_cast<int>(expect_int(m, gw.key("max_gen_toks"), 0, hi));
    }
    if (g.contains("do_sample") && !(g["do_sample"].is_boolean() && !g["do_sample"].get<bool>()))
      gw.key("do_sample").fail("only greedy decoding is supported (do_sample must be false)");
    if (g.contains("temperature") && !(g["temperature"].is_number() && g["temperature"].get<double>() == 0.0))
      gw.key("temperature").fail("only greedy decoding is supported (temperature must be 0)");
  }

  if (tj.contains("metric_list")) {
    Where mw = w.key("metric_list");
    const json& ml = tj["metric_list"];
    if (!ml.is_array()) mw.fail(fmt::format("expected a list, got {}", json_excerpt(ml)));
    const auto& allowed = metrics_for(t.output_type);
    for (size_t i = 0; i < ml.size(); ++i) {
      Where iw = mw.index(i);
      std::string name;
      if (ml[i].is_object()) {
        check_keys(ml[i], iw, {"metric", "aggregation", "higher_is_better"});
        if (!ml[i].contains("metric")) iw.fail("missing required key 'metric'");
        name = expect_string(ml[i]["metric"], iw.key("metric"));
        iw = iw.key("metric");
      } else {
        name = expect_string(ml[i], iw);
      }
      if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        std::string hint = closest(name, allowed);
        iw.fail(fmt::format("metric \"{}\" is not available for {}{}; available: {}", name, to_string(t.output_type),
                            hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint), list));
      }
      if (std::find(t.metric_list.begin(), t.metric_list.end(), name) == t.metric_list.end()) t.metric_list.push_back(name);
    }
    if (t.metric_list.empty()) mw.fail("empty metric list");
  } else {
    t.metric_list = metrics_for(t.output_type);
  }

  build_task_docs(t, tj, w, base_dir, spec);
  return t;
}

}  // namespace

EvalSpec parse_spec(const json& j, const std::string& origin, const std::string& base_dir,
                    const std::string& model_override) {
  Where w{origin, ""};
  if (!j.is_object()) w.fail(fmt::format("expected a JSON object at the top level, got {}", json_excerpt(j)));
  check_keys(j, w, {"model", "threads", "batch_size", "max_length", "seed", "limit", "tasks"});
  EvalSpec s;
  s.path = origin;
  s.raw = j;
  if (j.contains("model")) s.model = resolve_path(base_dir, expect_path(j["model"], w.key("model")));
  if (!model_override.empty()) s.model = model_override;
  if (s.model.empty()) w.fail("missing required key 'model' (or pass --model)");
  if (j.contains("threads")) s.threads = static_cast<int>(expect_int(j["threads"], w.key("threads"), 0, 4096));
  if (j.contains("batch_size")) s.batch_size = static_cast<int>(expect_int(j["batch_size"], w.key("batch_size"), 1, 4096));
  if (j.contains("max_length")) s.max_length = static_cast<int>(expect_int(j["max_length"], w.key("max_length"), 2, 1 << 24));
  if (j.contains("seed")) {
    const json& sd = j["seed"];
    if (!sd.is_number_integer() || (sd.is_number_integer() && !sd.is_number_unsigned() && sd.get<int64_t>() < 0))
      w.key("seed").fail(fmt::format("expected a non-negative integer, got {}", json_excerpt(sd)));
    s.seed = sd.get<uint64_t>();
  }
  if (j.contains("limit")) s.limit = static_cast<int>(expect_int(j["limit"], w.key("limit"), 0, 1 << 30));
  if (!j.contains("tasks")) w.fail("missing required key 'tasks'");
  const json& tasks = j["tasks"];
  if (!tasks.is_array()) w.key("tasks").fail(fmt::format("expected a list of tasks, got {}", json_excerpt(tasks)));
  if (tasks.empty()) w.key("tasks").fail("no tasks");
  std::set<std::string> names;
  for (size_t i = 0; i < tasks.size(); ++i) {
    TaskSpec t = parse_task(tasks[i], w.key("tasks").index(i), base_dir, s);
    if (!names.insert(t.name).second)
      w.key("tasks").index(i).key("name").fail(fmt::format("duplicate task name \"{}\"", t.name));
    s.tasks.push_back(std::move(t));
  }
  return s;
}

EvalSpec load_spec(const std::string& path, const std::string& model_override) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw SpecError(fmt::format("{}: is a directory (expected a JSON spec file)", path));
  if (!fs::exists(path, ec)) throw SpecError(fmt::format("{}: not found", path));
  std::ifstream f(path, std::ios::binary);
  if (!f) throw SpecError(fmt::format("{}: cannot open spec file", path));
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  json j = parse_json_text(text, path);
  std::string base = fs::path(path).parent_path().string();
  return parse_spec(j, path, base.empty() ? "." : base, model_override);
}

}  // namespace kveval::eval
