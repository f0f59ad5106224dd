// Model: accessors and memory estimates (loading is in model_load.cpp, the
// architectures in model/arch/, the forward pass in a Context: forward.cpp).
#include "model/model.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "model/model_impl.hpp"
#include "util/error.hpp"

namespace kveval {

Model::Model() : impl_(std::make_unique<Impl>()) {}
Model::~Model() = default;

const HParams& Model::hparams() const { return impl_->hp; }
const Tokenizer& Model::tokenizer() const { return *impl_->tok; }
const std::string& Model::path() const { return impl_->path; }
int Model::threads() const { return impl_->engine->threads(); }
size_t Model::weight_bytes() const { return impl_->weight_bytes; }
const LoadSummary& Model::load_summary() const { return impl_->summary; }
const std::string& Model::sha256() const { return impl_->sha256; }

size_t Model::activation_bytes_for(int rows, int seq, bool all_logits, int64_t tokens, int64_t logit_rows) const {
  const HParams& hp = impl_->hp;
  const size_t R = static_cast<size_t>(std::max(rows, 1)), S = static_cast<size_t>(std::max(seq, 1));
  const size_t T = tokens >= 0 ? static_cast<size_t>(tokens) : R * S, D = static_cast<size_t>(hp.n_embd), F = static_cast<size_t>(hp.n_ff);
  const size_t KV = static_cast<size_t>(impl_->kv_dim()), V = static_cast<size_t>(hp.n_vocab);
  const size_t group = static_cast<size_t>(hp.n_head / hp.n_head_kv);
  // Context::Impl::reserve: x, xb, qkv, att, gu, hb, last; attention scores of the longest sequence;
  // the caller's logits; the last-position logits of a partial batch.
  const size_t Q = static_cast<size_t>(impl_->q_dim());
  size_t floats = T * (D + D + (Q + 2 * KV) + Q + 2 * F + F) + R * D + group * S * S;
  if (logit_rows >= 0)  // forward_rows: the caller's logits and the gathered hidden states of those rows
    floats += static_cast<size_t>(logit_rows) * (V + D);
  else
    floats += all_logits ? R * S * V : 2 * R * V;
  size_t tile = 0;  // the engine's widened panels of the largest kept-block matrix a pass of many rows multiplies
  if (impl_->engine->block_tiles_bf16() && T > 16) {
    const int th = impl_->engine->threads();
    impl_->for_each_matrix([&tile, th](const backend::Weight& w) {
      if (backend::is_file_blocks(w.dtype()))
        tile = std::max(tile, backend::widened_bf16_bytes(w.n_out(), w.n_in(), th));
    });
  }
  return floats * sizeof(float) + T * 2 * sizeof(int32_t) + tile;
}
uint64_t Model::primitives_created() const { return impl_->engine->primitives_created(); }
uint64_t Model::backend_allocations() const { return impl_->engine->buffer_allocations(); }
ComputeDtype Model::dtype() const { return impl_->dtype; }
const std::string& Model::dtype_note() const { return impl_->dtype_note; }
KvCacheDtype Model::kv_cache_dtype() const { return impl_->kv_dtype; }

size_t Model::cache_bytes_for(int batch_size, int max_seq_len, KvCacheDtype kv) const {
  const HParams& hp = impl_->hp;
  const KvCache shape(hp.n_layer, hp.n_head_kv, hp.head_dim(),
                      kv == KvCacheDtype::Auto ? impl_->kv_dtype : resolve_kv_cache_dtype(kv, impl_->dtype),
                      impl_->layer_windows());
  return shape.bytes_for(batch_size, max_seq_len);
}

}  // namespace kveval
