// Scoring: cache-free log-likelihoods of token sequences (score), with logits
// only where a token is scored and prefix packing of requests that share a
// prefix (token tries, Context::forward_rows).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "model/context.hpp"
#include "util/error.hpp"

namespace kveval {

double token_logprob(std::span<const float> logits, int32_t token) {
  if (token < 0 || static_cast<size_t>(token) >= logits.size())
    throw ArgumentError(fmt::format("token_logprob: token {} outside [0, {})", token, logits.size()));
  float mx = -std::numeric_limits<float>::infinity();
  bool finite = true;
  for (float v : logits) {
    mx = std::max(mx, v);
    finite &= std::isfinite(v);
  }
  if (!finite) return std::numeric_limits<double>::quiet_NaN();
  // exp in float (each term has relative error ~1e-7), summed in double: the
  // log-sum-exp is exact to ~1e-7 nats, 3x cheaper than double exp over 32000 logits.
  double sum = 0.0;
  for (float v : logits) sum += static_cast<double>(std::exp(v - mx));
  return static_cast<double>(logits[static_cast<size_t>(token)]) - mx - std::log(sum);
}

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

double ScoreResult::sum() const {
  double s = 0.0;
  for (double v : logprobs) s += v;
  return s;
}

bool ScoreResult::all_greedy() const {
  return std::all_of(is_greedy.begin(), is_greedy.end(), [](uint8_t g) { return g != 0; });
}

namespace {

/// One row of a scoring pass: a request alone as a causal sequence (tree
/// false), or `pack` requests as a trie of their tokens [0, size - 1).
struct ScoreRow {
  std::vector<size_t> members;  ///< request indices
  bool tree = false;
  std::vector<int32_t> tokens;  ///< tree rows: the nodes' tokens (a node after its parent)
  std::vector<int> parent;      ///< tree rows: each node's parent (-1: a root)
  std::vector<std::vector<int>> path;  ///< tree rows, per member: the nodes of its tokens [score_from - 1, size - 1)
  std::map<std::pair<int, int32_t>, int> child;  ///< (parent, token) -> node, while the row is planned
  int64_t n_tokens = 0;         ///< tokens computed
  int64_t logit_rows = 0;       ///< distinct positions predicting a scored token
  int64_t scored = 0;           ///< scored tokens of the members (a bound on logit_rows)

