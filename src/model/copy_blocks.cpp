#include "model/copy_blocks.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "util/error.hpp"

namespace kveval {

namespace {

constexpr int64_t kNone = std::numeric_limits<int64_t>::max();

int threads_of(const ConvertOptions& opts) { return opts.threads > 0 ? opts.threads : omp_get_max_threads(); }

/// Scans the scales of file-block tensor `t` in chunks of `chunk` rows split among the threads, calling
/// each(r0, nr) on every chunk in the same pass; then decodes the chunks whose scales failed with
/// dequantize_rows, which throws its FormatError naming the first non-finite weight.
template <class Each>
void scan_file_block_rows(const gguf::File& file, const gguf::TensorInfo& t, const ConvertOptions& opts, Each each) {
  const int64_t n = static_cast<int64_t>(t.n_rows());
  const uint64_t row_bytes = t.row_bytes(), ts = gguf::type_info(t.type).type_size;
  const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>((uint64_t{4} << 20) / row_bytes));
  const int64_t n_chunks = (n + chunk - 1) / chunk;
  auto finite = [&](int64_t r0, int64_t nr) {
    return block_scales_finite(t.type, t.data + static_cast<uint64_t>(r0) * row_bytes,
                               static_cast<uint64_t>(nr) * row_bytes / ts);
  };
  int64_t first_bad = kNone;
#pragma omp parallel for num_threads(threads_of(opts)) schedule(static) reduction(min : first_bad) if (n_chunks >= 2)
  for (int64_t k = 0; k < n_chunks; ++k) {
    const int64_t r0 = k * chunk, nr = std::min(chunk, n - r0);
    if (opts.check_finite && !finite(r0, nr)) first_bad = std::min(first_bad, k);
    each(r0, nr);  // must not throw
  }
  if (first_bad == kNone) return;
  for (int64_t k = first_bad; k < n_chunks; ++k) {
    const int64_t r0 = k * chunk, nr = std::min(chunk, n - r0);
    if (finite(r0, nr)) continue;
    std::vector<float> rows(static_cast<size_t>(nr) * t.row_length());
    dequantize_rows(file, t, static_cast<uint64_t>(r0), static_cast<uint64_t>(nr), DType::F32, rows.data(),
                    {true, opts.threads});
  }
}

void require_file_blocks(const gguf::TensorInfo& t, const char* who) {
  const gguf::TypeInfo& ti = gguf::type_info(t.type);
  if (!ti.kept || !backend::is_file_blocks(*ti.kept))
    throw ArgumentError(fmt::format("{}: tensor '{}' is {}", who, t.name, gguf::type_name(t.type)));
}

}  // namespace

void check_file_block_rows(const gguf::File& file, const gguf::TensorInfo& t, const ConvertOptions& opts) {
  require_file_blocks(t, "check_file_block_rows");
  if (opts.check_finite) scan_file_block_rows(file, t, opts, [](int64_t, int64_t) {});
}

void copy_file_block_rows(const gguf::File& file, const gguf::TensorInfo& t, backend::Weight& w, int64_t row0,
                          const ConvertOptions& opts) {
  const int64_t n = static_cast<int64_t>(t.n_rows());
  if (!backend::is_file_blocks(w.dtype()) || w.is_view())
    throw ArgumentError(fmt::format("copy_file_block_rows: a {} weight{}", backend::to_string(w.dtype()),
                                    w.is_view() ? " view" : ""));
  require_file_blocks(t, "copy_file_block_rows");
  if (row0 < 0 || n > w.n_out() - row0)
    throw ArgumentError(fmt::format("copy_file_block_rows: tensor '{}' of {} rows at row {} of a {}-row weight", t.name,
                                    n, row0, w.n_out()));
  const uint64_t row_bytes = t.row_bytes();
  scan_file_block_rows(file, t, opts, [&](int64_t r0, int64_t nr) {  // set_rows_file_blocks: checked above
    w.set_rows_file_blocks(row0 + r0, t.data + static_cast<uint64_t>(r0) * row_bytes, nr);
  });
}

void copy_split_block_rows(const gguf::File& file, const gguf::TensorInfo& t, backend::Weight& w, int64_t row0,
                           const ConvertOptions& opts) {
  const int64_t n = static_cast<int64_t>(t.n_rows()), n_in = static_cast<int64_t>(t.row_length());
  const gguf::TypeInfo& ti = gguf::type_info(t.type);
  if (!backend::is_blocks(w.dtype()) || !ti.kept || *ti.kept != w.dtype() || n_in != w.n_in())
    throw ArgumentError(fmt::format("copy_split_block_rows: tensor '{}' ({}) into a {} weight", t.name,
                                    gguf::type_name(t.type), backend::to_string(w.dtype())));
  if (row0 < 0 || n > w.n_out() - row0)
    throw ArgumentError(fmt::format("copy_split_block_rows: tensor '{}' of {} rows at row {} of a {}-row weight",
                                    t.name, n, row0, w.n_out()));
  // chunks of whole kQGroup-row groups of w (so no two threads write one group's cache lines), about 1 MiB of quants
  const int64_t nb = n_in / backend::kQBlock, qb = backend::block_quant_bytes(w.dtype());
  const int64_t g = backend::kQGroup, chunk = std::max<int64_t>(g, (int64_t{1} << 20) / (nb * qb) / g * g);
  const int64_t skew = row0 % g, n_chunks = (n + skew + chunk - 1) / chunk;  // chunk k: tensor rows from k·chunk − skew
  int64_t first_bad = kNone;
#pragma omp parallel num_threads(threads_of(opts)) if (n_chunks >= 2)
  {
    std::vector<uint8_t> quants(static_cast<size_t>(chunk * nb * qb));
    std::vector<float> scales(static_cast<size_t>(chunk * nb));
#pragma omp for schedule(static) reduction(min : first_bad)
    for (int64_t k = 0; k < n_chunks; ++k) {
      const int64_t r0 = std::max<int64_t>(0, k * chunk - skew), nr = std::min(n, (k + 1) * chunk - skew) - r0;
      split_block_rows(file, t, static_cast<uint64_t>(r0), static_cast<uint64_t>(nr), quants.data(), scales.data(),
                       false);
      if (opts.check_finite && !std::all_of(scales.begin(), scales.begin() + nr * nb, [](float d) { return std::isfinite(d); }))
        first_bad = std::min(first_bad, r0);
      if (w.dtype() == backend::Dtype::Q4_0) w.set_rows_q4_0(row0 + r0, quants.data(), scales.data(), nr);
      else w.set_rows_q8_0(row0 + r0, reinterpret_cast<const int8_t*>(quants.data()), scales.data(), nr);
    }
  }
  if (first_bad == kNone) return;
  std::vector<uint8_t> quants(static_cast<size_t>(chunk * nb * qb));  // the first bad chunk again, to name the block
  std::vector<float> scales(static_cast<size_t>(chunk * nb));
  split_block_rows(file, t, static_cast<uint64_t>(first_bad),
                   static_cast<uint64_t>(std::min(chunk, n - first_bad)), quants.data(), scales.data(), true);
}

}  // namespace kveval
