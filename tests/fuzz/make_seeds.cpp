// Writes generated seed files for the GGUF fuzz target into the directory
// given as argv[1]: micro random Llama models (F32 and F16, with and without
// GQA) from the project's random-model writer, and small hand-made files
// (metadata only, every value type, one tensor).
#include <cstdio>
#include <string>

#include "model/gguf_writer.hpp"
#include "model/random_model.hpp"

using namespace kveval;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  RandomModelSpec s;
  s.name = "micro";
  s.n_embd = 8;
  s.n_layer = 1;
  s.n_head = 2;
  s.n_head_kv = 1;
  s.n_ff = 12;
  s.n_vocab = 262;
  s.n_ctx = 16;
  write_random_llama(dir + "/micro_gqa_f32.gguf", s, 1);
  write_random_llama(dir + "/micro_gqa_f16.gguf", s, 2, gguf::TensorType::F16);
  s.n_head_kv = 2;
  s.n_layer = 2;
  write_random_llama(dir + "/micro_2layer_f32.gguf", s, 3);

  gguf::Writer kv;
  kv.add_string("general.architecture", "llama");
  kv.add_uint32("llama.block_count", 1);
  kv.add_float32("llama.rope.freq_base", 10000.0f);
  kv.add_bool("flag", true);
  kv.add_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a"});
  kv.add_float32_array("tokenizer.ggml.scores", {0, 0, 0, -1});
  kv.add_int32_array("tokenizer.ggml.token_type", {2, 3, 3, 1});
  kv.add("u64", gguf::Value{gguf::ValueType::UINT64, uint64_t{1} << 40});
  kv.add("f64", gguf::Value{gguf::ValueType::FLOAT64, 0.5});
  kv.add_tensor("w", {4, 2}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  kv.add_tensor("h", {3}, std::vector<float>{0.5f, -1, 2}, gguf::TensorType::F16);
  kv.write(dir + "/values_and_tensors.gguf");

  gguf::Writer empty;
  empty.write(dir + "/empty.gguf");
  return 0;
}
