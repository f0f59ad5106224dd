#pragma once
// The key/value cache of a transformer's attention layers, on its own: buffers,
// element type, capacity, fill level per row and the f16 overflow counters.
// Role and vocabulary follow torchtune's KVCache (modules/kv_cache.py: a
// module per cache with reset/update and a per-row position, here n_past) and
// llama.cpp's llama_kv_cache (a cache apart from the model and the context).
#include <cstddef>
#include <cstdint>
#include <vector>

#include <string>

#include "backend/backend.hpp"

namespace kveval {

/// Element type of the KV cache. F32: K and V as the forward pass computed
/// them (cached decoding matches cache-free passes to f32 rounding). BF16:
/// bfloat16 (round to nearest even, util/bf16.hpp), half the bytes; attention
/// widens each element exactly as it reads it. F16: IEEE half (round to
/// nearest even, util/half.hpp; llama.cpp's default `-ctk f16 -ctv f16`), half
/// the bytes with 3 more significand bits than bf16 but a range of ±65504: a
/// K or V value with |x| >= 65520 (which rounds past 65504) is stored as ±Inf (counted in
/// ContextStats::kv_f16_overflows), and that row's logits become non-finite.
/// Auto: BF16 when the compute dtype is BF16 (vLLM's `--kv-cache-dtype auto`:
/// the model's dtype), else F32.
enum class KvCacheDtype { Auto, F32, BF16, F16 };
/// "auto" / "f32" / "bf16" / "f16".
const char* to_string(KvCacheDtype d);
/// Parses "auto", "f32", "bf16" or "f16"; throws ArgumentError naming `what` otherwise.
KvCacheDtype parse_kv_cache_dtype(const std::string& s, const std::string& what = "--kv-cache-dtype");
/// K and V caches of `n_layer` layers, each layer [batch][n_kv_head][cells][head_dim]
/// of dtype() (float32, bfloat16 or IEEE half), the layers one after another.
/// Positions are half-open: row r has seen [0, n_past(r)). A global layer
/// holds every position (cells = capacity(), position p in cell p). A sliding
/// layer (window W > 0: its queries see the last W positions, themselves
/// included) keeps min(capacity(), W - 1 + backend::kAttentionQueryBlock)
/// cells: a contiguous run of positions from begin(layer, row), position p in
/// cell p - begin. When an append would run past the last cell, the W - 1
/// positions before the first new one (all its query sees) move to the front
/// and begin advances, so attention reads the positions it sees in order from
/// one contiguous view (backend::KvView::begin), with the bits of a cache that
/// keeps them all. llama.cpp's iSWA cache (llama-kv-cache-iswa.cpp) likewise
/// gives the sliding layers window + ubatch cells. Built from plain shape
/// numbers; set up (allocated) by setup(). Not thread-safe.
class KvCache {
 public:
  /// A cache for `n_layer` layers of `n_kv_head` heads of `head_dim` values
  /// each, of element type `dtype` (F32, BF16 or F16). Not set up yet.
  /// Throws ArgumentError for a size < 1 or dtype Auto.
  /// `windows`: empty (every layer global) or one value per layer, > 0 for a
  /// sliding layer of that window, 0 for a global one. Throws ArgumentError
  /// for a size < 1, dtype Auto, a negative window or a count other than n_layer.
  KvCache(int n_layer, int n_kv_head, int head_dim, KvCacheDtype dtype = KvCacheDtype::F32,
          std::vector<int> windows = {});
  ~KvCache();
  KvCache(KvCache&&) noexcept;
  KvCache& operator=(KvCache&&) noexcept;

  int n_layer() const { return n_layer_; }
  int n_kv_head() const { return n_kv_head_; }
  int head_dim() const { return head_dim_; }
  /// Element type (F32, BF16 or F16, never Auto).
  KvCacheDtype dtype() const { return dtype_; }
  /// Changes the element type. Throws CacheError while set up (delete first),
  /// ArgumentError for Auto.
  void set_dtype(KvCacheDtype d);

  /// Allocates `batch_size` rows of `max_seq_len` positions (no zero-fill:
  /// pages become resident when written) and rewinds every row; a set-up
  /// cache of the same shape is only rewound. Returns true when it allocated.
  /// Throws ArgumentError for sizes < 1, CacheError when the memory cannot be
  /// mapped (naming the bytes).
  bool setup(int batch_size, int max_seq_len);
  /// True between setup and release.
  bool is_setup() const { return static_cast<bool>(k_); }
  /// Rewinds every row to position 0 in O(1) and clears the overflow counters;
  /// no memory is written.
  void reset();
  /// Rewinds row `row` to position 0 and clears its overflow counter. Throws
  /// ArgumentError if out of range.
  void reset_row(int row);
  /// Frees the buffers (torchtune's delete_caches); afterwards is_setup() is
  /// false, batch_size(), capacity() and bytes() are 0.
  void release();

