// `kveval make-model`: writes a random-weight GGUF model (llama, llama3,
// qwen2, qwen3, gemma2, gemma3, granite or phi3 flavour, any vocabulary, any supported tensor type quantized
// with kveval's quantizers) for benchmarks and tests.
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.hpp"
#include "model/arch/arch.hpp"
#include "model/random_model.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"
#include "util/number_format.hpp"

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
  int sliding_window = -1;  // -1: the flavour's
  float attn_softcap = -1.0f, final_softcap = -1.0f;
  int original_context = 0;  // 0: the flavour's
};
std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

/// Refuses option `opt` when architecture `name` reads no GGUF key for `param`
/// (sliding_window, attn_softcap, final_softcap), naming the architectures that do.
void check_arch_takes(const char* opt, const std::string& name, arch::Param arch::Description::*param) {
  const arch::Description* d = arch::find(name);
  if (!d || !(d->*param).key.empty()) return;  // an unknown architecture is check_spec's error
  std::string takers;
  for (const arch::Description* a : arch::all())
    if (!(a->*param).key.empty()) takers += (takers.empty() ? "" : ", ") + std::string(a->name);
  throw ArgumentError(fmt::format("{}: architecture {} does not take it (architectures that do: {})", opt, name, takers));
}

/// The spec of `a`: a synthetic shape in the --arch flavour (n_vocab from
/// --vocab when given), or a real-model preset as it is (--arch refused; with
/// --vocab its n_vocab stays, and a vocabulary with more tokens is refused).
RandomModelSpec make_model_spec(const MakeModelArgs& a, bool arch_given) {
  RandomModelSpec spec = random_model_preset(a.preset);
  if (spec.hf_model.empty()) {
    spec = random_model_flavour(spec, a.arch);
  } else if (arch_given) {
    throw ArgumentError(fmt::format("--arch {}: preset {} has {}'s architecture ({}); --arch applies to the synthetic "
                                    "shapes s15m, s110m, gqa and tiny",
                                    a.arch, a.preset, spec.hf_model, spec.arch));
  }
  spec.tied_output = spec.tied_output || a.tied;
  if (a.sliding_window >= 0) check_arch_takes("--sliding-window", spec.arch, &arch::Description::sliding_window);
  if (a.attn_softcap >= 0) check_arch_takes("--attn-softcap", spec.arch, &arch::Description::attn_softcap);
  if (a.final_softcap >= 0) check_arch_takes("--final-softcap", spec.arch, &arch::Description::final_softcap);
  if (a.sliding_window >= 0) spec.sliding_window = a.sliding_window;
  if (a.attn_softcap >= 0) spec.attn_softcap = a.attn_softcap;
  if (a.final_softcap >= 0) spec.final_softcap = a.final_softcap;
  if (a.original_context > 0) {
    if (spec.longrope.original_context == 0)
      throw ArgumentError(fmt::format("--original-context: architecture {} has no LongRoPE factors (phi3 has)", spec.arch));
    spec.longrope.original_context = a.original_context;
  }
  if (a.vocab.empty()) return spec;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(a.vocab, ec))
    throw ArgumentError(fmt::format("--vocab {}: no such file", a.vocab));
  spec.vocab = a.vocab;
  const int n = random_model_vocab_size(a.vocab);
  if (spec.hf_model.empty()) {
    spec.n_vocab = n;
  } else if (n > spec.n_vocab) {
    throw ArgumentError(fmt::format("--vocab {}: {} tokens, more than preset {}'s n_vocab {} ({}'s vocab_size)",
                                    a.vocab, n, a.preset, spec.n_vocab, spec.hf_model));
  }
  return spec;
}

/// The first row length of `s`'s matrices (rows are GGUF's dims[0]: n_embd for
/// the embedding, Q/K/V and FFN gate/up, n_ff for FFN down, n_head x head_dim
/// for the attention output) that is not a multiple of `block` elements, as
/// "n_embd 288"; "" when every row holds whole blocks.
std::string misfit_row(const RandomModelSpec& s, uint32_t block) {
  const std::pair<const char*, int64_t> rows[] = {
      {"n_embd", s.n_embd}, {"n_ff", s.n_ff}, {"n_head x head_dim", int64_t{s.n_head} * s.head_dim()}};
  for (const auto& [name, n] : rows)
    if (n % block != 0) return fmt::format("{} {}", name, n);
  return "";
}

/// Refuses --type `type` (ArgumentError naming --type, the preset, the row
/// that does not fit and the presets that do) when a matrix row of `spec` is
/// not a whole number of `type`'s blocks, before anything is written.
void check_type_fits(const MakeModelArgs& a, const RandomModelSpec& spec, gguf::TensorType type, bool arch_given) {
  const uint32_t block = gguf::type_info(type).block_size;
  const std::string misfit = misfit_row(spec, block);
  if (misfit.empty()) return;
  std::vector<std::string> fit;  // the presets this --arch can write in this type
  for (const std::string& p : random_model_presets()) {
    RandomModelSpec ps = random_model_preset(p);
    if (ps.hf_model.empty()) ps = random_model_flavour(ps, a.arch);
    else if (arch_given) continue;
    if (misfit_row(ps, block).empty()) fit.push_back(p);
  }
  throw ArgumentError(fmt::format("--type {}: preset {} has {}, not a multiple of {}'s block size {} (a quantized "
                                  "row holds whole blocks); {}",
                                  a.type, a.preset, misfit, a.type, block,
                                  fit.empty() ? std::string("no preset fits this type")
                                              : fmt::format("presets that fit: {}", fmt::join(fit, ", "))));
}

