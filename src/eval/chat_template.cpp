// Chat templates: Hugging Face's apply_chat_template over kveval's Jinja engine.
#include "eval/chat_template.hpp"

#include <fmt/format.h>

#include "model/gguf.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"

namespace kveval::eval {

ChatTemplate ChatTemplate::parse(std::string source, std::string origin) {
  ChatTemplate c;
  try {
    c.tpl = tmpl::Template::parse(source, tmpl::Dialect::HfChat);
  } catch (const tmpl::TemplateError& e) {
    throw SpecError(fmt::format("{}: {}", origin, e.what()));
  }
  c.source = std::move(source);
  c.origin = std::move(origin);
  return c;
}

ChatTemplate ChatTemplate::from_gguf(const gguf::File& f, const std::string& name) {
  const std::string key = name.empty() ? "tokenizer.chat_template" : "tokenizer.chat_template." + name;
  if (f.find(key) == nullptr) {
    std::string names;
    const std::string prefix = "tokenizer.chat_template.";
    for (const auto& [k, v] : f.metadata())
      if (k.rfind(prefix, 0) == 0) names += (names.empty() ? "" : ", ") + k.substr(prefix.size());
    if (name.empty()) throw SpecError(fmt::format("{}: no chat template (key 'tokenizer.chat_template' is missing)", f.path()));
    throw SpecError(fmt::format("{}: unknown chat template name '{}' (key '{}' is missing; the file's named templates: {})",
                                f.path(), name, key, names.empty() ? "none" : names));
  }
  return parse(f.get_string(key), fmt::format("{}: {}", f.path(), key));
}

void check_chat_messages(const nlohmann::json& messages, const std::string& where) {
  if (!messages.is_array()) throw SpecError(fmt::format("{}: expected a JSON list of {{\"role\", \"content\"}} objects", where));
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object()) throw SpecError(fmt::format("{}[{}]: expected an object with \"role\" and \"content\"", where, i));
    for (const char* k : {"role", "content"})
      if (!m.contains(k) || !m[k].is_string())
        throw SpecError(fmt::format("{}[{}].{}: expected a string", where, i, k));
  }
}

std::string ChatTemplate::render(const nlohmann::json& messages, bool add_generation_prompt, const std::string& bos_token,
                                 const std::string& eos_token) const {
  nlohmann::json vars = {{"messages", messages},           {"tools", nullptr},
                         {"documents", nullptr},           {"add_generation_prompt", add_generation_prompt},
                         {"bos_token", bos_token},         {"eos_token", eos_token}};
  try {
    return tpl.render(vars);
  } catch (const tmpl::TemplateError& e) {
    throw SpecError(fmt::format("{}: {}", origin, e.what()));
  }
}

std::string vocab_token_text(const gguf::File& f, const char* id_key) {
  if (f.find(id_key) == nullptr) return {};
  const uint64_t id = f.get_uint(id_key);
  const std::vector<std::string> tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (id >= tokens.size()) throw FormatError(fmt::format("{}: {} {} is not a token id (vocabulary of {})", f.path(), id_key, id, tokens.size()));
  return tokens[id];
}

std::string chat_template_sha(const std::string& source) { return sha256_hex(source); }

}  // namespace kveval::eval
