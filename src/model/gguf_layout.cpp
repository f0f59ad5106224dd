// Tensor shapes and the data section's alignment: see gguf.hpp.
#include <algorithm>
#include <bit>

#include <fmt/format.h>

#include "model/gguf.hpp"

namespace kveval::gguf {

std::vector<uint64_t> trim_trailing_ones(std::span<const uint64_t> dims) {
  size_t n = dims.size();
  while (n > 1 && dims[n - 1] == 1) --n;
  return {dims.begin(), dims.begin() + static_cast<long>(n)};
}

bool same_shape(std::span<const uint64_t> a, std::span<const uint64_t> b) {
  return trim_trailing_ones(a) == trim_trailing_ones(b);
}

std::string alignment_warning(const std::string& path, uint64_t alignment, bool declared, uint64_t header_end,
                              std::span<const uint8_t> file, const std::vector<TensorInfo>& tensors) {
  if (tensors.empty() || alignment == 0) return "";
  uint64_t offsets = 0;  // OR of all offsets: its lowest set bit is the largest power of two dividing them all
  uint64_t data_end = 0;  // end of the last tensor, relative to the data section
  for (const TensorInfo& t : tensors) {
    offsets |= t.offset;
    data_end = std::max(data_end, t.offset + t.n_bytes);
  }
  const uint64_t max_align = uint64_t{1} << 30;  // general.alignment's own limit
  const uint64_t divides_all = offsets == 0 ? max_align : (offsets & (~offsets + 1));
  const uint64_t size = file.size();
  const uint64_t start = (header_end + alignment - 1) / alignment * alignment;
  for (uint64_t larger = alignment * 2; larger <= std::min(divides_all, max_align); larger *= 2) {
    const uint64_t start2 = (header_end + larger - 1) / larger * larger;
    if (start2 == start) continue;  // the same data section: nothing is shifted
    if (start2 > size || data_end > size - start2) break;  // the tensors would not fit: not this layout
    if (!std::all_of(file.begin() + static_cast<long>(start), file.begin() + static_cast<long>(start2),
                     [](uint8_t b) { return b == 0; }))
      break;  // tensor bytes, not a writer's zero padding
    return fmt::format(
        "{}: general.alignment is {}{}, but every tensor offset is a multiple of {} and the tensors also fit "
        "a data section aligned to {} (after {} zero bytes): if the file was written for alignment {}, every weight "
        "is read {} bytes early",
        path, alignment, declared ? "" : " (the default)", larger, larger, start2 - start, larger, start2 - start);
  }
  return "";
}

}  // namespace kveval::gguf
