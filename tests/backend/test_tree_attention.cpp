// The token-tree mask (backend::TreeMask in AttentionOptions): every attention
// path against a naive double-precision attention over each query's visible
// keys (the trunk and its own branch), and a branch's bits equal to the same
// tokens attended as one causal sequence.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/kernel_isa.hpp"
#include "backend/random_values.hpp"

using namespace kveval;
using namespace kveval::backend;

namespace {

using kveval::test::randv;

/// A tree block: q [n, n_head, hd]; k, v [n, n_kv, hd] (block index major, as
/// in a cache-free pass); trunk then branches of `lens`.
struct Block {
  int64_t n_head, n_kv, hd, trunk;
  std::vector<int64_t> starts;
  int64_t n = 0;
  std::vector<float> q, k, v;
  Block(int64_t nh, int64_t nkv, int64_t d, int64_t t, const std::vector<int64_t>& lens, uint32_t seed)
      : n_head(nh), n_kv(nkv), hd(d), trunk(t), n(t) {
    for (int64_t l : lens) {
      starts.push_back(n);
      n += l;
    }
    q = randv(size_t(n * nh * d), seed, 2.0f);
    k = randv(size_t(n * nkv * d), seed + 1, 2.0f);
    v = randv(size_t(n * nkv * d), seed + 2, 2.0f);
  }
  KvView view() const { return KvView{k.data(), v.data(), n_kv * hd, hd}; }
  /// Block indices query t sees, in position order, and its position.
  std::vector<int64_t> visible(int64_t t, int64_t window, int64_t& pos) const {
    int64_t start = -1;
    for (int64_t s : starts)
      if (t >= s) start = s;
    pos = t < trunk ? t : trunk + (t - start);
    std::vector<int64_t> out;
    for (int64_t p = 0; p <= pos; ++p) {
      if (window > 0 && pos - p >= window) continue;
      out.push_back(p < trunk || t < trunk ? p : start + (p - trunk));
    }
    return out;
  }
};

/// Naive double attention of every query of `b` over the keys it sees.
std::vector<double> naive_tree(const Block& b, double scale, double softcap, int64_t window) {
  std::vector<double> ref(size_t(b.n * b.n_head * b.hd));
  for (int64_t t = 0; t < b.n; ++t) {
    int64_t pos = 0;
    const std::vector<int64_t> keys = b.visible(t, window, pos);
    for (int64_t h = 0; h < b.n_head; ++h) {
      const int64_t hk = h / (b.n_head / b.n_kv);
      std::vector<double> s;
      double mx = -1e300;
      for (int64_t p : keys) {
        double d = 0;
        for (int64_t e = 0; e < b.hd; ++e)
          d += double(b.q[size_t((t * b.n_head + h) * b.hd + e)]) * b.k[size_t((p * b.n_kv + hk) * b.hd + e)];
        d *= scale;
        if (softcap > 0) d = softcap * std::tanh(d / softcap);
        s.push_back(d);
        mx = std::max(mx, d);
      }
      double sum = 0;
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (int64_t e = 0; e < b.hd; ++e) {
        double o = 0;
        for (size_t j = 0; j < keys.size(); ++j) o += s[j] / sum * b.v[size_t((keys[j] * b.n_kv + hk) * b.hd + e)];
        ref[size_t((t * b.n_head + h) * b.hd + e)] = o;
      }
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
  const char* path;  // the path of the trunk: oneDNN matmuls (long trunk), the AVX-512 head kernel, the scalar loop
  int64_t n_head, n_kv, hd, trunk;
};
const Case kCases[] = {{"onednn", 4, 2, 32, 80}, {"heads", 4, 2, 32, 20}, {"loop", 4, 2, 24, 20}, {"loop", 3, 1, 8, 9}};
// Branches: one token, a longer one crossing a 16-position block, identical lengths.
const std::vector<int64_t> kLens = {1, 5, 18, 5};

/// Runs the engine attention and the loop attention with the tree mask and
/// checks both against naive_tree; returns the engine's output.
std::vector<float> check_case(const Case& c, AttentionOptions opts, uint32_t seed) {
  const Block b(c.n_head, c.n_kv, c.hd, c.trunk, kLens, seed);
  const TreeMask tree{b.trunk, b.starts};
  opts.tree = &tree;
  const double scale = opts.scale != 0 ? opts.scale : 1.0 / std::sqrt(double(c.hd));
  const auto ref = naive_tree(b, scale, opts.softcap, opts.window);
  Engine eng(2);
  Buffer scratch;
  std::vector<float> out(b.q.size()), loop(b.q.size());
  attention(eng, b.q.data(), b.view(), out.data(), b.n, 0, c.n_head, c.n_kv, c.hd, 0, scratch, opts);
  CHECK(worst_error(out, ref) <= 2e-5);
  attention(b.q.data(), b.view(), loop.data(), b.n, 0, c.n_head, c.n_kv, c.hd, 0, opts);
  CHECK(worst_error(loop, ref) <= 2e-5);
  return out;
}

}  // namespace

TEST_SUITE("backend.tree_attention") {
  TEST_CASE("a tree block on every path matches naive double attention over the trunk and the own branch") {
    for (const Case& c : kCases) {
      CAPTURE(c.path); CAPTURE(c.hd); CAPTURE(c.trunk);
      check_case(c, AttentionOptions{}, 7);
      check_case(c, AttentionOptions{0.3f, 1.5f, 0}, 8);
      check_case(c, AttentionOptions{0.0f, 0.0f, 7}, 9);  // a window shorter than trunk + branch
    }
  }

  TEST_CASE("a sibling's keys change nothing: the reference without the tree mask differs") {
    const Case c{"heads", 4, 2, 32, 20};
    const Block b(c.n_head, c.n_kv, c.hd, c.trunk, kLens, 5);
    const TreeMask tree{b.trunk, b.starts};
    AttentionOptions opts;
    opts.tree = &tree;
    Engine eng(2);
    Buffer scratch;
    std::vector<float> masked(b.q.size()), causal(b.q.size());
    attention(eng, b.q.data(), b.view(), masked.data(), b.n, 0, c.n_head, c.n_kv, c.hd, 0, scratch, opts);
    attention(eng, b.q.data(), b.view(), causal.data(), b.n, 0, c.n_head, c.n_kv, c.hd, 0, scratch);
    // The trunk and the first branch see the same keys either way; later branches do not.
    const size_t row = size_t(c.n_head * c.hd);
    const size_t first_branch_end = size_t(b.starts[1]) * row;
    // bit for bit where the AVX-512 head kernel runs both; elsewhere the causal block takes oneDNN's matmuls
    if (kernel_isa() == KernelIsa::Avx512) {
      CHECK(std::memcmp(masked.data(), causal.data(), first_branch_end * sizeof(float)) == 0);
    } else {
      double same = 0;
      for (size_t i = 0; i < first_branch_end; ++i) same = std::max(same, double(std::abs(masked[i] - causal[i])));
      CHECK(same < 1e-5);
    }
    double diff = 0;
    for (size_t i = first_branch_end; i < masked.size(); ++i) diff = std::max(diff, double(std::abs(masked[i] - causal[i])));
    CHECK(diff > 1e-3);
  }

  TEST_CASE("each branch has the bits of trunk + branch attended alone as one causal sequence (loop paths)") {
    for (const Case& c : kCases) {
      if (std::string(c.path) == "onednn") continue;  // a long causal block takes the matmuls, not the loop
      CAPTURE(c.path); CAPTURE(c.hd);
      const Block b(c.n_head, c.n_kv, c.hd, c.trunk, kLens, 11);
      const TreeMask tree{b.trunk, b.starts};
      AttentionOptions opts{0.0f, 1.0f, 0};
      opts.tree = &tree;
      std::vector<float> out(b.q.size());
      attention(b.q.data(), b.view(), out.data(), b.n, 0, c.n_head, c.n_kv, c.hd, 0, opts);
      const size_t row = size_t(c.n_head * c.hd), kvrow = size_t(c.n_kv * c.hd);
      for (size_t br = 0; br < b.starts.size(); ++br) {
        CAPTURE(br);
        const int64_t len = kLens[br], n = b.trunk + len;
        std::vector<float> q(b.q.begin(), b.q.begin() + b.trunk * int64_t(row));
        std::vector<float> k(b.k.begin(), b.k.begin() + b.trunk * int64_t(kvrow));
        std::vector<float> v(b.v.begin(), b.v.begin() + b.trunk * int64_t(kvrow));
        const int64_t s = b.starts[br];
        q.insert(q.end(), b.q.begin() + s * int64_t(row), b.q.begin() + (s + len) * int64_t(row));
        k.insert(k.end(), b.k.begin() + s * int64_t(kvrow), b.k.begin() + (s + len) * int64_t(kvrow));
        v.insert(v.end(), b.v.begin() + s * int64_t(kvrow), b.v.begin() + (s + len) * int64_t(kvrow));
        std::vector<float> alone(q.size());
        attention(q.data(), KvView{k.data(), v.data(), c.n_kv * c.hd, c.hd}, alone.data(), n, 0, c.n_head, c.n_kv,
                  c.hd, 0, AttentionOptions{0.0f, 1.0f, 0});
        CHECK(std::memcmp(alone.data() + b.trunk * int64_t(row), out.data() + s * int64_t(row),
                          size_t(len) * row * sizeof(float)) == 0);
      }
    }
  }

  TEST_CASE("a tree that does not fit its block is refused") {
    const Block b(4, 2, 32, 10, {3, 2}, 3);
    std::vector<int64_t> bad = {11, 13};  // the first branch must start at the trunk's end
    const TreeMask tree{b.trunk, bad};
    AttentionOptions opts;
    opts.tree = &tree;
    std::vector<float> out(b.q.size());
    CHECK_THROWS(attention(b.q.data(), b.view(), out.data(), b.n, 0, 4, 2, 32, 0, opts));
  }
}
