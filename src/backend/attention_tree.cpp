// The token-tree mask of the loop attention (backend::TreeMask): a branch
// query's keys gathered in position order, and the checks of a tree.
#include <algorithm>

#include <fmt/format.h>

#include "backend/attention_impl.hpp"
#include "backend/backend.hpp"
#include "util/error.hpp"

namespace kveval::backend {

int64_t TreeMask::branch_of(int64_t t) const {
  if (t < trunk) return -1;
  return static_cast<int64_t>(std::upper_bound(branch_start.begin(), branch_start.end(), t) - branch_start.begin()) - 1;
}

int64_t TreeMask::position(int64_t t) const {
  const int64_t b = branch_of(t);
  return b < 0 ? t : trunk + (t - branch_start[static_cast<size_t>(b)]);
}

namespace detail {

/// Throws ArgumentError unless `tree` fits the one sequence of `seqs`.
void check_tree(std::span<const AttentionSeq> seqs, const TreeMask& tree) {
  if (seqs.size() != 1) throw ArgumentError(fmt::format("attention: a tree mask needs one sequence, got {}", seqs.size()));
  const int64_t end = seqs[0].past + seqs[0].n_q;
  bool ok = tree.trunk >= 0 && tree.trunk <= end && (tree.branch_start.empty() || tree.branch_start[0] == tree.trunk);
  for (size_t b = 0; b < tree.branch_start.size(); ++b)
    ok = ok && tree.branch_start[b] < end && (b == 0 || tree.branch_start[b] > tree.branch_start[b - 1]);
  if (!ok)
    throw ArgumentError(fmt::format("attention: tree mask (trunk {}, {} branches) does not fit a block of {} queries",
                                    tree.trunk, tree.branch_start.size(), end));
}

/// A branch query of a token tree at block index t: the K and V rows of kv
/// heads [hk0, hk1) at the positions it sees (opts.first_visible .. its own),
/// in position order (trunk rows, then its branch's; `opts` gives the window), gathered as f32 into
/// w [2][hk1 - hk0][len][head_dim]; returns that view (kv head hk0 first) and
/// sets len.
KvView gather_tree_keys(const TreeMask& tree, const AttentionOptions& opts, const KvView& kv, int64_t head_dim,
                        int64_t t, int64_t hk0, int64_t hk1, int64_t& len, std::vector<float>& w) {
  const int64_t HD = head_dim, pos = tree.position(t), first = opts.first_visible(pos);
  const int64_t start = tree.branch_start[static_cast<size_t>(tree.branch_of(t))];
  len = pos + 1 - first;
  const int64_t nk = hk1 - hk0, n = nk * len * HD;
  if (w.size() < static_cast<size_t>(2 * n)) w.resize(static_cast<size_t>(2 * n));
  const bool narrow = kv.dtype != Dtype::F32;
  for (int which = 0; which < 2; ++which) {
    const void* base = which == 0 ? kv.k : kv.v;
    float* dst = w.data() + which * n;
    for (int64_t hk = hk0; hk < hk1; ++hk)
      for (int64_t v = first; v <= pos; ++v) {
        const int64_t row = v < tree.trunk ? v : start + (v - tree.trunk);  // block index of position v
        const int64_t at = hk * kv.head_stride + row * kv.pos_stride;
        float* d = dst + ((hk - hk0) * len + (v - first)) * HD;
        if (narrow)
          widen_row(static_cast<const uint16_t*>(base) + at, kv.dtype, d, HD);
        else
          std::copy_n(static_cast<const float*>(base) + at, HD, d);
      }
  }
  return KvView{w.data(), w.data() + n, HD, len * HD};
}

}  // namespace detail

}  // namespace kveval::backend
