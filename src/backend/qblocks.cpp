// Kept-block weights: the exact-mode product, the widening and the embedding
// lookup, each dispatched by dtype to the K-quant or blocks-of-32 kernels.
#include "backend/qblocks.hpp"

#include <fmt/format.h>

#include "backend/file_qblocks.hpp"
#include "backend/kquants.hpp"
#include "util/error.hpp"

namespace kveval::backend {

void blocks_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads) {
  if (is_kquant(w.dtype())) return kquant_matmul(x, m, w, y, accumulate, threads);
  file_qblocks_matmul(x, m, w, y, accumulate, threads);  // throws for another dtype
}

void widen_rows(const Weight& w, int64_t n0, int64_t nc, float* dst, int64_t ld, int threads) {
  if (is_kquant(w.dtype())) return kquant_widen_rows(w, n0, nc, dst, ld, threads);
  file_qblocks_widen_rows(w, n0, nc, dst, ld, threads);  // throws for another dtype
}

void gather_rows(const Weight& w, std::span<const int32_t> ids, float* dst) {
  if (!is_file_blocks(w.dtype()))
    throw ArgumentError(fmt::format("gather_rows: a {} weight (a kept-block dtype expected)", to_string(w.dtype())));
  const int64_t n_in = w.n_in();
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= w.n_out())
      throw ArgumentError(fmt::format("gather_rows: row {} outside [0, {})", id, w.n_out()));
    widen_rows(w, id, 1, dst + static_cast<int64_t>(i) * n_in, n_in, 1);
  }
}

}  // namespace kveval::backend
