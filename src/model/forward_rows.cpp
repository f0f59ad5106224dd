// Context::forward_rows: the cache-free forward pass that materialises logits
// only at the positions asked for, over rows that may be packed token trees.
#include <cstring>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "model/context_impl.hpp"
#include "util/error.hpp"

namespace kveval {

namespace be = kveval::backend;

// tree_for_seq / trees for the packed sequences of pack_batch (a row without
// a tree stays a causal sequence); throws ArgumentError for a tree that does
// not fit its row.
void Context::Impl::set_trees(std::span<const TokenTree> in, std::span<const int> n_tokens) {
  tree_for_seq.assign(seq_row.size(), -1);
  trees.clear();
  tree_parent.clear();
  tree_pos.clear();
  if (in.empty()) return;
  if (in.size() != n_tokens.size())
    throw ArgumentError(fmt::format("forward_rows: {} trees for {} rows", in.size(), n_tokens.size()));
  for (size_t r = 0; r < in.size(); ++r) {
    const TokenTree& t = in[r];
    const int n = n_tokens[r];
    bool ok = t.parent.empty() || (t.trunk >= 0 && t.trunk + static_cast<int>(t.parent.size()) == n);
    for (size_t i = 0; ok && i < t.parent.size(); ++i) ok = t.parent[i] >= -1 && t.parent[i] < t.trunk + static_cast<int>(i);
    if (!ok)
      throw ArgumentError(fmt::format("forward_rows: tree of row {} (trunk {}, {} nodes) does not fit its {} tokens "
                                      "(one parent per token after the trunk, each an earlier token or -1)",
                                      r, t.trunk, t.parent.size(), n));
  }
  std::vector<int64_t> trunks;
  for (size_t s = 0; s < seq_row.size(); ++s) {
    const TokenTree& t = in[static_cast<size_t>(seq_row[s])];
    if (t.parent.empty()) continue;
    trunks.push_back(t.trunk);
    tree_for_seq[s] = static_cast<int>(tree_parent.size());
    std::vector<int64_t>& parent = tree_parent.emplace_back(t.parent.begin(), t.parent.end());
    std::vector<int64_t>& pos = tree_pos.emplace_back(parent.size());
    for (size_t i = 0; i < parent.size(); ++i) {  // a parent is earlier: its position is known
      const int64_t p = parent[i];
      pos[i] = p < 0 ? 0 : (p < t.trunk ? p : pos[static_cast<size_t>(p - t.trunk)]) + 1;
    }
  }
  for (size_t i = 0; i < tree_parent.size(); ++i)  // spans into the storage, which no longer grows
    trees.push_back({trunks[i], tree_parent[i], tree_pos[i]});
}

// logits_out[k] = output head (output_norm, output matmul, logit scale, soft-cap)
// of the hidden state after token at[k]: [at.size(), n_vocab].
void Context::Impl::output_rows(const Pass& p, std::span<const LogitRow> at, std::span<float> logits_out) {
  const HParams& hp = w.hp;
  const size_t D = static_cast<size_t>(hp.n_embd), V = static_cast<size_t>(hp.n_vocab), n = at.size();
  if (n == 0) return;
  std::vector<int> seq_of_row(n_rows, -1);
  for (size_t s = 0; s < seq_row.size(); ++s) seq_of_row[static_cast<size_t>(seq_row[s])] = static_cast<int>(s);
  if (last.reserve(n * D)) ++stats.buffer_allocations;
  float* lastp = last.data();
  for (size_t k = 0; k < n; ++k) {
    const int s = seq_of_row[static_cast<size_t>(at[k].row)];
    std::memcpy(lastp + k * D, x.data() + (static_cast<size_t>(seq_start[static_cast<size_t>(s)]) + at[k].index) * D,
                sizeof(float) * D);
  }
  be::rmsnorm(lastp, w.output_norm.data(), lastp, static_cast<int64_t>(n), static_cast<int>(D), hp.rms_eps);
  be::matmul(*w.engine, lastp, static_cast<int64_t>(n), w.out_weight(), logits_out.data(), false, p.inv);
  scale_logits(logits_out.data(), n * V);
  stats.logit_rows += n;
}

void Context::forward_rows(std::span<const int32_t> tokens, int batch, int seq, std::span<const int> n_tokens,
                           std::span<const LogitRow> at, std::span<float> logits_out, std::span<const TokenTree> trees) {
  Impl& im = *impl_;
  if (im.cache_enabled)
    throw CacheError("forward_rows: KV caches are enabled; it runs cache-free (use KvCacheDisabled or leave the cache scope)");
  Impl::Pass p = im.check_pass(tokens, batch, seq, n_tokens, at.size(), logits_out);
  for (size_t k = 0; k < at.size(); ++k)
    if (at[k].row < 0 || at[k].row >= batch || at[k].index < 0 || at[k].index >= n_tokens[static_cast<size_t>(at[k].row)])
      throw ArgumentError(fmt::format("forward_rows: logits row {} asks for token {} of row {}, outside the batch's "
                                      "valid tokens", k, at[k].index, at[k].row));
  im.pack_batch(p, batch, n_tokens);
  im.set_trees(trees, n_tokens);
  im.n_rows = static_cast<size_t>(batch);
  if (!im.run_layers(p, tokens, seq)) return;
  im.output_rows(p, at, logits_out);
}

}  // namespace kveval
