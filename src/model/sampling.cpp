// Seeded sampling: Hugging Face's logits warpers, then an inverse-CDF draw at a
// Philox4x32-10 uniform keyed by (seed, request, repeat, step).
#include "model/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

namespace kveval {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  // Random123 philox.h: multipliers PHILOX_M4x32_0/1 and Weyl key bumps PHILOX_W32_0/1.
  constexpr uint64_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    const uint64_t p0 = kM0 * c[0], p1 = kM1 * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

double sample_uniform(uint64_t seed, uint64_t request, uint32_t repeat, uint32_t step) {
  const auto r = philox4x32_10({step, repeat, static_cast<uint32_t>(request), static_cast<uint32_t>(request >> 32)},
                               {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  const uint64_t bits = (static_cast<uint64_t>(r[0]) << 32 | r[1]) >> 11;  // 53 bits
  return static_cast<double>(bits) * 0x1.0p-53;
}

namespace {

int32_t first_argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

/// Removes the kept tokens marked in s.drop (order kept).
void remove_dropped(SamplingScratch& s) {
  size_t w = 0;
  for (size_t j = 0; j < s.kept.size(); ++j)
    if (!s.drop[j]) {
      s.kept[w] = s.kept[j];
      s.weight[w++] = s.weight[j];
    }
  s.kept.resize(w);
  s.weight.resize(w);
}

/// HF's TopPLogitsWarper on the kept tokens: in ascending order of their
/// logits (ties: the higher id first), the tokens whose cumulative probability
/// is <= 1 - top_p are removed; the most probable one always stays.
void top_p_filter(double top_p, SamplingScratch& s) {
  const size_t n = s.kept.size();
  s.order.resize(n);
  for (size_t j = 0; j < n; ++j) s.order[j] = j;
  std::sort(s.order.begin(), s.order.end(), [&](size_t a, size_t b) {
    return s.weight[a] != s.weight[b] ? s.weight[a] < s.weight[b] : s.kept[a] > s.kept[b];
  });
  double total = 0;
  for (double w : s.weight) total += w;
  s.drop.assign(n, 0);
  double cum = 0;
  for (size_t j = 0; j + 1 < n; ++j) {
    cum += s.weight[s.order[j]];
    if (cum / total > 1.0 - top_p) break;
    s.drop[s.order[j]] = 1;
  }
  remove_dropped(s);
}

/// The kept tokens (ascending id) and their unnormalised weights exp(x - max)
/// after temperature, top-k, top-p and min-p (HF's order).
void warp(std::span<const float> logits, const SamplingParams& p, SamplingScratch& s) {
  const size_t V = logits.size();
  s.scaled.resize(V);
  double mx = -INFINITY;
  for (size_t i = 0; i < V; ++i) {
    s.scaled[i] = static_cast<double>(logits[i]) / p.temperature;  // TemperatureLogitsWarper
    mx = std::max(mx, s.scaled[i]);
  }
  double threshold = -INFINITY;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < V) {  // TopKLogitsWarper: keep every score >= the k-th largest
    s.top_k.assign(s.scaled.begin(), s.scaled.end());
    std::nth_element(s.top_k.begin(), s.top_k.begin() + (p.top_k - 1), s.top_k.end(), std::greater<double>());
    threshold = s.top_k[static_cast<size_t>(p.top_k - 1)];
  }
  s.kept.clear();
  s.weight.clear();
  for (size_t i = 0; i < V; ++i)
    if (s.scaled[i] >= threshold) {
      s.kept.push_back(static_cast<int32_t>(i));
      s.weight.push_back(std::exp(s.scaled[i] - mx));
    }
  if (p.top_p < 1.0) top_p_filter(p.top_p, s);
  if (p.min_p > 0.0) {  // MinPLogitsWarper: prob < min_p * top prob removed (the top weight is exp(0) = 1)
    s.drop.resize(s.kept.size());
    for (size_t j = 0; j < s.kept.size(); ++j) s.drop[j] = s.weight[j] < p.min_p;
    remove_dropped(s);
  }
}

}  // namespace

std::vector<std::pair<int32_t, double>> sampling_distribution(std::span<const float> logits, const SamplingParams& p) {
  if (p.greedy()) return {{first_argmax(logits), 1.0}};
  SamplingScratch s;
  warp(logits, p, s);
  double total = 0;
  for (double w : s.weight) total += w;
  std::vector<std::pair<int32_t, double>> out;
  for (size_t j = 0; j < s.kept.size(); ++j) out.emplace_back(s.kept[j], s.weight[j] / total);
  return out;
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, double u, SamplingScratch& s) {
  if (p.greedy()) return first_argmax(logits);
  warp(logits, p, s);
  double total = 0;
  for (double w : s.weight) total += w;
  const double target = u * total;
  double cum = 0;
  for (size_t j = 0; j < s.kept.size(); ++j) {
    cum += s.weight[j];
    if (cum > target) return s.kept[j];
  }
  return s.kept.back();  // u * total rounded up to the sum
}

}  // namespace kveval
