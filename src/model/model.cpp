#include "model/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "model/gguf.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace kveval {

namespace be = kveval::backend;

const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::Eos: return "eos";
    case StopReason::MaxTokens: return "max_gen_toks";
    case StopReason::ContextFull: return "context full";
    case StopReason::StopString: return "until";
  }
  return "?";
}

const char* to_string(CachePolicy p) { return p == CachePolicy::Release ? "release" : "reuse"; }

const char* to_string(ComputeDtype d) {
  switch (d) {
    case ComputeDtype::F32: return "f32";
    case ComputeDtype::BF16: return "bf16";
    case ComputeDtype::Auto: return "auto";
  }
  return "?";
}

ComputeDtype parse_compute_dtype(const std::string& s, const std::string& what) {
  if (s == "f32") return ComputeDtype::F32;
  if (s == "bf16") return ComputeDtype::BF16;
  if (s == "auto") return ComputeDtype::Auto;
  throw ArgumentError(fmt::format("{} '{}': expected 'f32', 'bf16' or 'auto'", what, s));
}

ComputeDtype resolve_dtype(ComputeDtype requested, bool cpu_bf16, bool file_f32) {
  if (requested != ComputeDtype::Auto) return requested;
  return cpu_bf16 && !file_f32 ? ComputeDtype::BF16 : ComputeDtype::F32;
}

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

struct FreeDeleter {
  void operator()(float* p) const { be::free_floats(p); }
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
  ComputeDtype dtype = ComputeDtype::F32;
  std::string dtype_note;

  // ---- KV cache: K and V [n_layer][batch][n_kv_head][cap][head_dim] ----
  std::unique_ptr<float, FreeDeleter> k_cache, v_cache;
  int cache_batch = 0, cache_cap = 0;
  bool cache_enabled = false;
  std::vector<int> n_past;

  ModelStats stats;

