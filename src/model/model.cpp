#include "model/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <sys/stat.h>

#include <optional>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "model/gguf.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"
#include "util/hash.hpp"
#include "util/memory.hpp"
#include "util/sigbus_guard.hpp"

namespace kveval {

namespace be = kveval::backend;

const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::Eos: return "eos";
    case StopReason::MaxTokens: return "max_gen_toks";
    case StopReason::ContextFull: return "context full";
    case StopReason::StopString: return "until";
    case StopReason::NonFinite: return "non-finite logits";
  }
  return "?";
}

const char* to_string(CachePolicy p) { return p == CachePolicy::Release ? "release" : "reuse"; }

CachePolicy parse_cache_policy(const std::string& s) {
  if (s == "release") return CachePolicy::Release;
  if (s == "reuse") return CachePolicy::Reuse;
  throw ArgumentError(fmt::format("cache policy '{}': expected 'release' or 'reuse'", s));
}

namespace {

struct Layer {
  std::vector<float> attn_norm, ffn_norm;  // [n_embd]
  be::Weight wqkv;       // [n_embd + 2 kv_dim, n_embd]: attn_q, attn_k, attn_v stacked (one matmul)
  be::Weight wo;         // [n_embd, n_embd]
  be::Weight w_gate_up;  // [2 n_ff, n_embd]: ffn_gate, ffn_up stacked (one matmul)
  be::Weight w_down;     // [n_embd, n_ff]
};

}  // namespace

struct Model::Impl {
  std::string path;
  HParams hp;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<be::Engine> engine;
  std::vector<float> tok_embd;  // [n_vocab, n_embd] rows for the embedding lookup
  be::Weight output;            // output projection [n_vocab, n_embd] (a copy of token_embd when tied)
  std::vector<float> output_norm;
  std::vector<Layer> layers;
  size_t weight_bytes = 0;
  LoadSummary summary;
  std::string sha256;  // of the file bytes loaded ("" when not requested)

  // ---- KV cache: K and V [n_layer][batch][n_kv_head][cap][head_dim] ----
  be::PageBuffer k_cache, v_cache;  // pages become resident when written (no huge pages)
  int cache_batch = 0, cache_cap = 0;
  bool cache_enabled = false;
  std::vector<int> n_past;

  ModelStats stats;

  // ---- activation buffers (grow-only) ----
  be::Buffer x, xb, qkv, att, gu, hb, logits, last, scores;
  std::vector<int32_t> pos;       // [T]
  std::vector<int32_t> tok_ids;   // [T]
  std::vector<int> seq_row, seq_start, seq_len;  // packed sequences

  const be::Weight& out_weight() const { return output; }
  int kv_dim() const { return hp.n_head_kv * hp.head_dim(); }
  size_t cache_elems(int batch, int cap) const {
    return static_cast<size_t>(hp.n_layer) * batch * hp.n_head_kv * cap * hp.head_dim();
  }
  // Offset of (layer, row, head, pos=0) in a cache.
  size_t cache_off(int layer, int row, int head) const {
    return ((static_cast<size_t>(layer) * cache_batch + row) * hp.n_head_kv + head) * cache_cap * hp.head_dim();
  }

  void reserve(size_t T, size_t n_rows_last) {
    const size_t D = hp.n_embd, F = hp.n_ff, KV = kv_dim();
    bool a = false;
    a |= x.reserve(T * D);
    a |= xb.reserve(T * D);
    a |= qkv.reserve(T * (D + 2 * KV));
    a |= att.reserve(T * D);
    a |= gu.reserve(T * 2 * F);
    a |= hb.reserve(T * F);
    a |= last.reserve(std::max<size_t>(1, n_rows_last) * D);
    if (a) ++stats.buffer_allocations;
  }
};

Model::Model() : impl_(std::make_unique<Impl>()) {}
Model::~Model() = default;

