// Model::load: GGUF hyper-parameters and tensors of a supported architecture
// (model/arch/), validated and laid out for the forward pass (model.cpp).
// Keys and defaults follow llama.cpp's llama_model::load_hparams; tensor names
// and shapes its load_tensors.
#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_set>

#include <sys/stat.h>

#include <fmt/format.h>

#include "model/copy_blocks.hpp"
#include "model/gguf.hpp"
#include "model/model_impl.hpp"
#include "model/read_hparams.hpp"
#include "model/recipe_params.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"
#include "util/memory.hpp"
#include "util/sigbus_guard.hpp"
#include "util/timer.hpp"

namespace kveval {

namespace be = kveval::backend;

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

/// The architecture description named by general.architecture; throws FormatError naming the
/// supported ones (control bytes of the name shown as \xNN) when kveval has none.
const arch::Description& find_arch(const gguf::File& f, const std::string& path) {
  const std::string arch_name = f.get_string_or("general.architecture", "");
  const arch::Description* desc = arch::find(arch_name);
  if (!desc) {
    std::string shown;  // control bytes (a NUL would end the line on a terminal) as \xNN
    for (unsigned char c : arch_name)
      shown += c < 0x20 || c == 0x7f ? fmt::format("\\x{:02x}", c) : std::string(1, static_cast<char>(c));
    throw FormatError(fmt::format("{}: unsupported architecture '{}' (general.architecture); kveval supports {}", path,
                                  shown, arch::names()));
  }
  return *desc;
}

/// token_embd, checked to be [n_embd, n_vocab] with n_vocab <= 2^24; sets hp.n_vocab.
const gguf::TensorInfo& read_vocab_size(const gguf::File& f, const std::string& path, HParams& hp) {
  const auto& te = f.tensor(arch::kTokenEmbd);
  if (te.dims.size() != 2 || te.dims[0] != static_cast<uint64_t>(hp.n_embd))
    throw FormatError(fmt::format("{}: tensor '{}' has shape {} (expected [{}, n_vocab])", path, arch::kTokenEmbd,
                                  fmt::join(te.dims, "x"), hp.n_embd));
  if (te.dims[1] > (uint64_t{1} << 24))
    throw FormatError(fmt::format("{}: tensor '{}' has {} rows (n_vocab), more than {}", path, arch::kTokenEmbd,
                                  te.dims[1], uint64_t{1} << 24));
  hp.n_vocab = static_cast<int>(te.dims[1]);
  return te;
}

/// The file's tokenizer; throws when its vocabulary size differs from token_embd's rows.
std::unique_ptr<Tokenizer> load_tokenizer(const gguf::File& f, const std::string& path, int n_vocab) {
  auto tok = std::make_unique<Tokenizer>(Tokenizer::from_gguf(f));
  if (tok->n_vocab() != n_vocab)
    throw FormatError(
        fmt::format("{}: tokenizer has {} tokens but {} has {} rows", path, tok->n_vocab(), arch::kTokenEmbd, n_vocab));
  return tok;
}

/// Throws when the weights (matrices as `mat_dtype`, token_embd in its kept blocks or F32) do not fit the memory
/// budget.
void check_weight_memory(const gguf::File& f, const std::string& path, const gguf::TensorInfo& te, DType mat_dtype,
                         ComputeDtype dtype) {
  // token_embd not kept as blocks is F32 whatever the matrix dtype
  const uint64_t embd_extra = keeps(dtype, te.type) ? 0 : (dtype_size(DType::F32) - dtype_size(mat_dtype)) * te.n_elements;
  const MemoryPart weights{"weights", estimate_weight_bytes(f, mat_dtype, dtype) + embd_extra};
  check_memory_plan(fmt::format("the model {}", path), std::span(&weights, 1), memory_budget(),
                    "use a smaller model or raise the memory limit");
}

/// The SHA-256 (hex) of `bytes`, the mapping the weights are copied from; a truncation while reading is an error.
std::string hash_mapped(const std::string& path, std::span<const std::byte> bytes) {
  Sha256 sha;
  if (!read_catching_sigbus(bytes.data(), bytes.size(), [&] { sha.update(bytes.data(), bytes.size()); }))
    changed_while_loading(path, "it was truncated while being hashed");
  return sha.hex();
}

using Parts = std::initializer_list<std::pair<std::string, uint64_t>>;

/// Reads tensors of a GGUF file into the forward pass's layout: checks each
/// shape, converts to the matrix dtype (or keeps a kept type's blocks), counts the
/// bytes it stores and records which tensors were used.
class TensorReader {
 public:
  TensorReader(const gguf::File& f, const std::string& path, const ModelOptions& opts, detail::KeptBlocks keep,
               DType mat_dtype, size_t& weight_bytes)
      : f_(f), path_(path), opts_(opts), keep_(keep), mat_dtype_(mat_dtype),
        wdt_(mat_dtype == DType::BF16 ? be::Dtype::BF16 : be::Dtype::F32), weight_bytes_(weight_bytes) {}

