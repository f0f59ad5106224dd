#pragma once
// Prompts of instruct models the lm-eval way (lm-eval's --apply_chat_template,
// --system_instruction, --fewshot_as_multiturn), as lm-eval's main branch
// builds them: ConfigurableTask.fewshot_context with build_qa_turn and
// multiturn_to_singleturn (lm_eval/api/task.py, lm_eval/api/utils.py) for the
// system prompt, the few-shot examples and the evaluated document, in plain
// text and as chat messages; rendered as HFLM.apply_chat_template renders them
// (lm_eval/models/huggingface.py); the options' resolution and their record in
// the results.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/spec.hpp"

namespace kveval::eval {

struct Where;  // eval/spec_check.hpp

/// Reads the spec's top-level `apply_chat_template` (true, false or a template
/// name / file), `system_instruction` (a string) and `fewshot_as_multiturn` (a
/// boolean) into `s.chat`, the command line's `o` over them; when a template
/// applies, resolves it against the model file `s.model` (GGUF metadata only)
/// and takes bos_token / eos_token from its vocabulary. The template: none
/// named: the model's tokenizer.chat_template; NAME: the model's
/// tokenizer.chat_template.NAME ("default": tokenizer.chat_template, as
/// lm-eval's chat_template dict), else a file of that path. Throws SpecError
/// (one line) for a bad value, fewshot_as_multiturn without
/// apply_chat_template (lm-eval's __main__ refuses it too), an unknown name
/// (listing the model's templates), a model without a chat template, a
/// template outside the engine; ArgumentError for a missing model file.
void resolve_chat_options(const nlohmann::json& spec, const Where& w, const TaskOverrides& o, EvalSpec& s);

/// fewshot_context's system prompt: maybe_delimit(system_instruction,
/// description, fewshot_delimiter) (lm-eval main): either alone when the other
/// is absent or "", else both joined by fewshot_delimiter unless the join has
/// whitespace on either side.
std::string system_prompt(const std::optional<std::string>& system_instruction, const std::string& description,
                          const std::string& fewshot_delimiter);

/// lm-eval's requires_delimiter(prefix, suffix) (lm_eval/api/utils.py): false
/// when `prefix` is empty, else whether neither the last character of `prefix`
/// nor the first of `suffix` is whitespace (Python's str.isspace, util::is_space).
bool requires_delimiter(std::string_view prefix, std::string_view suffix);

/// lm-eval's ends_with_whitespace(s) (lm_eval/api/utils.py): `s` is not empty
/// and its last character is whitespace (Python's str.isspace, util::is_space).
bool ends_with_whitespace(std::string_view s);

/// lm-eval's maybe_delimit(prefix, suffix, delimiter) (lm_eval/api/utils.py):
/// `suffix` when `prefix` is empty, `prefix` when `suffix` is empty, else
/// prefix + delimiter + suffix, without the delimiter when either side of the join is whitespace.
std::string maybe_delimit(const std::string& prefix, const std::string& suffix, const std::string& delimiter = " ");

/// One turn (a few-shot example or the evaluated document) as the Messages of
/// lm-eval's ConfigurableTask.build_qa_turn (lm_eval/api/task.py, main branch):
/// a user message of its doc_to_text and, when there is one, an assistant
/// message; each with the delimiter its plain text (Message.to_text) ends with.
/// Chat messages drop the delimiters.
struct FewshotTurn {
  std::string text;                   ///< doc_to_text (user content)
  std::string text_delimiter;         ///< target_delimiter or ""
  std::optional<std::string> answer;  ///< assistant content; nullopt: no assistant message
  std::string answer_delimiter;       ///< fewshot_delimiter after a target, "" after a bare gen_prefix
};

/// build_qa_turn(q=text, a=target, gen_prefix, tgt_delim=target_delimiter,
/// few_delim=fewshot_delimiter) of a few-shot example, `target` being the target's
/// text ("" = no answer) and `gen_prefix` the prefix resolved against this example's
/// document (nullopt or "" = none). With a target: text + target_delimiter (with a
/// gen_prefix only when requires_delimiter(text, gen_prefix)), then the assistant's
/// maybe_delimit(gen_prefix, target) + fewshot_delimiter. Without one: text, then with
/// a gen_prefix target_delimiter when requires_delimiter(text, gen_prefix) and the
/// assistant's gen_prefix with no delimiter after it.
FewshotTurn fewshot_turn(const std::string& text, const std::string& target, const std::optional<std::string>& gen_prefix,
                         const std::string& target_delimiter, const std::string& fewshot_delimiter);

/// The evaluated document's turn: build_qa_turn(q=question, gen_prefix, tgt_delim=target_delimiter,
/// few_delim="") as fewshot_context calls it, with no answer: the question, then target_delimiter only
/// when gen_prefix is not empty and requires_delimiter(question, gen_prefix), then the gen_prefix.
/// fewshot_turn(question, "", gen_prefix, target_delimiter, "").
FewshotTurn question_turn(const std::string& question, const std::optional<std::string>& gen_prefix,
                          const std::string& target_delimiter);

/// The plain text of turns: every message's content + delimiter, concatenated
/// (lm-eval's "".join(m.to_text() for m in messages)).
std::string fewshot_text(const std::vector<FewshotTurn>& turns);

/// The parts of one document's chat prompt.
struct ChatPrompt {
  std::string system;                 ///< system_prompt(); "" = no system message
  bool has_fewshot = false;           ///< num_fewshot > 0
  std::vector<FewshotTurn> turns;     ///< fewshot_as_multiturn: the examples
  std::string examples;               ///< otherwise: fewshot_text of the examples (one user message)
  std::string question;               ///< doc_to_text of the document
  std::optional<std::string> gen_prefix;  ///< doc_to_prefix (nullopt: the task has none)
};

/// The messages of fewshot_context under apply_chat_template: the system
/// message (when `p.system` is not empty); with few-shot examples either each
/// example's user message and its assistant message when it has one (multiturn,
/// FewshotTurn) or one user message of `p.examples` (multiturn_to_singleturn);
/// then the question as a new user
/// message (multiturn, or when the last message is the system's or there is
/// none) or appended to the last user message (multiturn_to_singleturn drops
/// the question's own delimiter); then, when gen_prefix is not empty, an
/// assistant message of it. A JSON list of {"role", "content"}.
nlohmann::json chat_messages(const ChatPrompt& p, bool fewshot_as_multiturn);

/// transformers' apply_chat_template(continue_final_message=True) cut of
/// `rendered`: it ends where the last occurrence of the final message's
/// content (Python's strip()) ends, keeping the content's trailing whitespace
/// when the template kept it. Throws SpecError when the content does not
/// appear in `rendered` (transformers raises ValueError).
std::string continue_final_message(const std::string& rendered, const std::string& final_content);

/// HFLM.apply_chat_template(messages, add_generation_prompt): the template
/// rendered with `c`'s bos/eos texts and continue_final_message = not
/// add_generation_prompt; when rendering fails (jinja2's TemplateError,
/// raise_exception included) it is rendered once more without the system
/// messages, as lm-eval does. Throws SpecError with the second failure's message.
std::string apply_chat_template(const ChatOptions& c, const nlohmann::json& messages, bool add_generation_prompt);

/// fewshot_context's prompt of one document under a chat template:
/// chat_messages rendered by apply_chat_template with add_generation_prompt
/// false when gen_prefix is not empty (the prompt then ends with it), true
/// otherwise. Throws SpecError "<where>: chat template: ..." on a failure.
std::string chat_context(const ChatOptions& c, const ChatPrompt& p, const std::string& where);

/// The results' top-level keys lm-eval's EvaluationTracker writes
/// (GeneralConfigTracker.log_experiment_args): chat_template (the template's
/// text, null without apply_chat_template), chat_template_sha (its sha256 hex),
/// system_instruction and system_instruction_sha (null when unset or ""), and
/// fewshot_as_multiturn.
void add_chat_results_keys(const ChatOptions& c, nlohmann::ordered_json& results);

}  // namespace kveval::eval
