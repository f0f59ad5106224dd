// Each backend op against a naive scalar implementation (double accumulation).
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.hpp"
#include "backend/kernel_isa.hpp"
#include "backend/random_values.hpp"
#include "util/error.hpp"
#include "util/half.hpp"

using namespace kveval;
using namespace kveval::backend;

namespace {

using kveval::test::randv;

// |a - b| <= tol * max(1, |b|)
void check_close(const std::vector<float>& a, const std::vector<double>& b, double tol) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  CHECK(worst <= tol);
}

// Causal GQA attention in double: q [nq, q_stride] (head h at h * hd), k/v
// [n_kv][cap][hd]; out [nq, n_head, hd]. Scale 1/sqrt(hd), softmax over [0, past + i].
std::vector<double> naive_attention(const std::vector<float>& q, int64_t q_stride, const std::vector<float>& k,
                                    const std::vector<float>& v, int64_t cap, int64_t nq, int64_t past, int64_t n_head,
                                    int64_t n_kv, int64_t hd) {
  std::vector<double> ref(static_cast<size_t>(nq * n_head * hd));
  const int64_t group = n_head / n_kv;
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t hk = h / group, len = past + i + 1;
      std::vector<double> s(static_cast<size_t>(len));
      double mx = -1e300;
      for (int64_t p = 0; p < len; ++p) {
        double d = 0;
        for (int64_t e = 0; e < hd; ++e) d += double(q[size_t(i * q_stride + h * hd + e)]) * k[size_t((hk * cap + p) * hd + e)];
        s[size_t(p)] = d / std::sqrt(double(hd));
        mx = std::max(mx, s[size_t(p)]);
      }
      double sum = 0;
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (int64_t e = 0; e < hd; ++e) {
        double o = 0;
        for (int64_t p = 0; p < len; ++p) o += s[size_t(p)] / sum * v[size_t((hk * cap + p) * hd + e)];
        ref[size_t((i * n_head + h) * hd + e)] = o;
      }
    }
  return ref;
}

}  // namespace

