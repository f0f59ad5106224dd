// The attention options (backend::AttentionOptions: scale, soft-cap, sliding
// window) on every attention path against a naive double-precision attention:
// the oneDNN batched matmuls (long blocks, cached prefixes), the AVX-512 head
// kernel (head_dim a multiple of 16, short blocks) and the position-major loop
// (other head sizes), each cached (past > 0) and uncached.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/kernel_isa.hpp"
#include "backend/random_values.hpp"

using namespace kveval;
using namespace kveval::backend;

namespace {

using kveval::test::randv;

/// Attention in double: q [nq, n_head, hd], k/v [n_kv][cap][hd]; query i (at
/// position past + i) sees positions [max(0, past + i + 1 - window), past + i]
/// (all earlier ones for window 0); score = c tanh(scale q·k / c) (scale q·k for c = 0).
std::vector<double> naive(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                          int64_t cap, int64_t nq, int64_t past, int64_t n_head, int64_t n_kv, int64_t hd, double scale,
                          double cap_c, int64_t window) {
  std::vector<double> ref(static_cast<size_t>(nq * n_head * hd));
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t hk = h / (n_head / n_kv), pos = past + i;
      const int64_t first = window > 0 ? std::max<int64_t>(0, pos + 1 - window) : 0;
      std::vector<double> s;
      double mx = -1e300;
      for (int64_t p = first; p <= pos; ++p) {
        double d = 0;
        for (int64_t e = 0; e < hd; ++e) d += double(q[size_t((i * n_head + h) * hd + e)]) * k[size_t((hk * cap + p) * hd + e)];
        d *= scale;
        if (cap_c > 0) d = cap_c * std::tanh(d / cap_c);
        s.push_back(d);
        mx = std::max(mx, d);
      }
      double sum = 0;
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (int64_t e = 0; e < hd; ++e) {
        double o = 0;
        for (int64_t p = first; p <= pos; ++p) o += s[size_t(p - first)] / sum * v[size_t((hk * cap + p) * hd + e)];
        ref[size_t((i * n_head + h) * hd + e)] = o;
      }
    }
  return ref;
}

double worst_error(const std::vector<float>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  return worst;
}

struct Case {
  const char* path;  // which path the sizes select (on AVX-512 for "heads")
  int64_t n_head, n_kv, hd, past, nq;
};

// Sizes that select each path: the oneDNN matmuls (> 64 queries, or a cached
// prefix with >= 16 queries and head_dim >= 32), the AVX-512 head kernel
// (head_dim a multiple of 16: short blocks, or up to 64 uncached queries),
// the scalar loop (head_dim 24 or 8).
const Case kCases[] = {
    {"onednn", 4, 2, 32, 0, 80},  {"onednn", 4, 2, 32, 21, 20}, {"onednn", 2, 1, 40, 3, 150},
    {"heads", 4, 2, 32, 0, 40},   {"heads", 4, 2, 32, 37, 1},   {"heads", 2, 2, 48, 20, 5},
    {"loop", 4, 2, 24, 0, 30},    {"loop", 4, 2, 24, 33, 2},    {"loop", 3, 1, 8, 9, 7},
};

void check_path(const Case& c, const AttentionOptions& opts) {
  const std::string path = c.path;
  CAPTURE(path); CAPTURE(c.n_head); CAPTURE(c.hd); CAPTURE(c.past); CAPTURE(c.nq);
  CAPTURE(opts.scale); CAPTURE(opts.softcap); CAPTURE(opts.window);
  if (path == "onednn") REQUIRE_FALSE(attention_uses_loop(c.nq, c.past, c.hd));
  if (path == "heads" && kernel_isa() == KernelIsa::Avx512) REQUIRE(attention_uses_loop(c.nq, c.past, c.hd));
  const int64_t cap = c.past + c.nq + 2;
  auto q = randv(size_t(c.nq * c.n_head * c.hd), 21, 2.0f);
  auto k = randv(size_t(c.n_kv * cap * c.hd), 22, 2.0f);
  auto v = randv(size_t(c.n_kv * cap * c.hd), 23, 2.0f);
  const KvView view{k.data(), v.data(), c.hd, cap * c.hd};
  const double scale = opts.scale != 0 ? opts.scale : 1.0 / std::sqrt(double(c.hd));
  const auto ref = naive(q, k, v, cap, c.nq, c.past, c.n_head, c.n_kv, c.hd, scale, opts.softcap, opts.window);
  Engine eng(2);
  Buffer scratch;
  std::vector<float> out(q.size());
  attention(eng, q.data(), view, out.data(), c.nq, c.past, c.n_head, c.n_kv, c.hd, 0, scratch, opts);
  CHECK(worst_error(out, ref) <= 2e-5);
  // The loop attention (one sequence) gives the same values.
  std::vector<float> loop(q.size());
  attention(q.data(), view, loop.data(), c.nq, c.past, c.n_head, c.n_kv, c.hd, 0, opts);
  CHECK(worst_error(loop, ref) <= 2e-5);
  // Negative control: the plain attention differs by far more than the tolerance
  // (a window only where it is shorter than the sequence).
  if (opts.scale == 0 && opts.softcap == 0 && opts.window >= c.past + c.nq) return;
  const auto plain = naive(q, k, v, cap, c.nq, c.past, c.n_head, c.n_kv, c.hd, 1.0 / std::sqrt(double(c.hd)), 0, 0);
  std::vector<float> as_float(ref.begin(), ref.end());
  CHECK(worst_error(as_float, plain) > 1e-3);
}

}  // namespace

