// The KV cache of sliding-window layers: cells and bytes computed by hand, the
// positions a sliding layer keeps as its window moves, and gemma2, gemma3 and
// phi3 random models (window 16) generating past several windows, with a
// prompt longer than a sliding layer's cells in one pass: bit for bit the
// results of a cache that keeps every position (llama.cpp's swa_full), for
// f32, bf16 and f16 caches, with cache reuse and continuous batching; equal to
// the cache-free forward and the float64 reference (reference_forward.hpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "context_support.hpp"
#include "model/kv_cache.hpp"
#include "model/random_model.hpp"
#include "model/reference_forward.hpp"
#include "test_support.hpp"
#include "util/bf16.hpp"
#include "util/error.hpp"

using namespace kveval;

namespace {

constexpr int kHeads = 2, kHd = 4;

/// One token's K (or V) for both heads: head h, element d = base + 1000 h + d.
std::vector<float> token(float base) {
  std::vector<float> t(kHeads * kHd);
  for (int h = 0; h < kHeads; ++h)
    for (int d = 0; d < kHd; ++d) t[static_cast<size_t>(h * kHd + d)] = base + 1000.0f * h + d;
  return t;
}

/// A tiny model of `arch` (gemma2: 3 layers, 0 and 2 slide, soft-caps; gemma3: 7 layers, 6 slide;
/// phi3: 3 layers, all slide, heads of 16) with window `window` and context 512.
RandomModelSpec spec(const std::string& arch, int window) {
  RandomModelSpec s = random_model_flavour(random_model_preset("tiny"), arch);
  s.n_ctx = 512;
  s.sliding_window = window;
  if (arch == "phi3") {
    s.n_layer = 3;
    s.tied_output = false;
    return s;
  }
  s.n_embd = 128, s.n_layer = arch == "gemma2" ? 3 : 7, s.n_head = 4, s.n_head_kv = 2, s.n_ff = 192, s.n_vocab = 320;
  s.n_embd_head = 32;
  if (arch == "gemma2") s.attn_softcap = 1.5f;
  s.final_softcap = 3.0f;
  return s;
}

/// The model file of `arch` with window 16 (written once per process).
const std::string& model_path(const std::string& arch) {
  static const test::ScratchDir dir("sliding_cache");
  static std::map<std::string, std::string> paths;
  auto it = paths.find(arch);
  if (it == paths.end()) {
    const std::string p = dir.file(arch + ".gguf");
    write_random_model(p, spec(arch, 16), 21);
    it = paths.emplace(arch, p).first;
  }
  return it->second;
}

/// A greedy run through the set-up cache: the prompt in one pass (Logits::All),
/// then `steps` one-token passes of the argmax; ids = prompt + the steps' tokens,
/// logits [ids.size(), V]: row t follows ids[t].
struct Run {
  std::vector<int32_t> ids;
  std::vector<float> logits;
};

Run greedy(Context& ctx, const std::vector<int32_t>& prompt, int steps) {
  const size_t V = static_cast<size_t>(ctx.model().hparams().n_vocab);
  Run r{prompt, std::vector<float>(prompt.size() * V)};
  std::vector<int> n = {static_cast<int>(prompt.size())};
  ctx.forward(prompt, 1, n[0], n, Context::Logits::All, r.logits);
  n = {1};
  for (int s = 0; s < steps; ++s) {
    const int32_t next = argmax(std::span<const float>(r.logits).subspan(r.logits.size() - V));
    r.ids.push_back(next);
    std::vector<float> step(V);
    ctx.forward(std::vector<int32_t>{next}, 1, 1, n, Context::Logits::Last, step);
    r.logits.insert(r.logits.end(), step.begin(), step.end());
  }
  return r;
}

/// `greedy` in a fresh cache scope of prompt + steps positions, the sliding layers
/// window-sized (swa_full false) or holding every position; `bytes` gets Context::bytes().
Run scoped_greedy(Context& ctx, const std::vector<int32_t>& prompt, int steps, bool swa_full, size_t& bytes) {
  ctx.set_kv_cache_swa_full(swa_full);
  KvCacheScope scope(ctx, 1, static_cast<int>(prompt.size()) + steps);
  Run r = greedy(ctx, prompt, steps);
  bytes = ctx.bytes();
  return r;
}

/// Window-sized vs full sliding layers for `arch` and KV dtype `dt`: the same ids
/// and the same logits bit for bit, the window-sized cache smaller; with f32, the
/// logits also equal the cache-free forward's and the float64 reference's within 1e-4.
void check_arch(const std::string& arch, int prompt_len, int steps, KvCacheDtype dt) {
  CAPTURE(arch); CAPTURE(prompt_len); CAPTURE(steps); CAPTURE(to_string(dt));
  auto m = test::load_context(model_path(arch), ModelOptions{.dtype = ComputeDtype::F32});
  m->set_kv_cache_dtype(dt);
  const int V = m.model().hparams().n_vocab;
  const auto prompt = test::token_ids(size_t(prompt_len), V);
  size_t full_bytes = 0, win_bytes = 0;
  const Run full = scoped_greedy(*m, prompt, steps, true, full_bytes);
  const Run win = scoped_greedy(*m, prompt, steps, false, win_bytes);
  CHECK(win_bytes < full_bytes);
  CHECK(win.ids == full.ids);
  REQUIRE(win.logits.size() == full.logits.size());
  CHECK(std::memcmp(win.logits.data(), full.logits.data(), win.logits.size() * sizeof(float)) == 0);
  if (dt != KvCacheDtype::F32) return;
  const size_t T = win.ids.size();
  REQUIRE(win.logits.size() == T * size_t(V));
  const std::vector<int32_t>& seq = win.ids;
  std::vector<float> free_logits(T * size_t(V));
  std::vector<int> n = {static_cast<int>(T)};
  m->forward(seq, 1, n[0], n, Context::Logits::All, free_logits);
  const auto got = test::log_softmax_rows(win.logits.data(), T, size_t(V));
  CHECK(test::max_diff(got, test::log_softmax_rows(free_logits.data(), T, size_t(V))) <= 1e-4);
  for (size_t t = size_t(prompt_len) - 1; t + 1 < T; ++t)  // the greedy ids are the cache-free argmaxes
    CHECK(win.ids[t + 1] == argmax(std::span<const float>(free_logits).subspan(t * size_t(V), size_t(V))));
  CHECK(test::max_diff(got, test::reference_log_probs(test::ReferenceModel(model_path(arch)), seq)) <= 1e-4);
}

}  // namespace