  /// Positions filled in row `row`. Throws ArgumentError if out of range.
  int n_past(int row) const;
  /// K/V values of row `row` stored as ±Inf by an f16 cache (|x| >= 65520,
  /// util::f32_to_f16_n) since the row was set up or last reset; 0 for other
  /// element types. Throws ArgumentError if out of range.
  uint64_t f16_overflows(int row) const;
  /// Positions per row (max_seq_len of setup), 0 when not set up.
  int capacity() const { return cap_; }
  /// Rows (batch_size of setup), 0 when not set up.
  int batch_size() const { return batch_; }
  /// Bytes of K and V together (0 when not set up).
  size_t bytes() const;
  /// Bytes K and V of this shape and element type take:
  /// 2 * batch_size * n_kv_head * head_dim * (4 or 2) * the sum over layers of
  /// cells_for(layer, max_seq_len).
  size_t bytes_for(int batch_size, int max_seq_len) const;
  /// llama.cpp's swa_full: true makes every layer keep every position (cells =
  /// capacity(); the windows still mask). Throws CacheError while set up.
  void set_swa_full(bool full);
  bool swa_full() const { return swa_full_; }
  /// Window of `layer` (0: global). Throws ArgumentError for a bad layer.
  int window(int layer) const;
  /// Layers with a window (> 0).
  int n_sliding() const;
  /// Cells per row `layer` keeps in a cache of `max_seq_len` positions:
  /// max_seq_len for a global layer (or with swa_full()), min(max_seq_len,
  /// window - 1 + backend::kAttentionQueryBlock) for a sliding one.
  int cells_for(int layer, int max_seq_len) const;
  /// Positions one append to `layer` may write at most: capacity() when the
  /// layer holds every position, else cells - (window - 1) (= the attention's
  /// query block). 0 when not set up.
  int max_append(int layer) const;
  /// First position layer `layer`, row `row` still holds (0 for a global
  /// layer). Throws ArgumentError for a bad layer or row.
  int begin(int layer, int row) const;

  /// Writes the keys and values of `n` new tokens of layer `layer`, row `row`
  /// at positions [n_past(row) + offset, + n), converted to dtype()
  /// (bf16 and f16 round to nearest even). Token i's head h is read at
  /// k[i * stride + h * head_dim .. + head_dim] (and v alike), floats.
  /// n_past does not move (advance does, once every layer is written). A
  /// sliding layer first drops the positions no new query sees when the
  /// cells would overflow (see the class comment). Returns the values an f16
  /// cache stored as ±Inf (also added to the row's counter). Throws
  /// ArgumentError for a bad layer or row, CacheError when the row would
  /// exceed capacity() or n > max_append(layer).
  uint64_t append(int layer, int row, int n, const float* k, const float* v, int64_t stride, int offset = 0);
  /// n_past(row) += n after the tokens were appended to every layer. Throws
  /// ArgumentError for a bad row, CacheError past capacity().
  void advance(int row, int n);
  /// Attention's view of layer `layer`, row `row`: every kv head's cells,
  /// pos_stride head_dim, head_stride cells * head_dim, from position
  /// begin(layer, row). Throws ArgumentError for a bad layer or row.
  backend::KvView view(int layer, int row) const;
  /// Raw memory for tests: K (which=0) or V (which=1) as floats, nullptr when
  /// not set up (the layers one after another, each [batch][n_kv_head][cells][head_dim]).
  /// Throws CacheError for a set-up cache that is not F32.
  const float* data(int which) const;

 private:
  size_t elem_bytes() const { return dtype_ == KvCacheDtype::F32 ? 4 : 2; }
  size_t elems(int batch, int cap) const;
  /// Byte address of (layer, row, head, cell 0) in K (which 0) or V.
  char* at(int which, int layer, int row, int head) const;
  void check_row(const char* what, int row) const;
  void check_layer(const char* what, int layer) const;
  /// Makes room in sliding layer `layer`, row `row` for positions [pos, pos + n).
  void slide(int layer, int row, int pos, int n);

  int n_layer_, n_kv_head_, head_dim_;
  KvCacheDtype dtype_;
  std::vector<int> windows_;  // per layer, 0 = global
  bool swa_full_ = false;
  backend::PageBuffer k_, v_;  // pages become resident when written (no huge pages)
  int batch_ = 0, cap_ = 0;
  std::vector<int> cells_;         // per layer, of the set-up cache
  std::vector<size_t> layer_off_;  // per layer: elements before it
  std::vector<int> n_past_;
  std::vector<int> begin_;           // [layer][row]: first position held
  std::vector<uint64_t> overflows_;  // per row, since its last reset
};

}  // namespace kveval
