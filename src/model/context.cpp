// Context: the cache API over its KvCache, the counters and the cache scopes
// (the forward pass is in forward.cpp).
#include "model/context.hpp"

#include <fmt/format.h>

#include "model/context_impl.hpp"
#include "util/error.hpp"

namespace kveval {

Context::Context(const Model& model) : impl_(std::make_unique<Impl>(model)) {}
Context::~Context() = default;

const Model& Context::model() const { return impl_->model; }
const ContextStats& Context::stats() const { return impl_->stats; }
const KvCache& Context::kv_cache() const { return impl_->cache; }

KvCacheDtype Context::kv_cache_dtype() const { return impl_->cache.dtype(); }

void Context::set_kv_cache_dtype(KvCacheDtype d) {
  if (caches_are_setup())
    throw CacheError(fmt::format("set_kv_cache_dtype {}: KV caches are set up; delete_caches first", to_string(d)));
  impl_->cache.set_dtype(resolve_kv_cache_dtype(d, impl_->w.dtype));
}

void Context::set_kv_cache_swa_full(bool full) { impl_->cache.set_swa_full(full); }
bool Context::kv_cache_swa_full() const { return impl_->cache.swa_full(); }

void Context::setup_caches(int batch_size, int max_seq_len) {
  auto& im = *impl_;
  if (batch_size < 1 || max_seq_len < 1)
    throw ArgumentError(fmt::format("setup_caches: batch_size {} and max_seq_len {} must be >= 1", batch_size, max_seq_len));
  if (max_seq_len > im.w.hp.n_ctx_train)
    throw ArgumentError(fmt::format("setup_caches: max_seq_len {} exceeds the model's context_length {}", max_seq_len,
                                    im.w.hp.n_ctx_train));
  if (im.cache.is_setup() && !(im.cache.batch_size() == batch_size && im.cache.capacity() == max_seq_len))
    delete_caches();
  if (im.cache.setup(batch_size, max_seq_len)) ++im.stats.cache_allocations;
  im.cache_enabled = true;
}

bool Context::caches_are_setup() const { return impl_->cache.is_setup(); }
bool Context::caches_are_enabled() const { return impl_->cache_enabled; }

void Context::set_caches_enabled(bool enabled) {
  if (enabled && !caches_are_setup())
    throw CacheError("cannot enable KV caches: they are not set up; call setup_caches(batch_size, max_seq_len) first");
  impl_->cache_enabled = enabled;
}

void Context::reset_caches() { impl_->cache.reset(); }
void Context::reset_cache_row(int row) { impl_->cache.reset_row(row); }

void Context::delete_caches() {
  impl_->cache.release();
  impl_->cache_enabled = false;
}

int Context::n_past(int row) const { return impl_->cache.n_past(row); }
uint64_t Context::kv_f16_overflows(int row) const { return impl_->cache.f16_overflows(row); }
int Context::capacity() const { return impl_->cache.capacity(); }
int Context::cache_batch_size() const { return impl_->cache.batch_size(); }
size_t Context::bytes() const { return impl_->cache.bytes(); }
size_t Context::cache_bytes_for(int batch_size, int max_seq_len) const {
  return impl_->cache.bytes_for(batch_size, max_seq_len);
}
const float* Context::cache_data(int which) const { return impl_->cache.data(which); }

// ---- scopes -----------------------------------------------------------------

KvCacheScope::KvCacheScope(Context& ctx, int batch_size, int max_seq_len, CachePolicy policy)
    : ctx_(ctx), policy_(policy) {
  if (policy == CachePolicy::Release) {
    if (ctx.caches_are_setup())
      throw CacheError("KvCacheScope: KV caches are already set up; delete_caches() first or use CachePolicy::Reuse");
    ctx.setup_caches(batch_size, max_seq_len);
  } else {
    if (ctx.caches_are_setup() && ctx.cache_batch_size() == batch_size && ctx.capacity() == max_seq_len) {
      ctx.reset_caches();
      ctx.set_caches_enabled(true);
    } else {
      ctx.setup_caches(batch_size, max_seq_len);
    }
  }
}

KvCacheScope::~KvCacheScope() {
  ctx_.set_caches_enabled(false);
  if (policy_ == CachePolicy::Release)
    ctx_.delete_caches();
  else
    ctx_.reset_caches();
}

KvCacheDisabled::KvCacheDisabled(Context& ctx) : ctx_(ctx), was_enabled_(ctx.caches_are_enabled()) {
  if (!ctx.caches_are_setup())
    throw CacheError("KvCacheDisabled: KV caches are not set up; there is nothing to disable");
  ctx.set_caches_enabled(false);
}

KvCacheDisabled::~KvCacheDisabled() {
  if (ctx_.caches_are_setup()) ctx_.set_caches_enabled(was_enabled_);
}

}  // namespace kveval