  /// Tensor `name`, checked to have ggml dims {n_in, n_out} ({n_in} when n_out is 0).
  const gguf::TensorInfo& shaped(const std::string& name, uint64_t n_in, uint64_t n_out) const {
    const gguf::TensorInfo& t = f_.tensor(name);
    const std::vector<uint64_t> want = n_out == 0 ? std::vector<uint64_t>{n_in} : std::vector<uint64_t>{n_in, n_out};
    const bool ok = gguf::same_shape(t.dims, want);
    if (!ok)
      throw FormatError(fmt::format("{}: tensor '{}' has shape [{}], expected [{}]", path_, name,
                                    fmt::join(t.dims, ", "),
                                    n_out == 0 ? fmt::format("{}", n_in) : fmt::format("{}, {}", n_in, n_out)));
    return t;
  }

  /// Converts tensor `name` (ggml dims {n_in, n_out}, any supported type) into dst ([n_out, n_in]) as `dt`.
  void fill(void* dst, const std::string& name, uint64_t n_in, uint64_t n_out, DType dt = DType::F32) {
    const gguf::TensorInfo& t = shaped(name, n_in, n_out);
    // a file truncated under the mapping faults (SIGBUS) in whichever thread reads it: that becomes an error
    const bool read_ok = read_catching_sigbus(t.data, t.n_bytes, [&] {
      dequantize_rows(f_, t, 0, t.n_rows(), dt, dst, {opts_.check_finite, opts_.threads});
    });
    if (!read_ok) changed_while_loading(path_, fmt::format("truncated while reading tensor '{}'", name));
    weight_bytes_ += t.n_elements * dtype_size(dt);
    use(name);
  }

  /// Rows [row0, row0 + n) of block weight w (the kernel dtype of the tensor's type) from tensor `name`
  /// (ggml dims {n_in, n}, a type keep_ keeps): the tensor's blocks copied as they are, with check_finite
  /// their scales checked in the same pass (copy_file_block_rows).
  void put_blocks(be::Weight& w, int64_t row0, const std::string& name, uint64_t n_in, uint64_t n) {
    const gguf::TensorInfo& t = shaped(name, n_in, n);
    if (!read_catching_sigbus(t.data, t.n_bytes,
                              [&] { copy_file_block_rows(f_, t, w, row0, {opts_.check_finite, opts_.threads}); }))
      changed_while_loading(path_, fmt::format("truncated while reading tensor '{}'", t.name));
  }

  /// Records tensor `name` as used and, when its data has been copied or converted (`copied`), drops its pages
  /// of the mapped file from the resident set (gguf::File::release); a weight viewing the file keeps them.
  void use(const std::string& name, bool copied = true) {
    used_.insert(name);
    const gguf::TensorInfo& t = f_.tensor(name);
    if (copied) f_.release(t.data, t.n_bytes);
  }

  /// Whether tensor `t` (rows of n_in elements) stays in its own blocks under the compute dtype.
  bool keeps(const gguf::TensorInfo& t, uint64_t n_in) const {
    return keep_.keeps(t.type) && n_in % gguf::type_info(t.type).block_size == 0;
  }

