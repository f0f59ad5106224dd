#include "model/copy_blocks.hpp"

#include <omp.h>

#include <algorithm>
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

}  // namespace kveval
