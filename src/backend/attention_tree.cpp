// The token-tree mask of the loop attention (backend::TreeMask): a tree
// query's visible rows in position order, its keys gathered, and the checks of a tree.
#include <algorithm>

#include <fmt/format.h>

#include "backend/attention_impl.hpp"
#include "backend/backend.hpp"
#include "util/error.hpp"

namespace kveval::backend::detail {

/// Throws ArgumentError unless `tree` fits the one sequence of `seqs`.
void check_tree(std::span<const AttentionSeq> seqs, const TreeMask& tree) {
  if (seqs.size() != 1) throw ArgumentError(fmt::format("attention: a tree mask needs one sequence, got {}", seqs.size()));
  const int64_t end = seqs[0].past + seqs[0].n_q;
  bool ok = tree.trunk >= 0 && tree.trunk <= end && static_cast<int64_t>(tree.parent.size()) == end - tree.trunk &&
            tree.pos.size() == tree.parent.size();
  for (int64_t t = tree.trunk; ok && t < end; ++t) {
    const int64_t p = tree.parent_of(t);
    ok = p >= -1 && p < t && tree.position(t) == (p < 0 ? 0 : tree.position(p) + 1);
  }
  if (!ok)
    throw ArgumentError(fmt::format("attention: tree mask (trunk {}, {} nodes) does not fit a block of {} queries "
                                    "(each parent earlier, each position its parent's + 1)",
                                    tree.trunk, tree.parent.size(), end));
}

void tree_rows(const TreeMask& tree, const AttentionOptions& opts, int64_t t, std::vector<int64_t>& rows) {
  const int64_t pos = tree.position(t), first = opts.first_visible(pos);
  rows.resize(static_cast<size_t>(pos + 1 - first));
  int64_t r = t;
  for (int64_t v = pos; v >= first; --v) {
    rows[static_cast<size_t>(v - first)] = r;
    r = tree.parent_of(r);
  }
}

KvView gather_tree_keys(std::span<const int64_t> rows, const KvView& kv, int64_t head_dim, int64_t hk0, int64_t hk1,
                        std::vector<float>& w) {
  const int64_t HD = head_dim, len = static_cast<int64_t>(rows.size());
  const int64_t nk = hk1 - hk0, n = nk * len * HD;
  if (w.size() < static_cast<size_t>(2 * n)) w.resize(static_cast<size_t>(2 * n));
  const bool narrow = kv.dtype != Dtype::F32;
  for (int which = 0; which < 2; ++which) {
    const void* base = which == 0 ? kv.k : kv.v;
    float* dst = w.data() + which * n;
    for (int64_t hk = hk0; hk < hk1; ++hk)
      for (int64_t v = 0; v < len; ++v) {
        const int64_t at = hk * kv.head_stride + rows[static_cast<size_t>(v)] * kv.pos_stride;
        float* d = dst + ((hk - hk0) * len + v) * HD;
        if (narrow)
          widen_row(static_cast<const uint16_t*>(base) + at, kv.dtype, d, HD);
        else
          std::copy_n(static_cast<const float*>(base) + at, HD, d);
      }
  }
  return KvView{w.data(), w.data() + n, HD, len * HD};
}

}  // namespace kveval::backend::detail
