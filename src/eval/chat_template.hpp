#pragma once
// Chat templates as Hugging Face renders them (transformers'
// apply_chat_template): a Jinja template in the HfChat dialect, read from a
// GGUF file's tokenizer.chat_template[.<name>] keys or a file.
#include <string>

#include <nlohmann/json.hpp>

#include "eval/template/template.hpp"

namespace kveval::gguf {
class File;
}

namespace kveval::eval {

/// A parsed chat template.
struct ChatTemplate {
  std::string source;  ///< the template text
  std::string origin;  ///< where it came from ("tokenizer.chat_template", a file path), for messages
  tmpl::Template tpl;

  /// Parses `source` in Hugging Face's environment. Throws SpecError
  /// "<origin>: line L, column C: ..." for a construct outside the engine.
  static ChatTemplate parse(std::string source, std::string origin);
  /// The template of a GGUF file: tokenizer.chat_template, or
  /// tokenizer.chat_template.<name> when `name` is not empty. Throws SpecError
  /// naming the key (and the named templates the file has) when it is missing.
  static ChatTemplate from_gguf(const gguf::File& f, const std::string& name = {});

  /// The text transformers' apply_chat_template(messages, tokenize=False,
  /// add_generation_prompt=...) gives: the template rendered with messages,
  /// tools=None, documents=None, add_generation_prompt, bos_token, eos_token.
  /// `messages` is a JSON list of {"role", "content"} objects. Throws SpecError
  /// "<origin>: line L, column C: ..." (raise_exception's message included).
  std::string render(const nlohmann::json& messages, bool add_generation_prompt, const std::string& bos_token,
                     const std::string& eos_token) const;
};

/// Checks that `messages` is a JSON list of objects with string "role" and
/// "content"; throws SpecError "<where>[i]: ..." otherwise.
void check_chat_messages(const nlohmann::json& messages, const std::string& where);

/// The text of the vocabulary token whose id is metadata key `id_key` of `f`
/// (tokenizer.ggml.bos_token_id, ...), the bos_token/eos_token a chat template
/// gets; "" when the file has no such key. Throws FormatError for an id outside
/// tokenizer.ggml.tokens.
std::string vocab_token_text(const gguf::File& f, const char* id_key);

/// sha256 hex digest of a template's text (lm-eval's chat_template_sha).
std::string chat_template_sha(const std::string& source);

}  // namespace kveval::eval
