// The real-model presets of `kveval make-model` (llama-3.2-1b, llama-3.2-3b,
// qwen2.5-0.5b): the GGUF header they produce, checked through
// random_model_writer without generating a weight, against the models'
// config.json values and parameter counts computed here by hand; and
// --vocab padding of a shorter token list as llama.cpp's converter pads it.
// (model.gguf_conventions checks every preset, shrunk, against llama.cpp's rules.)
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <string>

#include "gguf_conventions.hpp"
#include "model/cost.hpp"
#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/random_model.hpp"
#include "model/tokenizer.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;
namespace fs = std::filesystem;
using D = std::vector<uint64_t>;

using kveval::test::llamacpp_violations;

namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

/// The writer's keys by name.
std::map<std::string, gguf::Value> keys_of(const gguf::Writer& w) {
  std::map<std::string, gguf::Value> m;
  for (const auto& [k, v] : w.metadata()) m[k] = v;
  return m;
}
uint64_t uint_key(const std::map<std::string, gguf::Value>& m, const std::string& k) {
  REQUIRE_MESSAGE(m.count(k), "missing key " << k);
  return std::get<uint64_t>(m.at(k).data);
}
double float_key(const std::map<std::string, gguf::Value>& m, const std::string& k) {
  REQUIRE_MESSAGE(m.count(k), "missing key " << k);
  return std::get<double>(m.at(k).data);
}

/// The writer's tensors by name.
std::map<std::string, gguf::TensorInfo> tensors_of(const gguf::Writer& w) {
  std::map<std::string, gguf::TensorInfo> m;
  for (auto& t : w.tensor_infos()) m[t.name] = t;
  return m;
}

/// HParams of a spec, as the loader reads them from the spec's file.
HParams hparams_of(const RandomModelSpec& s) {
  HParams hp;
  hp.arch = s.arch;
  hp.n_vocab = s.n_vocab;
  hp.n_embd = s.n_embd;
  hp.n_layer = s.n_layer;
  hp.n_head = s.n_head;
  hp.n_head_kv = s.n_head_kv;
  hp.n_ff = s.n_ff;
  hp.n_ctx_train = s.n_ctx;
  hp.n_embd_head = s.n_embd_head;
  hp.tied_output = s.tied_output;
  return hp;
}

}  // namespace