  /// Matrix `name` (ggml dims {n_in, n_out}, of a type keeps() accepts) as a weight [n_out, n_in] in its own
  /// blocks; counts its bytes.
  /// With opts.map_weights it is a view of the mapped file (its scales checked first).
  be::Weight kept(const std::string& name, uint64_t n_in, uint64_t n_out) {
    const gguf::TensorInfo& t = shaped(name, n_in, n_out);
    const be::Dtype dt = keep_.weight_dtype(t.type);
    const bool view = opts_.map_weights;
    be::Weight w;
    if (view) {
      if (opts_.check_finite && !read_catching_sigbus(t.data, t.n_bytes, [&] {
            check_file_block_rows(f_, t, {true, opts_.threads});
          }))
        changed_while_loading(path_, fmt::format("truncated while reading tensor '{}'", name));
      w = be::Weight::view_file_blocks(static_cast<int64_t>(n_out), static_cast<int64_t>(n_in), dt, t.data,
                                       f_.mapping());
    } else {
      w = be::Weight(static_cast<int64_t>(n_out), static_cast<int64_t>(n_in), dt);
      put_blocks(w, 0, name, n_in, n_out);
    }
    use(name, !view);
    weight_bytes_ += w.bytes();
    return w;
  }

  /// One weight from several tensors stacked along n_out (fused projections): one block weight when every
  /// part is of one type the compute dtype keeps; with `kept_parts`, when every part is of a kept type but the
  /// types differ, each part in its own blocks (into *kept_parts, the returned weight empty); else each part
  /// converted to the matrix dtype and transposed once into the matmul layout.
  be::Weight stacked(Parts parts, uint64_t n_in, std::vector<be::Weight>* kept_parts = nullptr) {
    uint64_t n_out = 0;
    const gguf::TensorInfo* first = f_.find_tensor(parts.begin()->first);
    bool blocks = true, one_type = true;  // every part kept; every part of the first's type
    for (const auto& p : parts) {
      n_out += p.second;
      const gguf::TensorInfo* t = f_.find_tensor(p.first);
      blocks = blocks && t && keeps(*t, n_in);
      one_type = one_type && t && t->type == first->type;
    }
    if (blocks && (one_type || kept_parts)) {
      // Parts or one matrix: each part in its own blocks when their types differ or each views the mapped file
      // (matmul_stacked multiplies the parts), else one block matrix (a lone tensor as kept() reads it).
      const bool views = opts_.map_weights && be::is_file_blocks(keep_.weight_dtype(first->type));
      if (kept_parts && parts.size() > 1 && (!one_type || views)) {
        for (const auto& [name, n] : parts) kept_parts->push_back(kept(name, n_in, n));
        return be::Weight();
      }
      if (parts.size() == 1) return kept(parts.begin()->first, n_in, n_out);
      be::Weight w(static_cast<int64_t>(n_out), static_cast<int64_t>(n_in), keep_.weight_dtype(first->type));
      int64_t row0 = 0;
      for (const auto& [name, n] : parts) {
        put_blocks(w, row0, name, n_in, n);
        use(name);
        row0 += static_cast<int64_t>(n);
      }
      weight_bytes_ += w.bytes();
      return w;
    }
    be::Weight w(static_cast<int64_t>(n_out), static_cast<int64_t>(n_in), wdt_);
    int64_t row0 = 0;
    for (const auto& [name, n] : parts) {
      if (mat_dtype_ == DType::BF16) {
        rows16_.resize(n * n_in);
        fill(rows16_.data(), name, n_in, n, mat_dtype_);
        w.set_rows_bf16(row0, rows16_.data(), static_cast<int64_t>(n));
      } else {
        rows_.resize(n * n_in);
        fill(rows_.data(), name, n_in, n, mat_dtype_);
        w.set_rows(row0, rows_.data(), static_cast<int64_t>(n));
      }
      row0 += static_cast<int64_t>(n);
    }
    return w;
  }

  /// Matrix `name` (ggml dims {n_in, n_out}) as a weight [n_out, n_in].
  be::Weight mat(const std::string& name, uint64_t n_in, uint64_t n_out) { return stacked({{name, n_out}}, n_in); }

  /// 1-D tensor `name` [n] as F32.
  std::vector<float> vec(const std::string& name, uint64_t n) {
    std::vector<float> v(n);
    fill(v.data(), name, n, 0);
    return v;
  }

