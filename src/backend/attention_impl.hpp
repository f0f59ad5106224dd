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
/// tree mask applies to one query block; branch starts strictly increasing
/// from the trunk's end, inside the block).
void check_tree(std::span<const AttentionSeq> seqs, const TreeMask& tree);

/// A branch query of `tree` at block index t: the K and V rows of kv heads
/// [hk0, hk1) at the positions it sees (opts.first_visible .. its own), in
/// position order (trunk rows, then its branch's), gathered as f32 into
/// w [2][hk1 - hk0][len][head_dim]; returns that view (kv head hk0 first) and sets len.
KvView gather_tree_keys(const TreeMask& tree, const AttentionOptions& opts, const KvView& kv, int64_t head_dim,
                        int64_t t, int64_t hk0, int64_t hk1, int64_t& len, std::vector<float>& w);

}  // namespace kveval::backend::detail
