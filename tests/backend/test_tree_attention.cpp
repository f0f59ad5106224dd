// The token-tree mask (backend::TreeMask in AttentionOptions): every attention
// path against a naive double-precision attention over each query's visible
// keys (its ancestors), and a node's bits equal to the same
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
/// in a cache-free pass); the trunk, then nodes with parents (TreeMask).
struct Block {
  int64_t n_head, n_kv, hd, trunk;
  std::vector<int64_t> parent, pos;  // of the nodes after the trunk
  int64_t n = 0;
  std::vector<float> q, k, v;
  /// Trunk t, then branches of `lens` tokens each hanging off the trunk's last token (a one-level tree).
  Block(int64_t nh, int64_t nkv, int64_t d, int64_t t, const std::vector<int64_t>& lens, uint32_t seed)
      : Block(nh, nkv, d, t, one_level(t, lens), seed, 0) {}
  /// Trunk t, then nodes whose parents are `par` (block indices, -1 for a root); the int tells the constructors apart.
  Block(int64_t nh, int64_t nkv, int64_t d, int64_t t, std::vector<int64_t> par, uint32_t seed, int)
      : n_head(nh), n_kv(nkv), hd(d), trunk(t), parent(std::move(par)), n(t + int64_t(parent.size())) {
    for (int64_t p : parent) pos.push_back(p < 0 ? 0 : (p < trunk ? p : pos[size_t(p - trunk)]) + 1);
    q = randv(size_t(n * nh * d), seed, 2.0f);
    k = randv(size_t(n * nkv * d), seed + 1, 2.0f);
    v = randv(size_t(n * nkv * d), seed + 2, 2.0f);
  }
  static std::vector<int64_t> one_level(int64_t t, const std::vector<int64_t>& lens) {
    std::vector<int64_t> par;
    for (int64_t l : lens)
      for (int64_t j = 0; j < l; ++j) par.push_back(j == 0 ? t - 1 : t + int64_t(par.size()) - 1);
    return par;
  }
  TreeMask mask() const { return TreeMask{trunk, parent, pos}; }
  KvView view() const { return KvView{k.data(), v.data(), n_kv * hd, hd}; }
  /// Block indices query t sees (its ancestors and itself), in position order, and its position.
  std::vector<int64_t> visible(int64_t t, int64_t window, int64_t& position) const {
    std::vector<int64_t> chain;
    for (int64_t r = t; r >= 0; r = r < trunk ? r - 1 : parent[size_t(r - trunk)]) chain.insert(chain.begin(), r);
    position = int64_t(chain.size()) - 1;
    std::vector<int64_t> out;
    for (int64_t p = 0; p <= position; ++p)
      if (window <= 0 || position - p < window) out.push_back(chain[size_t(p)]);
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
/// A trie after a trunk of `t`: a chain of 4 off the trunk's end, a branch of 3
/// off that chain's second node, a branch of 18 off the trunk's middle, a
/// one-node branch off the chain's last node, and a root of 2 tokens.
std::vector<int64_t> trie_parents(int64_t t) {
  std::vector<int64_t> par = {t - 1, t, t + 1, t + 2};  // nodes t .. t + 3
  par.insert(par.end(), {t + 1, t + 4, t + 5});          // nodes t + 4 .. t + 6
  par.push_back(t / 2);                                 // node t + 7, then 17 more below it
  for (int64_t j = 1; j < 18; ++j) par.push_back(t + 7 + j - 1);
  par.push_back(t + 3);                                 // node t + 25
  par.insert(par.end(), {-1, t + 26});                  // a root and its child
  return par;
}

/// Runs the engine attention and the loop attention with the tree mask and
/// checks both against naive_tree; returns the engine's output.
std::vector<float> check_case(const Case& c, AttentionOptions opts, uint32_t seed) {
  const Block b(c.n_head, c.n_kv, c.hd, c.trunk, kLens, seed);
  const TreeMask tree = b.mask();
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
    const TreeMask tree = b.mask();
    AttentionOptions opts;
    opts.tree = &tree;
    Engine eng(2);
    Buffer scratch;
    std::vector<float> masked(b.q.size()), causal(b.q.size());
    attention(eng, b.q.data(), b.view(), masked.data(), b.n, 0, c.n_head, c.n_kv, c.hd, 0, scratch, opts);
    attention(eng, b.q.data(), b.view(), causal.data(), b.n, 0, c.n_head, c.n_kv, c.hd, 0, scratch);
    // The trunk and the first branch see the same keys either way; later branches do not.
    const size_t row = size_t(c.n_head * c.hd);
    const size_t first_branch_end = size_t(b.trunk + kLens[0]) * row;
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

  TEST_CASE("each node has the bits of its ancestors attended alone as one causal sequence (loop paths)") {
    for (const Case& c : kCases) {
      if (std::string(c.path) == "onednn") continue;  // a long causal block takes the matmuls, not the loop
      for (bool trie : {false, true}) {
        CAPTURE(c.path); CAPTURE(c.hd); CAPTURE(trie);
        std::vector<int64_t> all;  // the trunk as nodes too: trunk 0, every query a tree node
        for (int64_t t = 0; t < c.trunk; ++t) all.push_back(t - 1);
        for (int64_t p : trie_parents(c.trunk)) all.push_back(p);
        const Block b = trie ? Block(c.n_head, c.n_kv, c.hd, 0, all, 11, 0)
                             : Block(c.n_head, c.n_kv, c.hd, c.trunk, kLens, 11);
        const TreeMask tree = b.mask();
        AttentionOptions opts{0.0f, 1.0f, 0};
        opts.tree = &tree;
        std::vector<float> out(b.q.size());
        attention(b.q.data(), b.view(), out.data(), b.n, 0, c.n_head, c.n_kv, c.hd, 0, opts);
        const size_t row = size_t(c.n_head * c.hd), kvrow = size_t(c.n_kv * c.hd);
        for (int64_t t = 0; t < b.n; ++t) {
          CAPTURE(t);
          int64_t position = 0;
          const std::vector<int64_t> chain = b.visible(t, 0, position);
          std::vector<float> q, k, v;
          for (int64_t r : chain) {
            q.insert(q.end(), b.q.begin() + r * int64_t(row), b.q.begin() + (r + 1) * int64_t(row));
            k.insert(k.end(), b.k.begin() + r * int64_t(kvrow), b.k.begin() + (r + 1) * int64_t(kvrow));
            v.insert(v.end(), b.v.begin() + r * int64_t(kvrow), b.v.begin() + (r + 1) * int64_t(kvrow));
          }
          std::vector<float> alone(q.size());
          attention(q.data(), KvView{k.data(), v.data(), c.n_kv * c.hd, c.hd}, alone.data(), position + 1, 0, c.n_head,
                    c.n_kv, c.hd, 0, AttentionOptions{0.0f, 1.0f, 0});
          CHECK(std::memcmp(alone.data() + position * int64_t(row), out.data() + t * int64_t(row), row * sizeof(float)) == 0);
        }
      }
    }
  }

  TEST_CASE("a trie block on every path matches naive double attention over each node's ancestors") {
    for (const Case& c : kCases) {
      CAPTURE(c.path); CAPTURE(c.hd);
      const Block b(c.n_head, c.n_kv, c.hd, c.trunk, trie_parents(c.trunk), 13, 0);
      const TreeMask tree = b.mask();
      for (int64_t window : {0, 7}) {
        AttentionOptions opts{0.0f, 0.0f, window};
        opts.tree = &tree;
        const auto ref = naive_tree(b, 1.0 / std::sqrt(double(c.hd)), 0.0, window);
        Engine eng(2);
        Buffer scratch;
        std::vector<float> out(b.q.size());
        attention(eng, b.q.data(), b.view(), out.data(), b.n, 0, c.n_head, c.n_kv, c.hd, 0, scratch, opts);
        CHECK(worst_error(out, ref) <= 2e-5);
      }
    }
  }

  TEST_CASE("a tree that does not fit its block is refused") {
    const Block b(4, 2, 32, 10, {3, 2}, 3);
    std::vector<int64_t> late = b.parent, wrong_pos = b.pos;
    late[1] = 12;      // a parent after its child
    wrong_pos[2] += 1;  // a position that is not the parent's + 1
    const TreeMask bad_parent{b.trunk, late, b.pos}, bad_pos{b.trunk, b.parent, wrong_pos};
    const TreeMask short_tree{b.trunk, std::span<const int64_t>(b.parent).first(3), std::span<const int64_t>(b.pos).first(3)};
    for (const TreeMask* tree : {&bad_parent, &bad_pos, &short_tree}) {
      AttentionOptions opts;
      opts.tree = tree;
      std::vector<float> out(b.q.size());
      CHECK_THROWS(attention(b.q.data(), b.view(), out.data(), b.n, 0, 4, 2, 32, 0, opts));
    }
  }
}
