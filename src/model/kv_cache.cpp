// KvCache: allocation, rows, appends with the element-type conversion, views.
#include "model/kv_cache.hpp"

#include <algorithm>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "util/bf16.hpp"
#include "util/error.hpp"
#include "util/half.hpp"

namespace kveval {

namespace be = kveval::backend;

KvCache::KvCache(int n_layer, int n_kv_head, int head_dim, KvCacheDtype dtype)
    : n_layer_(n_layer), n_kv_head_(n_kv_head), head_dim_(head_dim), dtype_(KvCacheDtype::F32) {
  if (n_layer < 1 || n_kv_head < 1 || head_dim < 1)
    throw ArgumentError(fmt::format("KvCache: n_layer {}, n_kv_head {} and head_dim {} must be >= 1", n_layer,
                                    n_kv_head, head_dim));
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

size_t KvCache::elems(int batch, int cap) const {
  return static_cast<size_t>(n_layer_) * batch * n_kv_head_ * cap * head_dim_;
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
    allocated = true;
  }
  n_past_.assign(static_cast<size_t>(batch_size), 0);
  overflows_.assign(static_cast<size_t>(batch_size), 0);
  return allocated;
}

void KvCache::reset() {
  std::fill(n_past_.begin(), n_past_.end(), 0);
  std::fill(overflows_.begin(), overflows_.end(), 0);
}

void KvCache::reset_row(int row) {
  check_row("reset_cache_row", row);
  n_past_[static_cast<size_t>(row)] = 0;
  overflows_[static_cast<size_t>(row)] = 0;
}

void KvCache::release() {
  k_.reset();
  v_.reset();
  batch_ = 0;
  cap_ = 0;
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
  const size_t off = ((static_cast<size_t>(layer) * batch_ + row) * n_kv_head_ + head) * cap_ * head_dim_;
  return reinterpret_cast<char*>((which == 0 ? k_ : v_).get()) + off * elem_bytes();
}

uint64_t KvCache::append(int layer, int row, int n, const float* k, const float* v, int64_t stride) {
  check_row("KvCache::append", row);
  if (layer < 0 || layer >= n_layer_)
    throw ArgumentError(fmt::format("KvCache::append: layer {} outside [0, {})", layer, n_layer_));
  const int past = n_past_[static_cast<size_t>(row)];
  if (n < 0 || past + n > cap_)
    throw CacheError(fmt::format("KV cache full: row {} holds {} of {} positions and {} more were written; "
                                 "set up caches with max_seq_len >= {}",
                                 row, past, cap_, n, past + n));
  const size_t HD = static_cast<size_t>(head_dim_);
  uint64_t over = 0;
  for (int h = 0; h < n_kv_head_; ++h) {
    char* kc = at(0, layer, row, h);
    char* vc = at(1, layer, row, h);
    for (int i = 0; i < n; ++i) {
      const float* ks = k + i * stride + h * head_dim_;
      const float* vs = v + i * stride + h * head_dim_;
      const size_t to = static_cast<size_t>(past + i) * HD;
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
  if (layer < 0 || layer >= n_layer_)
    throw ArgumentError(fmt::format("KvCache::view: layer {} outside [0, {})", layer, n_layer_));
  const be::Dtype dt = dtype_ == KvCacheDtype::BF16  ? be::Dtype::BF16
                       : dtype_ == KvCacheDtype::F16 ? be::Dtype::F16
                                                     : be::Dtype::F32;
  return {at(0, layer, row, 0), at(1, layer, row, 0), head_dim_, static_cast<int64_t>(cap_) * head_dim_, dt};
}

const float* KvCache::data(int which) const {
  if (dtype_ != KvCacheDtype::F32 && is_setup())
    throw CacheError(fmt::format("cache_data: the KV cache holds {}, not f32", to_string(dtype_)));
  return which == 0 ? k_.get() : v_.get();
}

}  // namespace kveval
