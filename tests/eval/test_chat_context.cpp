// Chat-template prompts the lm-eval way: the messages fewshot_context builds,
// transformers' continue_final_message cut, HFLM's retry without the system
// message, the spec keys and their errors, and the token rule for rendered chats.
#include <doctest/doctest.h>

#include <fstream>
#include <memory>
#include <string>

#include "eval/chat_context.hpp"
#include "eval/chat_template.hpp"
#include "eval/requests.hpp"
#include "eval/spec.hpp"
#include "model/gguf.hpp"
#include "model/tokenizer.hpp"
#include "eval_test_util.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;
using namespace kveval::eval;
using kveval::test::spec_error;
using nlohmann::json;

namespace {

/// A template that shows every message as [role]content, and [assistant] as the generation prompt.
constexpr const char* kBrackets =
    "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}";

ChatOptions options_with(const std::string& source, bool multiturn = false) {
  ChatOptions c;
  c.apply = true;
  c.fewshot_as_multiturn = multiturn;
  c.tpl = std::make_shared<const ChatTemplate>(ChatTemplate::parse(source, "test.jinja"));
  c.bos_token = "<s>";
  c.eos_token = "</s>";
  return c;
}

json msg(const char* role, const std::string& content) { return {{"role", role}, {"content", content}}; }

/// The shared fixtures' vocabulary file `name`, or "" (the case is skipped) without ../shared.
std::string vocab(const std::string& name) {
  const std::string shared = kveval::test::shared_dir();
  if (shared.empty()) MESSAGE("SKIPPED: no shared fixtures folder (set KVEVAL_SHARED_DIR or place ../shared next to the source)");
  return shared.empty() ? "" : shared + "/tokenizers/" + name;
}

/// A two-document multiple_choice task with a description, one first_n few-shot example each.
json two_doc_spec(const std::string& model) {
  json j = json::parse(R"({"tasks": [{"name": "t", "output_type": "multiple_choice", "description": "D.",
    "docs": [{"q": "A?", "c": ["x", "y"], "g": 0}, {"q": "B?", "c": ["u", "v"], "g": 1}],
    "doc_to_text": "{{q}}", "doc_to_target": "g", "doc_to_choice": "{{c}}",
    "num_fewshot": 1, "fewshot_config": {"sampler": "first_n"}}]})");
  j["model"] = model;
  return j;
}

/// `j` with key `k` set to `v`.
json with(json j, const std::string& k, const json& v) {
  j[k] = v;
  return j;
}

}  // namespace

