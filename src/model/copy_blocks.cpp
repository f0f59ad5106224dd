#include "model/copy_blocks.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "util/error.hpp"

namespace kveval {

void copy_file_block_rows(const gguf::File& file, const gguf::TensorInfo& t, backend::Weight& w, int64_t row0,
                          const ConvertOptions& opts) {
  const int64_t n = static_cast<int64_t>(t.n_rows());
  if (!backend::is_file_blocks(w.dtype()))
    throw ArgumentError(fmt::format("copy_file_block_rows: a {} weight", backend::to_string(w.dtype())));
  if (row0 < 0 || n > w.n_out() - row0)
    throw ArgumentError(fmt::format("copy_file_block_rows: tensor '{}' of {} rows at row {} of a {}-row weight", t.name,
                                    n, row0, w.n_out()));
  const uint64_t row_bytes = t.row_bytes(), ts = gguf::type_info(t.type).type_size;
  const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>((uint64_t{4} << 20) / row_bytes));
  const int64_t n_chunks = (n + chunk - 1) / chunk;
  int64_t first_bad = std::numeric_limits<int64_t>::max();
#pragma omp parallel for num_threads(opts.threads > 0 ? opts.threads : omp_get_max_threads()) schedule(static) reduction(min : first_bad) \
    if (n_chunks >= 2)
  for (int64_t k = 0; k < n_chunks; ++k) {
    const int64_t r0 = k * chunk, nr = std::min(chunk, n - r0);
    const std::byte* src = t.data + static_cast<uint64_t>(r0) * row_bytes;
    if (opts.check_finite && !block_scales_finite(t.type, src, static_cast<uint64_t>(nr) * row_bytes / ts))
      first_bad = std::min(first_bad, k);
    w.set_rows_file_blocks(row0 + r0, src, nr);  // cannot throw: dtype and range checked above
  }
  if (first_bad == std::numeric_limits<int64_t>::max()) return;
  for (int64_t k = first_bad; k < n_chunks; ++k) {  // decode the chunks whose scales failed: throws at the first bad weight
    const int64_t r0 = k * chunk, nr = std::min(chunk, n - r0);
    if (block_scales_finite(t.type, t.data + static_cast<uint64_t>(r0) * row_bytes, static_cast<uint64_t>(nr) * row_bytes / ts))
      continue;
    std::vector<float> rows(static_cast<size_t>(nr) * t.row_length());
    dequantize_rows(file, t, static_cast<uint64_t>(r0), static_cast<uint64_t>(nr), DType::F32, rows.data(),
                    {true, opts.threads});
  }
}

}  // namespace kveval