  /// Optional/required 1-D tensors concatenated (zeros for a missing optional
  /// part); empty when none is present. Absent parts in the file are left for
  /// the unused-tensor check.
  std::vector<float> vecs(arch::Presence presence, Parts parts) {
    std::vector<float> v;
    if (presence == arch::Presence::Absent) return v;
    bool any = presence == arch::Presence::Required;
    for (const auto& p : parts) any = any || f_.find_tensor(p.first) != nullptr;
    if (!any) return v;
    for (const auto& [name, n] : parts) {
      const size_t at = v.size();
      v.resize(at + n, 0.0f);
      if (presence == arch::Presence::Required || f_.find_tensor(name)) fill(v.data() + at, name, n, 0);
    }
    return v;
  }

  /// Throws when a tensor of the file was not read: it would be silently
  /// ignored and the numbers silently wrong (llama.cpp refuses such files too).
  void check_all_used(const std::string& arch_name) const {
    for (const auto& t : f_.tensors())
      if (!used_.count(t.name))
        throw FormatError(fmt::format(
            "{}: tensor '{}' is not used by architecture '{}' ({} tensors expected, {} found)", path_, t.name,
            arch_name, used_.size(), f_.tensors().size()));
  }

  const gguf::File& file() const { return f_; }
  detail::KeptBlocks keep() const { return keep_; }
  be::Dtype wdt() const { return wdt_; }