  /// Nodes request `r` would add to the trie.
  int64_t added(const ScoreRequest& r) const {
    int node = -1;
    const int64_t n = static_cast<int64_t>(r.tokens.size()) - 1;
    for (int64_t i = 0; i < n; ++i) {
      auto it = child.find({node, r.tokens[static_cast<size_t>(i)]});
      if (it == child.end()) return n - i;
      node = it->second;
    }
    return 0;
  }
  /// Adds request i (`r`) to the trie.
  void insert(size_t i, const ScoreRequest& r) {
    members.push_back(i);
    std::vector<int>& nodes = path.emplace_back();
    int node = -1;
    for (size_t p = 0; p + 1 < r.tokens.size(); ++p) {
      auto [it, added] = child.try_emplace({node, r.tokens[p]}, static_cast<int>(tokens.size()));
      if (added) {
        tokens.push_back(r.tokens[p]);
        parent.push_back(node);
      }
      node = it->second;
      if (p + 1 >= static_cast<size_t>(r.score_from)) nodes.push_back(node);
    }
    n_tokens = static_cast<int64_t>(tokens.size());
  }
};

/// True for a request scored as a tree: `pack`, at least one scored token.
bool as_tree(const ScoreRequest& r) { return r.pack && r.score_from >= 1 && r.tokens.size() >= 2 && r.tokens.size() > static_cast<size_t>(r.score_from); }

/// The logit rows of a tree row: its distinct scoring nodes.
int64_t count_logit_rows(const ScoreRow& row) {
  std::vector<int> nodes;
  for (const auto& p : row.path) nodes.insert(nodes.end(), p.begin(), p.end());
  std::sort(nodes.begin(), nodes.end());
  return std::unique(nodes.begin(), nodes.end()) - nodes.begin();
}

/// The rows of `requests` (see score() and score_rows()).
std::vector<ScoreRow> plan_rows(std::span<const ScoreRequest> requests, int n_ctx, const ScoreOptions& opts) {
  std::vector<ScoreRow> rows;
  std::vector<size_t> trees;
  for (size_t i = 0; i < requests.size(); ++i) {
    const ScoreRequest& r = requests[i];
    if (as_tree(r)) {
      trees.push_back(i);
      continue;
    }
    const int64_t size = static_cast<int64_t>(r.tokens.size()), scored = size - r.score_from;
    ScoreRow& row = rows.emplace_back();
    row.members = {i};
    row.n_tokens = std::max<int64_t>(size - 1, 0);
    row.logit_rows = std::max<int64_t>(scored, 0);
  }
  // a prefix shared by several requests sorts them side by side; ties keep their order
  std::stable_sort(trees.begin(), trees.end(), [&](size_t a, size_t b) { return requests[a].tokens < requests[b].tokens; });
  const int64_t budget = opts.row_tokens > 0 ? std::min(opts.row_tokens, n_ctx) : n_ctx;
  const size_t first_tree = rows.size();
  for (size_t i : trees) {
    const bool open = rows.size() > first_tree && opts.share_prefixes;
    const int64_t scored = static_cast<int64_t>(requests[i].tokens.size()) - requests[i].score_from;
    if (!open || rows.back().n_tokens + rows.back().added(requests[i]) > budget ||
        (opts.row_scored > 0 && rows.back().scored + scored > opts.row_scored)) {
      if (rows.size() > first_tree) rows.back().child.clear();
      rows.emplace_back().tree = true;
    }
    rows.back().scored += scored;
    rows.back().insert(i, requests[i]);
  }
  for (size_t j = first_tree; j < rows.size(); ++j) {
    rows[j].child.clear();
    rows[j].logit_rows = count_logit_rows(rows[j]);
  }
  return rows;
}

/// One pass's inputs: rows [r0, r1) of `rows` laid out for forward_rows, and
/// for each scored token the (request, token position, logits row) it takes.
struct PassInput {
  int seq = 1;
  std::vector<int32_t> tokens;
  std::vector<int> n_tokens;
  std::vector<Context::TokenTree> trees;
  std::vector<Context::LogitRow> at;
  struct Target {
    size_t request = 0, position = 0, logits = 0;
  };
  std::vector<Target> target;
};

/// Lays out one row (index j of the pass) into `in`: a request alone over its
/// tokens [0, size - 1), or the trie's nodes (one logits row per scoring node).
void lay_out_row(std::span<const ScoreRequest> requests, const ScoreRow& row, int j, PassInput& in) {
  int32_t* dst = in.tokens.data() + static_cast<size_t>(j) * in.seq;
  if (!row.tree) {
    const size_t i = row.members[0];
    const ScoreRequest& r = requests[i];
    if (r.tokens.size() > 1) std::copy(r.tokens.begin(), r.tokens.end() - 1, dst);
    in.n_tokens[static_cast<size_t>(j)] = static_cast<int>(r.tokens.size()) - 1;
    for (size_t p = static_cast<size_t>(r.score_from); p < r.tokens.size(); ++p) {
      in.target.push_back({i, p, in.at.size()});
      in.at.push_back({j, static_cast<int>(p) - 1});
    }
    return;
  }
  std::copy(row.tokens.begin(), row.tokens.end(), dst);
  in.n_tokens[static_cast<size_t>(j)] = static_cast<int>(row.tokens.size());
  in.trees[static_cast<size_t>(j)] = {0, row.parent};
  std::map<int, size_t> logits_of;  // node -> its logits row
  for (size_t m = 0; m < row.members.size(); ++m) {
    const size_t i = row.members[m];
    const std::vector<int>& nodes = row.path[m];
    for (size_t k = 0; k < nodes.size(); ++k) {
      auto [it, added] = logits_of.try_emplace(nodes[k], in.at.size());
      if (added) in.at.push_back({j, nodes[k]});
      in.target.push_back({i, static_cast<size_t>(requests[i].score_from) + k, it->second});
    }
  }
}

void check_requests(std::span<const ScoreRequest> requests, int n_ctx) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (r.tokens.size() > static_cast<size_t>(n_ctx) + 1)
      throw ArgumentError(fmt::format("score: request {} has {} tokens, more than the model's context_length {} + 1", i,
                                      r.tokens.size(), n_ctx));
    if (r.score_from < 1 || static_cast<size_t>(r.score_from) > r.tokens.size())
      throw ArgumentError(fmt::format("score: request {}: score_from {} outside [1, {}]", i, r.score_from,
                                      r.tokens.size()));
  }
}

/// A target's token_logprob and whether its token is the row's argmax.
struct TargetScore {
  double logprob = 0.0;
  uint8_t greedy = 0;
};

