#pragma once
// Internals shared by the attention paths (attention.cpp: the loop paths,
// attention_matmul.cpp: the oneDNN batched matmuls). Not part of the backend's interface.
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.hpp"

namespace kveval::backend::detail {

/// Throws ArgumentError unless kv.dtype is F32, BF16 or F16 and the view
/// holds every position a block of queries from `past` sees: kv.begin in
/// [0, opts.first_visible(past)], and 0 for a token tree.
void check_kv_view(const KvView& kv, int64_t past, const AttentionOptions& opts);

/// dst[d] = element d of the row at src (n 16-bit elements of `dtype`, BF16
/// or F16) widened exactly to float.
void widen_row(const uint16_t* src, Dtype dtype, float* dst, int64_t n);

/// Throws ArgumentError unless `tree` fits the one sequence of `seqs` (a
/// tree mask applies to one query block; each node's parent earlier, its
/// position the parent's + 1).
void check_tree(std::span<const AttentionSeq> seqs, const TreeMask& tree);

/// rows [len]: the block indices of the positions the tree query at block
/// index t sees (opts.first_visible .. its own), in position order (its
/// ancestors, then itself), strictly increasing.
void tree_rows(const TreeMask& tree, const AttentionOptions& opts, int64_t t, std::vector<int64_t>& rows);

/// The K and V rows of kv heads [hk0, hk1) at block indices `rows`, gathered
/// as f32 into w [2][hk1 - hk0][rows.size()][head_dim]; returns that view (kv head hk0 first).
KvView gather_tree_keys(std::span<const int64_t> rows, const KvView& kv, int64_t head_dim, int64_t hk0, int64_t hk1,
                        std::vector<float>& w);

}  // namespace kveval::backend::detail
