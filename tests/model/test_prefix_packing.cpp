// score() with prefix packing (requests sharing tokens[0, score_from) as one
// token-tree row) against the same requests scored one row each, and
// Context::forward_rows' logits against forward(Logits::All): hand-built trees
// on random models of each architecture flavour, f32 and bf16.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/kernel_isa.hpp"
#include "model/context.hpp"
#include "model/random_model.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;

namespace {

/// A random model of `flavour` (head_dim 32: the AVX-512 head kernel for up
/// to 64 uncached queries, the oneDNN matmuls beyond) and a context over it.
struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<Context> ctx;
};
Loaded load_flavour(const std::string& flavour, ComputeDtype dtype, int threads = 2) {
  static const test::ScratchDir dir("packing");
  RandomModelSpec s = random_model_flavour(random_model_preset("tiny"), flavour);
  s.n_embd = 128;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_embd_head = flavour == "qwen3" ? 32 : 0;
  s.n_ff = 192;
  s.n_ctx = 160;
  const std::string path = dir.file(flavour + ".gguf");
  if (!std::filesystem::exists(path)) write_random_model(path, s, 29);
  Loaded l;
  l.model = Model::load(path, {.threads = threads, .dtype = dtype});
  l.ctx = std::make_unique<Context>(*l.model);
  return l;
}

/// ids 1 + (7 k + seed) mod (V - 1): never 0, spread over the vocabulary.
std::vector<int32_t> ids(int n, int seed, int V) {
  std::vector<int32_t> v;
  for (int k = 0; k < n; ++k) v.push_back(static_cast<int32_t>(1 + (7 * k + seed * 13) % (V - 1)));
  return v;
}

ScoreRequest request(const std::vector<int32_t>& ctx, const std::vector<int32_t>& cont, bool pack) {
  ScoreRequest r;
  r.tokens = ctx;
  r.tokens.insert(r.tokens.end(), cont.begin(), cont.end());
  r.score_from = static_cast<int>(ctx.size());
  r.pack = pack;
  return r;
}

/// The hand-built requests: a choice that is a prefix of another, one-token
/// choices (an empty-looking " " is one token), identical choices, a long
/// branch, a second context, and a request of the first context not packed.
std::vector<ScoreRequest> cases(int V, int ctx_len, bool pack) {
  const std::vector<int32_t> c1 = ids(ctx_len, 1, V), c2 = ids(5, 2, V);
  const std::vector<int32_t> a = ids(3, 3, V), ab = {a[0], a[1], a[2], 17, 5}, sp = {9}, lng = ids(20, 4, V);
  std::vector<ScoreRequest> r = {request(c1, a, pack),   request(c2, sp, pack), request(c1, ab, pack),
                                 request(c1, sp, pack),  request(c1, a, pack),  request(c2, lng, pack),
                                 request(c1, {c1.back()}, pack), request(c1, lng, false)};
  return r;
}

/// Scores cases() unpacked (batch 1) and packed (batches 1 and 3): every
/// log-prob equal (bit for bit when tol is 0, else within tol nats), every is_greedy equal.
/// Bit equality needs the AVX-512 head kernel, which runs a branch's queries like an unpacked
/// row's; elsewhere unpacked rows of 16+ queries take oneDNN's matmuls (5e-6 nats, docs/engine.md).
void check_packed_equals_unpacked(Context& ctx, int ctx_len, double tol) {
  if (tol == 0 && backend::kernel_isa() != backend::KernelIsa::Avx512) tol = 5e-6;
  const int V = ctx.model().hparams().n_vocab;
  const auto plain = score(ctx, cases(V, ctx_len, false), 1);
  for (int b : {1, 3}) {
    CAPTURE(b);
    const uint64_t t0 = ctx.stats().tokens_processed, l0 = ctx.stats().logit_rows;
    const auto packed = score(ctx, cases(V, ctx_len, true), b);
    // c1 once + branches (2 + 4 + 0 + 2 + 0 + 19 for its packed choices), c2 once + 19, the unpacked one alone.
    CHECK(ctx.stats().tokens_processed - t0 == uint64_t(ctx_len + 2 + 4 + 2 + 0 + 5 + 19 + ctx_len + 19));
    CHECK(ctx.stats().logit_rows - l0 == uint64_t(3 + 1 + 5 + 1 + 3 + 20 + 1 + 20));
    REQUIRE(packed.size() == plain.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      CAPTURE(i);
      REQUIRE(packed[i].logprobs.size() == plain[i].logprobs.size());
      CHECK(packed[i].is_greedy == plain[i].is_greedy);
      for (size_t k = 0; k < plain[i].logprobs.size(); ++k) {
        if (tol == 0)
          CHECK(packed[i].logprobs[k] == plain[i].logprobs[k]);
        else
          CHECK(std::abs(packed[i].logprobs[k] - plain[i].logprobs[k]) <= tol);
      }
    }
    CHECK(packed[0].logprobs == packed[4].logprobs);  // identical choices
  }
}

}  // namespace