TEST_SUITE("backend.ops") {
  TEST_CASE("matmul matches naive y = x Wᵀ at the model's shapes and odd ones") {
    Engine eng(2);
    struct Shape { int64_t m, n, k; };
    for (Shape s : {Shape{1, 64, 64}, Shape{7, 172, 64}, Shape{33, 64, 172}, Shape{200, 512, 64}, Shape{5, 13, 17},
                    Shape{1, 2048, 768}, Shape{3, 1024, 40}, Shape{40, 1024, 40}, Shape{16, 2048, 24}}) {
      CAPTURE(s.m); CAPTURE(s.n); CAPTURE(s.k);
      auto x = randv(static_cast<size_t>(s.m * s.k), 1);
      auto w = randv(static_cast<size_t>(s.n * s.k), 2);
      Weight W(w, s.n, s.k);
      for (bool acc : {false, true})
        for (bool inv : {false, true}) {
          std::vector<float> y = randv(static_cast<size_t>(s.m * s.n), 3);
          std::vector<double> ref(y.size()), mag(y.size());
          for (int64_t i = 0; i < s.m; ++i)
            for (int64_t j = 0; j < s.n; ++j) {
              double t = acc ? y[static_cast<size_t>(i * s.n + j)] : 0.0, a = std::abs(t);
              for (int64_t kk = 0; kk < s.k; ++kk) {
                const double p = double(x[size_t(i * s.k + kk)]) * w[size_t(j * s.k + kk)];
                t += p;
                a += std::abs(p);
              }
              ref[static_cast<size_t>(i * s.n + j)] = t;
              mag[static_cast<size_t>(i * s.n + j)] = a;
            }
          matmul(eng, x.data(), s.m, W, y.data(), acc, inv);
          // relative to the magnitude of the sum's terms (the scale of float32 rounding in a dot product)
          double worst = 0;
          for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::abs(y[i] - ref[i]) / mag[i]);
          CHECK(worst <= 1e-5);
        }
    }
  }

  TEST_CASE("matmul primitives are created once per weight shape") {
    Engine eng(1);
    auto w = randv(64 * 32, 4);
    Weight W(w, 64, 32);
    std::vector<float> x(100 * 32, 0.5f), y(100 * 64);
    // 9 <= M <= 16 (2 <= M <= 16 without AVX-512): one fixed-M primitive per M; larger M: one runtime-M
    // primitive for all; M = 1 (and 2..8 on AVX-512): kveval's gemv, no primitive.
    for (int64_t m : {1, 3, 12, 100, 17}) matmul(eng, x.data(), m, W, y.data());
    const auto n0 = eng.primitives_created();
    CHECK(n0 == (decode_invariant_rows(Dtype::F32) >= 3 ? 2 : 3));
    for (int64_t m : {1, 3, 12, 100, 17, 64, 12, 3, 1}) matmul(eng, x.data(), m, W, y.data());
    CHECK(eng.primitives_created() == n0);
    matmul(eng, x.data(), 3, W, y.data(), false, true);  // batch-invariant: padded to 16, runtime M
    CHECK(eng.primitives_created() == n0);
    matmul(eng, x.data(), 50, W, y.data(), true);  // accumulate is a different primitive
    CHECK(eng.primitives_created() == n0 + 1);
  }

  TEST_CASE("weight size mismatch is an ArgumentError") {
    std::vector<float> w(10);
    CHECK_THROWS_AS(Weight(w, 3, 4), ArgumentError);
  }

  TEST_CASE("rmsnorm matches naive") {
    const int64_t rows = 9, dim = 172;
    auto x = randv(static_cast<size_t>(rows * dim), 5, 3.0f);
    auto w = randv(static_cast<size_t>(dim), 6);
    std::vector<float> y(x.size());
    std::vector<double> ref(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += double(x[size_t(r * dim + i)]) * x[size_t(r * dim + i)];
      const double sc = 1.0 / std::sqrt(ss / dim + 1e-5);
      for (int64_t i = 0; i < dim; ++i) ref[size_t(r * dim + i)] = x[size_t(r * dim + i)] * sc * w[size_t(i)];
    }
    rmsnorm(x.data(), w.data(), y.data(), rows, dim, 1e-5f);
    check_close(y, ref, 1e-5);
    // in place
    rmsnorm(x.data(), w.data(), x.data(), rows, dim, 1e-5f);
    check_close(x, ref, 1e-5);
  }

  TEST_CASE("rmsnorm: rows of small magnitude (where eps matters), a zero row, a large row") {
    // mean(x^2) ~ 3e-7 here, against eps = 1e-5: sqrt(ms + eps) and sqrt(ms) + eps differ 5x.
    const int64_t dim = 64;
    std::vector<float> x = randv(static_cast<size_t>(4 * dim), 8, 1e-3f);
    for (int64_t i = 0; i < dim; ++i) x[size_t(2 * dim + i)] = 0.0f;                     // row 2: zeros
    for (int64_t i = 0; i < dim; ++i) x[size_t(3 * dim + i)] = 1e4f * x[size_t(i)] * 1e3f;  // row 3: ~1e4
    auto w = randv(static_cast<size_t>(dim), 9);
    const float eps = 1e-5f;
    std::vector<double> ref(x.size());
    for (int64_t r = 0; r < 4; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += double(x[size_t(r * dim + i)]) * x[size_t(r * dim + i)];
      const double sc = 1.0 / std::sqrt(ss / dim + double(eps));
      for (int64_t i = 0; i < dim; ++i) ref[size_t(r * dim + i)] = x[size_t(r * dim + i)] * sc * w[size_t(i)];
    }
    std::vector<float> y(x.size());
    rmsnorm(x.data(), w.data(), y.data(), 4, dim, eps);
    check_close(y, ref, 1e-5);
    for (int64_t i = 0; i < dim; ++i) CHECK(y[size_t(2 * dim + i)] == 0.0f);
    // hand-computed: x = (3e-3, 4e-3), weight 1: mean square 1.25e-5, scale 1/sqrt(2.25e-5) = 1/4.74342e-3
    const std::vector<float> h = {3e-3f, 4e-3f}, ones = {1.0f, 1.0f};
    std::vector<float> hy(2);
    rmsnorm(h.data(), ones.data(), hy.data(), 1, 2, eps);
    CHECK(hy[0] == doctest::Approx(3e-3 / std::sqrt(2.25e-5)).epsilon(1e-6));
    CHECK(hy[1] == doctest::Approx(4e-3 / std::sqrt(2.25e-5)).epsilon(1e-6));
  }

  TEST_CASE("rope at absolute positions: (1, 0) turns by pos * base^(-2i/n_rot) radians") {
    // Hand-computed angles; position 0 is the identity, position 1 is one radian for pair 0.
    const int64_t HD = 4;
    std::vector<int32_t> pos = {0, 1, 2, 100};
    std::vector<float> x;
    for (size_t t = 0; t < pos.size(); ++t) x.insert(x.end(), {1.0f, 0.0f, 1.0f, 0.0f});
    rope(x.data(), 4, 1, HD, HD, pos.data(), 10000.0f);
    const double f1 = 0.01;  // 10000^(-2/4)
    for (size_t t = 0; t < pos.size(); ++t) {
      CAPTURE(pos[t]);
      CHECK(x[t * 4 + 0] == doctest::Approx(std::cos(pos[t] * 1.0)).epsilon(1e-6));
      CHECK(x[t * 4 + 1] == doctest::Approx(std::sin(pos[t] * 1.0)).epsilon(1e-6));
      CHECK(x[t * 4 + 2] == doctest::Approx(std::cos(pos[t] * f1)).epsilon(1e-6));
      CHECK(x[t * 4 + 3] == doctest::Approx(std::sin(pos[t] * f1)).epsilon(1e-6));
    }
    CHECK(x[0] == 1.0f);
    CHECK(x[1] == 0.0f);
    CHECK(x[2] == 1.0f);
    CHECK(x[3] == 0.0f);
  }

  TEST_CASE("rope rotates adjacent pairs (llama.cpp normal layout)") {
    const int64_t T = 5, H = 3, HD = 8, n_rot = 8;
    auto x = randv(static_cast<size_t>(T * H * HD), 7);
    std::vector<int32_t> pos = {0, 1, 17, 300, 2047};
    std::vector<double> ref(x.size());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < HD / 2; ++i) {
          const double th = pos[size_t(t)] * std::pow(10000.0, -2.0 * i / n_rot);
          const size_t o = size_t((t * H + h) * HD + 2 * i);
          ref[o] = x[o] * std::cos(th) - x[o + 1] * std::sin(th);
          ref[o + 1] = x[o] * std::sin(th) + x[o + 1] * std::cos(th);
        }
    // position 0 is the identity: hand-checked
    std::vector<float> x0(x.begin(), x.begin() + H * HD);
    rope(x.data(), T, H, HD, n_rot, pos.data(), 10000.0f);
    for (size_t i = 0; i < x0.size(); ++i) CHECK(x[i] == x0[i]);
    check_close(x, ref, 1e-5);
  }

  TEST_CASE("rope with n_rot < head_dim leaves the tail alone") {
    const int64_t HD = 6;
    std::vector<float> x = {1, 0, 0, 1, 5, 6};
    int32_t p = 1;
    rope(x.data(), 1, 1, HD, 4, &p, 10000.0f);
    // pair 0: theta = 1 rad; pair 1: theta = 1 * 10000^(-2/4) = 0.01 rad
    CHECK(x[0] == doctest::Approx(std::cos(1.0)).epsilon(1e-6));
    CHECK(x[1] == doctest::Approx(std::sin(1.0)).epsilon(1e-6));
    CHECK(x[2] == doctest::Approx(-std::sin(0.01)).epsilon(1e-6));
    CHECK(x[3] == doctest::Approx(std::cos(0.01)).epsilon(1e-6));
    CHECK(x[4] == 5.0f);
    CHECK(x[5] == 6.0f);
  }

  TEST_CASE("rope from a RopeTable is bit-identical to rope, NORM and NEOX, with frequency factors and strides") {
    const int64_t T = 5, H = 3, HD = 8, stride = H * HD + 4;
    const std::vector<int32_t> pos = {0, 7, 3, 1000, 12};
    const std::vector<float> factors = {1.0f, 2.5f, 8.0f};
    for (bool neox : {false, true}) {
      RopeParams p;
      p.n_rot = 6;
      p.freq_base = 500000.0f;
      p.freq_scale = 0.25f;
      p.freq_factors = factors.data();
      p.neox = neox;
      auto a = randv(static_cast<size_t>(T * stride), 11), b = a;
      rope(a.data(), T, H, HD, pos.data(), p, stride);
      RopeTable t;
      rope_table(pos.data(), T, p, t);
      rope(b.data(), H, HD, t, stride);
      for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == b[i]);
      // the rotation did something: token 1 (position 7) changed
      auto c = randv(static_cast<size_t>(T * stride), 11);
      CHECK(c[static_cast<size_t>(stride)] != a[static_cast<size_t>(stride)]);
    }
    RopeTable t;
    RopeParams p;
    p.n_rot = 10;
    rope_table(pos.data(), T, p, t);
    std::vector<float> x(static_cast<size_t>(T * H * HD));
    CHECK_THROWS_AS(rope(x.data(), H, HD, t), ArgumentError);  // n_rot 10 > head_dim 8
  }

  TEST_CASE("rope's attn_factor scales the rotated dimensions only (NEOX, 4 of 6 rotated)") {
    // head [1, 2, 3, 4, 5, 6] at position 1, base 10000, n_rot 4: pairs (0, 2) by 1 rad and (1, 3) by 0.01 rad,
    // cos and sin times 1.5; dimensions 4 and 5 pass through
    const std::vector<int32_t> pos = {1};
    RopeParams p;
    p.n_rot = 4;
    p.neox = true;
    p.attn_factor = 1.5f;
    std::vector<float> x = {1, 2, 3, 4, 5, 6};
    rope(x.data(), 1, 1, 6, pos.data(), p);
    const double c0 = std::cos(1.0), s0 = std::sin(1.0), c1 = std::cos(0.01), s1 = std::sin(0.01);
    check_close(x, {1.5 * (1 * c0 - 3 * s0), 1.5 * (2 * c1 - 4 * s1), 1.5 * (1 * s0 + 3 * c0), 1.5 * (2 * s1 + 4 * c1), 5, 6},
                1e-6);
    RopeTable t;
    rope_table(pos.data(), 1, p, t);
    std::vector<float> y = {1, 2, 3, 4, 5, 6};
    rope(y.data(), 1, 6, t);
    CHECK(y == x);
  }

  TEST_CASE("swiglu_fused matches silu(g) * u on [gate | up] rows") {
    // rows: [g0 g1 | u0 u1]
    std::vector<float> gu = {-3.0f, 0.0f, 2.0f, 5.0f, 1.0f, 2.5f, -1.0f, 0.5f}, out(4);
    std::vector<double> ref;
    for (int r = 0; r < 2; ++r)
      for (int i = 0; i < 2; ++i) {
        const double g = gu[size_t(r * 4 + i)], u = gu[size_t(r * 4 + 2 + i)];
        ref.push_back(g / (1.0 + std::exp(-g)) * u);
      }
    swiglu_fused(gu.data(), out.data(), 2, 2);
    check_close(out, ref, 1e-6);
    CHECK(out[1] == 0.0f);  // silu(0) = 0, hand-checked
  }

  TEST_CASE("attention: causal GQA with odd sizes matches naive, contiguous and strided K/V") {
    // head_dim 16-128 in steps of 16 take the AVX-512 head kernel where the CPU
    // has it: 16-position score blocks (past + i + 1 = 1, 16, 17, 31, 48, 103
    // positions: one partial block, full blocks, both), odd and even position
    // counts for the two V accumulators; 144 falls back to the loop.
    for (auto [n_head, n_kv, hd, past, nq] :
         {std::tuple{8, 4, 8, 0, 7}, std::tuple{6, 2, 5, 3, 4}, std::tuple{4, 4, 16, 11, 1}, std::tuple{3, 1, 3, 0, 1},
          std::tuple{4, 4, 64, 0, 1}, std::tuple{8, 2, 48, 15, 2}, std::tuple{4, 1, 128, 30, 1},
          std::tuple{2, 2, 16, 47, 1}, std::tuple{3, 3, 112, 100, 3}, std::tuple{2, 1, 144, 5, 1},
          std::tuple{4, 2, 32, 9, 13}}) {
      CAPTURE(n_head); CAPTURE(n_kv); CAPTURE(hd); CAPTURE(past); CAPTURE(nq);
      const int64_t n_ctx = past + nq;
      auto q = randv(size_t(nq * n_head * hd), 11, 2.0f);
      // Strided layout like the cache: [head][pos][d] with extra capacity.
      const int64_t cap = n_ctx + 3;
      auto k = randv(size_t(n_kv * cap * hd), 12, 2.0f);
      auto v = randv(size_t(n_kv * cap * hd), 13, 2.0f);
      KvView view{k.data(), v.data(), hd, cap * hd};
      std::vector<float> out(q.size());
      attention(q.data(), view, out.data(), nq, past, n_head, n_kv, hd);
      auto ref = naive_attention(q, n_head * hd, k, v, cap, nq, past, n_head, n_kv, hd);
      check_close(out, ref, 1e-5);

      // Same values in the packed [pos][kv_head][d] layout give the same output.
      std::vector<float> kp(size_t(n_ctx * n_kv * hd)), vp(kp.size());
      for (int64_t p = 0; p < n_ctx; ++p)
        for (int64_t h = 0; h < n_kv; ++h)
          for (int64_t e = 0; e < hd; ++e) {
            kp[size_t((p * n_kv + h) * hd + e)] = k[size_t((h * cap + p) * hd + e)];
            vp[size_t((p * n_kv + h) * hd + e)] = v[size_t((h * cap + p) * hd + e)];
          }
      std::vector<float> out2(q.size());
      attention(q.data(), KvView{kp.data(), vp.data(), n_kv * hd, hd}, out2.data(), nq, past, n_head, n_kv, hd);
      for (size_t i = 0; i < out.size(); ++i) CHECK(out2[i] == out[i]);
    }
  }

  TEST_CASE("attention over several sequences in one loop: naive values, bit-identical to one call per sequence") {
    // A decode step of 5 rows with their own caches (different lengths, one row
    // with 3 queries, one with none), GQA 6/2 heads of 8, strided queries.
    const int64_t n_head = 6, n_kv = 2, hd = 8, qs = n_head * hd + 2 * n_kv * hd;
    const std::vector<std::pair<int64_t, int64_t>> rows = {{0, 1}, {17, 1}, {4, 3}, {40, 1}, {9, 0}};  // (past, n_q)
    std::vector<std::vector<float>> q, k, v, out, single;
    std::vector<int64_t> caps;
    std::vector<AttentionSeq> seqs;
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto [past, nq] = rows[r];
      const int64_t cap = past + nq + 2;
      caps.push_back(cap);
      q.push_back(randv(size_t(std::max<int64_t>(nq, 1) * qs), 41 + uint32_t(r), 2.0f));
      k.push_back(randv(size_t(n_kv * cap * hd), 51 + uint32_t(r), 2.0f));
      v.push_back(randv(size_t(n_kv * cap * hd), 61 + uint32_t(r), 2.0f));
      out.emplace_back(size_t(std::max<int64_t>(nq, 1) * n_head * hd), -7.0f);
      single.emplace_back(out.back().size(), -7.0f);
    }
    for (size_t r = 0; r < rows.size(); ++r)
      seqs.push_back({q[r].data(), KvView{k[r].data(), v[r].data(), hd, caps[r] * hd}, out[r].data(), rows[r].second,
                      rows[r].first});
    attention(seqs, n_head, n_kv, hd, qs);
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto [past, nq] = rows[r];
      CAPTURE(r);
      if (nq == 0) {  // no queries: output untouched
        CHECK(out[r][0] == -7.0f);
        continue;
      }
      attention(q[r].data(), seqs[r].kv, single[r].data(), nq, past, n_head, n_kv, hd, qs);
      for (size_t i = 0; i < out[r].size(); ++i) REQUIRE(out[r][i] == single[r][i]);
      check_close(out[r], naive_attention(q[r], qs, k[r], v[r], caps[r], nq, past, n_head, n_kv, hd), 1e-5);
    }
    attention(std::span<const AttentionSeq>{}, n_head, n_kv, hd, qs);  // no sequences: nothing to do
  }

  TEST_CASE("attention_uses_loop: short blocks, narrow heads, and up to 64 queries without a cached prefix on AVX-512") {
    CHECK(attention_uses_loop(15, 500, 64));  // decode steps and short chunks: always the loop
    CHECK(attention_uses_loop(200, 0, 16));   // narrow heads: always the loop
    CHECK_FALSE(attention_uses_loop(65, 0, 64));
    CHECK_FALSE(attention_uses_loop(16, 1, 64));   // a cached prefix: the matmuls
    CHECK_FALSE(attention_uses_loop(16, 0, 33));   // no head kernel for 33
    CHECK_FALSE(attention_uses_loop(16, 0, 144));  // nor above 128
    const bool avx512 = kernel_isa() == KernelIsa::Avx512;
    CHECK(attention_uses_loop(16, 0, 64) == avx512);
    CHECK(attention_uses_loop(64, 0, 128) == avx512);
    CHECK(attention_uses_loop(40, 0, 48) == avx512);
  }

  TEST_CASE("attention through oneDNN batched matmuls matches naive (long blocks, GQA, odd sizes, both layouts)") {
    Engine eng(2);
    Buffer scratch;
    // Every block here takes the matmuls (attention_uses_loop false): over 64 queries, a cached prefix, or head_dim 33.
    for (auto [n_head, n_kv, hd, past, nq] : {std::tuple{8, 4, 32, 0, 80}, std::tuple{6, 2, 33, 13, 16},
                                             std::tuple{4, 4, 48, 1, 64}, std::tuple{32, 4, 64, 3, 20},
                                             std::tuple{4, 2, 32, 5, 300}}) {  // 300: causal blocks of 128
      CAPTURE(n_head); CAPTURE(n_kv); CAPTURE(hd); CAPTURE(past); CAPTURE(nq);
      REQUIRE_FALSE(attention_uses_loop(nq, past, hd));
      const int64_t n_ctx = past + nq, cap = n_ctx + 5;
      const int64_t qs = n_head * hd + 3;  // strided queries, like rows of a fused qkv buffer
      auto q = randv(size_t(nq * qs), 31, 2.0f);
      auto k = randv(size_t(n_kv * cap * hd), 32, 2.0f);
      auto v = randv(size_t(n_kv * cap * hd), 33, 2.0f);
      KvView view{k.data(), v.data(), hd, cap * hd};
      std::vector<float> fast(size_t(nq * n_head * hd)), slow(fast.size());
      attention(eng, q.data(), view, fast.data(), nq, past, n_head, n_kv, hd, qs, scratch);
      attention(q.data(), view, slow.data(), nq, past, n_head, n_kv, hd, qs);
      auto ref = naive_attention(q, qs, k, v, cap, nq, past, n_head, n_kv, hd);
      check_close(fast, ref, 1e-5);
      check_close(slow, ref, 1e-5);
    }
    const auto n = eng.primitives_created();
    std::vector<float> q(64 * 8 * 32, 0.1f), kv(65 * 4 * 32, 0.2f), o(64 * 8 * 32);
    attention(eng, q.data(), KvView{kv.data(), kv.data(), 128, 32}, o.data(), 64, 1, 8, 4, 32, 0, scratch);
    CHECK(eng.primitives_created() == n);  // runtime dims: no new primitive for a new shape
  }

  TEST_CASE("attention over bf16 and f16 K/V equals attention over their f32 widening, bit for bit, on every path") {
    // A bf16 or f16 KV cache is widened exactly as it is read, so its attention
    // must be the f32 attention of the widened values: the loop (head_dim 8, 5,
    // 144), the AVX-512 head kernel (16-128; f16 through vcvtph2ps), several
    // sequences in one loop, and the oneDNN matmuls (their K and V widened into
    // scratch first). Every 97th value is scaled by 2^-20: an f16 subnormal.
    auto round_trip = [](Dtype dt, std::vector<float> x, std::vector<uint16_t>& h, std::vector<float>& w) {
      h.resize(x.size());
      w.resize(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        if (i % 97 == 0) x[i] = std::ldexp(x[i], -20);
        h[i] = dt == Dtype::F16 ? util::f32_to_f16(x[i]) : f32_to_bf16(x[i]);
        w[i] = dt == Dtype::F16 ? util::f16_to_f32(h[i]) : bf16_to_f32(h[i]);
      }
    };
    Engine eng(2);
    Buffer scratch;
    for (Dtype dt : {Dtype::BF16, Dtype::F16})
    for (auto [n_head, n_kv, hd, past, nq] :
         {std::tuple{8, 4, 8, 0, 7}, std::tuple{6, 2, 5, 3, 4}, std::tuple{4, 4, 16, 11, 1}, std::tuple{4, 4, 64, 0, 1},
          std::tuple{8, 2, 48, 15, 2}, std::tuple{4, 1, 128, 30, 1}, std::tuple{3, 3, 112, 100, 3},
          std::tuple{2, 1, 144, 5, 1}, std::tuple{8, 4, 32, 0, 80}, std::tuple{6, 2, 33, 13, 16},
          std::tuple{32, 4, 64, 3, 20}, std::tuple{4, 2, 32, 5, 300}}) {
      const std::string dname = to_string(dt);
      CAPTURE(dname); CAPTURE(n_head); CAPTURE(n_kv); CAPTURE(hd); CAPTURE(past); CAPTURE(nq);
      const int64_t n_ctx = past + nq, cap = n_ctx + 3, qs = n_head * hd;
      auto q = randv(size_t(nq * qs), 71, 2.0f);
      std::vector<uint16_t> k16, v16;
      std::vector<float> kw, vw;
      round_trip(dt, randv(size_t(n_kv * cap * hd), 72, 2.0f), k16, kw);
      round_trip(dt, randv(size_t(n_kv * cap * hd), 73, 2.0f), v16, vw);
      const KvView f32{kw.data(), vw.data(), hd, cap * hd};
      const KvView b16{k16.data(), v16.data(), hd, cap * hd, dt};
      std::vector<float> a(size_t(nq * n_head * hd)), b(a.size());
      attention(q.data(), f32, a.data(), nq, past, n_head, n_kv, hd);  // the loop / head kernel
      attention(q.data(), b16, b.data(), nq, past, n_head, n_kv, hd);
      for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == b[i]);
      check_close(b, naive_attention(q, qs, kw, vw, cap, nq, past, n_head, n_kv, hd), 1e-5);
      attention(eng, q.data(), f32, a.data(), nq, past, n_head, n_kv, hd, qs, scratch);  // oneDNN where it applies
      attention(eng, q.data(), b16, b.data(), nq, past, n_head, n_kv, hd, qs, scratch);
      for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == b[i]);
      // Several sequences, one of them 16-bit, in one loop: each as its own call.
      if (nq <= 4) {
        std::vector<float> c(a.size()), d(a.size());
        const AttentionSeq two[] = {{q.data(), f32, c.data(), nq, past}, {q.data(), b16, d.data(), nq, past}};
        attention(std::span<const AttentionSeq>(two), n_head, n_kv, hd);
        attention(q.data(), f32, a.data(), nq, past, n_head, n_kv, hd);
        for (size_t i = 0; i < a.size(); ++i) REQUIRE((c[i] == a[i] && d[i] == a[i]));
      }
    }
    std::vector<float> q(64, 0.1f), kv(64, 0.2f), o(64);
    CHECK_THROWS_AS(attention(q.data(), KvView{kv.data(), kv.data(), 16, 16, Dtype::Q8_0}, o.data(), 1, 0, 4, 4, 16),
                    ArgumentError);
  }

  TEST_CASE("fused forms equal the separate ones: stacked weights, strided rope and attention") {
    Engine eng(1);
    auto a = randv(3 * 5, 21), b = randv(2 * 5, 22);
    Weight A(a, 3, 5), B(b, 2, 5);
    Weight AB(5, 5);
    AB.set_rows(0, a.data(), 3);
    AB.set_rows(3, b.data(), 2);
    CHECK(AB.ld() == 5);
    CHECK(AB.data()[0 * 5 + 3] == b[0]);  // Wᵀ layout: (k = 0, n = 3) is row 0 of b, column 0
    CHECK(AB.data()[1 * 5 + 0] == a[1]);  // (k = 1, n = 0) is row 0 of a, column 1
    CHECK(Weight(1024, 3).ld() == 1040);  // 4 KiB rows are padded
    CHECK(Weight(1000, 3).ld() == 1000);
    CHECK(AB.n_out() == 5);
    CHECK(AB.n_in() == 5);
    auto x = randv(4 * 5, 23);
    std::vector<float> ya(4 * 3), yb(4 * 2), yab(4 * 5);
    matmul(eng, x.data(), 4, A, ya.data());
    matmul(eng, x.data(), 4, B, yb.data());
    matmul(eng, x.data(), 4, AB, yab.data());
    for (int r = 0; r < 4; ++r) {
      for (int j = 0; j < 3; ++j) CHECK(yab[size_t(r * 5 + j)] == doctest::Approx(ya[size_t(r * 3 + j)]).epsilon(1e-6));
      for (int j = 0; j < 2; ++j) CHECK(yab[size_t(r * 5 + 3 + j)] == doctest::Approx(yb[size_t(r * 2 + j)]).epsilon(1e-6));
    }
    CHECK_THROWS_AS(AB.set_rows(4, a.data(), 3), ArgumentError);

    // strided rope/attention (rows of a fused qkv buffer) equal the contiguous ones
    const int64_t T = 3, H = 2, HD = 4, QS = 11;
    auto packed = randv(size_t(T * QS), 26);
    std::vector<float> contig;
    for (int64_t t = 0; t < T; ++t) contig.insert(contig.end(), packed.begin() + t * QS, packed.begin() + t * QS + H * HD);
    std::vector<int32_t> pos = {0, 5, 9};
    rope(packed.data(), T, H, HD, HD, pos.data(), 10000.0f, QS);
    rope(contig.data(), T, H, HD, HD, pos.data(), 10000.0f);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < H * HD; ++i) CHECK(packed[size_t(t * QS + i)] == contig[size_t(t * H * HD + i)]);
    auto kv = randv(size_t(T * H * HD), 27);
    KvView view{kv.data(), kv.data(), H * HD, HD};
    std::vector<float> o1(size_t(T * H * HD)), o2(o1.size());
    attention(packed.data(), view, o1.data(), T, 0, H, H, HD, QS);
    attention(contig.data(), view, o2.data(), T, 0, H, H, HD);
    CHECK(o1 == o2);
  }

  TEST_CASE("Buffer grows only when needed") {
    Buffer b;
    CHECK(b.reserve(10));
    CHECK_FALSE(b.reserve(5));
    CHECK(b.capacity() == 10);
    CHECK(b.reserve(11));
  }
}
