// llama.cpp's conventions (gguf_conventions.hpp lists the rules and their
// sources) checked on every file kveval writes: every preset, every --arch
// flavour (llama, llama3, qwen2, qwen3, gemma2, gemma3, granite, phi3), tied or not (gemma2: tied only), every tensor type, the
// synthetic and the real vocabularies; and the checker itself on files that
// break one rule each.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model/gguf.hpp"
#include "model/gguf_conventions.hpp"
#include "model/gguf_writer.hpp"
#include "model/random_model.hpp"
#include "test_support.hpp"

using namespace kveval;
using kveval::test::llamacpp_violations;
namespace fs = std::filesystem;

namespace {

fs::path conv_dir() {
  static const kveval::test::ScratchDir dir("gguf_conventions");
  return dir.path;
}

/// `spec` with small sizes (2 layers, head_dim 8, 300 tokens) and everything
/// else (architecture, head counts) kept, so every preset is written quickly.
RandomModelSpec shrunk(RandomModelSpec s) {
  s.n_embd = 8 * s.n_head;
  s.n_layer = 2;
  s.n_ff = 96;
  s.n_vocab = 300;
  s.n_ctx = 128;
  return s;
}

/// Deviations for the checker's own tests.
enum class Break {
  None,
  F16Norm,
  Alignment64,
  NoRmsEps,
  ExtraTensor,
  DuplicateToken,
  BadRot,
  F64Eps,
  KeyValueLength,  ///< attention.key_length 4, value_length 2
  NoQkNorm,        ///< (qwen3) no attn_q_norm
  RopeFreqs,       ///< (qwen2) a rope_freqs tensor, which only llama loads
  F16Bias,         ///< (qwen2) attn_q.bias in F16
  BpeNoMerges,     ///< tokenizer.ggml.model gpt2 without merges
};

/// A minimal GGUF of architecture `arch` ("llama", "qwen2", "qwen3" or any
/// other name; 1 layer, n_embd 8, 2 heads, 260 tokens) written with kveval's
/// Writer: qwen2 with Q/K/V biases, qwen3 with Q/K norms; with one deviation.
std::string write_min(const std::string& name, const std::string& arch, Break brk) {
  gguf::Writer w;
  auto key = [&](const char* k) { return arch + "." + k; };
  w.add_string("general.architecture", arch);
  if (brk == Break::Alignment64) w.add("general.alignment", gguf::Value{gguf::ValueType::UINT64, uint64_t{32}});
  w.add_uint32(key("context_length"), 64);
  w.add_uint32(key("embedding_length"), 8);
  w.add_uint32(key("block_count"), 1);
  w.add_uint32(key("feed_forward_length"), 16);
  w.add_uint32(key("attention.head_count"), 2);
  w.add_uint32(key("rope.dimension_count"), brk == Break::BadRot ? 2 : 4);
  if (brk == Break::KeyValueLength) {
    w.add_uint32(key("attention.key_length"), 4);
    w.add_uint32(key("attention.value_length"), 2);
  }
  if (brk == Break::F64Eps) w.add(key("attention.layer_norm_rms_epsilon"), gguf::Value{gguf::ValueType::FLOAT64, 1e-5});
  else if (brk != Break::NoRmsEps) w.add_float32(key("attention.layer_norm_rms_epsilon"), 1e-5f);
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) toks.push_back(fmt::format("<0x{:02X}>", b));
  toks.push_back(brk == Break::DuplicateToken ? "<s>" : "\xE2\x96\x81");
  w.add_string("tokenizer.ggml.model", brk == Break::BpeNoMerges ? "gpt2" : "llama");
  w.add_string_array("tokenizer.ggml.tokens", toks);
  w.add_float32_array("tokenizer.ggml.scores", std::vector<float>(toks.size(), 0.0f));
  w.add_int32_array("tokenizer.ggml.token_type", std::vector<int32_t>(toks.size(), 1));
  const uint64_t v = toks.size();
  auto t = [&](const std::string& n, std::vector<uint64_t> dims, gguf::TensorType type = gguf::TensorType::F32) {
    uint64_t k = 1;
    for (uint64_t d : dims) k *= d;
    w.add_tensor(n, dims, std::vector<float>(k, 0.5f), type);
  };
  t("token_embd.weight", {8, v});
  t("output_norm.weight", {8});
  t("blk.0.attn_norm.weight", {8}, brk == Break::F16Norm ? gguf::TensorType::F16 : gguf::TensorType::F32);
  for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output"}) t(fmt::format("blk.0.{}.weight", m), {8, 8});
  t("blk.0.ffn_norm.weight", {8});
  t("blk.0.ffn_gate.weight", {8, 16});
  t("blk.0.ffn_up.weight", {8, 16});
  t("blk.0.ffn_down.weight", {16, 8});
  if (arch == "qwen2") {
    t("blk.0.attn_q.bias", {8}, brk == Break::F16Bias ? gguf::TensorType::F16 : gguf::TensorType::F32);
    t("blk.0.attn_k.bias", {8});
    t("blk.0.attn_v.bias", {8});
  }
  if (arch == "qwen3") {
    if (brk != Break::NoQkNorm) t("blk.0.attn_q_norm.weight", {4});
    t("blk.0.attn_k_norm.weight", {4});
  }
  if (brk == Break::RopeFreqs) t("rope_freqs.weight", {2});
  if (brk == Break::ExtraTensor) t("blk.0.attn_q.bias_typo", {8});
  const std::string p = (conv_dir() / name).string();
  w.write(p);
  return p;
}

