// Prompts of instruct models the lm-eval way (lm-eval main's fewshot_context): see chat_context.hpp.
#include "eval/chat_context.hpp"

#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "eval/chat_template.hpp"
#include "eval/spec_check.hpp"
#include "model/gguf.hpp"
#include "util/error.hpp"
#include "util/input_file.hpp"
#include "util/whitespace.hpp"

namespace kveval::eval {

namespace fs = std::filesystem;

namespace {

/// The template `name` names for `model` (see resolve_chat_options); `where` names the option in messages.
ChatTemplate find_template(const gguf::File& f, const std::string& name, const std::string& where) {
  const std::string base = "tokenizer.chat_template", prefix = base + ".";
  if (name.empty()) {
    if (f.find(base) == nullptr)
      throw SpecError(fmt::format("{}: no chat template (key '{}' is missing); name a template file with "
                                  "--apply-chat-template FILE or the spec's apply_chat_template",
                                  f.path(), base));
    return ChatTemplate::from_gguf(f);
  }
  if (f.find(prefix + name) != nullptr) return ChatTemplate::from_gguf(f, name);
  if (name == "default" && f.find(base) != nullptr) return ChatTemplate::from_gguf(f);
  std::error_code ec;
  if (fs::is_regular_file(name, ec)) return ChatTemplate::parse(util::read_input_file(name, util::InputKind::Text), name);
  std::string names = f.find(base) != nullptr ? "default" : "";
  for (const auto& [k, v] : f.metadata())
    if (k.rfind(prefix, 0) == 0) names += (names.empty() ? "" : ", ") + k.substr(prefix.size());
  throw SpecError(fmt::format("{} {}: no chat template of that name in {} (its templates: {}) and no file of that path",
                              where, name, f.path(), names.empty() ? "none" : names));
}

/// The spec's apply_chat_template / system_instruction / fewshot_as_multiturn into `c`.
void read_spec_keys(const nlohmann::json& j, const Where& w, ChatOptions& c) {
  if (j.contains("apply_chat_template")) {
    const nlohmann::json& v = j["apply_chat_template"];
    if (v.is_boolean()) {
      c.apply = v.get<bool>();
    } else if (v.is_string() && !v.get<std::string>().empty()) {
      c.apply = true;
      c.name = v.get<std::string>();
    } else {
      w.key("apply_chat_template").fail(fmt::format("expected true, false or a template name, got {}", json_excerpt(v)));
    }
  }
  if (j.contains("system_instruction")) c.system_instruction = expect_string(j["system_instruction"], w.key("system_instruction"));
  if (j.contains("fewshot_as_multiturn")) {
    const nlohmann::json& v = j["fewshot_as_multiturn"];
    if (!v.is_boolean()) w.key("fewshot_as_multiturn").fail(fmt::format("expected true or false, got {}", json_excerpt(v)));
    c.fewshot_as_multiturn = v.get<bool>();
  }
}

}  // namespace

void resolve_chat_options(const nlohmann::json& j, const Where& w, const TaskOverrides& o, EvalSpec& s) {
  ChatOptions& c = s.chat;
  read_spec_keys(j, w, c);
  const bool cli_apply = o.apply_chat_template.has_value();
  if (cli_apply) c.apply = true, c.name = *o.apply_chat_template;
  if (o.system_instruction) c.system_instruction = o.system_instruction;
  if (o.fewshot_as_multiturn) c.fewshot_as_multiturn = true;
  if (c.fewshot_as_multiturn && !c.apply) {
    if (o.fewshot_as_multiturn)
      throw SpecError("--fewshot-as-multiturn needs --apply-chat-template (or the spec's apply_chat_template), as lm-eval's");
    w.key("fewshot_as_multiturn").fail("needs apply_chat_template (true or a template name), as lm-eval's");
  }
  if (!c.apply) return;
  const std::string where = cli_apply ? std::string("--apply-chat-template") : w.key("apply_chat_template").text();
  std::error_code ec;
  if (!fs::is_regular_file(s.model, ec))
    throw ArgumentError(fmt::format("{}: model file not found (spec 'model' or --model; {} reads its chat template)",
                                    s.model, where));
  gguf::File f(s.model);
  c.tpl = std::make_shared<const ChatTemplate>(find_template(f, c.name, where));
  c.bos_token = vocab_token_text(f, "tokenizer.ggml.bos_token_id");
  c.eos_token = vocab_token_text(f, "tokenizer.ggml.eos_token_id");
}

std::string system_prompt(const std::optional<std::string>& system_instruction, const std::string& description,
                          const std::string& fewshot_delimiter) {
  return maybe_delimit(system_instruction.value_or(""), description, fewshot_delimiter);
}

bool ends_with_whitespace(std::string_view s) {
  // the last character is whitespace when some whitespace character (1-3 bytes) ends `s`
  for (size_t n = 1; n <= 3 && n <= s.size(); ++n)
    if (util::space_length_at(s, s.size() - n) == n) return true;
  return false;
}

bool requires_delimiter(std::string_view prefix, std::string_view suffix) {
  if (prefix.empty()) return false;
  return !ends_with_whitespace(prefix) && util::space_length_at(suffix, 0) == 0;
}

std::string maybe_delimit(const std::string& prefix, const std::string& suffix, const std::string& delimiter) {
  if (prefix.empty()) return suffix;
  if (suffix.empty()) return prefix;
  return requires_delimiter(prefix, suffix) ? prefix + delimiter + suffix : prefix + suffix;
}

FewshotTurn fewshot_turn(const std::string& text, const std::string& target, const std::optional<std::string>& gen_prefix,
                         const std::string& target_delimiter, const std::string& fewshot_delimiter) {
  const std::string prefix = gen_prefix.value_or("");  // Python: `if gen_prefix:`
  const bool has_answer = !target.empty();
  FewshotTurn t{text, "", std::nullopt, ""};
  if ((has_answer && prefix.empty()) || (!prefix.empty() && requires_delimiter(text, prefix))) t.text_delimiter = target_delimiter;
  if (has_answer) {
    t.answer = maybe_delimit(prefix, target);
    t.answer_delimiter = fewshot_delimiter;
  } else if (!prefix.empty()) {
    t.answer = prefix;
  }
  return t;
}

FewshotTurn question_turn(const std::string& question, const std::optional<std::string>& gen_prefix,
                          const std::string& target_delimiter) {
  return fewshot_turn(question, "", gen_prefix, target_delimiter, "");
}

std::string fewshot_text(const std::vector<FewshotTurn>& turns) {
  std::string out;
  for (const FewshotTurn& t : turns) {
    out += t.text + t.text_delimiter;
    if (t.answer) out += *t.answer + t.answer_delimiter;
  }
  return out;
}

nlohmann::json chat_messages(const ChatPrompt& p, bool fewshot_as_multiturn) {
  using nlohmann::json;
  auto message = [](const char* role, const std::string& content) { return json{{"role", role}, {"content", content}}; };
  const bool has_prefix = p.gen_prefix && !p.gen_prefix->empty();  // Python: `if gen_prefix:`
  json m = json::array();
  if (!p.system.empty()) m.push_back(message("system", p.system));
  if (p.has_fewshot) {
    if (fewshot_as_multiturn) {  // the examples' Messages as to_dict() gives them
      for (const FewshotTurn& t : p.turns) {
        m.push_back(message("user", t.text));
        if (t.answer) m.push_back(message("assistant", *t.answer));
      }
    } else {
      m.push_back(message("user", p.examples));
    }
  }
  // the question's user Message: to_dict() or, in multiturn_to_singleturn, joined to the examples without its delimiter
  if (fewshot_as_multiturn || m.empty() || m.back()["role"] == "system") {
    m.push_back(message("user", p.question));
  } else {
    m.back()["content"] = m.back()["content"].get<std::string>() + p.question;
  }
  if (has_prefix) m.push_back(message("assistant", *p.gen_prefix));
  return m;
}

std::string continue_final_message(const std::string& rendered, const std::string& final_content) {
  const std::string_view stripped = util::strip(final_content), lstripped = util::lstrip(final_content);
  const size_t loc = rendered.rfind(stripped);
  if (loc == std::string::npos)
    throw SpecError("the final message does not appear in the chat after applying the chat template "
                    "(continue_final_message; the template changes the gen_prefix)");
  // transformers: rendered[loc : loc + len(lstripped)] == final_content keeps the content's trailing whitespace
  if (rendered.compare(loc, lstripped.size(), final_content) == 0 && lstripped.size() == final_content.size())
    return rendered.substr(0, loc + lstripped.size());
  return rendered.substr(0, loc + stripped.size());
}

std::string apply_chat_template(const ChatOptions& c, const nlohmann::json& messages, bool add_generation_prompt) {
  if (!c.tpl) throw Error("apply_chat_template: no chat template resolved");
  std::string text;
  try {
    text = c.tpl->render(messages, add_generation_prompt, c.bos_token, c.eos_token);
  } catch (const SpecError&) {
    // HFLM.apply_chat_template: on a TemplateError, once more without the system messages
    nlohmann::json without = nlohmann::json::array();
    for (const auto& m : messages)
      if (m["role"] != "system") without.push_back(m);
    text = c.tpl->render(without, add_generation_prompt, c.bos_token, c.eos_token);
  }
  if (!add_generation_prompt && !messages.empty()) text = continue_final_message(text, messages.back()["content"].get<std::string>());
  return text;
}

std::string chat_context(const ChatOptions& c, const ChatPrompt& p, const std::string& where) {
  const bool has_prefix = p.gen_prefix && !p.gen_prefix->empty();
  try {
    return apply_chat_template(c, chat_messages(p, c.fewshot_as_multiturn), !has_prefix);
  } catch (const SpecError& e) {
    throw SpecError(fmt::format("{}: chat template: {}", where, e.what()));
  }
}

void add_chat_results_keys(const ChatOptions& c, nlohmann::ordered_json& results) {
  using oj = nlohmann::ordered_json;
  const bool si = c.system_instruction.has_value();
  results["system_instruction"] = si ? oj(*c.system_instruction) : oj(nullptr);
  results["system_instruction_sha"] =
      si && !c.system_instruction->empty() ? oj(chat_template_sha(*c.system_instruction)) : oj(nullptr);
  results["fewshot_as_multiturn"] = c.fewshot_as_multiturn;
  const bool ct = c.apply && c.tpl && !c.tpl->source.empty();
  results["chat_template"] = c.apply && c.tpl ? oj(c.tpl->source) : oj(nullptr);
  results["chat_template_sha"] = ct ? oj(chat_template_sha(c.tpl->source)) : oj(nullptr);
}

}  // namespace kveval::eval
