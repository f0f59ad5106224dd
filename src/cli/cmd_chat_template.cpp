// `kveval chat-template`: a conversation rendered with a chat template as
// Hugging Face's apply_chat_template(tokenize=False) renders it, for users to
// check a model's template (and for the tests).
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "eval/chat_template.hpp"
#include "eval/json_input.hpp"
#include "model/gguf.hpp"
#include "util/error.hpp"

namespace kveval::cli {

void add_chat_template_command(CLI::App& app, Action& action) {
  struct Opts {
    std::string model, templ, messages, name, bos, eos;
    bool add_generation_prompt = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("chat-template", "Render a conversation with a chat template (as transformers' apply_chat_template)");
  auto* model = cmd->add_option("-m,--model", o->model, "GGUF file whose tokenizer.chat_template is used (tensors are not read)");
  auto* templ = cmd->add_option("--template", o->templ, "Jinja chat template file instead of a model's");
  model->excludes(templ);
  auto* name = cmd->add_option("--chat-template", o->name, "use the model's named template tokenizer.chat_template.NAME");
  name->needs(model);
  cmd->add_option("--messages", o->messages, "JSON file: a list of {\"role\", \"content\"} objects")->required();
  cmd->add_flag("--add-generation-prompt", o->add_generation_prompt, "end with the assistant turn's opening");
  auto* bos = cmd->add_option("--bos-token", o->bos, "bos_token text (default: the model's BOS token text; empty with --template)");
  auto* eos = cmd->add_option("--eos-token", o->eos, "eos_token text (default: the model's EOS token text; empty with --template)");
  cmd->callback([o, model, templ, bos, eos, &action] {
    action = [o, model, templ, bos, eos] {
      if (model->count() == 0 && templ->count() == 0) throw ArgumentError("chat-template: give -m MODEL.gguf or --template FILE.jinja");
      const nlohmann::json messages =
          eval::parse_json_text(read_option_file("--messages", o->messages), o->messages);
      eval::check_chat_messages(messages, o->messages);
      eval::ChatTemplate ct;
      std::string bos_text, eos_text;
      if (templ->count()) {
        ct = eval::ChatTemplate::parse(read_option_file("--template", o->templ), o->templ);
      } else {
        require_model_file(o->model, "--model");
        gguf::File f(o->model);
        ct = eval::ChatTemplate::from_gguf(f, o->name);
        bos_text = eval::vocab_token_text(f, "tokenizer.ggml.bos_token_id");
        eos_text = eval::vocab_token_text(f, "tokenizer.ggml.eos_token_id");
      }
      if (bos->count()) bos_text = o->bos;
      if (eos->count()) eos_text = o->eos;
      const std::string text = ct.render(messages, o->add_generation_prompt, bos_text, eos_text);
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      return kOk;
    };
  });
}

}  // namespace kveval::cli