std::string joined(const std::vector<std::string>& v) { return fmt::format("{}", fmt::join(v, "\n")); }

/// What the writer must put in a file of `flavour` beyond the common block
/// (random_model.hpp; Hugging Face configs: Qwen2 has Q/K/V biases, Qwen3 Q/K
/// norms of the head size, Llama 3.1 rope factors), each F32 with its dims;
/// and general.architecture.
void check_flavour_extras(const gguf::File& f, const RandomModelSpec& spec, const std::string& flavour) {
  CHECK(f.get_string("general.architecture") == (flavour == "llama3" ? "llama" : flavour));
  CHECK((f.find_tensor("output.weight") == nullptr) == spec.tied_output);
  const uint64_t hd = static_cast<uint64_t>(spec.head_dim()), q = hd * static_cast<uint64_t>(spec.n_head),
                 kv = hd * static_cast<uint64_t>(spec.n_head_kv);
  auto f32_with = [&](const std::string& name, std::vector<uint64_t> dims) {
    CAPTURE(name);
    const gguf::TensorInfo* t = f.find_tensor(name);
    REQUIRE(t != nullptr);
    CHECK(t->type == gguf::TensorType::F32);
    CHECK(t->dims == dims);
  };
  CHECK((f.find_tensor("rope_freqs.weight") != nullptr) == (flavour == "llama3"));
  if (flavour == "llama3") f32_with("rope_freqs.weight", {hd / 2});
  const uint64_t rot = static_cast<uint64_t>(spec.rot_dims());
  CHECK((f.find_tensor("rope_factors_long.weight") != nullptr) == (flavour == "phi3"));
  if (flavour == "phi3") {  // Phi-4-mini: 3/4 of each head rotated, LongRoPE factors
    CHECK(rot == hd * 3 / 4);
    f32_with("rope_factors_long.weight", {rot / 2});
    f32_with("rope_factors_short.weight", {rot / 2});
    CHECK(f.get_float(flavour + ".rope.scaling.attn_factor") > 1.0);
  }
  if (flavour == "granite")
    for (const char* k : {"embedding_scale", "residual_scale", "attention.scale", "logit_scale"})
      CHECK(f.get_float(flavour + "." + k) > 0.0);
  for (int l = 0; l < spec.n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    CHECK((f.find_tensor(b + "attn_q.bias") != nullptr) == (flavour == "qwen2"));
    CHECK((f.find_tensor(b + "attn_q_norm.weight") != nullptr) == (flavour == "qwen3" || flavour == "gemma3"));
    if (flavour == "qwen2") {
      f32_with(b + "attn_q.bias", {q});
      f32_with(b + "attn_k.bias", {kv});
      f32_with(b + "attn_v.bias", {kv});
    }
    const bool fused = flavour == "phi3";
    CHECK((f.find_tensor(b + "attn_qkv.weight") != nullptr) == fused);
    CHECK((f.find_tensor(b + "ffn_gate.weight") != nullptr) == !fused);
    if (fused) {
      CHECK(f.tensor(b + "attn_qkv.weight").dims == std::vector<uint64_t>{static_cast<uint64_t>(spec.n_embd), q + 2 * kv});
      CHECK(f.tensor(b + "ffn_up.weight").dims ==
            std::vector<uint64_t>{static_cast<uint64_t>(spec.n_embd), 2 * static_cast<uint64_t>(spec.n_ff)});
    }
    const bool gemma = flavour == "gemma2" || flavour == "gemma3";
    CHECK((f.find_tensor(b + "post_ffw_norm.weight") != nullptr) == gemma);
    if (gemma) {
      f32_with(b + "post_attention_norm.weight", {static_cast<uint64_t>(spec.n_embd)});
      f32_with(b + "post_ffw_norm.weight", {static_cast<uint64_t>(spec.n_embd)});
    }
    if (flavour == "qwen3") {
      CHECK(hd == 128);
      f32_with(b + "attn_q_norm.weight", {hd});
      f32_with(b + "attn_k_norm.weight", {hd});
    }
  }
}

}  // namespace

