#pragma once
// Loading kept blocks: a tensor's blocks checked, copied or re-laid out into a block weight in parallel, with
// the finite check on their scales (kept out of dequantize.cpp, which builds without src/backend for the fuzz
// targets).
#include <cstdint>

#include "backend/backend.hpp"
#include "model/dequantize.hpp"
#include "model/gguf.hpp"

namespace kveval {

/// Copies tensor `t` (a Q2_K…Q6_K, Q4_1, Q5_0 or Q5_1 tensor of w.n_out() − row0 rows or fewer) byte
/// for byte into rows [row0, row0 + t.n_rows()) of block weight `w` (Weight::set_rows_file_blocks),
/// about 4 MiB of rows per chunk, chunks split among `opts.threads` OpenMP threads in two contiguous
/// ranges (so first-touch page faults of `w`'s memory run in parallel). With opts.check_finite each
/// chunk's scales are scanned in the same pass (block_scales_finite); a chunk that fails is decoded with
/// dequantize_rows, which throws its FormatError naming the first non-finite weight.
void copy_file_block_rows(const gguf::File& file, const gguf::TensorInfo& t, backend::Weight& w, int64_t row0,
                          const ConvertOptions& opts = {});

/// The finite check of copy_file_block_rows without the copy, for a weight that reads `t` in place
/// (backend::Weight::view_file_blocks): with opts.check_finite, every scale of file-block tensor `t` scanned by
/// `opts.threads` threads; throws dequantize_rows' FormatError naming the first non-finite weight.
/// Throws ArgumentError for a tensor of another type.
void check_file_block_rows(const gguf::File& file, const gguf::TensorInfo& t, const ConvertOptions& opts = {});

/// Rows [row0, row0 + t.n_rows()) of Q8_0 or Q4_0 weight `w` (Weight::set_rows_q8_0 / set_rows_q4_0: 4-row
/// interleaved groups, quants and f32 scales apart) from tensor `t` of the matching type (split_block_rows),
/// chunks of about 1 MiB of whole row groups split among `opts.threads` OpenMP threads. With
/// opts.check_finite a non-finite scale throws split_block_rows' FormatError naming it (the first in the
/// tensor). Throws ArgumentError for another dtype, type or row range.
void copy_split_block_rows(const gguf::File& file, const gguf::TensorInfo& t, backend::Weight& w, int64_t row0,
                           const ConvertOptions& opts = {});

}  // namespace kveval
