// score() with prefix packing (requests sharing a prefix as one token-trie row)
// against the same requests scored one row each, and
// Context::forward_rows' logits against forward(Logits::All): hand-built trees
// on random models of each architecture flavour, f32 and bf16.
#include <doctest/doctest.h>

#include <cstring>
#include <tuple>
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

/// The hand-built requests over a few-shot prefix P of `prefix` tokens shared by
/// three documents d1 = P + q1, d2 = P + q2, d3 = d1 + e (a context that
/// extends another document's): a choice that is a prefix of another (a, ab),
/// one-token choices, identical requests (0 and 6), lm-eval's _encode_pair
/// split (7: d1 with its last token encoded otherwise, `alt`; 8: the same
/// tokens with alt in the continuation), and a request not packed (9).
std::vector<ScoreRequest> cases(int V, int prefix, bool pack) {
  const std::vector<int32_t> P = ids(prefix, 1, V), q1 = ids(4, 2, V), q2 = ids(3, 3, V), e = ids(2, 7, V);
  std::vector<int32_t> d1 = P, d2 = P;
  d1.insert(d1.end(), q1.begin(), q1.end());
  d2.insert(d2.end(), q2.begin(), q2.end());
  std::vector<int32_t> d3 = d1, d1alt(d1.begin(), d1.end() - 1);
  d3.insert(d3.end(), e.begin(), e.end());
  const int32_t alt = 3;
  d1alt.push_back(alt);
  const std::vector<int32_t> a = ids(3, 6, V), ab = {a[0], a[1], a[2], 17, 5}, sp = {9}, lng = ids(20, 4, V);
  std::vector<ScoreRequest> r = {request(d1, a, pack),     request(d1, ab, pack), request(d1, sp, pack),
                                 request(d2, sp, pack),    request(d2, a, pack),  request(d3, sp, pack),
                                 request(d1, a, pack),     request(d1alt, sp, pack),
                                 request(std::vector<int32_t>(d1alt.begin(), d1alt.end() - 1), {alt, 9}, pack),
                                 request(d1, lng, false)};
  return r;
}

/// Tokens and logit rows of cases(V, L, true) (hand-counted in cases()'s order).
/// Shared: the trie of the packed nine holds d1 and a[0..1] (L + 6), then a[2], 17
/// (request 1), q2 (3), a[0..1] after d2 (2), e (2), alt (1): L + 16 tokens; the
/// scoring nodes: d1's end, a0, a1 (3), a2, 17 (2), d2's end (1), d2 + a0, a1 (2),
/// d3's end (1), alt (1), d1's end but one (1): 11. The unpacked one: L + 23 tokens, 20 rows.
/// Alone: the nine take L + 6, L + 8, L + 4, L + 3, L + 5, L + 6, L + 6, L + 4, L + 4 tokens
/// (9 L + 46) and 3 + 5 + 1 + 1 + 3 + 1 + 3 + 1 + 2 = 20 logit rows.
uint64_t shared_tokens(int L) { return uint64_t(L + 16 + L + 23); }
uint64_t alone_tokens(int L) { return uint64_t(9 * L + 46 + L + 23); }
constexpr uint64_t kSharedLogitRows = 11 + 20, kAloneLogitRows = 20 + 20;

/// cases() scored with `opts` at `batch_size`; checks the tokens computed and logit rows.
std::vector<ScoreResult> score_counted(Context& ctx, int prefix, int batch_size, const ScoreOptions& opts) {
  const int V = ctx.model().hparams().n_vocab;
  const uint64_t t0 = ctx.stats().tokens_processed, l0 = ctx.stats().logit_rows;
  auto out = score(ctx, cases(V, prefix, true), batch_size, opts);
  CHECK(ctx.stats().tokens_processed - t0 == (opts.share_prefixes ? shared_tokens(prefix) : alone_tokens(prefix)));
  CHECK(ctx.stats().logit_rows - l0 == (opts.share_prefixes ? kSharedLogitRows : kAloneLogitRows));
  return out;
}

/// Every log-prob of a and b equal (bit for bit when tol is 0, else within tol nats), every is_greedy equal.
void check_same(const std::vector<ScoreResult>& a, const std::vector<ScoreResult>& b, double tol) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    REQUIRE(a[i].logprobs.size() == b[i].logprobs.size());
    CHECK(a[i].is_greedy == b[i].is_greedy);
    for (size_t k = 0; k < a[i].logprobs.size(); ++k) {
      if (tol == 0)
        CHECK(a[i].logprobs[k] == b[i].logprobs[k]);
      else
        CHECK(std::abs(a[i].logprobs[k] - b[i].logprobs[k]) <= tol);
    }
  }
}

/// Scores cases() each alone (batch 1) and shared as tries (batches 1, 3 and 8):
/// bit for bit the same, and (tol) against the requests scored as plain causal
/// rows (pack false), which take the same loop attention up to 64 tokens on AVX-512.
void check_packed_equals_unpacked(Context& ctx, int prefix, double plain_tol) {
  if (plain_tol == 0 && backend::kernel_isa() != backend::KernelIsa::Avx512) plain_tol = 5e-6;
  const int V = ctx.model().hparams().n_vocab;
  const auto alone = score_counted(ctx, prefix, 1, {.share_prefixes = false});
  for (int b : {1, 3, 8}) {
    CAPTURE(b);
    const auto packed = score_counted(ctx, prefix, b, {});
    check_same(packed, alone, 0);
    CHECK(packed[0].logprobs == packed[6].logprobs);  // identical requests
    CHECK(packed[7].logprobs.back() == packed[8].logprobs.back());  // the same token after the same tokens
  }
  std::vector<ScoreRequest> plain = cases(V, prefix, false);
  check_same(score(ctx, plain, 2), alone, plain_tol);
}

}  // namespace

