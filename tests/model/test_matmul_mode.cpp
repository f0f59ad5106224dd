// ModelOptions::matmul = Int8 (llama.cpp's int8 activations in decode steps on
// kept Q8_0, Q4_0, Q4_K, Q5_K and Q6_K blocks) on llama.cpp's fixtures (../shared/quant):
// the expected.json texts teacher-forced one token per cached pass against
// the exact mode and the float64 reference, greedy decoding against the exact
// mode (step log-probs up to the first differing token), and the load summary naming the mode.
#include <doctest/doctest.h>

#include "backend/backend.hpp"
#include "model/kept_blocks.hpp"
#include "util/error.hpp"

using namespace kveval;

namespace {

/// Per-token log-probs of ids[1..] with every token fed as its own cached pass
/// (decode steps of one row), log-softmax in double.
std::vector<double> teacher_forced(Context& c, const std::vector<int32_t>& ids) {
  const auto V = static_cast<size_t>(c.model().hparams().n_vocab);
  std::vector<float> logits(V);
  std::vector<double> out;
  KvCacheScope scope(c, 1, static_cast<int>(ids.size()));
  const std::vector<int> one = {1};
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    c.forward(std::span<const int32_t>(&ids[i], 1), 1, 1, one, Context::Logits::Last, logits);
    double mx = -INFINITY, sum = 0;
    for (float l : logits) mx = std::max(mx, double(l));
    for (float l : logits) sum += std::exp(double(l) - mx);
    out.push_back(double(logits[static_cast<size_t>(ids[i + 1])]) - mx - std::log(sum));
  }
  return out;
}

struct Gaps {
  double max_vs_exact = 0, mean_vs_exact = 0, max_vs_ref = 0, exact_max_vs_ref = 0;
  size_t tokens = 0;
};

/// The expected.json rolling texts of fixture `file` teacher-forced with the
/// model loaded as blocks in exact and in int8 mode.
Gaps int8_gaps(const std::string& file) {
  const auto path = std::filesystem::path(file);
  const auto ex = nlohmann::json::parse(std::ifstream(path.parent_path() / "expected.json"));
  auto e = test::load_context(file, {.threads = 2, .dtype = ComputeDtype::Blocks});
  auto q = test::load_context(file, {.threads = 2, .dtype = ComputeDtype::Blocks, .matmul = MatmulMode::Int8});
  CHECK(q->model().load_summary().matmul == "int8");
  CHECK(format_load_summary(q->model().load_summary()).find("; matmul int8 (") != std::string::npos);
  CHECK(format_load_summary(e->model().load_summary()).find("matmul") == std::string::npos);
  Gaps g;
  double sum = 0;
  for (const auto& r : ex["files"][path.filename().string()]["rolling"]) {
    const auto ids = r["ids"].get<std::vector<int32_t>>();
    const auto want = r["token_logprobs"].get<std::vector<double>>();
    const auto le = teacher_forced(*e, ids), lq = teacher_forced(*q, ids);
    REQUIRE(lq.size() == want.size());
    for (size_t i = 0; i < lq.size(); ++i) {
      g.max_vs_exact = std::max(g.max_vs_exact, std::abs(lq[i] - le[i]));
      sum += std::abs(lq[i] - le[i]);
      g.max_vs_ref = std::max(g.max_vs_ref, std::abs(lq[i] - want[i]));
      g.exact_max_vs_ref = std::max(g.exact_max_vs_ref, std::abs(le[i] - want[i]));
    }
    g.tokens += lq.size();
  }
  g.mean_vs_exact = g.tokens ? sum / double(g.tokens) : 0;
  MESSAGE(path.filename().string() << " int8 vs exact (teacher-forced decode): max |Δ log-prob| " << g.max_vs_exact
                                   << ", mean " << g.mean_vs_exact << "; vs float64 reference: int8 " << g.max_vs_ref
                                   << ", exact " << g.exact_max_vs_ref << " over " << g.tokens << " tokens");
  return g;
}

}  // namespace

