#pragma once
// Loading kept blocks: a tensor's blocks checked and copied into a block weight in parallel, with
// the finite check on their scales (kept out of dequantize.cpp, which builds without src/backend for the fuzz
// targets).
#include <cstdint>

#include "backend/backend.hpp"
#include "model/dequantize.hpp"
#include "model/gguf.hpp"

namespace kveval {

/// Copies tensor `t` (a Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 or Q2_K…Q6_K tensor of w.n_out() − row0 rows or fewer) byte
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

}  // namespace kveval