namespace {

/// What identifies the contents of a file on disk: a change of size or
/// mtime of the same inode while loading means the bytes under the mapping moved.
struct FileStamp {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0;
};

std::optional<FileStamp> stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileStamp{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
                   static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

[[noreturn]] void changed_while_loading(const std::string& path, const std::string& what) {
  throw FormatError(fmt::format("{}: file changed while loading ({}); load it again once nothing writes to it", path, what));
}

/// Throws when the file at `path` is the same inode as `at_open` but its size
/// or mtime moved. A file renamed over the path is fine: the mapping still
/// holds the old inode's bytes, which stay consistent.
void check_unchanged(const std::string& path, const FileStamp& at_open, uint64_t mapped) {
  if (at_open.size != mapped)
    changed_while_loading(path, fmt::format("{} bytes before opening, {} bytes mapped", at_open.size, mapped));
  const auto now = stamp_of(path);
  if (!now || now->dev != at_open.dev || now->ino != at_open.ino) return;
  if (now->size != at_open.size)
    changed_while_loading(path, fmt::format("{} bytes at open, {} bytes now", at_open.size, now->size));
  if (now->mtime_ns != at_open.mtime_ns) changed_while_loading(path, "modified since it was opened");
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, const ModelOptions& opts) {
  if (opts.threads < 0 || opts.threads > kMaxThreads)
    throw ArgumentError(fmt::format("threads: expected an integer in [0, {}], got {}", kMaxThreads, opts.threads));
  const std::optional<FileStamp> at_open = stamp_of(path);
  Stopwatch load_time;
  gguf::File f(path);
  const std::span<const std::byte> file_bytes = f.bytes();
  if (!at_open) changed_while_loading(path, "it could not be stat()ed before opening");
  check_unchanged(path, *at_open, file_bytes.size());
  std::unique_ptr<Model> m(new Model());
  auto& im = *m->impl_;
  im.path = path;
  HParams& hp = im.hp;
  hp = read_hparams(f);
  im.tok = std::make_unique<Tokenizer>(Tokenizer::from_gguf(f));
  if (im.tok->n_vocab() != hp.n_vocab)
    throw FormatError(fmt::format("{}: tokenizer has {} tokens but token_embd.weight has {} rows", path,
                                  im.tok->n_vocab(), hp.n_vocab));
  if (opts.check_memory) {
    const MemoryPart weights{"weights", estimate_weight_bytes(f, opts.weight_dtype)};
    check_memory_plan(fmt::format("the model {}", path), std::span(&weights, 1), memory_budget(),
                      "use a smaller model or raise the memory limit");
  }
  if (opts.on_load_stage) opts.on_load_stage("mapped");
  // The file's SHA-256 from the very bytes the weights are copied from.
  if (opts.hash) {
    Sha256 sha;
    if (!read_catching_sigbus(file_bytes.data(), file_bytes.size(),
                              [&] { sha.update(file_bytes.data(), file_bytes.size()); }))
      changed_while_loading(path, "it was truncated while being hashed");
    im.sha256 = sha.hex();
  }
  check_unchanged(path, *at_open, file_bytes.size());  // again, just before copying
  if (opts.on_load_stage) opts.on_load_stage("copy");

  const uint64_t D = hp.n_embd, F = hp.n_ff, V = hp.n_vocab, KV = static_cast<uint64_t>(im.kv_dim());
  // Converts tensor `name` (ggml dims {n_in, n_out}, any supported type) into dst ([n_out, n_in]).
  auto fill = [&](float* dst, const std::string& name, uint64_t n_in, uint64_t n_out) {
    const gguf::TensorInfo& t = f.tensor(name);
    const bool ok = n_out == 0 ? (t.dims.size() == 1 && t.dims[0] == n_in)
                               : (t.dims.size() == 2 && t.dims[0] == n_in && t.dims[1] == n_out);
    if (!ok)
      throw FormatError(fmt::format("{}: tensor '{}' has shape [{}], expected [{}]", path, name, fmt::join(t.dims, ", "),
                                    n_out == 0 ? fmt::format("{}", n_in) : fmt::format("{}, {}", n_in, n_out)));
    // a file truncated under the mapping faults (SIGBUS) in whichever thread reads it: that becomes an error
    const bool read_ok = read_catching_sigbus(t.data, t.n_bytes, [&] {
      dequantize_rows(f, t, 0, t.n_rows(), opts.weight_dtype, dst, {opts.check_finite, opts.threads});
    });
    if (!read_ok) changed_while_loading(path, fmt::format("truncated while reading tensor '{}'", name));
    im.weight_bytes += t.n_elements * dtype_size(opts.weight_dtype);
  };
  // One weight from several tensors stacked along n_out (fused projections),
  // each transposed once into the matmul layout.
  std::vector<float> rows;
  auto stacked = [&](std::initializer_list<std::pair<std::string, uint64_t>> parts, uint64_t n_in) {
    uint64_t n_out = 0;
    for (const auto& p : parts) n_out += p.second;
    be::Weight w(static_cast<int64_t>(n_out), static_cast<int64_t>(n_in));
    int64_t row0 = 0;
    for (const auto& [name, n] : parts) {
      rows.resize(n * n_in);
      fill(rows.data(), name, n_in, n);
      w.set_rows(row0, rows.data(), static_cast<int64_t>(n));
      row0 += static_cast<int64_t>(n);
    }
    return w;
  };
  auto mat = [&](const std::string& name, uint64_t n_in, uint64_t n_out) { return stacked({{name, n_out}}, n_in); };
  auto vec = [&](const std::string& name, uint64_t n) {
    std::vector<float> v(n);
    fill(v.data(), name, n, 0);
    return v;
  };
  im.tok_embd.resize(V * D);
  fill(im.tok_embd.data(), "token_embd.weight", D, V);
  im.output_norm = vec("output_norm.weight", D);
  if (hp.tied_output) {
    im.output = be::Weight(static_cast<int64_t>(V), static_cast<int64_t>(D));
    im.output.set_rows(0, im.tok_embd.data(), static_cast<int64_t>(V));
  } else {
    im.output = mat("output.weight", D, V);
  }
  im.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int l = 0; l < hp.n_layer; ++l) {
    auto& L = im.layers[static_cast<size_t>(l)];
    const std::string p = fmt::format("blk.{}.", l);
    L.attn_norm = vec(p + "attn_norm.weight", D);
    L.wqkv = stacked({{p + "attn_q.weight", D}, {p + "attn_k.weight", KV}, {p + "attn_v.weight", KV}}, D);
    L.wo = mat(p + "attn_output.weight", D, D);
    L.ffn_norm = vec(p + "ffn_norm.weight", D);
    L.w_gate_up = stacked({{p + "ffn_gate.weight", F}, {p + "ffn_up.weight", F}}, D);
    L.w_down = mat(p + "ffn_down.weight", F, D);
  }
  check_unchanged(path, *at_open, file_bytes.size());  // and after: the copy saw one version of the file
  im.engine = std::make_unique<be::Engine>(opts.threads);
  im.summary = summarize_gguf(f);
  im.summary.weight_dtype = dtype_name(opts.weight_dtype);
  im.summary.resident_bytes = im.weight_bytes + (hp.tied_output ? V * D * dtype_size(opts.weight_dtype) : 0);
  im.summary.load_seconds = load_time.seconds();
  return m;
}

const HParams& Model::hparams() const { return impl_->hp; }
const Tokenizer& Model::tokenizer() const { return *impl_->tok; }
const std::string& Model::path() const { return impl_->path; }
int Model::threads() const { return impl_->engine->threads(); }
size_t Model::weight_bytes() const { return impl_->weight_bytes; }
const LoadSummary& Model::load_summary() const { return impl_->summary; }
const std::string& Model::sha256() const { return impl_->sha256; }

size_t Model::activation_bytes_for(int rows, int seq, bool all_logits, int64_t tokens) const {
  const HParams& hp = impl_->hp;
  const size_t R = static_cast<size_t>(std::max(rows, 1)), S = static_cast<size_t>(std::max(seq, 1));
  const size_t T = tokens >= 0 ? static_cast<size_t>(tokens) : R * S, D = static_cast<size_t>(hp.n_embd), F = static_cast<size_t>(hp.n_ff);
  const size_t KV = static_cast<size_t>(impl_->kv_dim()), V = static_cast<size_t>(hp.n_vocab);
  const size_t group = static_cast<size_t>(hp.n_head / hp.n_head_kv);
  // Impl::reserve: x, xb, qkv, att, gu, hb, last; attention scores of the longest sequence;
  // the caller's logits; the last-position logits of a partial batch.
  size_t floats = T * (D + D + (D + 2 * KV) + D + 2 * F + F) + R * D + group * S * S;
  floats += all_logits ? R * S * V : 2 * R * V;
  return floats * sizeof(float) + T * 2 * sizeof(int32_t);
}
const ModelStats& Model::stats() const { return impl_->stats; }
uint64_t Model::primitives_created() const { return impl_->engine->primitives_created(); }

// ---- KV cache ---------------------------------------------------------------

size_t Model::cache_bytes_for(int batch_size, int max_seq_len) const {
  return 2 * impl_->cache_elems(batch_size, max_seq_len) * sizeof(float);
}

void Model::setup_caches(int batch_size, int max_seq_len) {
  auto& im = *impl_;
  if (batch_size < 1 || max_seq_len < 1)
    throw ArgumentError(fmt::format("setup_caches: batch_size {} and max_seq_len {} must be >= 1", batch_size, max_seq_len));
  if (max_seq_len > im.hp.n_ctx_train)
    throw ArgumentError(fmt::format("setup_caches: max_seq_len {} exceeds the model's context_length {}", max_seq_len,
                                    im.hp.n_ctx_train));
  if (!(im.k_cache && im.cache_batch == batch_size && im.cache_cap == max_seq_len)) {
    delete_caches();
    const size_t n = im.cache_elems(batch_size, max_seq_len);
    // No zero-fill: positions >= n_past are never read, so untouched pages stay
    // unmapped (4 KiB pages: PageBuffer refuses transparent huge pages).
    try {
      im.k_cache = be::PageBuffer::allocate(n);
      im.v_cache = be::PageBuffer::allocate(n);
    } catch (const std::bad_alloc&) {
      im.k_cache.reset();
      throw CacheError(fmt::format("setup_caches: cannot allocate {} bytes for a {} x {} KV cache",
                                   cache_bytes_for(batch_size, max_seq_len), batch_size, max_seq_len));
    }
    im.cache_batch = batch_size;
    im.cache_cap = max_seq_len;
    ++im.stats.cache_allocations;
  }
  im.n_past.assign(static_cast<size_t>(batch_size), 0);
  im.cache_enabled = true;
}

bool Model::caches_are_setup() const { return static_cast<bool>(impl_->k_cache); }
bool Model::caches_are_enabled() const { return impl_->cache_enabled; }

void Model::set_caches_enabled(bool enabled) {
  if (enabled && !caches_are_setup())
    throw CacheError("cannot enable KV caches: they are not set up; call setup_caches(batch_size, max_seq_len) first");
  impl_->cache_enabled = enabled;
}

void Model::reset_caches() { std::fill(impl_->n_past.begin(), impl_->n_past.end(), 0); }

void Model::reset_cache_row(int row) {
  if (row < 0 || row >= impl_->cache_batch)
    throw ArgumentError(fmt::format("reset_cache_row: row {} outside [0, {})", row, impl_->cache_batch));
  impl_->n_past[static_cast<size_t>(row)] = 0;
}

void Model::delete_caches() {
  auto& im = *impl_;
  im.k_cache.reset();
  im.v_cache.reset();
  im.cache_batch = 0;
  im.cache_cap = 0;
  im.cache_enabled = false;
  im.n_past.clear();
}

int Model::n_past(int row) const {
  if (row < 0 || row >= impl_->cache_batch)
    throw ArgumentError(fmt::format("n_past: row {} outside [0, {}) (caches {})", row, impl_->cache_batch,
                                    caches_are_setup() ? "set up" : "not set up"));
  return impl_->n_past[static_cast<size_t>(row)];
}
int Model::capacity() const { return impl_->cache_cap; }
int Model::cache_batch_size() const { return impl_->cache_batch; }
size_t Model::bytes() const { return caches_are_setup() ? cache_bytes_for(impl_->cache_batch, impl_->cache_cap) : 0; }
const float* Model::cache_data(int which) const { return which == 0 ? impl_->k_cache.get() : impl_->v_cache.get(); }

// ---- forward ----------------------------------------------------------------

void Model::forward(std::span<const int32_t> tokens, int batch, int seq, std::span<const int> n_tokens, Logits mode,
                    std::span<float> logits_out) {
  auto& im = *impl_;
  const HParams& hp = im.hp;
  if (batch < 1 || seq < 1 || tokens.size() != static_cast<size_t>(batch) * seq || n_tokens.size() != static_cast<size_t>(batch))
    throw ArgumentError(fmt::format("forward: tokens has {} ids and n_tokens {} rows for batch {} x seq {}", tokens.size(),
                                    n_tokens.size(), batch, seq));
  const size_t V = static_cast<size_t>(hp.n_vocab);
  const size_t need = (mode == Logits::All ? static_cast<size_t>(batch) * seq : static_cast<size_t>(batch)) * V;
  if (logits_out.size() < need)
    throw ArgumentError(fmt::format("forward: logits_out holds {} floats, {} needed", logits_out.size(), need));
  const bool cached = im.cache_enabled;
  if (cached && batch > im.cache_batch)
    throw CacheError(fmt::format("forward: batch {} exceeds the KV cache's batch size {}; call setup_caches with batch_size >= {}",
                                 batch, im.cache_batch, batch));
  // Pack the valid tokens of all rows: sequence s = row seq_row[s], tokens [seq_start[s], +seq_len[s]).
  im.seq_row.clear();
  im.seq_start.clear();
  im.seq_len.clear();
  size_t T = 0;
  for (int r = 0; r < batch; ++r) {
    const int n = n_tokens[static_cast<size_t>(r)];
    if (n < 0 || n > seq) throw ArgumentError(fmt::format("forward: n_tokens[{}] = {} outside [0, {}]", r, n, seq));
    if (n == 0) continue;
    if (cached && im.n_past[static_cast<size_t>(r)] + n > im.cache_cap)
      throw CacheError(fmt::format("KV cache full: row {} holds {} of {} positions and {} more were written; "
                                   "set up caches with max_seq_len >= {}",
                                   r, im.n_past[static_cast<size_t>(r)], im.cache_cap, n, im.n_past[static_cast<size_t>(r)] + n));
    im.seq_row.push_back(r);
    im.seq_start.push_back(static_cast<int>(T));
    im.seq_len.push_back(n);
    T += static_cast<size_t>(n);
  }
  // Zero only what no matmul writes: padding positions and rows without tokens.
  auto zero = [&](size_t from, size_t count) {
    std::fill(logits_out.begin() + static_cast<std::ptrdiff_t>(from * V),
              logits_out.begin() + static_cast<std::ptrdiff_t>((from + count) * V), 0.0f);
  };
  for (int r = 0; r < batch; ++r) {
    const int n = n_tokens[static_cast<size_t>(r)];
    if (mode == Logits::All)
      zero(static_cast<size_t>(r) * seq + n, static_cast<size_t>(seq - n));
    else if (n == 0)
      zero(static_cast<size_t>(r), 1);
  }
  ++im.stats.forward_calls;
  if (cached) ++im.stats.forward_cached;
  if (im.k_cache) ++im.stats.forward_with_cache_setup;
  if (T == 0) return;
  im.stats.tokens_processed += T;

  const int D = hp.n_embd, HD = hp.head_dim(), KV = im.kv_dim(), F = hp.n_ff;
  const size_t n_seq = im.seq_row.size();
  im.reserve(T, n_seq);
  im.pos.resize(T);
  im.tok_ids.resize(T);
  for (size_t s = 0; s < n_seq; ++s) {
    const int r = im.seq_row[s];
    const int p0 = cached ? im.n_past[static_cast<size_t>(r)] : 0;
    for (int i = 0; i < im.seq_len[s]; ++i) {
      const int32_t id = tokens[static_cast<size_t>(r) * seq + i];
      if (id < 0 || id >= hp.n_vocab)
        throw ArgumentError(fmt::format("forward: token id {} at [{}, {}] outside [0, {})", id, r, i, hp.n_vocab));
      im.tok_ids[static_cast<size_t>(im.seq_start[s] + i)] = id;
      im.pos[static_cast<size_t>(im.seq_start[s] + i)] = p0 + i;
    }
  }
  float* x = im.x.data();
  for (size_t t = 0; t < T; ++t)
    std::memcpy(x + t * D, im.tok_embd.data() + static_cast<size_t>(im.tok_ids[t]) * D, sizeof(float) * D);

  be::Engine& eng = *im.engine;
  const int64_t Ti = static_cast<int64_t>(T);
  // Cache-free passes score log-likelihoods: make every row's result independent
  // of how requests were batched (bit-identical for batch_size 1 vs 8).
  const bool inv = !cached;
  for (int l = 0; l < hp.n_layer; ++l) {
    const Layer& L = im.layers[static_cast<size_t>(l)];
    be::rmsnorm(x, L.attn_norm.data(), im.xb.data(), Ti, D, hp.rms_eps);
    // qkv row t: [q (n_head x HD) | k (n_head_kv x HD) | v (n_head_kv x HD)]
    const int64_t QS = D + 2 * KV;
    float* q = im.qkv.data();
    float* k = q + D;
    float* v = k + KV;
    be::matmul(eng, im.xb.data(), Ti, L.wqkv, q, false, inv);
    be::rope(q, Ti, hp.n_head, HD, hp.n_rot, im.pos.data(), hp.rope_freq_base, QS);
    be::rope(k, Ti, hp.n_head_kv, HD, hp.n_rot, im.pos.data(), hp.rope_freq_base, QS);
    for (size_t s = 0; s < n_seq; ++s) {
      const int r = im.seq_row[s];
      const size_t t0 = static_cast<size_t>(im.seq_start[s]);
      const int n = im.seq_len[s];
      be::KvView view;
      int64_t past = 0;
      if (cached) {
        past = im.n_past[static_cast<size_t>(r)];
        // Append K, V of the new tokens at positions [past, past + n).
        for (int h = 0; h < hp.n_head_kv; ++h) {
          float* kc = im.k_cache.get() + im.cache_off(l, r, h);
          float* vc = im.v_cache.get() + im.cache_off(l, r, h);
          for (int i = 0; i < n; ++i) {
            std::memcpy(kc + (past + i) * HD, k + (t0 + i) * QS + h * HD, sizeof(float) * HD);
            std::memcpy(vc + (past + i) * HD, v + (t0 + i) * QS + h * HD, sizeof(float) * HD);
          }
        }
        view = {im.k_cache.get() + im.cache_off(l, r, 0), im.v_cache.get() + im.cache_off(l, r, 0), HD,
                static_cast<int64_t>(im.cache_cap) * HD};
      } else {
        view = {k + t0 * QS, v + t0 * QS, QS, HD};
      }
      be::attention(eng, q + t0 * QS, view, im.att.data() + t0 * D, n, past, hp.n_head, hp.n_head_kv, HD, QS,
                    im.scores);
    }
    be::matmul(eng, im.att.data(), Ti, L.wo, x, /*accumulate=*/true, inv);
    be::rmsnorm(x, L.ffn_norm.data(), im.xb.data(), Ti, D, hp.rms_eps);
    be::matmul(eng, im.xb.data(), Ti, L.w_gate_up, im.gu.data(), false, inv);
    be::swiglu_fused(im.gu.data(), im.hb.data(), Ti, F);
    be::matmul(eng, im.hb.data(), Ti, L.w_down, x, /*accumulate=*/true, inv);
  }
  if (cached)
    for (size_t s = 0; s < n_seq; ++s) im.n_past[static_cast<size_t>(im.seq_row[s])] += im.seq_len[s];

  if (mode == Logits::Last) {
    float* last = im.last.data();
    for (size_t s = 0; s < n_seq; ++s)
      std::memcpy(last + s * D, x + static_cast<size_t>(im.seq_start[s] + im.seq_len[s] - 1) * D, sizeof(float) * D);
    be::rmsnorm(last, im.output_norm.data(), last, static_cast<int64_t>(n_seq), D, hp.rms_eps);
    if (n_seq == static_cast<size_t>(batch)) {
      be::matmul(eng, last, static_cast<int64_t>(n_seq), im.out_weight(), logits_out.data(), false, inv);
    } else {
      if (im.logits.reserve(n_seq * V)) ++im.stats.buffer_allocations;
      be::matmul(eng, last, static_cast<int64_t>(n_seq), im.out_weight(), im.logits.data(), false, inv);
      for (size_t s = 0; s < n_seq; ++s)
        std::memcpy(logits_out.data() + static_cast<size_t>(im.seq_row[s]) * V, im.logits.data() + s * V, sizeof(float) * V);
    }
    return;
  }
  be::rmsnorm(x, im.output_norm.data(), im.xb.data(), Ti, D, hp.rms_eps);
  if (T == static_cast<size_t>(batch) * seq) {  // no padding: write in place
    be::matmul(eng, im.xb.data(), Ti, im.out_weight(), logits_out.data(), false, inv);
  } else {
    for (size_t s = 0; s < n_seq; ++s)
      be::matmul(eng, im.xb.data() + static_cast<size_t>(im.seq_start[s]) * D, im.seq_len[s], im.out_weight(),
                 logits_out.data() + static_cast<size_t>(im.seq_row[s]) * seq * V, false, inv);
  }
}

// ---- scopes -----------------------------------------------------------------

KvCacheScope::KvCacheScope(Model& model, int batch_size, int max_seq_len, CachePolicy policy)
    : model_(model), policy_(policy) {
  if (policy == CachePolicy::Release) {
    if (model.caches_are_setup())
      throw CacheError("KvCacheScope: KV caches are already set up; delete_caches() first or use CachePolicy::Reuse");
    model.setup_caches(batch_size, max_seq_len);
  } else {
    if (model.caches_are_setup() && model.cache_batch_size() == batch_size && model.capacity() == max_seq_len) {
      model.reset_caches();
      model.set_caches_enabled(true);
    } else {
      model.setup_caches(batch_size, max_seq_len);
    }
  }
}

KvCacheScope::~KvCacheScope() {
  model_.set_caches_enabled(false);
  if (policy_ == CachePolicy::Release)
    model_.delete_caches();
  else
    model_.reset_caches();
}

KvCacheDisabled::KvCacheDisabled(Model& model) : model_(model), was_enabled_(model.caches_are_enabled()) {
  if (!model.caches_are_setup())
    throw CacheError("KvCacheDisabled: KV caches are not set up; there is nothing to disable");
  model.set_caches_enabled(false);
}

KvCacheDisabled::~KvCacheDisabled() {
  if (model_.caches_are_setup()) model_.set_caches_enabled(was_enabled_);
}

}  // namespace kveval