TEST_SUITE("model.model_presets") {
  TEST_CASE("llama-3.2-1b: config.json's shape in the header; 1,235,814,400 parameters") {
    const RandomModelSpec s = random_model_preset("llama-3.2-1b");
    CHECK(s.hf_model == "meta-llama/Llama-3.2-1B");
    const gguf::Writer w = random_model_writer(s, 1, gguf::TensorType::BF16);
    const auto k = keys_of(w);
    CHECK(std::get<std::string>(k.at("general.architecture").data) == "llama");
    CHECK(uint_key(k, "llama.context_length") == 131072);
    CHECK(uint_key(k, "llama.embedding_length") == 2048);
    CHECK(uint_key(k, "llama.block_count") == 16);
    CHECK(uint_key(k, "llama.feed_forward_length") == 8192);
    CHECK(uint_key(k, "llama.attention.head_count") == 32);
    CHECK(uint_key(k, "llama.attention.head_count_kv") == 8);
    CHECK(uint_key(k, "llama.attention.key_length") == 64);  // config.json has head_dim: the converter writes it
    CHECK(uint_key(k, "llama.attention.value_length") == 64);
    CHECK(uint_key(k, "llama.rope.dimension_count") == 64);
    CHECK(float_key(k, "llama.rope.freq_base") == 500000.0);
    CHECK(float_key(k, "llama.attention.layer_norm_rms_epsilon") == static_cast<double>(1e-5f));
    CHECK_FALSE(k.count("llama.rope.scaling.type"));  // llama3 scaling travels as rope_freqs.weight only
    CHECK(std::get<std::vector<gguf::Value>>(k.at("tokenizer.ggml.tokens").data).size() == 128256);

    const auto t = tensors_of(w);
    CHECK(t.size() == 2 + 1 + 16 * 9);  // token_embd, output_norm, rope_freqs, 9 per layer; tied: no output
    CHECK_FALSE(t.count("output.weight"));
    CHECK(t.at("token_embd.weight").dims == D{2048, 128256});
    CHECK(t.at("blk.15.attn_q.weight").dims == D{2048, 2048});
    CHECK(t.at("blk.15.attn_k.weight").dims == D{2048, 512});
    CHECK(t.at("blk.15.attn_v.weight").dims == D{2048, 512});
    CHECK(t.at("blk.15.attn_output.weight").dims == D{2048, 2048});
    CHECK(t.at("blk.15.ffn_gate.weight").dims == D{2048, 8192});
    CHECK(t.at("blk.15.ffn_down.weight").dims == D{8192, 2048});
    CHECK(t.at("blk.0.ffn_down.weight").type == gguf::TensorType::BF16);
    CHECK(t.at("rope_freqs.weight").dims == D{32});
    CHECK(t.at("rope_freqs.weight").type == gguf::TensorType::F32);
    const auto f = llama3_rope_factors(s.llama3, s.rope_freq_base, 64);
    CHECK(f.front() == 1.0f);
    CHECK(f.back() == 32.0f);  // Llama 3.2's factor (Llama 3.1: 8)

    // By hand from config.json: embeddings 128256·2048 (tied), per layer q and o
    // 2048·2048, k and v 2048·512, gate/up/down 2048·8192, two norms 2048; final norm 2048.
    const uint64_t hf =
        128256ull * 2048 + 16ull * (2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048) + 2048;
    CHECK(hf == 1235814400ull);  // the Hugging Face checkpoint's parameter count (1.23B on the model card)
    CHECK(n_params(hparams_of(s)) == 1235814400.0);
    CHECK(random_model_parameters(s) == 1235814400ull + 32);  // the file also holds rope_freqs
    uint64_t elements = 0, bytes = 0;
    for (const auto& ti : w.tensor_infos()) {
      elements += ti.n_elements;
      bytes += ti.n_bytes;
    }
    CHECK(elements == 1235814432ull);
    const uint64_t norms = 2048 + 16 * 2 * 2048;
    CHECK(bytes == 2 * (1235814400ull - norms) + 4 * (norms + 32));  // BF16 matrices, F32 norms and rope_freqs
    CHECK(w.file_size() > bytes);
    CHECK(w.file_size() < bytes + 8 * 1024 * 1024);  // the header: keys, 128256 token strings, tensor infos
  }

  TEST_CASE("llama-3.2-3b and qwen2.5-0.5b: config.json's shapes; 3,212,749,824 and 494,032,768 parameters") {
    const RandomModelSpec l = random_model_preset("llama-3.2-3b");
    CHECK(l.hf_model == "meta-llama/Llama-3.2-3B");
    const auto lk = keys_of(random_model_writer(l, 1));
    CHECK(uint_key(lk, "llama.embedding_length") == 3072);
    CHECK(uint_key(lk, "llama.block_count") == 28);
    CHECK(uint_key(lk, "llama.attention.head_count") == 24);
    CHECK(uint_key(lk, "llama.attention.head_count_kv") == 8);
    CHECK(uint_key(lk, "llama.attention.key_length") == 128);
    CHECK(uint_key(lk, "llama.feed_forward_length") == 8192);
    CHECK(uint_key(lk, "llama.context_length") == 131072);
    const uint64_t l_hf =
        128256ull * 3072 + 28ull * (2 * 3072 * 3072 + 2 * 3072 * 1024 + 3 * 3072 * 8192 + 2 * 3072) + 3072;
    CHECK(l_hf == 3212749824ull);  // 3.21B on the model card
    CHECK(n_params(hparams_of(l)) == 3212749824.0);
    CHECK(random_model_parameters(l) == l_hf + 64);  // + rope_freqs (head_dim / 2)

    const RandomModelSpec q = random_model_preset("qwen2.5-0.5b");
    CHECK(q.hf_model == "Qwen/Qwen2.5-0.5B");
    const gguf::Writer qw = random_model_writer(q, 1);
    const auto qk = keys_of(qw);
    CHECK(std::get<std::string>(qk.at("general.architecture").data) == "qwen2");
    CHECK(uint_key(qk, "qwen2.embedding_length") == 896);
    CHECK(uint_key(qk, "qwen2.block_count") == 24);
    CHECK(uint_key(qk, "qwen2.attention.head_count") == 14);
    CHECK(uint_key(qk, "qwen2.attention.head_count_kv") == 2);
    CHECK_FALSE(qk.count("qwen2.attention.key_length"));  // no head_dim in its config.json
    CHECK(uint_key(qk, "qwen2.rope.dimension_count") == 64);
    CHECK(uint_key(qk, "qwen2.feed_forward_length") == 4864);
    CHECK(uint_key(qk, "qwen2.context_length") == 32768);
    CHECK(float_key(qk, "qwen2.rope.freq_base") == 1e6);
    CHECK(float_key(qk, "qwen2.attention.layer_norm_rms_epsilon") == static_cast<double>(1e-6f));
    const auto qt = tensors_of(qw);
    CHECK_FALSE(qt.count("output.weight"));
    CHECK_FALSE(qt.count("rope_freqs.weight"));
    CHECK(qt.at("token_embd.weight").dims == D{896, 151936});
    CHECK(qt.at("blk.23.attn_k.weight").dims == D{896, 128});
    CHECK(qt.at("blk.23.attn_q.bias").dims == D{896});
    CHECK(qt.at("blk.23.attn_v.bias").dims == D{128});
    // By hand: embeddings 151936·896 (tied); per layer q, o 896·896, k, v 896·128, the
    // q/k/v biases 896 + 2·128, gate/up/down 896·4864, two norms; final norm.
    const uint64_t q_hf =
        151936ull * 896 + 24ull * (2 * 896 * 896 + 2 * 896 * 128 + (896 + 2 * 128) + 3 * 896 * 4864 + 2 * 896) + 896;
    CHECK(q_hf == 494032768ull);  // 0.49B (0.36B non-embedding) on the model card
    CHECK(random_model_parameters(q) == q_hf);
    CHECK(n_params(hparams_of(q)) == static_cast<double>(q_hf - 24 * (896 + 2 * 128)));  // cost.hpp counts no biases
  }

  TEST_CASE("--vocab shorter than n_vocab: padded with [PAD<id>] tokens of type UNUSED; tokenization unchanged") {
    const kveval::test::ScratchDir dir("model_presets_pad");
    // A SentencePiece source (scores present) of 300 tokens, padded to 310.
    RandomModelSpec src = random_model_preset("tiny");
    const std::string src_path = dir.file("src.gguf");
    write_random_model(src_path, src, 3);
    RandomModelSpec s = random_model_preset("tiny");
    s.vocab = src_path;
    s.n_vocab = 310;
    const std::string p = dir.file("padded.gguf");
    write_random_model(p, s, 3);
    const gguf::File a(src_path), b(p);
    const auto tokens = b.get_string_array("tokenizer.ggml.tokens");
    const auto types = b.get_int_array("tokenizer.ggml.token_type");
    const auto scores = b.get_float_array("tokenizer.ggml.scores");
    REQUIRE(tokens.size() == 310);
    REQUIRE(types.size() == 310);
    REQUIRE(scores.size() == 310);
    const auto src_tokens = a.get_string_array("tokenizer.ggml.tokens");
    CHECK(std::vector<std::string>(tokens.begin(), tokens.begin() + 300) == src_tokens);
    CHECK(tokens[300] == "[PAD300]");
    CHECK(tokens[309] == "[PAD309]");
    CHECK(types[309] == 5);
    CHECK(scores[309] == -1000.0);
    CHECK(b.tensor("token_embd.weight").dims == D{64, 310});
    const std::string text = "Once upon a time, a cat sat.";
    CHECK(Tokenizer::from_gguf(b).encode(text, true) == Tokenizer::from_gguf(a).encode(text, true));
    CHECK(llamacpp_violations(p).empty());
    s.n_vocab = 299;
    CHECK_THROWS_WITH_AS(write_random_model(p, s, 3), doctest::Contains("has 300 tokens"), ArgumentError);

    // Qwen2's real BPE vocabulary (no scores) padded to Qwen2.5's vocab_size, as its GGUFs carry it.
    const std::string shared = kveval::test::shared_dir();
    const std::string qv = shared + "/tokenizers/ggml-vocab-qwen2.gguf";
    if (shared.empty() || !fs::exists(qv)) {
      MESSAGE("skipping the Qwen2 part: " << qv << " not found");
      return;
    }
    RandomModelSpec q = random_model_preset("qwen2.5-0.5b");
    q.n_layer = 1;
    q.n_embd = 28;  // 14 heads of 2
    q.n_ff = 32;
    q.vocab = qv;
    const int n = random_model_vocab_size(qv);
    REQUIRE(n < 151936);
    const std::string qp = dir.file("qwen.gguf");
    write_random_model(qp, q, 1, gguf::TensorType::F16);
    const gguf::File qa(qv), qb(qp);
    const auto qt = qb.get_string_array("tokenizer.ggml.tokens");
    REQUIRE(qt.size() == 151936);
    CHECK(qt[static_cast<size_t>(n)] == "[PAD" + std::to_string(n) + "]");
    CHECK(qt.back() == "[PAD151935]");
    CHECK(qb.get_int_array("tokenizer.ggml.token_type").back() == 5);
    CHECK_FALSE(qb.find("tokenizer.ggml.scores"));
    CHECK(qb.get_string_array("tokenizer.ggml.merges").size() == qa.get_string_array("tokenizer.ggml.merges").size());
    const std::string mixed = "Hello world! 你好, <|endoftext|> 12345";
    CHECK(Tokenizer::from_gguf(qb).encode(mixed, false) == Tokenizer::from_gguf(qa).encode(mixed, false));
    const auto bad = llamacpp_violations(qp);
    CHECK_MESSAGE(bad.empty(), joined(bad));
  }
}
