// KvCache: allocation, rows, appends with the element-type conversion, the
// sliding layers' cells, views.
#include "model/kv_cache.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include <fmt/format.h>

#include "util/bf16.hpp"
#include "util/error.hpp"
#include "util/half.hpp"

namespace kveval {

namespace be = kveval::backend;

KvCache::KvCache(int n_layer, int n_kv_head, int head_dim, KvCacheDtype dtype, std::vector<int> windows)
    : n_layer_(n_layer), n_kv_head_(n_kv_head), head_dim_(head_dim), dtype_(KvCacheDtype::F32),
      windows_(std::move(windows)) {
  if (n_layer < 1 || n_kv_head < 1 || head_dim < 1)
    throw ArgumentError(fmt::format("KvCache: n_layer {}, n_kv_head {} and head_dim {} must be >= 1", n_layer,
                                    n_kv_head, head_dim));
  if (windows_.empty()) windows_.assign(static_cast<size_t>(n_layer), 0);
  if (windows_.size() != static_cast<size_t>(n_layer) || std::any_of(windows_.begin(), windows_.end(), [](int w) { return w < 0; }))
    throw ArgumentError(fmt::format("KvCache: {} windows for {} layers; each must be >= 0", windows_.size(), n_layer));
  set_dtype(dtype);
}
KvCache::~KvCache() = default;
KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;

void KvCache::set_dtype(KvCacheDtype d) {
  if (d == KvCacheDtype::Auto) throw ArgumentError("KvCache: the element type must be f32, bf16 or f16, not auto");
  if (is_setup())
    throw CacheError(fmt::format("set_kv_cache_dtype {}: KV caches are set up; delete_caches first", to_string(d)));
  dtype_ = d;
}

void KvCache::set_swa_full(bool full) {
  if (is_setup()) throw CacheError("set_swa_full: KV caches are set up; delete_caches first");
  swa_full_ = full;
}

size_t KvCache::elems(int batch, int cap) const {
  size_t cells = 0;
  for (int l = 0; l < n_layer_; ++l) cells += static_cast<size_t>(cells_for(l, cap));
  return cells * batch * n_kv_head_ * head_dim_;
}

void KvCache::check_layer(const char* what, int layer) const {
  if (layer < 0 || layer >= n_layer_)
    throw ArgumentError(fmt::format("{}: layer {} outside [0, {})", what, layer, n_layer_));
}

int KvCache::window(int layer) const {
  check_layer("KvCache::window", layer);
  return windows_[static_cast<size_t>(layer)];
}

int KvCache::n_sliding() const {
  return static_cast<int>(std::count_if(windows_.begin(), windows_.end(), [](int w) { return w > 0; }));
}

int KvCache::cells_for(int layer, int max_seq_len) const {
  const int w = window(layer);
  if (w == 0 || swa_full_) return max_seq_len;
  return static_cast<int>(std::min<int64_t>(max_seq_len, int64_t{w} - 1 + be::kAttentionQueryBlock));
}

int KvCache::max_append(int layer) const {
  check_layer("KvCache::max_append", layer);
  if (!is_setup()) return 0;
  const int cells = cells_[static_cast<size_t>(layer)];
  return cells == cap_ ? cap_ : cells - (windows_[static_cast<size_t>(layer)] - 1);
}

int KvCache::begin(int layer, int row) const {
  check_layer("KvCache::begin", layer);
  check_row("KvCache::begin", row);
  return begin_[static_cast<size_t>(layer) * batch_ + row];
}

size_t KvCache::bytes_for(int batch_size, int max_seq_len) const {
  return 2 * elems(batch_size, max_seq_len) * elem_bytes();
}

size_t KvCache::bytes() const { return is_setup() ? bytes_for(batch_, cap_) : 0; }

bool KvCache::setup(int batch_size, int max_seq_len) {
  if (batch_size < 1 || max_seq_len < 1)
    throw ArgumentError(fmt::format("setup_caches: batch_size {} and max_seq_len {} must be >= 1", batch_size, max_seq_len));
  bool allocated = false;
  if (!(k_ && batch_ == batch_size && cap_ == max_seq_len)) {
    release();
    const size_t n = (elems(batch_size, max_seq_len) * elem_bytes() + sizeof(float) - 1) / sizeof(float);
    // No zero-fill: positions >= n_past are never read, so untouched pages stay
    // unmapped (4 KiB pages: PageBuffer refuses transparent huge pages).
    try {
      k_ = be::PageBuffer::allocate(n);
      v_ = be::PageBuffer::allocate(n);
    } catch (const std::bad_alloc&) {
      k_.reset();
      throw CacheError(fmt::format("setup_caches: cannot allocate {} bytes for a {} x {} KV cache",
                                   bytes_for(batch_size, max_seq_len), batch_size, max_seq_len));
    }
    batch_ = batch_size;
    cap_ = max_seq_len;
    cells_.resize(static_cast<size_t>(n_layer_));
    layer_off_.resize(static_cast<size_t>(n_layer_));
    size_t off = 0;
    for (int l = 0; l < n_layer_; ++l) {
      cells_[static_cast<size_t>(l)] = cells_for(l, max_seq_len);
      layer_off_[static_cast<size_t>(l)] = off;
      off += static_cast<size_t>(batch_size) * n_kv_head_ * cells_[static_cast<size_t>(l)] * head_dim_;
    }
    allocated = true;
  }
  begin_.assign(static_cast<size_t>(n_layer_) * batch_size, 0);
  n_past_.assign(static_cast<size_t>(batch_size), 0);
  overflows_.assign(static_cast<size_t>(batch_size), 0);
  return allocated;
}

void KvCache::reset() {
  std::fill(n_past_.begin(), n_past_.end(), 0);
  std::fill(begin_.begin(), begin_.end(), 0);
  std::fill(overflows_.begin(), overflows_.end(), 0);
}

void KvCache::reset_row(int row) {
  check_row("reset_cache_row", row);
  n_past_[static_cast<size_t>(row)] = 0;
  for (int l = 0; l < n_layer_; ++l) begin_[static_cast<size_t>(l) * batch_ + row] = 0;
  overflows_[static_cast<size_t>(row)] = 0;
}

void KvCache::release() {
  k_.reset();
  v_.reset();
  batch_ = 0;
  cap_ = 0;
  cells_.clear();
  layer_off_.clear();
  begin_.clear();
  n_past_.clear();
  overflows_.clear();
}

void KvCache::check_row(const char* what, int row) const {
  if (row < 0 || row >= batch_)
    throw ArgumentError(fmt::format("{}: row {} outside [0, {}) (caches {})", what, row, batch_,
                                    is_setup() ? "set up" : "not set up"));
}

int KvCache::n_past(int row) const {
  check_row("n_past", row);
  return n_past_[static_cast<size_t>(row)];
}

uint64_t KvCache::f16_overflows(int row) const {
  check_row("kv_f16_overflows", row);
  return overflows_[static_cast<size_t>(row)];
}

char* KvCache::at(int which, int layer, int row, int head) const {
  const size_t cells = static_cast<size_t>(cells_[static_cast<size_t>(layer)]);
  const size_t off = layer_off_[static_cast<size_t>(layer)] + (static_cast<size_t>(row) * n_kv_head_ + head) * cells * head_dim_;
  return reinterpret_cast<char*>((which == 0 ? k_ : v_).get()) + off * elem_bytes();
}

void KvCache::slide(int layer, int row, int pos, int n) {
  int& b = begin_[static_cast<size_t>(layer) * batch_ + row];
  const int cells = cells_[static_cast<size_t>(layer)], w = windows_[static_cast<size_t>(layer)];
  if (pos + n - b <= cells) return;
  // The first new query (at pos) sees [pos + 1 - w, pos]: keep those held before it, at the front.
  const int nb = std::max(b, pos + 1 - w);
  if (pos < b || pos + n - nb > cells)
    throw CacheError(fmt::format("KvCache::append: {} positions from {} do not fit the {} cells of sliding layer {} "
                                 "(row {} holds positions from {}); append at most {} at once",
                                 n, pos, cells, layer, row, b, max_append(layer)));
  const size_t row_bytes = static_cast<size_t>(head_dim_) * elem_bytes();
  for (int which = 0; which < 2; ++which)
    for (int h = 0; h < n_kv_head_; ++h) {
      char* base = at(which, layer, row, h);
      std::memmove(base, base + static_cast<size_t>(nb - b) * row_bytes, static_cast<size_t>(pos - nb) * row_bytes);
    }
  b = nb;
}

uint64_t KvCache::append(int layer, int row, int n, const float* k, const float* v, int64_t stride, int offset) {
  check_row("KvCache::append", row);
  check_layer("KvCache::append", layer);
  const int past = n_past_[static_cast<size_t>(row)] + offset;
  if (n < 0 || offset < 0 || past + n > cap_)
    throw CacheError(fmt::format("KV cache full: row {} holds {} of {} positions and {} more were written; "
                                 "set up caches with max_seq_len >= {}",
                                 row, past, cap_, n, past + n));
  if (windows_[static_cast<size_t>(layer)] > 0) slide(layer, row, past, n);
  const int b = begin_[static_cast<size_t>(layer) * batch_ + row];
  const size_t HD = static_cast<size_t>(head_dim_);
  uint64_t over = 0;
  for (int h = 0; h < n_kv_head_; ++h) {
    char* kc = at(0, layer, row, h);
    char* vc = at(1, layer, row, h);
    for (int i = 0; i < n; ++i) {
      const float* ks = k + i * stride + h * head_dim_;
      const float* vs = v + i * stride + h * head_dim_;
      const size_t to = static_cast<size_t>(past - b + i) * HD;
      if (dtype_ == KvCacheDtype::BF16) {
        util::f32_to_bf16_n(ks, reinterpret_cast<uint16_t*>(kc) + to, HD);
        util::f32_to_bf16_n(vs, reinterpret_cast<uint16_t*>(vc) + to, HD);
      } else if (dtype_ == KvCacheDtype::F16) {  // |x| >= 65520: ±Inf, counted
        over += util::f32_to_f16_n(ks, reinterpret_cast<uint16_t*>(kc) + to, HD) +
                util::f32_to_f16_n(vs, reinterpret_cast<uint16_t*>(vc) + to, HD);
      } else {
        std::memcpy(reinterpret_cast<float*>(kc) + to, ks, sizeof(float) * HD);
        std::memcpy(reinterpret_cast<float*>(vc) + to, vs, sizeof(float) * HD);
      }
    }
  }
  overflows_[static_cast<size_t>(row)] += over;
  return over;
}

void KvCache::advance(int row, int n) {
  check_row("KvCache::advance", row);
  int& past = n_past_[static_cast<size_t>(row)];
  if (n < 0 || past + n > cap_)
    throw CacheError(fmt::format("KvCache::advance: row {} holds {} of {} positions; {} more do not fit", row, past,
                                 cap_, n));
  past += n;
}

be::KvView KvCache::view(int layer, int row) const {
  check_row("KvCache::view", row);
  check_layer("KvCache::view", layer);
  const be::Dtype dt = dtype_ == KvCacheDtype::BF16  ? be::Dtype::BF16
                       : dtype_ == KvCacheDtype::F16 ? be::Dtype::F16
                                                     : be::Dtype::F32;
  return {at(0, layer, row, 0), at(1, layer, row, 0), head_dim_,
          static_cast<int64_t>(cells_[static_cast<size_t>(layer)]) * head_dim_, dt,
          begin_[static_cast<size_t>(layer) * batch_ + row]};
}

const float* KvCache::data(int which) const {
  if (dtype_ != KvCacheDtype::F32 && is_setup())
    throw CacheError(fmt::format("cache_data: the KV cache holds {}, not f32", to_string(dtype_)));
  return which == 0 ? k_.get() : v_.get();
}

}  // namespace kveval
