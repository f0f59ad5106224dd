// `kveval tokenize`: the token ids of a text under a GGUF file's tokenizer
// (no tensors needed: vocab-only files work), like llama.cpp's llama-tokenize.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "model/gguf.hpp"
#include "model/tokenizer.hpp"
#include "util/error.hpp"

namespace kveval::cli {

namespace {

/// A piece for a one-line listing: valid UTF-8 is kept, '\\' '\n' '\r' '\t'
/// are escaped as in C, other control bytes and bytes of incomplete or invalid
/// UTF-8 (byte tokens) as \xNN.
std::string escape_piece(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) out += fmt::format("\\x{:02x}", c);
    else if (c < 0x80) out += static_cast<char>(c);
    else {
      const size_t n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
      bool ok = n > 0 && i + n <= s.size() && c < 0xF5;
      for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
      if (ok) {
        out.append(s.substr(i, n));
        i += n;
        continue;
      }
      out += fmt::format("\\x{:02x}", c);
    }
    ++i;
  }
  return out;
}

}  // namespace

void add_tokenize_command(CLI::App& app, Action& action) {
  struct Opts {
    std::string model, text, file;
    bool no_bos = false, ids = false, parse_special = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("tokenize", "Token ids of a text (works on vocab-only GGUF files)");
  cmd->add_option("-m,--model", o->model, "GGUF file (its tokenizer.ggml.* keys; tensors are not read)")->required();
  auto* text = cmd->add_option("text", o->text, "the text");
  auto* file = cmd->add_option("-f,--file", o->file, "read the text from FILE (all bytes, as is)");
  text->excludes(file);
  cmd->add_flag("--no-bos", o->no_bos, "do not add BOS (it is added only when the file's add_bos_token says so)");
  cmd->add_flag("--ids", o->ids, "print only the ids, as a JSON list (llama-tokenize --ids)");
  cmd->add_flag("--parse-special", o->parse_special,
                "match control tokens written in the text (\"<|eot_id|>\"); off by default, as for evaluation data");
  cmd->callback([o, text, file, &action] {
    action = [o, text, file] {
      if (text->count() == 0 && file->count() == 0) throw ArgumentError("tokenize: give a TEXT or -f FILE");
      const std::string input = file->count() ? read_option_file("--file", o->file) : o->text;
      require_model_file(o->model, "--model");
      gguf::File f(o->model);
      const Tokenizer tok = Tokenizer::from_gguf(f);
      const std::vector<int32_t> ids = tok.encode(input, !o->no_bos && tok.add_bos(), o->parse_special);
      if (o->ids) {
        fmt::print("[{}]\n", fmt::join(ids, ", "));
        return kOk;
      }
      for (int32_t id : ids) {
        // Control tokens have no text of their own: show their name.
        const std::string piece = tok.type(id) == TokenType::Control ? tok.piece(id) : tok.token_to_piece(id);
        fmt::print("{}\t{}\n", id, escape_piece(piece));
      }
      return kOk;
    };
  });
}

}  // namespace kveval::cli