 private:
  const gguf::File& f_;
  const std::string& path_;
  const ModelOptions& opts_;
  const detail::KeptBlocks keep_;
  const DType mat_dtype_;  // matrices in memory
  const be::Dtype wdt_;
  size_t& weight_bytes_;
  std::unordered_set<std::string> used_;  // every tensor of the file must be used
  std::vector<float> rows_;               // F32 matrices
  std::vector<uint16_t> rows16_;          // BF16 matrices
};

/// token_embd and the output projection (output.weight, or token_embd when it is absent: tied). A kept type
/// stays in its blocks (embd_blocks, or the tied output itself) and the lookup decodes rows from them; else
/// token_embd is read into tok_embd ([n_vocab, n_embd] F32) and a tied output is a copy in the matrix dtype.
/// Sets hp.tied_output; an architecture without output.weight (!output_allowed) leaves one in the file to the
/// unused-tensor check.
void load_embedding_output(TensorReader& r, HParams& hp, const gguf::TensorInfo& te, detail::Embedding im,
                           bool output_allowed) {
  const uint64_t D = hp.n_embd, V = hp.n_vocab;
  const std::string name(arch::kTokenEmbd);
  hp.tied_output = !output_allowed || r.file().find_tensor(arch::kOutput) == nullptr;
  if (r.keeps(te, D)) {
    be::Weight w = r.kept(name, D, V);
    im.embd_in_output = hp.tied_output;
    (hp.tied_output ? im.output : im.embd_blocks) = std::move(w);
    if (hp.tied_output) return;
  } else {
    im.tok_embd.resize(V * D);
    r.fill(im.tok_embd.data(), name, D, V);
    if (hp.tied_output) {
      im.output = be::Weight(static_cast<int64_t>(V), static_cast<int64_t>(D), r.wdt());
      im.output.set_rows(0, im.tok_embd.data(), static_cast<int64_t>(V));
      return;
    }
  }
  im.output = r.mat(std::string(arch::kOutput), D, V);
}

/// The per-pair frequency divisors [n_rot/2] (each in [0.001, 1000]), or empty: rope_freqs.weight when the
/// architecture has it; for LongRoPE, rope_factors_long.weight when the run's context `n_ctx` exceeds
/// hp.n_ctx_orig, else rope_factors_short.weight (both read and checked; sets hp.rope_factors_set).
std::vector<float> load_rope_factors(TensorReader& r, const arch::Description& d, HParams& hp, const std::string& path,
                                     int n_ctx) {
  const uint64_t half = static_cast<uint64_t>(hp.n_rot / 2);
  auto checked = [&](std::vector<float> factors, std::string_view name) {
    for (size_t i = 0; i < factors.size(); ++i)
      if (!(factors[i] >= 1e-3f && factors[i] <= 1e3f))  // Llama 3.1: 1 .. 8; Phi-3.5 long: 1 .. 64
        throw FormatError(fmt::format("{}: tensor '{}' element {} = {} (frequency factors must be in [0.001, 1000])",
                                      path, name, i, factors[i]));
    return factors;
  };
  std::vector<float> factors = checked(r.vecs(d.rope_freqs, {{std::string(arch::kRopeFreqs), half}}), arch::kRopeFreqs);
  if (d.longrope == arch::Presence::Absent) return factors;
  const std::string long_name(arch::kRopeFactorsLong), short_name(arch::kRopeFactorsShort);
  const bool has_long = r.file().find_tensor(long_name) != nullptr, has_short = r.file().find_tensor(short_name) != nullptr;
  if (has_long != has_short)
    throw FormatError(fmt::format("{}: tensor '{}' without '{}' (LongRoPE needs both factor sets)", path,
                                  has_long ? long_name : short_name, has_long ? short_name : long_name));
  if (!has_long && d.longrope != arch::Presence::Required) return factors;
  std::vector<float> long_f = checked(r.vec(long_name, half), long_name);
  std::vector<float> short_f = checked(r.vec(short_name, half), short_name);
  const bool use_long = n_ctx > hp.n_ctx_orig;  // llama.cpp get_rope_factors
  hp.rope_factors_set = use_long ? "long" : "short";
  return use_long ? long_f : short_f;
}

/// Block `l` (blk.{l}.*) of architecture `d` into L: the common Llama block as the
/// recipe lays it out (separate or fused Q/K/V and gate/up) plus its biases, Q/K
/// norms and post-norms.
void load_layer(TensorReader& r, const arch::Description& d, const HParams& hp, int l, detail::Layer& L,
                const std::string& path) {
  const uint64_t D = hp.n_embd, F = hp.n_ff, KV = static_cast<uint64_t>(hp.n_head_kv * hp.head_dim()),
                 Q = static_cast<uint64_t>(hp.n_embd_q()), HD = static_cast<uint64_t>(hp.head_dim());
  auto w = [&](const char* base) { return arch::blk_tensor(l, base); };
  auto b = [&](const char* base) { return arch::blk_tensor(l, base, "bias"); };
  L.attn_norm = r.vec(w("attn_norm"), D);
  if (d.fused_qkv) {
    L.wqkv = r.mat(w("attn_qkv"), D, Q + 2 * KV);
    L.bqkv = r.vecs(d.qkv_bias, {{b("attn_qkv"), Q + 2 * KV}});
  } else {
    L.wqkv = r.stacked({{w("attn_q"), Q}, {w("attn_k"), KV}, {w("attn_v"), KV}}, D, &L.qkv_parts);
    L.bqkv = r.vecs(d.qkv_bias, {{b("attn_q"), Q}, {b("attn_k"), KV}, {b("attn_v"), KV}});
  }
  L.q_norm = r.vecs(d.qk_norm, {{w("attn_q_norm"), HD}});
  L.k_norm = r.vecs(d.qk_norm, {{w("attn_k_norm"), HD}});
  if (L.q_norm.empty() != L.k_norm.empty())
    throw FormatError(fmt::format("{}: layer {} has only one of attn_q_norm and attn_k_norm", path, l));
  L.wo = r.mat(w("attn_output"), Q, D);
  L.bo = r.vecs(d.out_bias, {{b("attn_output"), D}});
  L.ffn_norm = r.vec(w("ffn_norm"), D);
  if (d.fused_gate_up) {
    L.w_gate_up = r.mat(w("ffn_up"), D, 2 * F);
    L.b_gate_up = r.vecs(d.ffn_bias, {{b("ffn_up"), 2 * F}});
  } else {
    L.w_gate_up = r.stacked({{w("ffn_gate"), F}, {w("ffn_up"), F}}, D, &L.gate_up_parts);
    L.b_gate_up = r.vecs(d.ffn_bias, {{b("ffn_gate"), F}, {b("ffn_up"), F}});
  }
  L.w_down = r.mat(w("ffn_down"), F, D);
  L.b_down = r.vecs(d.ffn_bias, {{b("ffn_down"), D}});
  if (d.norm == arch::NormPlacement::PreAndPost) {
    L.post_attn_norm = r.vec(w("post_attention_norm"), D);
    L.post_ffn_norm = r.vec(w("post_ffw_norm"), D);
  }
}

/// The summary's weight dtype when blocks are kept ("Q8_0", "Q4_0", "Q4_K+Q6_K", "Q8_0+F32", "F32": the kept
/// storage types in table order, "+F32" when some matrix was widened), and appends to `note` how many
/// matrices were widened to F32. `all`: every matrix a forward pass multiplies (Model::Impl::for_each_matrix).
std::string kept_weight_dtype(detail::KeptBlocks keep, const std::vector<const be::Weight*>& all, std::string& note) {
  std::string types;  // the kept storage types' names, "Q4_K+Q6_K"
  size_t kept = 0;
  for (const gguf::TypeInfo& ti : gguf::kTensorTypes) {
    if (!ti.kept || !keep.keeps(ti.type)) continue;
    const size_t n = static_cast<size_t>(
        std::count_if(all.begin(), all.end(), [&](const be::Weight* w) { return w->dtype() == *ti.kept; }));
    if (n > 0) {
      if (!types.empty()) types += '+';
      types += ti.name;
    }
    kept += n;
  }
  const ComputeDtypeInfo& row = compute_dtype_info(keep.dtype);
  const std::string label = row.kept ? gguf::type_name(*row.kept) : "kept-block";  // "Q8_0", "Q4_0"
  if (kept == 0) note += fmt::format("; no {} matrix in the file: every matrix widened to F32", label);
  else if (kept < all.size()) note += fmt::format("; {} of {} matrices {}, the others widened to F32", kept, all.size(), types);
  return kept == all.size() ? types : (kept == 0 ? "F32" : types + "+F32");
}

/// Refuses thread counts outside [0, kMaxThreads] and a negative n_ctx (ArgumentError naming the option).
void check_load_options(const ModelOptions& opts) {
  if (opts.threads < 0 || opts.threads > kMaxThreads)
    throw ArgumentError(fmt::format("threads: expected an integer in [0, {}], got {}", kMaxThreads, opts.threads));
  if (opts.n_ctx < 0) throw ArgumentError(fmt::format("n_ctx: expected an integer >= 0, got {}", opts.n_ctx));
}

}  // namespace