TEST_SUITE("backend.attention") {
  TEST_CASE("soft-capped scores on every path match naive double attention, cached and uncached") {
    for (const Case& c : kCases) check_path(c, AttentionOptions{0.0f, 1.5f, 0});
  }

  TEST_CASE("a sliding window shorter than the sequence on every path matches naive, cached and uncached") {
    // Windows across the 16-position score blocks of the head kernel.
    for (const Case& c : kCases)
      for (int64_t window : {1, 7, 16, 17}) check_path(c, AttentionOptions{0.0f, 0.0f, window});
  }

  TEST_CASE("scale, soft-cap and window together on every path match naive") {
    for (const Case& c : kCases) check_path(c, AttentionOptions{0.3f, 2.0f, 9});
  }

  TEST_CASE("a window covering every position and the default options give the plain attention's bits") {
    for (const Case& c : kCases) {
      const std::string path = c.path;
      CAPTURE(path); CAPTURE(c.hd); CAPTURE(c.nq);
      const int64_t cap = c.past + c.nq;
      auto q = randv(size_t(c.nq * c.n_head * c.hd), 31, 2.0f);
      auto k = randv(size_t(c.n_kv * cap * c.hd), 32, 2.0f);
      auto v = randv(size_t(c.n_kv * cap * c.hd), 33, 2.0f);
      const KvView view{k.data(), v.data(), c.hd, cap * c.hd};
      Engine eng(2);
      Buffer scratch;
      std::vector<float> plain(q.size()), wide(q.size()), scaled(q.size());
      attention(eng, q.data(), view, plain.data(), c.nq, c.past, c.n_head, c.n_kv, c.hd, 0, scratch);
      attention(eng, q.data(), view, wide.data(), c.nq, c.past, c.n_head, c.n_kv, c.hd, 0, scratch,
                AttentionOptions{0.0f, 0.0f, cap});
      const float default_scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
      attention(eng, q.data(), view, scaled.data(), c.nq, c.past, c.n_head, c.n_kv, c.hd, 0, scratch,
                AttentionOptions{default_scale, 0.0f, 0});
      for (size_t i = 0; i < plain.size(); ++i) {
        CHECK(wide[i] == plain[i]);
        CHECK(scaled[i] == plain[i]);
      }
      CHECK(worst_error(plain, naive(q, k, v, cap, c.nq, c.past, c.n_head, c.n_kv, c.hd,
                                     1.0 / std::sqrt(double(c.hd)), 0, 0)) <= 1e-5);
    }
  }

  TEST_CASE("several sequences in one loop call share the options: each as alone") {
    const int64_t n_head = 4, n_kv = 2, hd = 32, cap = 60;
    const int64_t pasts[3] = {40, 3, 0}, nqs[3] = {1, 2, 12};
    std::vector<std::vector<float>> q, k, v, out(3);
    std::vector<AttentionSeq> seqs;
    const AttentionOptions opts{0.0f, 1.0f, 5};
    for (int r = 0; r < 3; ++r) {
      q.push_back(randv(size_t(nqs[r] * n_head * hd), 40 + r, 2.0f));
      k.push_back(randv(size_t(n_kv * cap * hd), 50 + r, 2.0f));
      v.push_back(randv(size_t(n_kv * cap * hd), 60 + r, 2.0f));
    }
    for (int r = 0; r < 3; ++r) {
      out[size_t(r)].resize(q[size_t(r)].size());
      seqs.push_back({q[size_t(r)].data(), KvView{k[size_t(r)].data(), v[size_t(r)].data(), hd, cap * hd},
                      out[size_t(r)].data(), nqs[r], pasts[r]});
    }
    attention(seqs, n_head, n_kv, hd, 0, opts);
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      const auto ref = naive(q[size_t(r)], k[size_t(r)], v[size_t(r)], cap, nqs[r], pasts[r], n_head, n_kv, hd,
                             1.0 / std::sqrt(double(hd)), 1.0, 5);
      CHECK(worst_error(out[size_t(r)], ref) <= 2e-5);
    }
  }

  TEST_CASE("bf16 K/V under the options equal f32 K/V widened, bit for bit") {
    const int64_t n_head = 4, n_kv = 2, hd = 32, past = 30, nq = 20, cap = past + nq;
    auto q = randv(size_t(nq * n_head * hd), 71, 2.0f);
    auto k = randv(size_t(n_kv * cap * hd), 72, 2.0f);
    auto v = randv(size_t(n_kv * cap * hd), 73, 2.0f);
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    to_bf16(k.data(), k16.data(), k.size());
    to_bf16(v.data(), v16.data(), v.size());
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = bf16_to_f32(k16[i]);
      v[i] = bf16_to_f32(v16[i]);
    }
    const AttentionOptions opts{0.0f, 1.5f, 11};
    Engine eng(2);
    Buffer scratch;
    for (int64_t n : {nq, int64_t{1}}) {  // the matmuls, then a decode step (the loop)
      CAPTURE(n);
      const int64_t p0 = past + nq - n;
      std::vector<float> a(size_t(n * n_head * hd)), b(a.size());
      attention(eng, q.data(), KvView{k.data(), v.data(), hd, cap * hd}, a.data(), n, p0, n_head, n_kv, hd, 0, scratch,
                opts);
      attention(eng, q.data(), KvView{k16.data(), v16.data(), hd, cap * hd, Dtype::BF16}, b.data(), n, p0, n_head, n_kv,
                hd, 0, scratch, opts);
      for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == b[i]);
    }
  }
}
