// `kveval make-model`: writes a random-weight Llama GGUF for benchmarks, in any
// supported tensor type (quantized with kveval's quantizers).
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
  uint64_t seed = 1;
  std::string type = "f32";
  std::string out;
};
std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}
/// Validator of --seed: a non-negative integer that fits 64 bits, with a one-line message.
CLI::Validator seed_validator() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        if (!v.empty() && v[0] == '-') return fmt::format("must be >= 0, got {}", v);
        errno = 0;
        char* end = nullptr;
        std::strtoull(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || errno == ERANGE)
          return fmt::format("expected an integer in [0, 18446744073709551615], got '{}'", v);
        return "";
      },
      "UINT64");
}
}  // namespace

void add_make_model_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<MakeModelArgs>();
  CLI::App* sub = app.add_subcommand("make-model", "write a random-weight Llama GGUF model (for benchmarks)");
  sub->add_option("--preset", args->preset, "model shape: s15m, s110m, gqa or tiny")
      ->required()
      ->check(CLI::IsMember({"s15m", "s110m", "gqa", "tiny"}));
  sub->add_option("--seed", args->seed, "weight seed (same seed => identical bytes)")
      ->check(seed_validator())
      ->capture_default_str();
  std::vector<std::string> types;
  for (gguf::TensorType t : gguf::supported_types()) types.push_back(lower(gguf::type_name(t)));
  sub->add_option("--type", args->type,
                  "tensor type: f32, f16, bf16, or a quantized type (q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, "
                  "q5_k, q6_k: every matrix in that type, norms in f32; K-quants need n_embd and n_ff multiples of 256)")
      ->check(CLI::IsMember(types))
      ->capture_default_str();
  sub->add_option("-o,--output", args->out, "output .gguf path")->required();
  sub->callback([args, &action] {
    action = [args]() -> int {
      std::error_code ec;
      if (std::filesystem::is_directory(args->out, ec))
        throw ArgumentError(fmt::format("--output {}: is a directory (give a file path, e.g. {}/{}.gguf)", args->out,
                                        args->out, args->preset));
      const RandomModelSpec spec = random_model_preset(args->preset);
      gguf::TensorType type = gguf::TensorType::F32;
      for (gguf::TensorType t : gguf::supported_types())
        if (lower(gguf::type_name(t)) == args->type) type = t;
      const uint64_t params = random_model_parameters(spec);
      const uint64_t bytes = write_random_llama(args->out, spec, args->seed, type);
      fmt::print(
          "wrote {}: preset {} (n_embd {}, n_layer {}, n_head {}, n_head_kv {}, n_ff {}, n_vocab {}, n_ctx {}), "
          "{} parameters as {}, seed {}, {} bytes ({:.1f} MiB)\n",
          args->out, spec.name, spec.n_embd, spec.n_layer, spec.n_head, spec.n_head_kv, spec.n_ff, spec.n_vocab,
          spec.n_ctx, params, args->type, args->seed, bytes, static_cast<double>(bytes) / (1024.0 * 1024.0));
      return kOk;
    };
  });
}

}  // namespace kveval::cli