TEST_SUITE("model.sliding_cache") {
  TEST_CASE("cells and bytes by hand: window - 1 + 128 cells per sliding layer, capped at max_seq_len") {
    KvCache c(3, kHeads, kHd, KvCacheDtype::F32, {5, 0, 5});
    CHECK(c.n_sliding() == 2);
    CHECK(c.window(0) == 5);
    CHECK(c.window(1) == 0);
    CHECK(c.cells_for(0, 1000) == 132);
    CHECK(c.cells_for(1, 1000) == 1000);
    CHECK(c.cells_for(2, 100) == 100);
    // 2 (K, V) x 2 rows x 2 heads x 4 values x 4 bytes x (132 + 1000 + 132) cells
    CHECK(c.bytes_for(2, 1000) == 161792);
    CHECK(c.bytes_for(2, 100) == 38400);  // a window >= max_seq_len: 3 x 100 cells, as without windows
    CHECK(KvCache(3, kHeads, kHd).bytes_for(2, 100) == 38400);
    CHECK(KvCache(3, kHeads, kHd, KvCacheDtype::BF16, {5, 0, 5}).bytes_for(2, 1000) == 80896);
    c.set_swa_full(true);
    CHECK(c.bytes_for(2, 1000) == 384000);  // 3 x 1000 cells
    c.set_swa_full(false);
    c.setup(2, 1000);
    CHECK(c.bytes() == 161792);
    CHECK(c.max_append(0) == 128);
    CHECK(c.max_append(1) == 1000);
    CHECK(c.view(0, 1).head_stride == 132 * kHd);
    CHECK(c.view(1, 1).head_stride == 1000 * kHd);
    CHECK_THROWS_AS(c.set_swa_full(true), CacheError);
    CHECK_THROWS_AS(KvCache(3, kHeads, kHd, KvCacheDtype::F32, {5, 0}), ArgumentError);
    CHECK_THROWS_AS(KvCache(2, kHeads, kHd, KvCacheDtype::F32, {5, -1}), ArgumentError);
  }

  TEST_CASE("a sliding layer keeps the positions its queries see, in order, as the window moves") {
    for (KvCacheDtype dt : {KvCacheDtype::F32, KvCacheDtype::BF16}) {
      CAPTURE(to_string(dt));
      KvCache c(2, kHeads, kHd, dt, {5, 0});
      c.setup(1, 600);
      const size_t es = dt == KvCacheDtype::F32 ? 4 : 2;
      for (int p = 0; p < 300; ++p) {
        const auto t = token(static_cast<float>(p));
        for (int l = 0; l < 2; ++l) c.append(l, 0, 1, t.data(), t.data(), kHeads * kHd);
        c.advance(0, 1);
        // cells 0..131 hold positions 0..131; position 132 moves 128..131 to the front; 260 moves 256..259
        const int want_begin = p < 132 ? 0 : p < 260 ? 128 : 256;
        REQUIRE(c.begin(0, 0) == want_begin);
        REQUIRE(c.begin(1, 0) == 0);
        const backend::KvView v = c.view(0, 0);
        REQUIRE(v.begin == want_begin);
        for (int q = std::max(0, p - 4); q <= p; ++q)
          for (int h = 0; h < kHeads; ++h) {
            const char* at = static_cast<const char*>(v.k) + ((h * v.head_stride) + (q - v.begin) * v.pos_stride) * es;
            if (dt == KvCacheDtype::F32) {
              float x;
              std::memcpy(&x, at, 4);
              REQUIRE(x == static_cast<float>(q) + 1000.0f * h);
            } else {
              uint16_t b;
              std::memcpy(&b, at, 2);
              std::vector<uint16_t> want(1);
              const float x = static_cast<float>(q) + 1000.0f * h;
              util::f32_to_bf16_n(&x, want.data(), 1);
              REQUIRE(b == want[0]);
            }
          }
      }
      // one append takes at most 128 positions of the sliding layer: 4 kept + 128 = 132 cells
      std::vector<float> many(129 * kHeads * kHd, 1.0f);
      CHECK_THROWS_WITH_AS(c.append(0, 0, 129, many.data(), many.data(), kHeads * kHd),
                           doctest::Contains("append at most 128 at once"), CacheError);
      CHECK(c.append(0, 0, 100, many.data(), many.data(), kHeads * kHd, 0) == 0);
      CHECK(c.append(0, 0, 28, many.data(), many.data(), kHeads * kHd, 100) == 0);
      CHECK(c.begin(0, 0) == 296);  // position 300's query sees 296..300
      c.reset_row(0);
      CHECK(c.begin(0, 0) == 0);
      CHECK(c.n_past(0) == 0);
    }
  }

  TEST_CASE("gemma2, gemma3, phi3: a prompt of 3 windows, then decoding past 2 x 132 positions") {
    for (const char* arch : {"gemma2", "gemma3", "phi3"}) check_arch(arch, 48, 260, KvCacheDtype::F32);
  }

  TEST_CASE("gemma2, gemma3, phi3: a 300-token prompt in one pass (blocks of 128 queries), then decoding") {
    for (const char* arch : {"gemma2", "gemma3", "phi3"}) check_arch(arch, 300, 40, KvCacheDtype::F32);
  }

  TEST_CASE("bf16 and f16 caches: window-sized sliding layers give the full cache's bits") {
    for (KvCacheDtype dt : {KvCacheDtype::BF16, KvCacheDtype::F16})
      for (const char* arch : {"gemma3", "phi3"}) check_arch(arch, 300, 40, dt);
  }

  TEST_CASE("gemma3's cache bytes by hand; a window >= max_seq_len is a full cache") {
    auto m = test::load_context(model_path("gemma3"), ModelOptions{.dtype = ComputeDtype::F32});
    // 2 (K, V) x 2 kv heads x 32 values x 4 bytes = 512 bytes per cell and row
    CHECK(m->cache_bytes_for(1, 340) == 512u * (6 * 143 + 340));  // 6 sliding layers of 16 - 1 + 128 cells
    CHECK(m.model().cache_bytes_for(1, 340) == 512u * (6 * 143 + 340));
    CHECK(m.model().cache_bytes_for(2, 8192, KvCacheDtype::BF16) == 2u * 256 * (6 * 143 + 8192));
    CHECK(m->cache_bytes_for(1, 143) == 512u * 7 * 143);
    m->set_kv_cache_swa_full(true);
    CHECK(m->cache_bytes_for(1, 340) == 512u * 7 * 340);
    m->set_kv_cache_swa_full(false);
    const auto prompt = test::token_ids(40, m.model().hparams().n_vocab);
    size_t full = 0, win = 0;
    const Run a = scoped_greedy(*m, prompt, 103, true, full);
    const Run b = scoped_greedy(*m, prompt, 103, false, win);
    CHECK(win == full);
    CHECK(b.ids == a.ids);
    CHECK(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)) == 0);
    CHECK(m.model().load_summary().sliding ==
          "sliding window 16 on 6 of 7 layers (those read at most 16 cached positions and keep at most 143 per KV "
          "cache row, RoPE base 10000 scale 1)");
  }

  TEST_CASE("cache reuse, reset_caches and continuous batching over window-sized sliding layers") {
    auto m = test::load_context(model_path("gemma2"), ModelOptions{.dtype = ComputeDtype::F32});
    const int V = m.model().hparams().n_vocab;
    const auto prompt = test::token_ids(200, V);
    Run first;
    for (int pass = 0; pass < 3; ++pass) {  // the same allocation, rewound by the scope or by reset_caches
      CAPTURE(pass);
      KvCacheScope scope(*m, 1, 400, CachePolicy::Reuse);
      if (pass == 2) {
        greedy(*m, prompt, 5);
        m->reset_caches();
      }
      const Run r = greedy(*m, prompt, 150);
      if (pass == 0) first = r;
      CHECK(r.ids == first.ids);
      CHECK(std::memcmp(r.logits.data(), first.logits.data(), r.logits.size() * sizeof(float)) == 0);
    }
    CHECK(m->stats().cache_allocations == 1);
    m->delete_caches();
    // three prompts over two rows (rows rewound and refilled while the other decodes)
    const std::vector<std::vector<int32_t>> prompts = {test::token_ids(300, V), std::vector<int32_t>(prompt.begin(), prompt.begin() + 48),
                                                       std::vector<int32_t>(prompt.begin() + 7, prompt.begin() + 190)};
    GenerateOptions o;
    o.max_gen_toks = {60};
    o.stop_at_eos = false;
    std::vector<Generation> g[2];
    for (bool full : {true, false}) {
      m->set_kv_cache_swa_full(full);
      KvCacheScope scope(*m, 2, 400);
      g[full ? 1 : 0] = generate_greedy(*m, prompts, o);
    }
    REQUIRE(g[0].size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(g[0][i].ids == g[1][i].ids);
      CHECK(g[0][i].logprobs == g[1][i].logprobs);
      CHECK(g[0][i].ids.size() == 60);
    }
  }
}