/// Writes the model of `a` and prints one line on what it wrote.
int write_model(const MakeModelArgs& a, bool arch_given) {
  std::error_code ec;
  if (std::filesystem::is_directory(a.out, ec))
    throw ArgumentError(fmt::format("--output {}: is a directory (give a file path, e.g. {}/{}.gguf)", a.out,
                                    a.out, a.preset));
  util::check_writable("--output", a.out);
  if (!a.vocab.empty() && util::same_output_file(a.out, a.vocab))  // the only file make-model reads
    throw ArgumentError(fmt::format("--output {} is the --vocab file{}: refusing to overwrite an input", a.out,
                                    a.vocab == a.out ? "" : " (" + a.vocab + ")"));
  RandomModelSpec spec = make_model_spec(a, arch_given);
  const int vocab_tokens = spec.vocab.empty() ? spec.n_vocab : random_model_vocab_size(spec.vocab);
  gguf::TensorType type = gguf::TensorType::F32;
  for (gguf::TensorType t : gguf::supported_types())
    if (lower(gguf::type_name(t)) == a.type) type = t;
  check_type_fits(a, spec, type, arch_given);
  const uint64_t params = random_model_parameters(spec);
  const uint64_t bytes = write_random_model(a.out, spec, a.seed, type);
  const std::string preset_note = spec.hf_model.empty() ? "" : " (" + spec.hf_model + "'s shape)";
  const std::string vocab_note =
      spec.vocab.empty()              ? ""
      : vocab_tokens == spec.n_vocab ? " from " + spec.vocab
                                     : fmt::format(" from {}: {} + {}", spec.vocab, count_of(vocab_tokens, "token"),
                                                   count_of(spec.n_vocab - vocab_tokens, "[PAD] token"));
  fmt::print(
      "wrote {}: preset {}{}, arch {} ({}; n_embd {}, n_layer {}, n_head {}, n_head_kv {}, head_dim {}, n_ff {}, "
      "n_vocab {}{}, n_ctx {}{}), {} parameters as {}, seed {}, {} bytes ({:.1f} MiB)\n",
      a.out, spec.name, preset_note, spec.hf_model.empty() ? a.arch : spec.arch, spec.arch, spec.n_embd,
      spec.n_layer, spec.n_head, spec.n_head_kv, spec.head_dim(), spec.n_ff, spec.n_vocab, vocab_note, spec.n_ctx,
      spec.tied_output ? ", tied output" : "", params, a.type, a.seed, bytes,
      static_cast<double>(bytes) / (1024.0 * 1024.0));
  return kOk;
}

}  // namespace

void add_make_model_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<MakeModelArgs>();
  CLI::App* sub = app.add_subcommand("make-model", "write a random-weight GGUF model (for benchmarks and tests)");
  sub->add_option("--preset", args->preset,
                  "model shape: s15m, s110m, gqa or tiny (synthetic), or a real model's exact shape and "
                  "hyper-parameters: llama-3.2-1b, llama-3.2-3b, qwen2.5-0.5b")
      ->required()
      ->check(CLI::IsMember(random_model_presets()));
  CLI::Option* arch_opt =
      sub->add_option("--arch", args->arch,
                      "architecture of a synthetic shape: llama, llama3 (llama with Llama 3.1 rope scaling), qwen2 "
                      "(Q/K/V biases), qwen3 (Q/K norms, head size 128) or gemma2 (post-norms, GeGLU, soft-caps 50 / 30, "
                      "sliding window 4096 on even layers, tied output) or gemma3 (gemma2's block with Q/K norms, no soft-caps, "
                      "window 512 on 5 of 6 layers, local RoPE base 10000), granite (embedding / residual / attention / "
                      "logit scales 12 / 0.22 / 0.015625 / 8, tied) or phi3 (fused attn_qkv and gate/up ffn_up, RoPE on 3/4 "
                      "of each head, LongRoPE factors with original context n_ctx / 4, tied); the real-model presets fix "
                      "their own")
          ->check(CLI::IsMember(random_model_flavours()))
          ->capture_default_str();
  sub->add_option("--vocab", args->vocab,
                  "copy the tokenizer.* keys of this GGUF file (e.g. a vocab-only ggml-vocab-*.gguf); a synthetic "
                  "shape's n_vocab becomes its token count, a real-model preset keeps its n_vocab and pads a "
                  "shorter token list with [PAD<id>] tokens as llama.cpp's converter does (default: a synthetic "
                  "SentencePiece vocabulary)");
  sub->add_flag("--tied", args->tied, "no output.weight: the output projection is token_embd");
  sub->add_option("--sliding-window", args->sliding_window,
                  "{arch}.attention.sliding_window: positions a sliding layer's query sees (gemma2: default 4096; gemma3: 512; "
                  "phi3: every layer, default none)")
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--attn-softcap", args->attn_softcap, "{arch}.attn_logit_softcapping (gemma2; default 50)")
      ->check(CLI::Range(1e-3, 1e6));
  sub->add_option("--final-softcap", args->final_softcap, "{arch}.final_logit_softcapping (gemma2: default 30; gemma3: none)")
      ->check(CLI::Range(1e-3, 1e6));
  sub->add_option("--original-context", args->original_context,
                  "{arch}.rope.scaling.original_context_length (phi3): a run whose context exceeds it uses "
                  "rope_factors_long, else rope_factors_short (default n_ctx / 4)")
      ->check(CLI::Range(1, 1 << 24));
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
  sub->callback([args, arch_opt, &action] {
    const bool arch_given = arch_opt->count() > 0;
    action = [args, arch_given]() -> int { return write_model(*args, arch_given); };
  });
}

}  // namespace kveval::cli
