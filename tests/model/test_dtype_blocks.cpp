// The `blocks` compute dtype: every matrix whose GGUF type has a kept-block
// kernel stays in its own blocks (file blocks copied as they are), token_embd
// and the parts of a fused projection of different types included, on
// llama.cpp's fixtures (../shared/quant: pure Q4_1, Q5_0, Q5_1, Q2_K ... Q6_K
// and the Q4_K_M / Q5_K_M mixes) and on random Q3_K_M- and Q2_K-like mixes:
// log-probs against f32 and expected.json's float64 reference, resident bytes
// against the file's tensor bytes, and `auto` choosing blocks for such files.
// File-block matrices read in place from the mapped file (the default) give
// the copied weights' log-probs and decode logits bit for bit; a non-finite
// scale is still refused, named.
#include <doctest/doctest.h>

#include <fmt/format.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "backend/backend.hpp"
#include "model/gguf.hpp"
#include "model/kept_blocks.hpp"
#include "model/random_model.hpp"
#include "util/error.hpp"

using namespace kveval;

namespace {

/// The file's tensor bytes (every tensor as the file holds it).
uint64_t file_bytes(const gguf::File& f) {
  uint64_t bytes = 0;
  for (const auto& t : f.tensors()) bytes += t.n_bytes;
  return bytes;
}

}  // namespace