TEST_SUITE("eval.chat_context") {
  TEST_CASE("system prompt: maybe_delimit(system_instruction, description, fewshot_delimiter)") {
    // lm-eval main's fewshot_context: system_prompt = maybe_delimit(system_instruction, description, fewshot_delimiter)
    CHECK(system_prompt(std::string("S."), "D.", "\n\n") == "S.\n\nD.");
    CHECK(system_prompt(std::string("S."), "", "\n\n") == "S.");
    CHECK(system_prompt(std::nullopt, "D.", "\n\n") == "D.");
    CHECK(system_prompt(std::nullopt, "", "\n\n") == "");
    CHECK(system_prompt(std::string(""), "D.", "|") == "D.");         // `if not prefix: return suffix`
    CHECK(system_prompt(std::string("S.\n"), "D.", "\n\n") == "S.\nD.");  // prefix[-1].isspace(): no delimiter
    CHECK(system_prompt(std::string("S."), " D.", "|") == "S. D.");    // suffix[0].isspace(): no delimiter
  }

  TEST_CASE("messages: one user message of examples + question, or user/assistant turns; gen_prefix as the last turn") {
    const std::vector<FewshotTurn> turns{fewshot_turn("Q1", "a1", std::nullopt, " ", "\n\n"),
                                         fewshot_turn("Q2", "a2", std::nullopt, " ", "\n\n")};
    ChatPrompt p{"S.", true, turns, fewshot_text(turns), "Q3", std::nullopt};
    CHECK(chat_messages(p, false) == json::array({msg("system", "S."), msg("user", "Q1 a1\n\nQ2 a2\n\nQ3")}));
    CHECK(chat_messages(p, true) == json::array({msg("system", "S."), msg("user", "Q1"), msg("assistant", "a1"),
                                                 msg("user", "Q2"), msg("assistant", "a2"), msg("user", "Q3")}));
    // lm-eval main: fewshot_context gives each example build_qa_turn(gen_prefix=the example's own prefix);
    // its assistant Message is maybe_delimit(gen_prefix, answer) = "Answer:" + " " + "a1", to_dict() drops
    // the delimiters
    p.turns = {fewshot_turn("Q1", "a1", std::string("Answer:"), " ", "\n\n"),
               fewshot_turn("Q2", "a2", std::string("Answer:"), " ", "\n\n")};
    p.gen_prefix = "Answer:";
    CHECK(chat_messages(p, true) == json::array({msg("system", "S."), msg("user", "Q1"), msg("assistant", "Answer: a1"),
                                                 msg("user", "Q2"), msg("assistant", "Answer: a2"), msg("user", "Q3"),
                                                 msg("assistant", "Answer:")}));
    // an example without a target: build_qa_turn gives its user Message and, with a gen_prefix, an
    // assistant Message of the prefix alone; without one, no assistant Message
    p.turns = {fewshot_turn("Q1", "", std::string("Answer:"), " ", "\n\n"), fewshot_turn("Q2", "", std::nullopt, " ", "\n\n")};
    CHECK(chat_messages(p, true) == json::array({msg("system", "S."), msg("user", "Q1"), msg("assistant", "Answer:"),
                                                 msg("user", "Q2"), msg("user", "Q3"), msg("assistant", "Answer:")}));
    ChatPrompt zero{"", false, {}, "", "Q", std::string("")};  // an empty gen_prefix adds no turn
    CHECK(chat_messages(zero, false) == json::array({msg("user", "Q")}));
    ChatPrompt sys_only{"S.", false, {}, "", "Q", std::nullopt};
    CHECK(chat_messages(sys_only, false) == json::array({msg("system", "S."), msg("user", "Q")}));
  }

  TEST_CASE("requires_delimiter and maybe_delimit: lm_eval/api/utils.py, Python's str.isspace at the join") {
    CHECK(requires_delimiter("Q:", "A"));
    CHECK_FALSE(requires_delimiter("", "A"));          // `if prefix == "": return False`
    CHECK_FALSE(requires_delimiter("Q:\n", "A"));      // prefix[-1].isspace()
    CHECK_FALSE(requires_delimiter("Q:", " A"));        // suffix[0].isspace()
    CHECK_FALSE(requires_delimiter("Q:\u00a0", "A"));  // '\xa0'.isspace() (2 UTF-8 bytes)
    CHECK_FALSE(requires_delimiter("Q:", "\u3000A"));  // '\u3000'.isspace() (3 UTF-8 bytes)
    CHECK_FALSE(requires_delimiter("Q:\x1f", "A"));     // '\x1f'.isspace() in Python
    CHECK(requires_delimiter("caf\u00e9", "A"));        // 'é' is not whitespace
    CHECK(maybe_delimit("", "x") == "x");
    CHECK(maybe_delimit("p", "") == "p");
    CHECK(maybe_delimit("p", "x") == "p x");
    CHECK(maybe_delimit("p ", "x") == "p x");
    CHECK(maybe_delimit("p", "\nx") == "p\nx");
    CHECK(maybe_delimit("p", "x", "\n\n") == "p\n\nx");  // the delimiter argument
    CHECK(maybe_delimit("p\t", "x", "\n\n") == "p\tx");
    // ends_with_whitespace(s): bool(s) and s[-1].isspace()
    CHECK_FALSE(ends_with_whitespace(""));
    CHECK_FALSE(ends_with_whitespace("A:"));
    CHECK(ends_with_whitespace("A: "));
    CHECK(ends_with_whitespace("A:\u00a0"));  // 2 UTF-8 bytes
    CHECK(ends_with_whitespace("A:\u3000"));  // 3 UTF-8 bytes
    CHECK_FALSE(ends_with_whitespace(" A"));
  }

  TEST_CASE("fewshot_turn: lm-eval main's build_qa_turn of a few-shot example, as plain text") {
    // user Message(q, tgt_delim if has_answer and not gen_prefix else tgt_delim if gen_prefix and
    // requires_delimiter(q, gen_prefix) else ""), then assistant Message(maybe_delimit(gen_prefix, a), few_delim)
    CHECK(fewshot_text({fewshot_turn("Q: y", "Y", std::string("A:"), " ", "\n\n")}) == "Q: y A: Y\n\n");
    CHECK(fewshot_text({fewshot_turn("Q: y\n", " Y", std::string("A: "), " ", "\n\n")}) == "Q: y\nA:  Y\n\n");
    CHECK(fewshot_text({fewshot_turn("Q: y", "Y", std::string(" A:"), "|", "\n\n")}) == "Q: y A: Y\n\n");
    CHECK(fewshot_text({fewshot_turn("Q: y\n", "Y", std::nullopt, " ", "\n\n")}) == "Q: y\n Y\n\n");  // no prefix: always
    CHECK(fewshot_text({fewshot_turn("Q: y\n", "Y", std::string(""), " ", "\n\n")}) == "Q: y\n Y\n\n");  // "" is none
    // no answer: with a gen_prefix, assistant Message(gen_prefix) with no delimiter; without one, the text alone
    CHECK(fewshot_text({fewshot_turn("Q", "", std::string("A:"), " ", "\n\n"), fewshot_turn("R", "", std::nullopt, " ", "\n\n")}) ==
          "Q A:R");
    const FewshotTurn t = fewshot_turn("Q\n", "Y", std::string("A:"), " ", "\n\n");
    CHECK(t.text_delimiter.empty());
    CHECK(t.answer == std::optional<std::string>("A: Y"));
    CHECK(t.answer_delimiter == "\n\n");
  }

  TEST_CASE("question_turn: the evaluated document as fewshot_context's last build_qa_turn (no answer, few_delim \"\")") {
    // user Message(q, tgt_delim if gen_prefix and requires_delimiter(q, gen_prefix) else ""), then an assistant
    // Message(gen_prefix) with no delimiter when gen_prefix is not empty
    CHECK(fewshot_text({question_turn("Q: x", std::string("A:"), " ")}) == "Q: x A:");
    CHECK(fewshot_text({question_turn("Q: x\n", std::string("A:"), " ")}) == "Q: x\nA:");
    CHECK(fewshot_text({question_turn("Q: x", std::string("\nA:"), " ")}) == "Q: x\nA:");
    CHECK(fewshot_text({question_turn("Q: x", std::string(""), " ")}) == "Q: x");
    CHECK(fewshot_text({question_turn("Q: x", std::nullopt, " ")}) == "Q: x");
    CHECK(fewshot_text({question_turn("Q: x", std::string("A:"), "|")}) == "Q: x|A:");
    // under a chat template the question's user message keeps no delimiter either way
    const ChatOptions c = options_with(kBrackets);
    CHECK(chat_context(c, {"", false, {}, "", "Q: x\n", std::string("A:")}, "t") == "[user]Q: x\n[assistant]A:");
    CHECK(chat_context(c, {"", false, {}, "", "Q: x", std::string("A:")}, "t") == "[user]Q: x[assistant]A:");
  }

  TEST_CASE("continue_final_message: cut after the final message's last occurrence, its trailing space kept when rendered") {
    CHECK(continue_final_message("<u>Q</u><a>Answer:</a>\n", "Answer:") == "<u>Q</u><a>Answer:");
    CHECK(continue_final_message("<a>Answer: </a>", "Answer: ") == "<a>Answer: ");   // the template kept the space
    CHECK(continue_final_message("<a>Answer:</a>", "Answer: ") == "<a>Answer:");      // trimmed by the template
    CHECK(continue_final_message("<a> Answer:</a>", " Answer:") == "<a> Answer:");    // leading space: the stripped length
    CHECK(continue_final_message("Answer: x Answer: y", "Answer:") == "Answer: x Answer:");
    CHECK(spec_error([] { continue_final_message("<a>nothing</a>", "Answer:"); }).find("does not appear") != std::string::npos);
  }

  TEST_CASE("apply_chat_template: a template that raises is rendered again without the system message") {
    const ChatOptions c = options_with(
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}{% endif %}"
        "<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}");
    const json m = json::array({msg("system", "S."), msg("user", "Q")});
    CHECK(apply_chat_template(c, m, true) == "<user>Q<assistant>");
    const json prefixed = json::array({msg("system", "S."), msg("user", "Q"), msg("assistant", "A:")});
    CHECK(apply_chat_template(c, prefixed, false) == "<user>Q<assistant>A:");
    const ChatOptions raises = options_with("{{ raise_exception('never') }}");
    const std::string e = spec_error([&] { chat_context(raises, {"", false, {}, "", "Q", std::nullopt}, "task 't' document 3"); });
    CHECK(e.rfind("task 't' document 3: chat template: test.jinja:", 0) == 0);
    CHECK(e.find("never") != std::string::npos);
  }

  TEST_CASE("continuations under a chat template keep target_delimiter only after a gen_prefix not ending in whitespace") {
    // lm-eval main's construct_requests (multiple_choice): under apply_chat_template, target_delimiter =
    // config.target_delimiter if config.gen_prefix and not ends_with_whitespace(config.gen_prefix) else ""
    // (config.gen_prefix as written, not rendered)
    TaskSpec t;
    t.target_delimiter = " ";
    Doc d;
    d.choices = {"x", "y"};
    d.target = "x";
    CHECK(continuation_of(t, d, 1) == " y");
    CHECK(continuation_of(t, d, -1) == " x");
    t.loglikelihood_delimiter = false;
    CHECK(continuation_of(t, d, -1) == "x");
    t.chat_template = true;
    t.loglikelihood_delimiter = true;
    CHECK(continuation_of(t, d, 1) == "y");  // no gen_prefix
    CHECK(continuation_of(t, d, -1) == "x");
    t.gen_prefix = "Answer:";
    CHECK(continuation_of(t, d, 1) == " y");
    t.gen_prefix = "{{prefix}}";  // a template or field name: its source does not end in whitespace
    CHECK(continuation_of(t, d, 1) == " y");
    t.gen_prefix = "Answer: ";
    CHECK(continuation_of(t, d, 1) == "y");
    t.gen_prefix = "Answer:\u00a0";  // '\xa0'.isspace()
    CHECK(continuation_of(t, d, 1) == "y");
    t.gen_prefix = "";  // `if config.gen_prefix` is false for ""
    CHECK(continuation_of(t, d, 1) == "y");
    t.chat_template = false;
    t.gen_prefix = "Answer: ";  // plain text: always the delimiter
    CHECK(continuation_of(t, d, 1) == " y");
  }

  TEST_CASE("token rule: special tokens parsed, the prefix token put first unless the text starts with its text") {
    const std::string qwen = vocab("ggml-vocab-qwen2.gguf"), llama3 = vocab("ggml-vocab-llama-bpe.gguf");
    if (qwen.empty()) return;
    const Tokenizer q = Tokenizer::from_gguf(gguf::File(qwen));
    // Qwen2 has no BOS: its prefix token is its EOS, <|im_end|> (151645); <|im_start|> is 151644
    REQUIRE(q.bos() == 151645);
    REQUIRE(q.piece(q.bos()) == "<|im_end|>");
    std::vector<int32_t> want = {151645, 151644};
    const std::vector<int32_t> rest = q.encode("user\nHi", false);
    want.insert(want.end(), rest.begin(), rest.end());
    CHECK(encode_prompt(q, "<|im_start|>user\nHi", true) == want);
    CHECK(encode_prompt(q, "<|im_start|>user\nHi", false).at(1) != 151644);  // plain text: no control token
    CHECK(encode_prompt(q, "<|im_end|><|im_start|>user\nHi", true) == want);  // not two prefix tokens
    std::vector<int32_t> other = {151645, 151643};  // another control token first: the prefix token is still added
    other.insert(other.end(), want.begin() + 1, want.end());
    CHECK(encode_prompt(q, "<|endoftext|><|im_start|>user\nHi", true) == other);
    const Tokenizer l = Tokenizer::from_gguf(gguf::File(llama3));
    // Hugging Face ids: <|begin_of_text|> 128000, "Hi" 13347, <|eot_id|> 128009
    CHECK(encode_prompt(l, "<|begin_of_text|>Hi<|eot_id|>", true) == std::vector<int32_t>{128000, 13347, 128009});
    CHECK(encode_prompt(l, "Hi<|eot_id|>", true) == std::vector<int32_t>{128000, 13347, 128009});
    const EncodedPair p = encode_pair(l, "<|begin_of_text|>Hi ", "Hi", true);
    CHECK(p.context == std::vector<int32_t>{128000, 13347});
    CHECK(p.continuation == l.encode(" Hi", false));
  }

  TEST_CASE("spec keys: prompts rendered with a template file, system_instruction, fewshot_as_multiturn") {
    const std::string qwen = vocab("ggml-vocab-qwen2.gguf");
    if (qwen.empty()) return;
    kveval::test::ScratchDir dir("chatspec");
    const std::string tpl = dir.file("brackets.jinja");
    std::ofstream(tpl) << kBrackets;
    json j = two_doc_spec(qwen);
    j["apply_chat_template"] = tpl;
    j["system_instruction"] = "S.";
    EvalSpec s = parse_spec(j, "s.json", ".");
    REQUIRE(s.tasks.size() == 1);
    CHECK(s.tasks[0].chat_template);
    // first_n draws docs 0 and 1 and drops the document itself: doc 0's example is doc 1 and the other way round
    CHECK(s.tasks[0].docs[0].context == "[system]S.\n\nD.[user]B? v\n\nA?[assistant]");
    CHECK(s.tasks[0].docs[1].context == "[system]S.\n\nD.[user]A? x\n\nB?[assistant]");
    CHECK(continuation_of(s.tasks[0], s.tasks[0].docs[0], 0) == "x");
    TaskOverrides o;
    o.fewshot_as_multiturn = true;
    o.system_instruction = "T.";
    s = parse_spec(j, "s.json", ".", "", o);
    CHECK(s.tasks[0].docs[0].context == "[system]T.\n\nD.[user]B?[assistant]v[user]A?[assistant]");
    // without a chat template the system instruction is put before the description
    json plain = two_doc_spec(qwen);
    plain["system_instruction"] = "S.";
    s = parse_spec(plain, "s.json", ".");
    CHECK_FALSE(s.tasks[0].chat_template);
    CHECK(s.tasks[0].docs[0].context == "S.\n\nD.B? v\n\nA?");
  }

  TEST_CASE("spec keys: bad values and missing templates are one line naming the key or the model") {
    const std::string qwen = vocab("ggml-vocab-qwen2.gguf"), phi3 = vocab("ggml-vocab-phi-3.gguf");
    if (qwen.empty()) return;
    auto err = [](json j, const TaskOverrides& o = {}) { return spec_error([&] { parse_spec(j, "s.json", ".", "", o); }); };
    json j = two_doc_spec(qwen);
    CHECK(err(with(j, "apply_chat_templat", true)) ==
          "s.json: apply_chat_templat: unknown key (did you mean 'apply_chat_template'?)");
    CHECK(err(with(j, "apply_chat_template", 1)) ==
          "s.json: apply_chat_template: expected true, false or a template name, got 1");
    CHECK(err(with(j, "fewshot_as_multiturn", true)) ==
          "s.json: fewshot_as_multiturn: needs apply_chat_template (true or a template name), as lm-eval's");
    TaskOverrides multiturn;
    multiturn.fewshot_as_multiturn = true;
    CHECK(err(j, multiturn) ==
          "--fewshot-as-multiturn needs --apply-chat-template (or the spec's apply_chat_template), as lm-eval's");
    CHECK(err(with(j, "apply_chat_template", true)) ==
          qwen + ": no chat template (key 'tokenizer.chat_template' is missing); name a template file with "
                 "--apply-chat-template FILE or the spec's apply_chat_template");
    TaskOverrides named;
    named.apply_chat_template = "tool_use";
    CHECK(err(j, named) == "--apply-chat-template tool_use: no chat template of that name in " + qwen +
                               " (its templates: none) and no file of that path");
    j["model"] = phi3;
    CHECK(err(j, named) == "--apply-chat-template tool_use: no chat template of that name in " + phi3 +
                               " (its templates: default) and no file of that path");
    named.apply_chat_template = "default";  // lm-eval's name of a tokenizer's main template
    const EvalSpec s = parse_spec(j, "s.json", ".", "", named);
    CHECK(s.chat.tpl->origin == phi3 + ": tokenizer.chat_template");
    CHECK(s.tasks[0].docs[0].context.find("A?") != std::string::npos);
  }
}