TEST_SUITE("model.gguf_conventions") {
  TEST_CASE("every random-model preset, F32, F16 and BF16, follows llama.cpp's conventions") {
    for (const std::string& preset : random_model_presets()) {
      for (auto type : {gguf::TensorType::F32, gguf::TensorType::F16, gguf::TensorType::BF16}) {
        const RandomModelSpec spec = shrunk(random_model_preset(preset));
        const std::string p = (conv_dir() / fmt::format("{}_{}.gguf", preset, static_cast<int>(type))).string();
        write_random_llama(p, spec, 5, type);
        CAPTURE(preset);
        CAPTURE(static_cast<int>(type));
        const auto bad = llamacpp_violations(p);
        CHECK_MESSAGE(bad.empty(), joined(bad));
        // the type reaches the matrices (the rules are not met by writing F32 only)
        CHECK(gguf::File(p).tensor("blk.0.ffn_up.weight").type == type);
      }
    }
  }

  TEST_CASE("every type make-model writes (quantized ones too) follows the conventions") {
    RandomModelSpec spec = random_model_preset("tiny");
    spec.n_embd = 256;  // K-quants need rows of 256
    spec.n_ff = 256;
    for (gguf::TensorType type : gguf::supported_types()) {
      CAPTURE(gguf::type_name(type));
      const std::string p = (conv_dir() / fmt::format("q_{}.gguf", gguf::type_name(type))).string();
      write_random_llama(p, spec, 2, type);
      const auto bad = llamacpp_violations(p);
      CHECK_MESSAGE(bad.empty(), joined(bad));
      CHECK(gguf::File(p).tensor("blk.1.attn_q.weight").type == type);
      CHECK(gguf::File(p).tensor("blk.1.attn_norm.weight").type == gguf::TensorType::F32);
    }
  }

  TEST_CASE("the tiny preset as make-model writes it (F16) follows the conventions") {
    const std::string p = (conv_dir() / "tiny_f16.gguf").string();
    write_random_llama(p, random_model_preset("tiny"), 1, gguf::TensorType::F16);
    const auto bad = llamacpp_violations(p);
    CHECK_MESSAGE(bad.empty(), joined(bad));
  }

  TEST_CASE("the real stories260K file (converted by llama.cpp's tools) passes the checker" * kveval::test::needs_model()) {
    const auto bad = llamacpp_violations(kveval::test::model_path());
    CHECK_MESSAGE(bad.empty(), joined(bad));
  }

  TEST_CASE("every --arch flavour (llama, llama3, qwen2, qwen3, gemma2, gemma3, granite, phi3), tied or not, F32/F16/Q8_0, follows the conventions") {
    // make-model builds its spec as random_model_flavour(random_model_preset(preset), arch) with tied_output = --tied.
    const std::vector<std::string> flavours = random_model_flavours();
    REQUIRE(flavours == std::vector<std::string>{"llama", "llama3", "qwen2", "qwen3", "gemma2", "gemma3", "granite", "phi3"});
    for (const std::string& flavour : flavours)
      for (bool tied : {false, true})
        for (auto type : {gguf::TensorType::F32, gguf::TensorType::F16, gguf::TensorType::Q8_0}) {
          if (flavour == "gemma2" && !tied) continue;  // gemma2 has no output.weight
          RandomModelSpec spec = random_model_flavour(random_model_preset("tiny"), flavour);
          spec.tied_output = tied;
          const std::string p =
              (conv_dir() / fmt::format("{}_{}_{}.gguf", flavour, tied ? "tied" : "untied", gguf::type_name(type))).string();
          write_random_model(p, spec, 3, type);
          CAPTURE(flavour);
          CAPTURE(tied);
          CAPTURE(gguf::type_name(type));
          const auto bad = llamacpp_violations(p);
          CHECK_MESSAGE(bad.empty(), joined(bad));
          const gguf::File f(p);
          CHECK(f.tensor("blk.1.attn_output.weight").type == type);
          check_flavour_extras(f, spec, flavour);
        }
  }

  TEST_CASE("--arch files with the real vocabularies of ../shared/tokenizers follow the conventions") {
    const std::string shared = kveval::test::shared_dir();
    if (shared.empty()) {
      MESSAGE("skipping: no shared fixtures folder (KVEVAL_SHARED_DIR or <source>/../shared), so no real vocabularies");
      return;
    }
    struct Case {
      const char* flavour;
      const char* vocab;
      bool tied;
    };
    // The vocabularies these models ship with: Llama 3 (BPE, 128256 tokens), Qwen2/Qwen3 (BPE, 151669 tokens).
    // (SentencePiece vocabularies: the synthetic one above and the real stories260K file.)
    for (const Case c : {Case{"llama3", "ggml-vocab-llama-bpe.gguf", true}, Case{"qwen2", "ggml-vocab-qwen2.gguf", false},
                         Case{"qwen3", "ggml-vocab-qwen2.gguf", true}, Case{"phi3", "ggml-vocab-phi-3.gguf", false},
                         Case{"granite", "ggml-vocab-refact.gguf", true}}) {
      CAPTURE(c.flavour);
      CAPTURE(c.vocab);
      const std::string vocab = (fs::path(shared) / "tokenizers" / c.vocab).string();
      REQUIRE_MESSAGE(fs::exists(vocab), vocab << " is missing from the shared fixtures");
      RandomModelSpec spec = random_model_flavour(random_model_preset("tiny"), c.flavour);
      spec.n_embd = 32;  // head_dim 8 (qwen3: 128); keeps the {n_embd, n_vocab} embedding small
      if (spec.n_rot > 0) spec.n_rot = 6;  // phi3: 3/4 of the head of 8
      spec.n_layer = 1;
      spec.tied_output = c.tied;
      spec.vocab = vocab;
      spec.n_vocab = random_model_vocab_size(vocab);
      CHECK(spec.n_vocab >= 32000);
      const std::string p = (conv_dir() / fmt::format("{}_real_vocab.gguf", c.flavour)).string();
      write_random_model(p, spec, 4, gguf::TensorType::F16);
      const auto bad = llamacpp_violations(p);
      CHECK_MESSAGE(bad.empty(), joined(bad));
      // the tokenizer keys are the vocabulary file's (BPE: with its merges and pre-tokenizer name)
      const gguf::File out(p), in(vocab);
      check_flavour_extras(out, spec, c.flavour);
      CHECK(out.get_string("tokenizer.ggml.model") == in.get_string("tokenizer.ggml.model"));
      CHECK(out.get_string_or("tokenizer.ggml.pre", "") == in.get_string_or("tokenizer.ggml.pre", ""));
      if (in.get_string("tokenizer.ggml.model") == "gpt2")
        CHECK(out.get_string_array("tokenizer.ggml.merges").size() == in.get_string_array("tokenizer.ggml.merges").size());
    }
  }

  TEST_CASE("the checker finds each broken rule") {
    for (const char* arch : {"llama", "qwen2", "qwen3"}) {
      CAPTURE(arch);
      const auto bad = llamacpp_violations(write_min(fmt::format("ok_{}.gguf", arch), arch, Break::None));
      CHECK_MESSAGE(bad.empty(), joined(bad));
    }
    struct Case {
      Break brk;
      const char* arch;
      const char* rule;
    };
    for (const Case c :
         {Case{Break::F16Norm, "llama", "T1: tensor blk.0.attn_norm.weight (1-D) has type 1"},
          Case{Break::Alignment64, "llama", "C2: general.alignment is UINT64"},
          Case{Break::NoRmsEps, "llama", "H4: missing llama.attention.layer_norm_rms_epsilon"},
          Case{Break::NoRmsEps, "qwen3", "H4: missing qwen3.attention.layer_norm_rms_epsilon"},
          Case{Break::F64Eps, "llama", "H4: llama.attention.layer_norm_rms_epsilon is FLOAT64"},
          Case{Break::ExtraTensor, "llama", "S1: tensor blk.0.attn_q.bias_typo is not one"},
          Case{Break::DuplicateToken, "llama", "V2: tokenizer.ggml.tokens has duplicate strings"},
          Case{Break::BadRot, "llama", "H5: llama.rope.dimension_count 2 != head_dim 4"},
          Case{Break::BadRot, "qwen2", "H5: qwen2.rope.dimension_count 2 != head_dim 4"},
          Case{Break::KeyValueLength, "qwen3", "H5: key_length 4 != value_length 2"},
          Case{Break::NoQkNorm, "qwen3", "S1: missing tensor blk.0.attn_q_norm.weight"},
          Case{Break::RopeFreqs, "qwen2", "S1: tensor rope_freqs.weight is not one llama.cpp loads for qwen2"},
          Case{Break::F16Bias, "qwen2", "T1: tensor blk.0.attn_q.bias (1-D) has type 1"},
          Case{Break::BpeNoMerges, "llama", "V7: tokenizer.ggml.merges missing"},
          Case{Break::None, "gemma", "H1: no conventions listed here for architecture 'gemma'"}}) {
      const auto bad = llamacpp_violations(
          write_min(fmt::format("broken{}_{}.gguf", static_cast<int>(c.brk), c.arch), c.arch, c.brk));
      CAPTURE(c.rule);
      CAPTURE(joined(bad));
      REQUIRE(bad.size() >= 1);
      CHECK(bad[0].rfind(c.rule, 0) == 0);
    }
    // granite without its logit scale; phi3 with a fused attn_qkv one head too narrow
    for (const std::string arch : {"granite", "phi3"}) {
      const std::string ok = (conv_dir() / (arch + "_ok.gguf")).string();
      write_random_model(ok, random_model_flavour(random_model_preset("tiny"), arch), 3);
      const gguf::File f(ok);
      gguf::Writer w;
      for (const auto& [k, v] : f.metadata())
        if (k != "general.alignment" && k != "granite.logit_scale") w.add(k, v);
      for (const auto& t : f.tensors()) {
        std::vector<uint64_t> dims = t.dims;
        if (t.name == "blk.1.attn_qkv.weight") dims[1] -= 16;
        std::vector<float> data = f.tensor_f32(t.name, t.dims);
        data.resize(dims.size() == 1 ? dims[0] : dims[0] * dims[1]);
        w.add_tensor(t.name, dims, data);
      }
      const std::string broken = (conv_dir() / (arch + "_broken.gguf")).string();
      w.write(broken);
      const auto bad = llamacpp_violations(broken);
      CAPTURE(joined(bad));
      REQUIRE(bad.size() == 1);
      CHECK(bad[0] == (arch == "granite" ? "H5: missing granite.logit_scale"
                                         : "S1: tensor blk.1.attn_qkv.weight has dims 64x112, expected 64x128"));
    }
    // a file cut in its data section
    const std::string p = write_min("cut.gguf", "llama", Break::None);
    fs::resize_file(p, fs::file_size(p) - 40);
    const auto bad = llamacpp_violations(p);
    REQUIRE(bad.size() == 1);
    CHECK(bad[0].rfind("C4: data section needs", 0) == 0);
  }
}