void Model::Impl::set_rope() {
  rope = be::RopeParams{hp.n_rot, hp.rope_freq_base, hp.rope_freq_scale,
                        hp.rope_freq_factors ? rope_factors.data() : nullptr,
                        hp.rope_style == arch::RopeStyle::Neox, hp.rope_attn_factor};
  rope_swa = rope;
  rope_swa.freq_base = hp.rope_freq_base_swa;
  rope_swa.freq_scale = hp.rope_freq_scale_swa;
}

void Model::Impl::finish_load(const gguf::File& f, const ModelOptions& opts, detail::KeptBlocks keep, DType mat_dtype) {
  const be::MatmulMode requested = opts.matmul;
  const int64_t n_ctx = opts.n_ctx;
  engine = std::make_unique<be::Engine>(opts.threads);
  engine->set_block_tiles_bf16(compute_dtype_info(dtype).bf16_tiles);
  const be::MatmulMode mm = has_int8_matrix() ? requested : be::MatmulMode::Exact;  // int8 needs its blocks
  engine->set_matmul_mode(mm);
  summary = summarize_gguf(f);
  summary.matmul = be::to_string(mm), summary.matmul_int8_ignored = mm != requested;
  // weight_bytes: matrices in mat_dtype (or kept blocks), token_embd (its kept blocks, else F32) and norms F32;
  // a tied output adds its copy unless it is token_embd's kept blocks.
  std::vector<const be::Weight*> matrices;
  for_each_matrix([&matrices](const be::Weight& w) { matrices.push_back(&w); });
  summary.weight_dtype = keep.any() ? kept_weight_dtype(keep, matrices, dtype_note) : dtype_name(mat_dtype);
  summary.resident_bytes = weight_bytes + (hp.tied_output && !embd_in_output ? output.bytes() : 0);
  summary.lookup_only_bytes =
      embd_in_output ? 0 : embd_blocks.n_out() > 0 ? embd_blocks.bytes() : tok_embd.size() * sizeof(float);
  summary.mapped_bytes = mapped_bytes();
  summary.map_ignored = opts.map_weights && summary.mapped_bytes == 0;
  summary.sliding = sliding_summary(hp, *desc);
  if (!hp.rope_factors_set.empty())
    summary.longrope = fmt::format("LongRoPE {} factors (context {} {} original {}), attention factor {:.4g}",
                                   hp.rope_factors_set, n_ctx > 0 ? n_ctx : hp.n_ctx_train,
                                   hp.rope_factors_set == "long" ? ">" : "<=", hp.n_ctx_orig, hp.rope_attn_factor);
}

