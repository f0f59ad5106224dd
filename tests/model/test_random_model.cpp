// Random-model writer: the tiny preset written to a temp dir and read back
// with gguf::File (every hyper-parameter and tensor shape), determinism by
// seed, weight statistics, and the F16 variant (exactly the F32 weights
// rounded to half; norms stay F32).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

#include "model/gguf.hpp"
#include "model/random_model.hpp"
#include "model/tokenizer.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"
#include "test_support.hpp"

using namespace kveval;
namespace fs = std::filesystem;

namespace {

fs::path rm_temp_dir() {
  static const kveval::test::ScratchDir dir("random_model");
  return dir.path;
}

std::string write_tiny(const std::string& name, uint64_t seed, gguf::TensorType type = gguf::TensorType::F32) {
  const std::string p = (rm_temp_dir() / name).string();
  const uint64_t n = write_random_model(p, random_model_preset("tiny"), seed, type);
  CHECK(n == fs::file_size(p));
  return p;
}

std::vector<char> file_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST_SUITE("model.random_model") {
  TEST_CASE("presets") {
    const auto s = random_model_preset("s15m");
    CHECK(s.n_embd == 288);
    CHECK(s.n_layer == 6);
    CHECK(s.n_head == 6);
    CHECK(s.n_head_kv == 6);
    CHECK(s.n_ff == 768);
    CHECK(s.n_vocab == 32000);
    CHECK(s.n_ctx == 256);
    const auto g = random_model_preset("gqa");
    CHECK(g.n_embd == 2048);
    CHECK(g.n_layer == 4);
    CHECK(g.n_head == 32);
    CHECK(g.n_head_kv == 4);
    CHECK(g.n_ff == 5632);
    CHECK(g.n_ctx == 4096);
    const auto m = random_model_preset("s110m");
    CHECK(m.n_embd == 768);
    CHECK(m.n_layer == 12);
    CHECK(m.n_ff == 2048);
    CHECK(m.n_ctx == 1024);
    // llama2.c's stories15M: 24.4M parameters with an untied 288 x 32000 output.
    CHECK(random_model_parameters(s) == 2ull * 288 * 32000 + 288 + 6ull * (2 * 288 + 4 * 288 * 288 + 3 * 288 * 768));
    CHECK_THROWS_WITH_AS(random_model_preset("huge"),
                         "unknown model preset 'huge' (expected one of: s15m, s110m, gqa, tiny, llama-3.2-1b, "
                         "llama-3.2-3b, qwen2.5-0.5b)",
                         ArgumentError);
    RandomModelSpec bad = random_model_preset("tiny");
    bad.n_head_kv = 3;
    CHECK_THROWS_AS(write_random_model((rm_temp_dir() / "bad.gguf").string(), bad, 1), ArgumentError);
    bad = random_model_preset("tiny");
    bad.n_vocab = 100;
    CHECK_THROWS_AS(write_random_model((rm_temp_dir() / "bad.gguf").string(), bad, 1), ArgumentError);
  }

  TEST_CASE("tiny preset reads back with every key and tensor shape") {
    const std::string p = write_tiny("tiny.gguf", 42);
    gguf::File f(p);
    CHECK(f.version() == 3);
    CHECK(f.alignment() == 32);
    CHECK(f.get_string("general.architecture") == "llama");
    CHECK(f.get_string("general.name") == "random-tiny");
    CHECK(f.get_uint("llama.embedding_length") == 64);
    CHECK(f.get_uint("llama.block_count") == 2);
    CHECK(f.get_uint("llama.attention.head_count") == 4);
    CHECK(f.get_uint("llama.attention.head_count_kv") == 2);
    CHECK(f.get_uint("llama.feed_forward_length") == 96);
    CHECK(f.get_uint("llama.context_length") == 128);
    CHECK(f.get_uint("llama.rope.dimension_count") == 16);
    CHECK(f.get_float("llama.rope.freq_base") == 10000.0);
    CHECK(f.get_float("llama.attention.layer_norm_rms_epsilon") == static_cast<double>(1e-5f));
    CHECK(f.get_string("tokenizer.ggml.model") == "llama");
    CHECK(f.get_uint("tokenizer.ggml.bos_token_id") == 1);
    CHECK(f.get_uint("tokenizer.ggml.eos_token_id") == 2);
    CHECK(f.get_uint("tokenizer.ggml.unknown_token_id") == 0);

    const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
    const auto types = f.get_int_array("tokenizer.ggml.token_type");
    const auto scores = f.get_float_array("tokenizer.ggml.scores");
    REQUIRE(tokens.size() == 300);
    REQUIRE(types.size() == 300);
    REQUIRE(scores.size() == 300);
    CHECK(tokens[0] == "<unk>");
    CHECK(tokens[1] == "<s>");
    CHECK(tokens[2] == "</s>");
    CHECK(tokens[3] == "<0x00>");
    CHECK(tokens[258] == "<0xFF>");
    CHECK(types[0] == 2);
    CHECK(types[1] == 3);
    CHECK(types[3] == 6);
    CHECK(types[258] == 6);
    CHECK(tokens[259] == "\xE2\x96\x81");
    CHECK(tokens[260] == "a");
    CHECK(tokens[286] == "\xE2\x96\x81" "a");
    CHECK(types[260] == 1);
    CHECK(scores[260] < scores[259]);
    std::set<std::string> distinct(tokens.begin(), tokens.end());
    CHECK(distinct.size() == 300);

    const uint64_t e = 64, kv = 2 * 16, ff = 96, v = 300;
    CHECK(f.tensors().size() == 3 + 2 * 9);
    auto dims = [&](const std::string& n) { return f.tensor(n).dims; };
    using D = std::vector<uint64_t>;
    CHECK(dims("token_embd.weight") == D{e, v});
    CHECK(dims("output_norm.weight") == D{e});
    CHECK(dims("output.weight") == D{e, v});
    for (int l = 0; l < 2; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      CHECK(dims(b + "attn_norm.weight") == D{e});
      CHECK(dims(b + "attn_q.weight") == D{e, e});
      CHECK(dims(b + "attn_k.weight") == D{e, kv});
      CHECK(dims(b + "attn_v.weight") == D{e, kv});
      CHECK(dims(b + "attn_output.weight") == D{e, e});
      CHECK(dims(b + "ffn_norm.weight") == D{e});
      CHECK(dims(b + "ffn_gate.weight") == D{e, ff});
      CHECK(dims(b + "ffn_up.weight") == D{e, ff});
      CHECK(dims(b + "ffn_down.weight") == D{ff, e});
    }
    for (const auto& t : f.tensors()) CHECK(t.type == gguf::TensorType::F32);

    // Norms are 1; weights are uniform in [-sqrt(3/n_in), sqrt(3/n_in)) with variance 1/n_in.
    const uint64_t de[] = {e};
    for (float x : f.tensor_f32("blk.1.ffn_norm.weight", de)) CHECK(x == 1.0f);
    const uint64_t dd[] = {ff, e};
    const auto w = f.tensor_f32("blk.0.ffn_down.weight", dd);
    const double a = std::sqrt(3.0 / ff);
    double sum = 0, sq = 0, maxabs = 0;
    for (float x : w) {
      sum += x;
      sq += double(x) * x;
      maxabs = std::max(maxabs, double(std::fabs(x)));
    }
    const double n = static_cast<double>(w.size());
    CHECK(maxabs <= a);
    CHECK(maxabs > 0.99 * a);
    CHECK(std::fabs(sum / n) < 4 * std::sqrt(1.0 / ff / n));          // mean 0 within 4 sigma
    CHECK(sq / n == doctest::Approx(1.0 / ff).epsilon(0.05));          // variance 1/n_in

    // Tensors differ from each other (independent streams).
    const uint64_t dk[] = {e, kv};
    CHECK(f.tensor_f32("blk.0.attn_k.weight", dk) != f.tensor_f32("blk.0.attn_v.weight", dk));

    // The vocabulary works with the tokenizer: "ab" -> ▁a, b.
    Tokenizer tok = Tokenizer::from_gguf(f);
    CHECK(tok.n_vocab() == 300);
    CHECK(tok.encode("ab", true) == std::vector<int32_t>{1, 286, 261});
    CHECK(tok.decode(tok.encode("hello world!", true)) == "hello world!");
  }

  TEST_CASE("same seed gives identical bytes, another seed different bytes") {
    const auto a = file_bytes(write_tiny("seed7a.gguf", 7));
    const auto b = file_bytes(write_tiny("seed7b.gguf", 7));
    const auto c = file_bytes(write_tiny("seed8.gguf", 8));
    CHECK(a == b);
    REQUIRE(a.size() == c.size());
    CHECK(a != c);
    // Only tensor data differs: the metadata (first 4 KiB) is identical.
    CHECK(std::equal(a.begin(), a.begin() + 4096, c.begin()));
    // Pinned: the generator is specified bit-for-bit (splitmix64, integer
    // uniform, one float multiply), so this digest holds on every machine.
    // Regenerate deliberately if the format of the random model changes.
    CHECK(sha256_file((rm_temp_dir() / "seed7a.gguf").string()) ==
          "21d97a340957fc23809782babf197cf92b909d6a3b7e2190b060bd4b3da3e1ce");
  }

  TEST_CASE("F16 variant loads and holds the F32 weights rounded to half") {
    gguf::File f32(write_tiny("tiny32.gguf", 3));
    gguf::File f16(write_tiny("tiny16.gguf", 3, gguf::TensorType::F16));
    REQUIRE(f16.tensors().size() == f32.tensors().size());
    int n_norms = 0;
    for (const auto& t : f16.tensors()) {
      CAPTURE(t.name);
      // matrices F16, the 1-D norm vectors F32 (llama.cpp's convention)
      const bool is_norm = t.dims.size() == 1;
      n_norms += is_norm;
      CHECK(t.type == (is_norm ? gguf::TensorType::F32 : gguf::TensorType::F16));
      const auto a = f32.tensor_f32(t.name, f32.tensor(t.name).dims);
      const auto b = f16.tensor_f32(t.name, t.dims);
      REQUIRE(a.size() == b.size());
      size_t mismatches = 0;
      for (size_t i = 0; i < a.size(); ++i)
        mismatches += b[i] != gguf::f16_to_f32(gguf::f32_to_f16(a[i]));
      CHECK(mismatches == 0);
    }
    CHECK(n_norms == 1 + 2 * 2);  // output_norm + attn_norm, ffn_norm per layer
    CHECK(fs::file_size(f16.path()) < fs::file_size(f32.path()));
  }

  TEST_CASE("flavours: keys and extra tensors of llama3, qwen2 and qwen3; 1-D extras stay F32 in an F16 file") {
    const RandomModelSpec tiny = random_model_preset("tiny");
    const std::string l3 = (rm_temp_dir() / "l3.gguf").string();
    write_random_model(l3, random_model_flavour(tiny, "llama3"), 1, gguf::TensorType::F16);
    gguf::File f(l3);
    CHECK(f.get_string("general.architecture") == "llama");
    CHECK(f.get_float("llama.rope.freq_base") == 500000.0);
    CHECK_FALSE(f.find("llama.rope.scaling.type"));  // llama.cpp's converter writes only the tensor for llama3
    const auto& rf = f.tensor("rope_freqs.weight");
    CHECK(rf.type == gguf::TensorType::F32);
    const uint64_t d8[] = {8};
    const auto factors = f.tensor_f32("rope_freqs.weight", d8);
    CHECK(factors == llama3_rope_factors({8.0f, 1.0f, 4.0f, 8192}, 500000.0f, 16));
    CHECK(factors.front() == 1.0f);  // wavelength 2 pi < 8192 / 4
    CHECK(factors.back() == 8.0f);   // wavelength 2 pi 500000^(14/16) > 8192
    CHECK(f.tensor("blk.0.attn_q.weight").type == gguf::TensorType::F16);

    const std::string q2 = (rm_temp_dir() / "q2.gguf").string();
    write_random_model(q2, random_model_flavour(tiny, "qwen2"), 1);
    gguf::File g(q2);
    CHECK(g.get_string("general.architecture") == "qwen2");
    CHECK(g.get_float("qwen2.attention.layer_norm_rms_epsilon") == static_cast<double>(1e-6f));
    CHECK(g.get_float("qwen2.rope.freq_base") == 1e6);
    using D = std::vector<uint64_t>;
    CHECK(g.tensor("blk.1.attn_q.bias").dims == D{64});
    CHECK(g.tensor("blk.1.attn_k.bias").dims == D{32});
    CHECK(g.tensor("blk.1.attn_v.bias").dims == D{32});
    CHECK_FALSE(g.find_tensor("blk.1.attn_output.bias"));
    const uint64_t d64[] = {64};
    const auto bias = g.tensor_f32("blk.0.attn_q.bias", d64);
    CHECK(*std::max_element(bias.begin(), bias.end()) <= 0.5f);
    CHECK(*std::min_element(bias.begin(), bias.end()) >= -0.5f);
    CHECK(*std::max_element(bias.begin(), bias.end()) > 0.3f);

    const std::string q3 = (rm_temp_dir() / "q3.gguf").string();
    RandomModelSpec s3 = random_model_flavour(tiny, "qwen3");
    s3.tied_output = true;
    CHECK(random_model_parameters(s3) ==
          300ull * 64 + 64 + 2ull * (2 * 64 + 2 * 64 * 512 + 2 * 64 * 256 + 3 * 64 * 96 + 2 * 128));
    write_random_model(q3, s3, 1);
    gguf::File h(q3);
    CHECK(h.get_uint("qwen3.attention.key_length") == 128);
    CHECK(h.get_uint("qwen3.attention.value_length") == 128);
    CHECK(h.get_uint("qwen3.rope.dimension_count") == 128);
    CHECK_FALSE(h.find_tensor("output.weight"));
    CHECK(h.tensor("blk.0.attn_q.weight").dims == D{64, 512});
    CHECK(h.tensor("blk.0.attn_output.weight").dims == D{512, 64});
    CHECK(h.tensor("blk.0.attn_k_norm.weight").dims == D{128});
    const uint64_t d128[] = {128};
    for (float x : h.tensor_f32("blk.1.attn_q_norm.weight", d128)) CHECK((x >= 0.5f && x <= 1.5f));
    CHECK_THROWS_WITH_AS(random_model_flavour(tiny, "mistral"), doctest::Contains("unknown architecture flavour"),
                         ArgumentError);
    RandomModelSpec bad = random_model_flavour(tiny, "qwen2");
    bad.llama3.factor = 8;
    CHECK_THROWS_WITH_AS(write_random_model(q2, bad, 1), doctest::Contains("no rope_freqs"), ArgumentError);
  }

  TEST_CASE("--vocab: the tokenizer.* keys of another GGUF are copied, n_vocab is its token count") {
    // The source: a random model with a synthetic vocabulary of 512 pieces and the qwen3 layout.
    RandomModelSpec src_spec = random_model_flavour(random_model_preset("tiny"), "qwen3");
    src_spec.n_vocab = 512;
    const std::string src = (rm_temp_dir() / "vocab_src.gguf").string();
    write_random_model(src, src_spec, 9);
    RandomModelSpec s = random_model_preset("tiny");
    s.vocab = src;
    s.n_vocab = random_model_vocab_size(src);
    CHECK(s.n_vocab == 512);
    const std::string p = (rm_temp_dir() / "vocab.gguf").string();
    write_random_model(p, s, 1);
    gguf::File a(src), b(p);
    size_t copied = 0;
    for (const auto& [k, v] : a.metadata())
      if (k.starts_with("tokenizer.")) {
        ++copied;
        REQUIRE(b.find(k));
      }
    CHECK(copied >= 5);
    CHECK(b.get_string_array("tokenizer.ggml.tokens") == a.get_string_array("tokenizer.ggml.tokens"));
    CHECK(b.tensor("token_embd.weight").dims == std::vector<uint64_t>{64, 512});
    CHECK(Tokenizer::from_gguf(b).encode("Once upon a time", true) ==
          Tokenizer::from_gguf(a).encode("Once upon a time", true));
    CHECK_FALSE(b.find("qwen3.block_count"));  // only tokenizer.* keys come along
    CHECK(b.get_string("general.architecture") == "llama");
    s.n_vocab = 300;
    CHECK_THROWS_WITH_AS(write_random_model(p, s, 1), doctest::Contains("has 512 tokens"), ArgumentError);
    CHECK_THROWS_AS(random_model_vocab_size((rm_temp_dir() / "nowhere.gguf").string()), FormatError);
  }
}
