// `kveval make-model`: writes a random-weight GGUF model (llama, llama3,
// qwen2 or qwen3 flavour, any vocabulary, any supported tensor type quantized
// with kveval's quantizers) for benchmarks and tests.
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <cstdlib>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "model/random_model.hpp"
#include "util/error.hpp"

namespace kveval::cli {

namespace {
struct MakeModelArgs {
  std::string preset;
  std::string arch = "llama";
  std::string vocab;
  bool tied = false;
  uint64_t seed = 1;
  std::string type = "f32";
  std::string out;
};
std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}
}  // namespace

void add_make_model_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<MakeModelArgs>();
  CLI::App* sub = app.add_subcommand("make-model", "write a random-weight GGUF model (for benchmarks and tests)");
  sub->add_option("--preset", args->preset, "model shape: s15m, s110m, gqa or tiny")
      ->required()
      ->check(CLI::IsMember(random_model_presets()));
  sub->add_option("--arch", args->arch,
                  "architecture: llama, llama3 (llama with Llama 3.1 rope scaling), qwen2 (Q/K/V biases) or qwen3 "
                  "(Q/K norms, head size 128)")
      ->check(CLI::IsMember(random_model_flavours()))
      ->capture_default_str();
  sub->add_option("--vocab", args->vocab,
                  "copy the tokenizer.* keys of this GGUF file (e.g. a vocab-only ggml-vocab-*.gguf); n_vocab "
                  "becomes its token count (default: a synthetic SentencePiece vocabulary)");
  sub->add_flag("--tied", args->tied, "no output.weight: the output projection is token_embd");
  sub->add_option("--seed", args->seed, "weight seed (same seed => identical bytes)")
      ->check(seed_validator())
      ->capture_default_str();
  std::vector<std::string> types;
  std::string plain, quantized;  // the table's element types (block size 1) and block types, for the help
  for (gguf::TensorType t : gguf::supported_types()) {
    types.push_back(lower(gguf::type_name(t)));
    std::string& list = gguf::type_info(t).block_size == 1 ? plain : quantized;
    list += (list.empty() ? "" : ", ") + types.back();
  }
  sub->add_option("--type", args->type,
                  fmt::format("tensor type: {}, or a quantized type ({}: every matrix in that type, norms in f32; "
                              "K-quants need n_embd and n_ff multiples of 256)",
                              plain, quantized))
      ->check(CLI::IsMember(types))
      ->capture_default_str();
  sub->add_option("-o,--output", args->out, "output .gguf path")->required()->check(non_empty_path());
  sub->callback([args, &action] {
    action = [args]() -> int {
      std::error_code ec;
      if (std::filesystem::is_directory(args->out, ec))
        throw ArgumentError(fmt::format("--output {}: is a directory (give a file path, e.g. {}/{}.gguf)", args->out,
                                        args->out, args->preset));
      RandomModelSpec spec = random_model_flavour(random_model_preset(args->preset), args->arch);
      spec.tied_output = args->tied;
      if (!args->vocab.empty()) {
        std::error_code ec2;
        if (!std::filesystem::is_regular_file(args->vocab, ec2))
          throw ArgumentError(fmt::format("--vocab {}: no such file", args->vocab));
        spec.vocab = args->vocab;
        spec.n_vocab = random_model_vocab_size(args->vocab);
      }
      gguf::TensorType type = gguf::TensorType::F32;
      for (gguf::TensorType t : gguf::supported_types())
        if (lower(gguf::type_name(t)) == args->type) type = t;
      const uint64_t params = random_model_parameters(spec);
      const uint64_t bytes = write_random_model(args->out, spec, args->seed, type);
      fmt::print(
          "wrote {}: preset {}, arch {} ({}; n_embd {}, n_layer {}, n_head {}, n_head_kv {}, head_dim {}, n_ff {}, "
          "n_vocab {}{}, n_ctx {}{}), {} parameters as {}, seed {}, {} bytes ({:.1f} MiB)\n",
          args->out, spec.name, args->arch, spec.arch, spec.n_embd, spec.n_layer, spec.n_head, spec.n_head_kv,
          spec.head_dim(), spec.n_ff, spec.n_vocab, spec.vocab.empty() ? "" : " from " + spec.vocab, spec.n_ctx,
          spec.tied_output ? ", tied output" : "", params, args->type, args->seed, bytes,
          static_cast<double>(bytes) / (1024.0 * 1024.0));
      return kOk;
    };
  });
}

}  // namespace kveval::cli