TEST_SUITE("model.dtype_blocks") {
  TEST_CASE("blocks: pure files of every file-block type stay in their blocks; log-probs within 1e-4 of the float64 reference") {
    for (const auto& [name, type] : std::vector<std::pair<std::string, std::string>>{
             {"model-Q4_K.gguf", "Q4_K"}, {"model-Q5_K.gguf", "Q5_K"}, {"model-Q6_K.gguf", "Q6_K"},
             {"model-Q4_1.gguf", "Q4_1"}, {"model-Q5_0.gguf", "Q5_0"}, {"model-Q5_1.gguf", "Q5_1"},
             {"model-Q2_K.gguf", "Q2_K"}, {"model-Q3_K.gguf", "Q3_K"}}) {
      CAPTURE(name);
      const std::string file = test::quant_file(name);
      if (file.empty()) return;
      const test::RollingGap g = test::rolling_gap(file, ComputeDtype::Blocks, type);
      CHECK(g.tokens >= 30);  // both texts of expected.json
      CHECK(g.vs_f32 < 1e-5);
      CHECK(g.vs_ref < 1e-4);  // the widened path's bound (model.quant_shared)
      auto m = Model::load(file, {.threads = 2, .dtype = ComputeDtype::Blocks});
      const gguf::File f(file);
      const uint64_t want = file_bytes(f);  // token_embd in its blocks too
      CHECK(m->load_summary().resident_bytes == want);
      CHECK(m->load_summary().file_tensor_bytes == want);
      CHECK(estimate_weight_bytes(f, DType::F32, ComputeDtype::Blocks) == want);
      MESSAGE(name << ": resident " << m->load_summary().resident_bytes << " bytes, file tensors "
                   << m->load_summary().file_tensor_bytes);
    }
  }

  TEST_CASE("blocks: the Q4_K_M and Q5_K_M mixes keep every matrix in its own type, fused parts of two types included") {
    for (const auto& [name, types] : std::vector<std::pair<std::string, std::string>>{
             {"model-Q4_K_M.gguf", "Q4_K+Q6_K"}, {"model-Q5_K_M.gguf", "Q5_K+Q6_K"}}) {
      CAPTURE(name);
      const std::string file = test::quant_file(name);
      if (file.empty()) return;
      const gguf::File f(file);
      // The fixture has a fused projection whose parts differ in type (attn_v or ffn_down in Q6_K).
      bool mixed = false;
      for (int l = 0; l < 2; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        auto type = [&](const char* n) { return f.tensor(b + n + ".weight").type; };
        mixed = mixed || type("attn_q") != type("attn_k") || type("attn_k") != type("attn_v") ||
                type("ffn_gate") != type("ffn_up");
      }
      CHECK(mixed);
      const test::RollingGap g = test::rolling_gap(file, ComputeDtype::Blocks, types);
      CHECK(g.vs_f32 < 1e-5);
      CHECK(g.vs_ref < 1e-4);
      auto m = Model::load(file, {.threads = 2, .dtype = ComputeDtype::Blocks});
      const uint64_t resident = m->load_summary().resident_bytes;
      CHECK(resident == estimate_weight_bytes(f, DType::F32, ComputeDtype::Blocks));
      CHECK(resident == file_bytes(f));
      CHECK(double(resident) <= 1.05 * double(m->load_summary().file_tensor_bytes));
      MESSAGE(name << ": resident " << resident << " bytes, file tensors " << m->load_summary().file_tensor_bytes
                   << ", weights " << m->load_summary().weight_dtype);
    }
  }

  TEST_CASE("blocks: Q3_K_M- and Q2_K-like mixes keep every matrix in its own type") {
    // n_embd 256, n_ff 512: rows of every matrix a multiple of 256. Q3_K (Q2_K) everywhere but attn_v and
    // ffn_down (Q5_K, Q4_K; Q3_K, Q4_K for the Q2_K mix) and output Q6_K, as llama.cpp's mixes choose.
    static const test::ScratchDir dir("dtype_blocks_low_mixes");
    for (const auto& [base, v_type, types] :
         std::vector<std::tuple<gguf::TensorType, gguf::TensorType, std::string>>{
             {gguf::TensorType::Q3_K, gguf::TensorType::Q5_K, "Q3_K+Q4_K+Q5_K+Q6_K"},
             {gguf::TensorType::Q2_K, gguf::TensorType::Q3_K, "Q2_K+Q3_K+Q4_K+Q6_K"}}) {
      CAPTURE(types);
      RandomModelSpec spec = random_model_preset("tiny");
      spec.n_embd = 256, spec.n_ff = 512;
      for (int l = 0; l < spec.n_layer; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        spec.matrix_types[b + "attn_v.weight"] = v_type;
        spec.matrix_types[b + "ffn_down.weight"] = gguf::TensorType::Q4_K;
      }
      spec.matrix_types["output.weight"] = gguf::TensorType::Q6_K;
      const std::string p = (dir.path / (types + ".gguf")).string();
      write_random_model(p, spec, 7, base);
      const ComputeDtype want = backend::cpu_has_bf16() ? ComputeDtype::BlocksBf16 : ComputeDtype::Blocks;
      CHECK(resolve_dtype_for_file(p, ComputeDtype::Auto) == want);
      auto m = Model::load(p, {.threads = 2, .dtype = ComputeDtype::Auto});
      CHECK(m->dtype() == want);
      CHECK(m->load_summary().weight_dtype == types);
      const gguf::File f(p);
      CHECK(m->load_summary().resident_bytes == file_bytes(f));
      CHECK(m->load_summary().resident_bytes == estimate_weight_bytes(f, DType::F32, ComputeDtype::Blocks));
      CHECK(test::decode_logit_gap(p, ComputeDtype::Blocks) < 1e-4);
    }
  }

  TEST_CASE("blocks: decode steps on file blocks match f32 (logits within 1e-4, greedy tokens equal)") {
    for (const char* name : {"model-Q4_K_M.gguf", "model-Q5_K_M.gguf", "model-Q4_1.gguf", "model-Q5_0.gguf",
                             "model-Q5_1.gguf", "model-Q2_K.gguf", "model-Q3_K.gguf"}) {
      CAPTURE(name);
      const std::string file = test::quant_file(name);
      if (file.empty()) return;
      CHECK(test::decode_logit_gap(file, ComputeDtype::Blocks) < 1e-4);
      std::unique_ptr<Model> q;
      CHECK(test::greedy_gap(file, ComputeDtype::Blocks, {{1, 5, 9}, {1, 100, 7, 8}}, q) < 1e-4);
    }
  }

  TEST_CASE("blocks-bf16: scoring gives bf16 weights' log-probs bit for bit from the file's blocks; decode steps as blocks") {
    if (!backend::cpu_has_bf16()) {
      MESSAGE("SKIPPED: no bf16 on this CPU (blocks-bf16 then multiplies as blocks does)");
      return;
    }
    for (const auto& [name, types] : std::vector<std::pair<std::string, std::string>>{
             {"model-Q4_K_M.gguf", "Q4_K+Q6_K"}, {"model-Q8_0.gguf", "Q8_0"}, {"model-Q4_0.gguf", "Q4_0"},
             {"model-Q6_K.gguf", "Q6_K"}}) {
      CAPTURE(name);
      const std::string file = test::quant_file(name);
      if (file.empty()) return;
      const auto ex = nlohmann::json::parse(std::ifstream(std::filesystem::path(file).parent_path() / "expected.json"));
      auto b = test::load_context(file, {.threads = 2, .dtype = ComputeDtype::BF16});
      auto q = test::load_context(file, {.threads = 2, .dtype = ComputeDtype::BlocksBf16});
      CHECK(q->model().load_summary().weight_dtype == types);
      const gguf::File f(file);  // the same bytes as blocks (Q8_0/Q4_0 hold their scales as f32)
      CHECK(q->model().load_summary().resident_bytes == estimate_weight_bytes(f, DType::F32, ComputeDtype::Blocks));
      CHECK(estimate_weight_bytes(f, DType::F32, ComputeDtype::BlocksBf16) == estimate_weight_bytes(f, DType::F32, ComputeDtype::Blocks));
      size_t tokens = 0;
      for (const auto& r : ex["files"][name]["rolling"]) {
        const auto ids = r["ids"].get<std::vector<int32_t>>();
        const auto lb = test::rolling(*b, ids), lq = test::rolling(*q, ids);
        REQUIRE(lb.size() == lq.size());
        for (size_t i = 0; i < lb.size(); ++i) CHECK(lq[i] == lb[i]);
        tokens += lq.size();
      }
      CHECK(tokens >= 30);
      std::unique_ptr<Model> m;
      CHECK(test::greedy_gap(file, ComputeDtype::BlocksBf16, {{1, 5, 9}, {1, 100, 7, 8}}, m) < 1e-4);
    }
  }

  TEST_CASE("auto picks blocks when every matrix is of a kept-block type, else what it picked before") {
    for (const char* name : {"model-Q4_K_M.gguf", "model-Q5_K_M.gguf", "model-Q8_0.gguf", "model-Q4_0.gguf",
                             "model-Q6_K.gguf", "model-Q4_1.gguf", "model-Q5_0.gguf", "model-Q5_1.gguf",
                             "model-Q2_K.gguf", "model-Q3_K.gguf"}) {
      CAPTURE(name);
      const std::string file = test::quant_file(name);
      if (file.empty()) return;
      // on a bf16 CPU with scoring on bf16 tiles
      const ComputeDtype want = backend::cpu_has_bf16() ? ComputeDtype::BlocksBf16 : ComputeDtype::Blocks;
      CHECK(resolve_dtype_for_file(file, ComputeDtype::Auto) == want);
      auto m = Model::load(file, {.threads = 1, .dtype = ComputeDtype::Auto});
      CHECK(m->dtype() == want);
      CHECK(m->dtype_note().find(fmt::format("auto -> {} (", to_string(want))) == 0);
      CHECK(m->dtype_note().find("every matrix a kept-block type") != std::string::npos);
      CHECK(m->load_summary().weight_dtype.find("F32") == std::string::npos);
    }
    // F16 and BF16 matrices have no kept-block kernel: auto resolves as it does for any such file.
    const ComputeDtype other = resolve_dtype(ComputeDtype::Auto, backend::cpu_has_bf16(), false, std::nullopt);
    for (const char* name : {"model-F16.gguf", "model-BF16.gguf"}) {
      CAPTURE(name);
      const std::string file = test::quant_file(name);
      if (file.empty()) return;
      CHECK(resolve_dtype_for_file(file, ComputeDtype::Auto) == other);
    }
    const std::string f32 = test::quant_file("model-F32.gguf");
    if (!f32.empty()) CHECK(resolve_dtype_for_file(f32, ComputeDtype::Auto) == ComputeDtype::F32);
  }

  TEST_CASE("blocks keeps Q8_0 as q8_0 does") {
    const std::string file = test::quant_file("model-Q8_0.gguf");
    if (file.empty()) return;
    auto b = Model::load(file, {.threads = 2, .dtype = ComputeDtype::Blocks});
    auto q = Model::load(file, {.threads = 2, .dtype = ComputeDtype::Q8_0});
    CHECK(b->load_summary().weight_dtype == "Q8_0");
    CHECK(b->load_summary().resident_bytes == q->load_summary().resident_bytes);
  }

  TEST_CASE("blocks: file-block matrices read in place from the mapping score and decode as the copied ones, bit for bit") {
    for (const char* name : {"model-Q4_K_M.gguf", "model-Q6_K.gguf", "model-Q5_0.gguf", "model-Q8_0.gguf"}) {
      CAPTURE(name);
      const std::string file = test::quant_file(name);
      if (file.empty()) return;
      auto mapped = test::load_context(file, {.threads = 2, .dtype = ComputeDtype::Blocks, .map_weights = true});
      auto copied = test::load_context(file, {.threads = 2, .dtype = ComputeDtype::Blocks, .map_weights = false});
      CHECK(mapped->model().load_summary().resident_bytes == copied->model().load_summary().resident_bytes);
      CHECK(mapped->model().load_summary().weight_dtype == copied->model().load_summary().weight_dtype);
      const std::vector<int32_t> ids = {1, 5, 9, 14, 20, 30, 40, 100, 7, 8, 3, 4, 5, 6, 200, 300, 17, 2};
      CHECK(test::rolling(*mapped, ids) == test::rolling(*copied, ids));  // 17 rows: the widened path
      const std::vector<int32_t> prompt = {1, 5, 9, 14, 1, 20, 30, 40}, next = {3, 4};
      const std::vector<int> n4 = {4, 4}, n1 = {1, 1};
      std::vector<std::vector<float>> step;
      for (Context* c : {mapped.ctx.get(), copied.ctx.get()}) {
        std::vector<float> logits(2 * static_cast<size_t>(c->model().hparams().n_vocab));
        KvCacheScope scope(*c, 2, 16);
        c->forward(prompt, 2, 4, n4, Context::Logits::Last, logits);
        c->forward(next, 2, 1, n1, Context::Logits::Last, logits);  // a 2-row decode step: the block kernel
        step.push_back(logits);
      }
      CHECK(std::memcmp(step[0].data(), step[1].data(), step[0].size() * sizeof(float)) == 0);
    }
  }

  TEST_CASE("blocks: a non-finite scale of a matrix read in place or copied is refused, naming the tensor and the weight") {
    const std::string file = test::quant_file("model-Q6_K.gguf");
    if (file.empty()) return;
    std::vector<char> bytes;
    size_t at = 0;
    {
      std::ifstream in(file, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
      const gguf::File f(file);
      const gguf::TensorInfo& t = f.tensor("blk.1.ffn_down.weight");  // Q6_K rows of 768: 3 blocks of 210 bytes
      REQUIRE(t.type == gguf::TensorType::Q6_K);
      at = f.data_offset() + t.offset + 5 * t.row_bytes() + 210 + 208;  // row 5, block 1: its f16 d
    }
    const uint16_t nan = 0x7e00;
    std::memcpy(bytes.data() + at, &nan, 2);
    const test::ScratchDir dir("mapped_nan");
    const std::string bad = dir.file("nan.gguf");
    std::ofstream(bad, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    for (bool map : {true, false}) {
      CAPTURE(map);
      CHECK_THROWS_WITH_AS(Model::load(bad, {.threads = 2, .dtype = ComputeDtype::Blocks, .map_weights = map}),
                           doctest::Contains("tensor 'blk.1.ffn_down.weight' holds NaN at element 4096 (row 5, column 256)"),
                           FormatError);
    }
  }
}