TEST_SUITE("model.matmul_mode") {
  TEST_CASE("int8 decode steps on the Q4_K_M, Q8_0, Q6_K, Q4_0 and Q5_K_M fixtures: log-probs near exact, greedy steps close") {
    for (const char* name : {"model-Q4_K_M.gguf", "model-Q8_0.gguf", "model-Q6_K.gguf", "model-Q4_0.gguf",
                             "model-Q5_K_M.gguf"}) {
      const std::string file_name = name;
      CAPTURE(file_name);
      const std::string file = test::quant_file(name);
      if (file.empty()) return;
      const Gaps g = int8_gaps(file);
      CHECK(g.tokens >= 30);
      CHECK(g.max_vs_exact > 0);  // the int8 kernels ran
      // Measured on these fixtures: mean 0.013-0.019, max 0.038-0.057 nats (random models: flat
      // next-token distributions). A wrong scale, min or offset term moves log-probs by whole nats.
      CHECK(g.mean_vs_exact < 0.03);
      CHECK(g.max_vs_exact < 0.1);
      CHECK(g.exact_max_vs_ref < 1e-4);
      // greedy decoding runs and stays close: the step log-probs of the tokens both modes chose
      auto e = test::load_context(file, {.threads = 2, .dtype = ComputeDtype::Blocks});
      auto q = test::load_context(file, {.threads = 2, .dtype = ComputeDtype::Blocks, .matmul = MatmulMode::Int8});
      GenerateOptions go;
      go.max_gen_toks = {24};
      go.stop_at_eos = false;
      go.logprobs = true;
      const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9}, {1, 100, 7, 8}};
      std::vector<Generation> re, rq;
      {
        KvCacheScope scope(*e, 2, 64);
        re = generate_greedy(*e, prompts, go);
      }
      {
        KvCacheScope scope(*q, 2, 64);
        rq = generate_greedy(*q, prompts, go);
      }
      REQUIRE(re.size() == rq.size());
      for (size_t i = 0; i < re.size(); ++i) {
        REQUIRE(rq[i].ids.size() == 24);
        // up to the first token where the two differ (a near tie on these flat distributions)
        for (size_t j = 0; j < re[i].ids.size() && re[i].ids[j] == rq[i].ids[j]; ++j)
          CHECK(std::abs(re[i].logprobs[j] - rq[i].logprobs[j]) < 0.1);
      }
    }
  }

  TEST_CASE("int8 on a model with no Q8_0/Q4_0/Q4_K/Q5_K/Q6_K matrix is ignored, and the load line says so") {
    const std::string q8 = test::quant_file("model-Q8_0.gguf"), q41 = test::quant_file("model-Q4_1.gguf");
    if (q8.empty() || q41.empty()) return;
    // Q8_0 widened to f32, and Q4_1 kept in its own blocks (a type int8 does not multiply)
    for (const auto& [file, dtype] : {std::pair{q8, ComputeDtype::F32}, std::pair{q41, ComputeDtype::Blocks}}) {
      CAPTURE(file);
      auto q = test::load_context(file, {.threads = 1, .dtype = dtype, .matmul = MatmulMode::Int8});
      CHECK(q->model().load_summary().matmul == "exact");
      CHECK(q->model().load_summary().matmul_int8_ignored);
      CHECK(format_load_summary(q->model().load_summary()).find("; --matmul int8 ignored (no matrix kept in ") !=
            std::string::npos);
    }
    auto k = test::load_context(q8, {.threads = 1, .dtype = ComputeDtype::Blocks, .matmul = MatmulMode::Int8});
    CHECK(k->model().load_summary().matmul == "int8");
    CHECK_FALSE(k->model().load_summary().matmul_int8_ignored);
  }

  TEST_CASE("parse_matmul_mode takes exact and int8 and names the option otherwise") {
    CHECK(parse_matmul_mode("exact") == MatmulMode::Exact);
    CHECK(parse_matmul_mode("int8") == MatmulMode::Int8);
    CHECK_THROWS_WITH_AS(parse_matmul_mode("fp8", "--matmul"), "--matmul 'fp8': expected 'exact' or 'int8'", ArgumentError);
    CHECK(ModelOptions{}.matmul == MatmulMode::Exact);
  }
}