TEST_SUITE("model.prefix_packing") {
  TEST_CASE("tries score every token as each request alone, bit for bit, on each architecture (f32)") {
    for (const std::string& f : random_model_flavours()) {
      CAPTURE(f);
      Loaded l = load_flavour(f, ComputeDtype::F32);
      check_packed_equals_unpacked(*l.ctx, 12, 0);  // rows of <= 64 tokens: plain rows take the loop attention too
    }
  }

  TEST_CASE("bf16: shared equals alone, bit for bit where bf16 products are row-invariant") {
    if (!backend::bf16_matmul_available()) {
      MESSAGE("SKIPPED: oneDNN has no bf16 matmul on this CPU (" << std::string(backend::cpu_isa_name()) << ")");
      return;
    }
    Loaded l = load_flavour("llama", ComputeDtype::BF16);
    // On AMX oneDNN's bf16 brgemm sums some row counts in another order, so a row's
    // bits depend on the rows of its pass (batch sizes differ there too, docs/engine.md).
    const bool invariant = backend::matmul_rows_invariant(backend::Dtype::BF16);
    // There a row's bf16 rounding of its activations may flip with the rows around it: 1e-2 nats then.
    if (!invariant) {
      MESSAGE("bf16 products are not row-invariant on this CPU (AMX): checked within 1e-2 nats");
      const auto alone = score_counted(*l.ctx, 12, 1, {.share_prefixes = false});
      check_same(score_counted(*l.ctx, 12, 3, {}), alone, 1e-2);
      return;
    }
    check_packed_equals_unpacked(*l.ctx, 12, 0);
  }

  TEST_CASE("a prefix of 80 tokens: shared equals alone bit for bit; plain rows (oneDNN attention) within 5e-6 nats") {
    // Measured: up to 1.55e-6 (the plain rows' matmul attention sums in another order).
    Loaded l = load_flavour("llama3", ComputeDtype::F32);
    check_packed_equals_unpacked(*l.ctx, 80, 5e-6);
  }

  TEST_CASE("shared scores do not depend on the thread count or the batch size") {
    Loaded one = load_flavour("qwen2", ComputeDtype::F32, 1), two = load_flavour("qwen2", ComputeDtype::F32, 2);
    const auto a = score_counted(*one.ctx, 70, 1, {.share_prefixes = false});
    check_same(score_counted(*two.ctx, 70, 8, {}), a, 0);
    check_same(score_counted(*one.ctx, 70, 3, {}), a, 0);
  }

  TEST_CASE("rows hold at most row_tokens tokens (and the context length); scores unchanged") {
    Loaded l = load_flavour("llama", ComputeDtype::F32);
    const int V = l.model->hparams().n_vocab, n_ctx = l.model->hparams().n_ctx_train;  // 160
    const std::vector<int32_t> c = ids(100, 5, V);
    std::vector<ScoreRequest> reqs;
    for (int k = 0; k < 3; ++k) reqs.push_back(request(c, ids(n_ctx + 1 - 100, 6 + k, V), true));  // 160 tokens each
    uint64_t t0 = l.ctx->stats().tokens_processed;
    const auto p = score(*l.ctx, reqs, 2);  // 100 + 3 x 60 tokens > 160: three rows
    CHECK(l.ctx->stats().tokens_processed - t0 == uint64_t(3 * n_ctx));
    check_same(p, score(*l.ctx, reqs, 1, {.share_prefixes = false}), 0);
    // Short requests: d1-like contexts of 30 tokens sharing 25, continuations of 2.
    std::vector<ScoreRequest> few;
    for (int k = 0; k < 4; ++k) {
      std::vector<int32_t> ctx = ids(25, 9, V), q = ids(5, 10 + k, V);
      ctx.insert(ctx.end(), q.begin(), q.end());
      few.push_back(request(ctx, {5, 6}, true));
    }
    // Each takes 31 tokens alone, 6 more when it shares the 25: rows of at most 33 tokens hold
    // one request (4 x 31), of 40 two (2 x 37), of 200 all four (31 + 3 x 6).
    for (auto [budget, rows, tokens] : {std::tuple{33, 4, 124}, {40, 2, 74}, {200, 1, 49}}) {
      CAPTURE(budget);
      t0 = l.ctx->stats().tokens_processed;
      check_same(score(*l.ctx, few, 3, {.row_tokens = budget}), score(*l.ctx, few, 1, {.share_prefixes = false}), 0);
      CHECK(l.ctx->stats().tokens_processed - t0 == uint64_t(tokens + 124));  // the unshared pass adds 4 x 31
      CHECK(score_rows(few, n_ctx, {.row_tokens = budget}).size() == size_t(rows));
    }
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
    trees[0] = {3, {2, 3, 4, 7, 5, 6}};  // a parent (7) after its token (6)
    CHECK_THROWS_AS(l.ctx->forward_rows(toks, 2, seq, n, at, some, trees), ArgumentError);
    trees[0] = {3, {2, 3, 4, 5, 5}};  // one parent short of the 6 tokens after the trunk
    CHECK_THROWS_AS(l.ctx->forward_rows(toks, 2, seq, n, at, some, trees), ArgumentError);
    trees[0] = {0, {-1, 0, 1, 0, 3, 3, 5, 2, -1}};  // a trie with two roots: accepted
    CHECK_NOTHROW(l.ctx->forward_rows(toks, 2, seq, n, at, some, trees));
  }
}