TEST_SUITE("model.prefix_packing") {
  TEST_CASE("packed trees score every token as unpacked rows, bit for bit, on each architecture (f32)") {
    for (const std::string& f : random_model_flavours()) {
      CAPTURE(f);
      Loaded l = load_flavour(f, ComputeDtype::F32);
      check_packed_equals_unpacked(*l.ctx, 12, 0);  // rows of <= 64 tokens: the loop attention either way
    }
  }

  TEST_CASE("bf16: packed equals unpacked, bit for bit where bf16 products are row-invariant") {
    if (!backend::bf16_matmul_available()) {
      MESSAGE("SKIPPED: oneDNN has no bf16 matmul on this CPU (" << std::string(backend::cpu_isa_name()) << ")");
      return;
    }
    Loaded l = load_flavour("llama", ComputeDtype::BF16);
    // On AMX oneDNN's bf16 brgemm sums some row counts in another order, so a row's
    // bits depend on the rows of its pass (batch sizes differ there too, docs/engine.md).
    const bool invariant = backend::matmul_rows_invariant(backend::Dtype::BF16);
    // There a row's bf16 rounding of its activations may flip with the rows around it: 1e-2 nats then.
    if (!invariant) MESSAGE("bf16 products are not row-invariant on this CPU (AMX): checked within 1e-2 nats");
    check_packed_equals_unpacked(*l.ctx, 12, invariant ? 0.0 : 1e-2);
  }

  TEST_CASE("a context of 80 tokens (the oneDNN attention unpacked) agrees within 5e-6 nats") {
    // Measured: up to 1.55e-6 (the trunk's block and the branch queries sum in another order).
    Loaded l = load_flavour("llama3", ComputeDtype::F32);
    check_packed_equals_unpacked(*l.ctx, 80, 5e-6);
  }

  TEST_CASE("packed scores do not depend on the thread count") {
    Loaded one = load_flavour("qwen2", ComputeDtype::F32, 1), two = load_flavour("qwen2", ComputeDtype::F32, 2);
    const int V = one.model->hparams().n_vocab;
    const auto a = score(*one.ctx, cases(V, 70, true), 2), b = score(*two.ctx, cases(V, 70, true), 5);
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].logprobs == b[i].logprobs);
  }

  TEST_CASE("a group larger than the context length continues in another row, scores unchanged") {
    Loaded l = load_flavour("llama", ComputeDtype::F32);
    const int V = l.model->hparams().n_vocab, n_ctx = l.model->hparams().n_ctx_train;  // 160
    const std::vector<int32_t> c = ids(100, 5, V);
    std::vector<ScoreRequest> packed, plain;
    for (int k = 0; k < 3; ++k) {  // 100 + 3 x 60 tokens > 160: three rows
      packed.push_back(request(c, ids(n_ctx + 1 - 100, 6 + k, V), true));
      plain.push_back(packed.back());
      plain.back().pack = false;
    }
    const uint64_t t0 = l.ctx->stats().tokens_processed;
    const auto p = score(*l.ctx, packed, 2);
    CHECK(l.ctx->stats().tokens_processed - t0 == uint64_t(3 * n_ctx));
    const auto u = score(*l.ctx, plain, 2);
    for (size_t i = 0; i < 3; ++i) CHECK(p[i].logprobs == u[i].logprobs);
  }

  TEST_CASE("forward_rows: the asked rows equal forward(Logits::All)'s, bit for bit; bad rows are refused") {
    Loaded l = load_flavour("qwen3", ComputeDtype::F32);
    const int V = l.model->hparams().n_vocab;
    const int seq = 9;
    std::vector<int32_t> toks = ids(2 * seq, 7, V);
    const std::vector<int> n = {9, 4};
    std::vector<float> all(size_t(2 * seq * V));
    l.ctx->forward(toks, 2, seq, n, Context::Logits::All, all);
    const std::vector<Context::LogitRow> at = {{1, 3}, {0, 0}, {0, 8}, {1, 0}};
    std::vector<float> some(at.size() * size_t(V));
    const uint64_t r0 = l.ctx->stats().logit_rows;
    l.ctx->forward_rows(toks, 2, seq, n, at, some);
    CHECK(l.ctx->stats().logit_rows - r0 == at.size());
    for (size_t k = 0; k < at.size(); ++k)
      CHECK(std::memcmp(some.data() + k * V, all.data() + (size_t(at[k].row) * seq + at[k].index) * V,
                        sizeof(float) * size_t(V)) == 0);
    const std::vector<Context::LogitRow> bad = {{1, 4}};  // row 1 has 4 tokens
    CHECK_THROWS_AS(l.ctx->forward_rows(toks, 2, seq, n, bad, some), ArgumentError);
    std::vector<Context::TokenTree> trees(2);
    trees[0].trunk = 3;
    trees[0].branch_start = {4, 6};  // must start at the trunk's end
    CHECK_THROWS_AS(l.ctx->forward_rows(toks, 2, seq, n, at, some, trees), ArgumentError);
  }
}