std::unique_ptr<Model> Model::load(const std::string& path, const ModelOptions& opts) {
  check_load_options(opts);
  const std::optional<FileStamp> at_open = stamp_of(path);
  Stopwatch load_time;
  gguf::File f(path);
  const std::span<const std::byte> file_bytes = f.bytes();
  if (!at_open) changed_while_loading(path, "it could not be stat()ed before opening");
  check_unchanged(path, *at_open, file_bytes.size());
  const arch::Description& desc = opts.recipe ? *opts.recipe : find_arch(f, path);
  std::unique_ptr<Model> m(new Model());
  auto& im = *m->impl_;
  im.path = path;
  im.desc = &desc;
  HParams& hp = im.hp;
  read_hparams(f, desc, hp);
  const gguf::TensorInfo& te = read_vocab_size(f, path, hp);
  im.tok = load_tokenizer(f, path, hp.n_vocab);
  im.dtype = detail::choose_dtype(f, opts.dtype, im.dtype_note);
  im.kv_dtype = resolve_kv_cache_dtype(opts.kv_cache_dtype, im.dtype);
  // a compute dtype that keeps storage types (q8_0, q4_0, blocks, blocks-bf16): the file's matrices of those types stay as blocks
  const detail::KeptBlocks keep = detail::kept_blocks(im.dtype);
  if (im.dtype == ComputeDtype::BF16 && !be::bf16_matmul_available())
    throw ArgumentError(fmt::format("{}: dtype bf16: oneDNN has no bf16 matmul on this CPU (ISA {}); use f32 or auto",
                                    path, be::cpu_isa_name()));
  const DType mat_dtype = compute_dtype_info(im.dtype).matrices;  // matrices in memory
  if (opts.check_memory) check_weight_memory(f, path, te, mat_dtype, im.dtype);
  if (opts.on_load_stage) opts.on_load_stage("mapped");
  // The file's SHA-256 from the very bytes the weights are copied from.
  if (opts.hash) im.sha256 = hash_mapped(path, file_bytes);
  check_unchanged(path, *at_open, file_bytes.size());  // again, just before copying
  if (opts.on_load_stage) opts.on_load_stage("copy");

  TensorReader r(f, path, opts, keep, mat_dtype, im.weight_bytes);
  load_embedding_output(r, hp, te, {im.tok_embd, im.embd_blocks, im.output, im.embd_in_output},
                        desc.output != arch::Presence::Absent);
  im.output_norm = r.vec(std::string(arch::kOutputNorm), hp.n_embd);
  im.rope_factors = load_rope_factors(r, desc, hp, path, opts.n_ctx > 0 ? opts.n_ctx : hp.n_ctx_train);
  hp.rope_freq_factors = !im.rope_factors.empty();
  im.set_rope();
  im.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int l = 0; l < hp.n_layer; ++l) load_layer(r, desc, hp, l, im.layers[static_cast<size_t>(l)], path);
  for (const detail::Layer& L : im.layers)
    for (const auto* parts : {&L.qkv_parts, &L.gate_up_parts})
      for (const be::Weight& w : *parts) im.max_part_rows = std::max(im.max_part_rows, w.n_out());
  hp.qkv_bias = !im.layers[0].bqkv.empty();
  hp.qk_norm = !im.layers[0].q_norm.empty();
  r.check_all_used(hp.arch);
  check_unchanged(path, *at_open, file_bytes.size());  // and after: the copy saw one version of the file
  im.finish_load(f, opts, keep, mat_dtype);
  im.summary.load_seconds = load_time.seconds();
  return m;
}

}  // namespace kveval
