#include "eval/shard.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "util/error.hpp"

namespace kveval::eval {

double forward_cost(int64_t n, double matmul_params, int n_layer, int n_embd) {
  const double x = static_cast<double>(std::max<int64_t>(n, 0));
  return 2.0 * matmul_params * x + 2.0 * n_layer * static_cast<double>(n_embd) * x * x;
}

std::vector<int> balance_by_cost(const std::vector<double>& costs, int size) {
  if (size < 1) throw ArgumentError(fmt::format("balance_by_cost: size {} must be >= 1", size));
  for (double c : costs)
    if (!std::isfinite(c) || c < 0) throw ArgumentError(fmt::format("balance_by_cost: invalid cost {}", c));
  std::vector<size_t> idx(costs.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return costs[a] > costs[b]; });
  std::vector<double> load(static_cast<size_t>(size), 0.0);
  std::vector<int> owner(costs.size(), 0);
  for (size_t i : idx) {
    size_t best = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = static_cast<int>(best);
    load[best] += costs[i];
  }
  return owner;
}

std::vector<int> assign_requests(const std::vector<Request>& reqs, int size, double matmul_params, int n_layer,
                                 int n_embd) {
  std::vector<int> owner(reqs.size(), 0);
  std::vector<size_t> score_idx, gen_idx;
  std::vector<double> score_cost, gen_cost;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Request& r = reqs[i];
    if (!r.error.empty()) continue;
    if (r.kind == RequestKind::Generate) {
      gen_idx.push_back(i);
      gen_cost.push_back(forward_cost(static_cast<int64_t>(r.prompt.size()) + r.max_gen_toks, matmul_params, n_layer, n_embd));
    } else {
      score_idx.push_back(i);
      score_cost.push_back(forward_cost(static_cast<int64_t>(r.score.tokens.size()) - 1, matmul_params, n_layer, n_embd));
    }
  }
  std::vector<int> so = balance_by_cost(score_cost, size), go = balance_by_cost(gen_cost, size);
  for (size_t k = 0; k < score_idx.size(); ++k) owner[score_idx[k]] = so[k];
  for (size_t k = 0; k < gen_idx.size(); ++k) owner[gen_idx[k]] = go[k];
  return owner;
}

namespace {

class Writer {
 public:
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void f64(double v) { u64(std::bit_cast<uint64_t>(v)); }
  void str(const std::string& s) {
    u64(s.size());
    out_ += s;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  uint64_t u64() {
    need(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return v;
  }
  double f64() { return std::bit_cast<double>(u64()); }
  std::string str() {
    uint64_t n = u64();
    need(n);
    std::string v = s_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  /// A count of items each at least `min_bytes` long that must fit in what is left.
  size_t count(size_t min_bytes) {
    uint64_t n = u64();
    if (n > (s_.size() - pos_) / std::max<size_t>(min_bytes, 1)) bad();
    return static_cast<size_t>(n);
  }
  bool done() const { return pos_ == s_.size(); }

 private:
  void need(uint64_t n) {
    if (n > s_.size() - pos_) bad();
  }
  [[noreturn]] static void bad() { throw Error("internal: malformed rank report (truncated or corrupt)"); }
  const std::string& s_;
  size_t pos_ = 0;
};

constexpr uint64_t kMagic = 0x3276707261726b76ULL;  // "vkraprv2": version of this format (v2: outcome errors)

}  // namespace

std::string encode_rank_report(const RankReport& r) {
  Writer w;
  w.u64(kMagic);
  w.u64(r.outcomes.size());
  for (const auto& [i, o] : r.outcomes) {
    w.u64(i);
    w.u64(o.ran ? 1 : 0);
    w.f64(o.logprob);
    w.f64(o.logprob_sq);
    w.u64(o.is_greedy ? 1 : 0);
    w.u64(static_cast<uint64_t>(static_cast<int64_t>(o.tokens)));
    w.u64(o.output_ids.size());
    for (int32_t id : o.output_ids) w.u64(static_cast<uint64_t>(static_cast<int64_t>(id)));
    w.str(o.output);
    w.str(o.stop_reason);
    w.str(o.error);
  }
  w.u64(r.phases.size());
  for (const Phase& p : r.phases) {
    w.str(p.name);
    w.f64(p.seconds);
    w.u64(static_cast<uint64_t>(p.tokens));
  }
  w.u64(r.ll_forward_calls);
  w.u64(r.ll_forward_with_cache_setup);
  w.u64(r.ll_forward_cached);
  w.u64(r.ll_tokens_requested);
  w.u64(r.ll_tokens_computed);
  w.u64(r.ll_logit_rows);
  w.u64(r.cache_bytes_setup);
  return w.take();
}

RankReport decode_rank_report(const std::string& bytes) {
  Reader rd(bytes);
  if (rd.u64() != kMagic) throw Error("internal: rank report of another format version");
  RankReport r;
  size_t n = rd.count(9 * 8);
  r.outcomes.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    size_t i = static_cast<size_t>(rd.u64());
    RequestOutcome o;
    o.ran = rd.u64() != 0;
    o.logprob = rd.f64();
    o.logprob_sq = rd.f64();
    o.is_greedy = rd.u64() != 0;
    o.tokens = static_cast<int>(static_cast<int64_t>(rd.u64()));
    size_t m = rd.count(8);
    o.output_ids.reserve(m);
    for (size_t j = 0; j < m; ++j) o.output_ids.push_back(static_cast<int32_t>(static_cast<int64_t>(rd.u64())));
    o.output = rd.str();
    o.stop_reason = rd.str();
    o.error = rd.str();
    r.outcomes.emplace_back(i, std::move(o));
  }
  size_t np = rd.count(3 * 8);
  for (size_t k = 0; k < np; ++k) {
    Phase p;
    p.name = rd.str();
    p.seconds = rd.f64();
    p.tokens = static_cast<int64_t>(rd.u64());
    r.phases.push_back(std::move(p));
  }
  r.ll_forward_calls = rd.u64();
  r.ll_forward_with_cache_setup = rd.u64();
  r.ll_forward_cached = rd.u64();
  r.ll_tokens_requested = rd.u64();
  r.ll_tokens_computed = rd.u64();
  r.ll_logit_rows = rd.u64();
  r.cache_bytes_setup = static_cast<size_t>(rd.u64());
  if (!rd.done()) throw Error("internal: malformed rank report (trailing bytes)");
  return r;
}

}  // namespace kveval::eval