/// scored[i] for each target of a pass (a token outside [0, V): left 0, the
/// caller throws), the targets split among the OpenMP threads: each one reads
/// only its own logits row, so the values are the same for every thread count.
void score_targets(std::span<const ScoreRequest> requests, std::span<const PassInput::Target> targets,
                   const std::vector<float>& logits, size_t V, std::vector<TargetScore>& scored) {
  scored.assign(targets.size(), TargetScore{});
  const int64_t n = static_cast<int64_t>(targets.size());
#pragma omp parallel for schedule(dynamic, 4) if (n > 1)
  for (int64_t i = 0; i < n; ++i) {
    const PassInput::Target& tg = targets[static_cast<size_t>(i)];
    const int32_t tok = requests[tg.request].tokens[tg.position];
    if (tok < 0 || static_cast<size_t>(tok) >= V) continue;
    const std::span<const float> row(logits.data() + tg.logits * V, V);
    scored[static_cast<size_t>(i)] = {token_logprob(row, tok), static_cast<uint8_t>(argmax(row) == tok ? 1 : 0)};
  }
}

}  // namespace

std::vector<std::vector<size_t>> score_rows(std::span<const ScoreRequest> requests, int n_ctx,
                                            const ScoreOptions& opts) {
  std::vector<std::vector<size_t>> out;
  for (ScoreRow& row : plan_rows(requests, n_ctx, opts)) out.push_back(std::move(row.members));
  return out;
}

std::vector<ScorePassShape> score_pass_shapes(std::span<const ScoreRequest> requests, int batch_size, int n_ctx,
                                              const ScoreOptions& opts) {
  const std::vector<ScoreRow> rows = plan_rows(requests, n_ctx, opts);
  std::vector<ScorePassShape> out;
  const size_t B = static_cast<size_t>(std::max(batch_size, 1));
  for (size_t r0 = 0; r0 < rows.size(); r0 += B) {
    ScorePassShape s;
    for (size_t j = r0; j < std::min(rows.size(), r0 + B); ++j) {
      ++s.rows;
      s.seq = std::max(s.seq, static_cast<int>(rows[j].n_tokens));
      s.tokens += rows[j].n_tokens;
      s.logit_rows += rows[j].logit_rows;
    }
    out.push_back(s);
  }
  return out;
}

std::vector<ScoreResult> score(Context& ctx, std::span<const ScoreRequest> requests, int batch_size,
                               const ScoreOptions& opts) {
  if (ctx.caches_are_enabled())
    throw CacheError("score: KV caches are enabled; scoring runs cache-free (use KvCacheDisabled or leave the cache scope)");
  if (batch_size < 1) throw ArgumentError(fmt::format("score: batch_size {} must be >= 1", batch_size));
  const size_t V = static_cast<size_t>(ctx.model().hparams().n_vocab);
  const int n_ctx = ctx.model().hparams().n_ctx_train;
  check_requests(requests, n_ctx);
  const std::vector<ScoreRow> rows = plan_rows(requests, n_ctx, opts);
  std::vector<ScoreResult> out(requests.size());
  std::vector<float> logits;
  std::vector<TargetScore> scored;
  PassInput in;
  for (size_t r0 = 0; r0 < rows.size(); r0 += static_cast<size_t>(batch_size)) {
    const size_t r1 = std::min(rows.size(), r0 + static_cast<size_t>(batch_size));
    const int nb = static_cast<int>(r1 - r0);
    in.seq = 1;
    bool trees = false;
    for (size_t j = r0; j < r1; ++j) {
      in.seq = std::max(in.seq, static_cast<int>(rows[j].n_tokens));
      trees |= rows[j].tree;
    }
    in.tokens.assign(static_cast<size_t>(nb) * in.seq, 0);
    in.n_tokens.assign(static_cast<size_t>(nb), 0);
    in.trees.assign(trees ? static_cast<size_t>(nb) : 0, {});
    in.at.clear();
    in.target.clear();
    for (size_t j = r0; j < r1; ++j) lay_out_row(requests, rows[j], static_cast<int>(j - r0), in);
    logits.resize(in.at.size() * V);
    ctx.forward_rows(in.tokens, nb, in.seq, in.n_tokens, in.at, logits, in.trees);
    score_targets(requests, in.target, logits, V, scored);
    for (size_t i = 0; i < in.target.size(); ++i) {
      const PassInput::Target& tg = in.target[i];
      ScoreResult& res = out[tg.request];
      if (res.nonfinite_at >= 0) continue;  // scoring of this request stopped at an earlier position
      const int32_t tok = requests[tg.request].tokens[tg.position];
      if (tok < 0 || static_cast<size_t>(tok) >= V) token_logprob(std::span<const float>(logits.data(), V), tok);  // throws
      const double lp = scored[i].logprob;
      if (!std::isfinite(lp)) {  // an overflowed forward pass: this request fails, never scores
        res.nonfinite_at = static_cast<int>(tg.position);
        continue;
      }
      res.logprobs.push_back(lp);
      res.is_greedy.push_back(scored[i].greedy);
    }
  }
  return out;
}

}  // namespace kveval