  // ---- activation buffers (grow-only) ----
  be::Buffer x, xb, qkv, att, gu, hb, logits, last, scores;
  std::vector<int32_t> pos;       // [T]
  std::vector<int32_t> tok_ids;   // [T]
  std::vector<int> seq_row, seq_start, seq_len;  // packed sequences
  std::vector<be::AttentionSeq> short_att;        // sequences of a layer attended in one parallel loop

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

std::unique_ptr<Model> Model::load(const std::string& path, const ModelOptions& opts) {
  Stopwatch load_time;
  gguf::File f(path);
  const std::string arch = f.get_string_or("general.architecture", "");
  if (arch != "llama")
    throw FormatError(fmt::format("{}: unsupported architecture '{}' (general.architecture); kveval supports 'llama'",
                                  path, arch));
  std::unique_ptr<Model> m(new Model());
  auto& im = *m->impl_;
  im.path = path;
  HParams& hp = im.hp;
  auto get_int = [&](const char* key, uint64_t lo, uint64_t hi) {
    uint64_t v = f.get_uint(key);
    if (v < lo || v > hi) throw FormatError(fmt::format("{}: key '{}' = {} out of range [{}, {}]", path, key, v, lo, hi));
    return static_cast<int>(v);
  };
  hp.n_embd = get_int("llama.embedding_length", 1, 1 << 16);
  hp.n_layer = get_int("llama.block_count", 1, 1024);
  hp.n_head = get_int("llama.attention.head_count", 1, 1024);
  hp.n_head_kv = f.find("llama.attention.head_count_kv") ? get_int("llama.attention.head_count_kv", 1, 1024) : hp.n_head;
  hp.n_ff = get_int("llama.feed_forward_length", 1, 1 << 20);
  hp.n_ctx_train = get_int("llama.context_length", 1, 1 << 24);
  hp.rope_freq_base = static_cast<float>(f.get_float_or("llama.rope.freq_base", 10000.0));
  hp.rms_eps = static_cast<float>(f.get_float_or("llama.attention.layer_norm_rms_epsilon", 1e-5));
  if (hp.n_embd % hp.n_head != 0)
    throw FormatError(fmt::format("{}: llama.embedding_length {} is not a multiple of llama.attention.head_count {}",
                                  path, hp.n_embd, hp.n_head));
  if (hp.n_head % hp.n_head_kv != 0)
    throw FormatError(fmt::format("{}: llama.attention.head_count {} is not a multiple of head_count_kv {}", path,
                                  hp.n_head, hp.n_head_kv));
  hp.n_rot = f.find("llama.rope.dimension_count") ? get_int("llama.rope.dimension_count", 2, hp.head_dim())
                                                  : hp.head_dim();
  if (hp.n_rot % 2 != 0 || hp.n_rot > 1024)
    throw FormatError(fmt::format("{}: llama.rope.dimension_count {} must be even and <= head_dim", path, hp.n_rot));
  if (!(hp.rms_eps > 0.0f) || !(hp.rope_freq_base > 0.0f))
    throw FormatError(fmt::format("{}: rms epsilon and rope.freq_base must be positive", path));

  const auto& te = f.tensor("token_embd.weight");
  if (te.dims.size() != 2 || te.dims[0] != static_cast<uint64_t>(hp.n_embd))
    throw FormatError(fmt::format("{}: tensor 'token_embd.weight' has shape {} (expected [{}, n_vocab])", path,
                                  fmt::join(te.dims, "x"), hp.n_embd));
  hp.n_vocab = static_cast<int>(te.dims[1]);
  im.tok = std::make_unique<Tokenizer>(Tokenizer::from_gguf(f));
  if (im.tok->n_vocab() != hp.n_vocab)
    throw FormatError(fmt::format("{}: tokenizer has {} tokens but token_embd.weight has {} rows", path,
                                  im.tok->n_vocab(), hp.n_vocab));

  bool file_f32 = true;
  for (const auto& t : f.tensors())
    if (t.dims.size() >= 2 && t.type != gguf::TensorType::F32) file_f32 = false;
  const bool cpu_bf16 = be::cpu_has_bf16();
  im.dtype = resolve_dtype(opts.dtype, cpu_bf16, file_f32);
  im.dtype_note = fmt::format("{} -> {} (file {}, oneDNN ISA {}{})", to_string(opts.dtype), to_string(im.dtype),
                              file_f32 ? "F32" : "not F32", be::cpu_isa_name(), cpu_bf16 ? ", bf16" : ", no bf16");
  if (im.dtype == ComputeDtype::BF16 && !be::bf16_matmul_available())
    throw ArgumentError(fmt::format("{}: dtype bf16: oneDNN has no bf16 matmul on this CPU (ISA {}); use f32 or auto",
                                    path, be::cpu_isa_name()));
  const be::Dtype wdt = im.dtype == ComputeDtype::BF16 ? be::Dtype::BF16 : be::Dtype::F32;
  const DType mat_dtype = im.dtype == ComputeDtype::BF16 ? DType::BF16 : DType::F32;  // matrices in memory
  const uint64_t D = hp.n_embd, F = hp.n_ff, V = hp.n_vocab, KV = static_cast<uint64_t>(im.kv_dim());
  // Converts tensor `name` (ggml dims {n_in, n_out}, any supported type) into dst ([n_out, n_in]) as `dt`.
  auto fill = [&](void* dst, const std::string& name, uint64_t n_in, uint64_t n_out, DType dt) {
    const gguf::TensorInfo& t = f.tensor(name);
    const bool ok = n_out == 0 ? (t.dims.size() == 1 && t.dims[0] == n_in)
                               : (t.dims.size() == 2 && t.dims[0] == n_in && t.dims[1] == n_out);
    if (!ok)
      throw FormatError(fmt::format("{}: tensor '{}' has shape [{}], expected [{}]", path, name, fmt::join(t.dims, ", "),
                                    n_out == 0 ? fmt::format("{}", n_in) : fmt::format("{}, {}", n_in, n_out)));
    dequantize_rows(f, t, 0, t.n_rows(), dt, dst, {opts.check_finite, opts.threads});
    im.weight_bytes += t.n_elements * dtype_size(dt);
  };
  // One weight from several tensors stacked along n_out (fused projections),
  // each converted to the matrix dtype and transposed once into the matmul layout.
  std::vector<float> rows;      // F32 matrices
  std::vector<uint16_t> rows16;  // BF16 matrices
  auto stacked = [&](std::initializer_list<std::pair<std::string, uint64_t>> parts, uint64_t n_in) {
    uint64_t n_out = 0;
    for (const auto& p : parts) n_out += p.second;
    be::Weight w(static_cast<int64_t>(n_out), static_cast<int64_t>(n_in), wdt);
    int64_t row0 = 0;
    for (const auto& [name, n] : parts) {
      if (mat_dtype == DType::BF16) {
        rows16.resize(n * n_in);
        fill(rows16.data(), name, n_in, n, mat_dtype);
        w.set_rows_bf16(row0, rows16.data(), static_cast<int64_t>(n));
      } else {
        rows.resize(n * n_in);
        fill(rows.data(), name, n_in, n, mat_dtype);
        w.set_rows(row0, rows.data(), static_cast<int64_t>(n));
      }
      row0 += static_cast<int64_t>(n);
    }
    return w;
  };
  auto mat = [&](const std::string& name, uint64_t n_in, uint64_t n_out) { return stacked({{name, n_out}}, n_in); };
  auto vec = [&](const std::string& name, uint64_t n) {
    std::vector<float> v(n);
    fill(v.data(), name, n, 0, DType::F32);
    return v;
  };
  im.tok_embd.resize(V * D);
  fill(im.tok_embd.data(), "token_embd.weight", D, V, DType::F32);  // embedding rows are read in F32
  im.output_norm = vec("output_norm.weight", D);
  hp.tied_output = f.find_tensor("output.weight") == nullptr;
  if (hp.tied_output) {
    im.output = be::Weight(static_cast<int64_t>(V), static_cast<int64_t>(D), wdt);
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
  im.engine = std::make_unique<be::Engine>(opts.threads);
  im.summary = summarize_gguf(f);
  // weight_bytes: matrices in mat_dtype, token_embd and norms F32; a tied output adds its copy.
  im.summary.weight_dtype = dtype_name(mat_dtype);
  im.summary.resident_bytes = im.weight_bytes + (hp.tied_output ? V * D * dtype_size(mat_dtype) : 0);
  im.summary.load_seconds = load_time.seconds();
  return m;
}

const HParams& Model::hparams() const { return impl_->hp; }
const Tokenizer& Model::tokenizer() const { return *impl_->tok; }
const std::string& Model::path() const { return impl_->path; }
int Model::threads() const { return impl_->engine->threads(); }
size_t Model::weight_bytes() const { return impl_->weight_bytes; }
const LoadSummary& Model::load_summary() const { return impl_->summary; }
const ModelStats& Model::stats() const { return impl_->stats; }
uint64_t Model::primitives_created() const { return impl_->engine->primitives_created(); }
uint64_t Model::backend_allocations() const { return impl_->engine->buffer_allocations(); }
ComputeDtype Model::dtype() const { return impl_->dtype; }
const std::string& Model::dtype_note() const { return impl_->dtype_note; }

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
    // No zero-fill: positions >= n_past are never read, so untouched pages stay unmapped.
    float *k = nullptr, *v = nullptr;
    try {
      k = be::alloc_floats(n);
      v = be::alloc_floats(n);
    } catch (const std::bad_alloc&) {
      be::free_floats(k);
      throw CacheError(fmt::format("setup_caches: cannot allocate {} bytes for a {} x {} KV cache",
                                   cache_bytes_for(batch_size, max_seq_len), batch_size, max_seq_len));
    }
    im.k_cache.reset(k);
    im.v_cache.reset(v);
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
    im.short_att.clear();
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
      if (be::attention_uses_loop(n, HD))  // short blocks (decode steps): one parallel loop for all of them below
        im.short_att.push_back({q + t0 * QS, view, im.att.data() + t0 * D, n, past});
      else
        be::attention(eng, q + t0 * QS, view, im.att.data() + t0 * D, n, past, hp.n_head, hp.n_head_kv, HD, QS,
                      im.scores);
    }
    be::attention(im.short_att, hp.n_head, hp.n_head_kv, HD, QS);
    im.short_att.clear();
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
