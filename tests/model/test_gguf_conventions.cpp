// llama.cpp's conventions for GGUF files, checked on every file kveval writes.
//
// The rules below are what llama.cpp (ggml-org/llama.cpp) checks or assumes
// when it loads a Llama GGUF; each cites the place in its source. The checker
// reads the file with its own byte-level parser (not kveval's gguf::File), so a
// bug in kveval's reader cannot hide one in its writer. A file that breaks a
// rule either fails to load in llama.cpp (an exception or a GGML_ASSERT/ABORT)
// or loads with a different meaning.
//
// Container (ggml/src/gguf.cpp, gguf_init_from_file_impl):
//   C1 magic "GGUF", version 2 or 3; no duplicate key; no duplicate tensor name;
//      tensor names shorter than GGML_MAX_NAME (64); at most GGML_MAX_DIMS (4) dims.
//   C2 general.alignment, when present, is a UINT32 and a power of two (default 32).
//   C3 the data section starts at the end of the tensor infos rounded up to the alignment.
//   C4 tensor data follow in tensor-info order: each offset equals the sum of the
//      previous tensors' sizes, each rounded up to the alignment ("tensor '%s' has
//      offset %d, expected %d"); the file holds the whole data section.
//   C5 tensor types are ggml types (every type make-model writes: F32, F16, BF16, Q8_0,
//      Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K) and ne[0] is a multiple of the block size.
// Tensor types (conversion/base.py prepare_tensors: "if n_dims <= 1 or
// new_name.endswith('_norm.weight'): data_qtype = F32"; ggml/src/ggml-cpu/binary-ops.cpp
// binary_op aborts on F32 activations times an F16 vector):
//   T1 every 1-D tensor (norms, biases) and every *_norm.weight is F32.
// Llama hyper-parameters (src/llama-model.cpp llama_model_base::load_hparams, and
// src/models/llama.cpp load_arch_hparams; src/llama-model-loader.cpp GKV::get_kv
// throws "key %s has wrong type" unless the GGUF type is exactly the expected one):
//   H1 general.architecture is a STRING ("llama" here: the rules below are llama's).
//   H2 llama.context_length, llama.embedding_length, llama.block_count: UINT32, required.
//   H3 llama.feed_forward_length, llama.attention.head_count: UINT32 (llama.cpp also
//      takes per-layer arrays; kveval writes scalars); needed for the tensor shapes.
//   H4 llama.attention.layer_norm_rms_epsilon: FLOAT32, required (load_arch_hparams).
//   H5 optional llama.attention.head_count_kv UINT32 dividing head_count; llama.rope.freq_base
//      FLOAT32; llama.rope.dimension_count UINT32 equal to embedding_length / head_count
//      ("invalid n_rot" for LLM_ARCH_LLAMA); llama.vocab_size UINT32 equal to the token count.
// Tokenizer (src/llama-vocab.cpp llama_vocab::impl::load):
//   V1 tokenizer.ggml.model: STRING, required ("llama" = SentencePiece).
//   V2 tokenizer.ggml.tokens: ARRAY of STRING, required; the strings are distinct
//      (GGML_ASSERT(id_to_token.size() == token_to_id.size())) and non-empty.
//   V3 tokenizer.ggml.scores: ARRAY of FLOAT32, tokenizer.ggml.token_type: ARRAY of
//      INT32, each with at least one entry per token ("invalid gguf type", "Index out
//      of array bounds").
//   V4 tokenizer.ggml.{bos,eos,unknown}_token_id: UINT32 below the token count (an id
//      out of range is replaced by the default with a "bad special token" warning;
//      llama.cpp's own llama2.c converter writes padding_token_id 0xFFFFFFFF, so
//      only the type of the other *_token_id keys is checked).
//   V5 tokenizer.ggml.add_space_prefix / add_bos_token / add_eos_token: BOOL;
//      add_eos_token false (tools/perplexity/perplexity.cpp GGML_ASSERT(!add_eos)).
//   V6 a SentencePiece vocabulary has the byte token "<0x0A>" (the newline,
//      found with byte_to_token('\n')).
// Tensors (src/models/llama.cpp llama_model_llama::load_arch_tensors;
// src/llama-model-loader.cpp create_tensor checks the shape, done_getting_tensors
// throws "wrong number of tensors" for tensors it did not use):
//   S1 exactly these tensors, with these ggml dims: token_embd {n_embd, n_vocab},
//      output_norm {n_embd}, output {n_embd, n_vocab} (optional), and per layer
//      attn_norm {n_embd}, attn_q {n_embd, n_embd}, attn_k and attn_v {n_embd,
//      n_head_kv*head_dim}, attn_output {n_embd, n_embd}, ffn_norm {n_embd}, ffn_gate
//      and ffn_up {n_embd, n_ff}, ffn_down {n_ff, n_embd} (all ".weight"); n_vocab
//      is the token count.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/random_model.hpp"
#include "test_support.hpp"

using namespace kveval;
namespace fs = std::filesystem;

namespace {

// ---- a byte-level GGUF parser (the format: ggml docs/gguf.md) -------------

enum : uint32_t { kU8, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kStr, kArr, kU64, kI64, kF64 };

struct RawValue {
  uint32_t type = 0;
  uint32_t arr_type = 0;
  uint64_t arr_n = 0;
  uint64_t u = 0;                  ///< unsigned scalars and bool
  int64_t i = 0;                   ///< signed scalars
  double f = 0;                    ///< float scalars
  std::string s;                   ///< string scalar
  std::vector<std::string> strs;   ///< array of strings
};
struct RawTensor {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = 0;
  uint64_t offset = 0;
};
struct RawFile {
  uint32_t version = 0;
  std::vector<std::pair<std::string, RawValue>> kv;  ///< file order
  std::vector<RawTensor> tensors;                    ///< file order
  uint64_t infos_end = 0;                            ///< file offset after the last tensor info
  uint64_t file_size = 0;
  const RawValue* find(const std::string& k) const {
    for (const auto& [key, v] : kv)
      if (key == k) return &v;
    return nullptr;
  }
};

struct Reader {
  std::vector<char> b;
  size_t p = 0;
  void need(size_t n) {
    if (n > b.size() - p) throw std::runtime_error(fmt::format("file cut at byte {}", p));
  }
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, b.data() + p, sizeof(T));
    p += sizeof(T);
    return v;
  }
  std::string str() {
    const auto n = get<uint64_t>();
    need(n);
    std::string s(b.data() + p, n);
    p += n;
    return s;
  }
  /// Reads one scalar of `type` into `v` (arrays: elements of strings kept).
  void scalar(uint32_t type, RawValue& v) {
    switch (type) {
      case kU8: v.u = get<uint8_t>(); break;
      case kI8: v.i = get<int8_t>(); break;
      case kU16: v.u = get<uint16_t>(); break;
      case kI16: v.i = get<int16_t>(); break;
      case kU32: v.u = get<uint32_t>(); break;
      case kI32: v.i = get<int32_t>(); break;
      case kF32: v.f = get<float>(); break;
      case kBool: v.u = get<uint8_t>(); break;
      case kStr: v.s = str(); break;
      case kU64: v.u = get<uint64_t>(); break;
      case kI64: v.i = get<int64_t>(); break;
      case kF64: v.f = get<double>(); break;
      default: throw std::runtime_error(fmt::format("unknown value type {}", type));
    }
  }
};

RawFile parse_raw(const std::string& path) {
  Reader r;
  {
    std::ifstream f(path, std::ios::binary);
    r.b.assign(std::istreambuf_iterator<char>(f), {});
  }
  RawFile out;
  out.file_size = r.b.size();
  r.need(4);
  if (std::memcmp(r.b.data(), "GGUF", 4) != 0) throw std::runtime_error("bad magic");
  r.p = 4;
  out.version = r.get<uint32_t>();
  const auto n_tensors = r.get<uint64_t>();
  const auto n_kv = r.get<uint64_t>();
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = r.str();
    RawValue v;
    v.type = r.get<uint32_t>();
    if (v.type == kArr) {
      v.arr_type = r.get<uint32_t>();
      v.arr_n = r.get<uint64_t>();
      for (uint64_t e = 0; e < v.arr_n; ++e) {
        RawValue el;
        r.scalar(v.arr_type, el);
        if (v.arr_type == kStr) v.strs.push_back(std::move(el.s));
      }
    } else {
      r.scalar(v.type, v);
    }
    out.kv.emplace_back(std::move(key), std::move(v));
  }
  for (uint64_t t = 0; t < n_tensors; ++t) {
    RawTensor ti;
    ti.name = r.str();
    const auto n_dims = r.get<uint32_t>();
    if (n_dims > 16) throw std::runtime_error(fmt::format("tensor '{}': {} dims", ti.name, n_dims));
    for (uint32_t d = 0; d < n_dims; ++d) ti.ne.push_back(r.get<uint64_t>());
    ti.type = r.get<uint32_t>();
    ti.offset = r.get<uint64_t>();
    out.tensors.push_back(std::move(ti));
  }
  out.infos_end = r.p;
  return out;
}

/// ggml type -> (block size in elements, bytes per block) for the types kveval
/// writes, from ggml's type_traits (ggml/src/ggml.c) and block structs
/// (ggml/src/ggml-common.h, QK_K = 256); nullopt for others.
std::optional<std::pair<uint64_t, uint64_t>> ggml_block(uint32_t type) {
  using P = std::pair<uint64_t, uint64_t>;
  switch (type) {
    case 0: return P{1, 4};       // F32
    case 1: return P{1, 2};       // F16
    case 2: return P{32, 18};     // Q4_0: d (f16) + 16 bytes of nibbles
    case 3: return P{32, 20};     // Q4_1: d, m + 16
    case 6: return P{32, 22};     // Q5_0: d + qh[4] + 16
    case 7: return P{32, 24};     // Q5_1: d, m + qh[4] + 16
    case 8: return P{32, 34};     // Q8_0: d + 32
    case 10: return P{256, 84};   // Q2_K: scales[16] + qs[64] + d, dmin
    case 11: return P{256, 110};  // Q3_K: hmask[32] + qs[64] + scales[12] + d
    case 12: return P{256, 144};  // Q4_K: d, dmin + scales[12] + qs[128]
    case 13: return P{256, 176};  // Q5_K: d, dmin + scales[12] + qh[32] + qs[128]
    case 14: return P{256, 210};  // Q6_K: ql[128] + qh[64] + scales[16] + d
    case 30: return P{1, 2};      // BF16
    default: return std::nullopt;
  }
}

const char* type_name(uint32_t t) {
  static const char* names[] = {"UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
                                "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"};
  return t < 13 ? names[t] : "?";
}

// ---- the rules -------------------------------------------------------------

/// Every violation of the rules at the top of this file, one line each ("" none).
std::vector<std::string> llamacpp_violations(const std::string& path) {
  std::vector<std::string> bad;
  RawFile f;
  try {
    f = parse_raw(path);
  } catch (const std::exception& e) {
    return {fmt::format("C1: unreadable: {}", e.what())};
  }
  auto add = [&](std::string s) { bad.push_back(std::move(s)); };

  // C1
  if (f.version != 2 && f.version != 3) add(fmt::format("C1: version {}", f.version));
  std::set<std::string> keys, names;
  for (const auto& [k, v] : f.kv)
    if (!keys.insert(k).second) add("C1: duplicate key " + k);
  for (const auto& t : f.tensors) {
    if (!names.insert(t.name).second) add("C1: duplicate tensor " + t.name);
    if (t.name.size() >= 64) add("C1: tensor name too long: " + t.name);
    if (t.ne.empty() || t.ne.size() > 4) add(fmt::format("C1: tensor {} has {} dims", t.name, t.ne.size()));
  }
  // C2
  uint64_t align = 32;
  if (const RawValue* a = f.find("general.alignment")) {
    if (a->type != kU32) add(fmt::format("C2: general.alignment is {}, not UINT32", type_name(a->type)));
    else if (a->u == 0 || (a->u & (a->u - 1)) != 0) add(fmt::format("C2: general.alignment {} not a power of 2", a->u));
    else align = a->u;
  }
  auto pad = [&](uint64_t x) { return (x + align - 1) / align * align; };
  // C3, C4, C5
  const uint64_t data_start = pad(f.infos_end);
  uint64_t expect = 0;
  for (const auto& t : f.tensors) {
    auto blk = ggml_block(t.type);
    if (!blk) {
      add(fmt::format("C5: tensor {} has ggml type {} (not checked here)", t.name, t.type));
      return bad;
    }
    uint64_t n = 1;
    for (uint64_t d : t.ne) n *= d;
    if (t.ne.empty() || t.ne[0] % blk->first != 0) add(fmt::format("C5: tensor {}: row not whole blocks", t.name));
    if (t.offset != expect) add(fmt::format("C4: tensor {} at offset {}, expected {}", t.name, t.offset, expect));
    expect += pad(n / blk->first * blk->second);
  }
  if (data_start + expect > f.file_size)
    add(fmt::format("C4: data section needs {} bytes from {}, file has {}", expect, data_start, f.file_size));

  // T1
  for (const auto& t : f.tensors) {
    const bool norm = t.name.size() >= 12 && t.name.compare(t.name.size() - 12, 12, "_norm.weight") == 0;
    if ((t.ne.size() == 1 || norm) && t.type != 0)
      add(fmt::format("T1: tensor {} ({}-D) has type {}, llama.cpp needs F32", t.name, t.ne.size(), t.type));
  }

  // H1
  const RawValue* arch = f.find("general.architecture");
  if (!arch || arch->type != kStr) {
    add("H1: general.architecture missing or not a STRING");
    return bad;
  }
  if (arch->s != "llama") {
    add("H1: no conventions listed here for architecture '" + arch->s + "' (add its rules)");
    return bad;
  }
  auto u32 = [&](const std::string& k, bool required, const char* rule) -> std::optional<uint64_t> {
    const RawValue* v = f.find(k);
    if (!v) {
      if (required) add(fmt::format("{}: missing {}", rule, k));
      return std::nullopt;
    }
    if (v->type != kU32) {
      add(fmt::format("{}: {} is {}, llama.cpp reads UINT32", rule, k, type_name(v->type)));
      return std::nullopt;
    }
    return v->u;
  };
  auto f32 = [&](const std::string& k, bool required, const char* rule) {
    const RawValue* v = f.find(k);
    if (!v) {
      if (required) add(fmt::format("{}: missing {}", rule, k));
    } else if (v->type != kF32) {
      add(fmt::format("{}: {} is {}, llama.cpp reads FLOAT32", rule, k, type_name(v->type)));
    }
  };
  u32("llama.context_length", true, "H2");
  const auto n_embd = u32("llama.embedding_length", true, "H2");
  const auto n_layer = u32("llama.block_count", true, "H2");
  const auto n_ff = u32("llama.feed_forward_length", true, "H3");
  const auto n_head = u32("llama.attention.head_count", true, "H3");
  f32("llama.attention.layer_norm_rms_epsilon", true, "H4");
  f32("llama.rope.freq_base", false, "H5");
  auto n_head_kv = u32("llama.attention.head_count_kv", false, "H5");
  if (!n_head_kv) n_head_kv = n_head;
  if (n_head && n_head_kv && (*n_head_kv == 0 || *n_head % *n_head_kv != 0))
    add(fmt::format("H5: head_count {} not a multiple of head_count_kv {}", *n_head, *n_head_kv));
  const auto n_rot = u32("llama.rope.dimension_count", false, "H5");
  if (n_rot && n_embd && n_head && *n_head > 0 && *n_rot != *n_embd / *n_head)
    add(fmt::format("H5: llama.rope.dimension_count {} != head_dim {}", *n_rot, *n_embd / *n_head));

  // V1..V6
  const RawValue* model = f.find("tokenizer.ggml.model");
  if (!model || model->type != kStr) add("V1: tokenizer.ggml.model missing or not a STRING");
  const RawValue* toks = f.find("tokenizer.ggml.tokens");
  uint64_t n_tokens = 0;
  if (!toks || toks->type != kArr || toks->arr_type != kStr) {
    add("V2: tokenizer.ggml.tokens missing or not an ARRAY of STRING");
  } else {
    n_tokens = toks->arr_n;
    std::set<std::string> distinct(toks->strs.begin(), toks->strs.end());
    if (distinct.size() != toks->strs.size()) add("V2: tokenizer.ggml.tokens has duplicate strings");
    if (distinct.count("")) add("V2: tokenizer.ggml.tokens has an empty string");
    if (model && model->s == "llama" && !distinct.count("<0x0A>")) add("V6: no <0x0A> byte token");
  }
  auto arr = [&](const std::string& k, uint32_t el, const char* rule) {
    const RawValue* v = f.find(k);
    if (!v) return;
    if (v->type != kArr || v->arr_type != el) add(fmt::format("{}: {} is not an ARRAY of {}", rule, k, type_name(el)));
    else if (v->arr_n < n_tokens) add(fmt::format("{}: {} has {} entries for {} tokens", rule, k, v->arr_n, n_tokens));
  };
  arr("tokenizer.ggml.scores", kF32, "V3");
  arr("tokenizer.ggml.token_type", kI32, "V3");
  for (const char* id : {"bos", "eos", "unknown", "padding", "seperator"}) {
    const std::string k = fmt::format("tokenizer.ggml.{}_token_id", id);
    const bool in_range = std::strcmp(id, "padding") != 0 && std::strcmp(id, "seperator") != 0;
    if (auto v = u32(k, false, "V4"); v && in_range && *v >= n_tokens)
      add(fmt::format("V4: {} {} >= {} tokens", k, *v, n_tokens));
  }
  for (const char* k : {"tokenizer.ggml.add_space_prefix", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"})
    if (const RawValue* v = f.find(k); v && v->type != kBool) add(fmt::format("V5: {} is not a BOOL", k));
  if (const RawValue* v = f.find("tokenizer.ggml.add_eos_token"); v && v->type == kBool && v->u)
    add("V5: add_eos_token is true (llama-perplexity asserts it is false)");
  if (auto v = u32("llama.vocab_size", false, "H5"); v && *v != n_tokens)
    add(fmt::format("H5: llama.vocab_size {} != {} tokens", *v, n_tokens));

  // S1
  if (!n_embd || !n_layer || !n_ff || !n_head || !n_head_kv || *n_head == 0) return bad;
  const uint64_t e = *n_embd, kv = *n_head_kv * (e / *n_head), ff = *n_ff;
  std::map<std::string, std::vector<uint64_t>> want = {{"token_embd.weight", {e, n_tokens}},
                                                       {"output_norm.weight", {e}}};
  for (uint64_t l = 0; l < *n_layer; ++l) {
    auto n = [&](const char* s) { return fmt::format("blk.{}.{}.weight", l, s); };
    want[n("attn_norm")] = {e};
    want[n("attn_q")] = {e, e};
    want[n("attn_k")] = {e, kv};
    want[n("attn_v")] = {e, kv};
    want[n("attn_output")] = {e, e};
    want[n("ffn_norm")] = {e};
    want[n("ffn_gate")] = {e, ff};
    want[n("ffn_up")] = {e, ff};
    want[n("ffn_down")] = {ff, e};
  }
  const std::map<std::string, std::vector<uint64_t>> optional = {{"output.weight", {e, n_tokens}}};
  for (const auto& t : f.tensors) {
    auto it = want.find(t.name);
    auto opt = optional.find(t.name);
    if (it == want.end() && opt == optional.end()) {
      add("S1: tensor " + t.name + " is not one llama.cpp loads (wrong number of tensors)");
      continue;
    }
    const auto& dims = it != want.end() ? it->second : opt->second;
    if (t.ne != dims) add(fmt::format("S1: tensor {} has dims {}, expected {}", t.name, fmt::join(t.ne, "x"), fmt::join(dims, "x")));
    if (it != want.end()) want.erase(it);
  }
  for (const auto& [name, dims] : want) add("S1: missing tensor " + name);
  return bad;
}

fs::path conv_dir() {
  static const kveval::test::ScratchDir dir("gguf_conventions");
  return dir.path;
}

/// `spec` with small sizes (2 layers, head_dim 8, 300 tokens) and everything
/// else (architecture, head counts) kept, so every preset is written quickly.
RandomModelSpec shrunk(RandomModelSpec s) {
  s.n_embd = 8 * s.n_head;
  s.n_layer = 2;
  s.n_ff = 96;
  s.n_vocab = 300;
  s.n_ctx = 128;
  return s;
}

/// Deviations for the checker's own tests.
enum class Break { None, F16Norm, Alignment64, NoRmsEps, ExtraTensor, DuplicateToken, BadRot, F64Eps };

/// A minimal llama GGUF (1 layer, n_embd 8, 2 heads, 260 tokens) written with
/// kveval's Writer, with one deviation.
std::string write_min_llama(const std::string& name, Break brk) {
  gguf::Writer w;
  w.add_string("general.architecture", "llama");
  if (brk == Break::Alignment64) w.add("general.alignment", gguf::Value{gguf::ValueType::UINT64, uint64_t{32}});
  w.add_uint32("llama.context_length", 64);
  w.add_uint32("llama.embedding_length", 8);
  w.add_uint32("llama.block_count", 1);
  w.add_uint32("llama.feed_forward_length", 16);
  w.add_uint32("llama.attention.head_count", 2);
  w.add_uint32("llama.rope.dimension_count", brk == Break::BadRot ? 2 : 4);
  if (brk == Break::F64Eps) w.add("llama.attention.layer_norm_rms_epsilon", gguf::Value{gguf::ValueType::FLOAT64, 1e-5});
  else if (brk != Break::NoRmsEps) w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) toks.push_back(fmt::format("<0x{:02X}>", b));
  toks.push_back(brk == Break::DuplicateToken ? "<s>" : "\xE2\x96\x81");
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", toks);
  w.add_float32_array("tokenizer.ggml.scores", std::vector<float>(toks.size(), 0.0f));
  w.add_int32_array("tokenizer.ggml.token_type", std::vector<int32_t>(toks.size(), 1));
  const uint64_t v = toks.size();
  auto t = [&](const std::string& n, std::vector<uint64_t> dims, gguf::TensorType type = gguf::TensorType::F32) {
    uint64_t k = 1;
    for (uint64_t d : dims) k *= d;
    w.add_tensor(n, dims, std::vector<float>(k, 0.5f), type);
  };
  t("token_embd.weight", {8, v});
  t("output_norm.weight", {8});
  t("blk.0.attn_norm.weight", {8}, brk == Break::F16Norm ? gguf::TensorType::F16 : gguf::TensorType::F32);
  for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output"}) t(fmt::format("blk.0.{}.weight", m), {8, 8});
  t("blk.0.ffn_norm.weight", {8});
  t("blk.0.ffn_gate.weight", {8, 16});
  t("blk.0.ffn_up.weight", {8, 16});
  t("blk.0.ffn_down.weight", {16, 8});
  if (brk == Break::ExtraTensor) t("blk.0.attn_q.bias_typo", {8});
  const std::string p = (conv_dir() / name).string();
  w.write(p);
  return p;
}

std::string joined(const std::vector<std::string>& v) { return fmt::format("{}", fmt::join(v, "\n")); }

}  // namespace

TEST_SUITE("model.gguf_conventions") {
  TEST_CASE("every random-model preset, F32, F16 and BF16, follows llama.cpp's conventions") {
    for (const std::string& preset : random_model_presets()) {
      for (auto type : {gguf::TensorType::F32, gguf::TensorType::F16, gguf::TensorType::BF16}) {
        const RandomModelSpec spec = shrunk(random_model_preset(preset));
        const std::string p = (conv_dir() / fmt::format("{}_{}.gguf", preset, static_cast<int>(type))).string();
        write_random_llama(p, spec, 5, type);
        CAPTURE(preset);
        CAPTURE(static_cast<int>(type));
        const auto bad = llamacpp_violations(p);
        CHECK_MESSAGE(bad.empty(), joined(bad));
        // the type reaches the matrices (the rules are not met by writing F32 only)
        CHECK(gguf::File(p).tensor("blk.0.ffn_up.weight").type == type);
      }
    }
  }

  TEST_CASE("every type make-model writes (quantized ones too) follows the conventions") {
    RandomModelSpec spec = random_model_preset("tiny");
    spec.n_embd = 256;  // K-quants need rows of 256
    spec.n_ff = 256;
    for (gguf::TensorType type : gguf::supported_types()) {
      CAPTURE(gguf::type_name(type));
      const std::string p = (conv_dir() / fmt::format("q_{}.gguf", gguf::type_name(type))).string();
      write_random_llama(p, spec, 2, type);
      const auto bad = llamacpp_violations(p);
      CHECK_MESSAGE(bad.empty(), joined(bad));
      CHECK(gguf::File(p).tensor("blk.1.attn_q.weight").type == type);
      CHECK(gguf::File(p).tensor("blk.1.attn_norm.weight").type == gguf::TensorType::F32);
    }
  }

  TEST_CASE("the tiny preset as make-model writes it (F16) follows the conventions") {
    const std::string p = (conv_dir() / "tiny_f16.gguf").string();
    write_random_llama(p, random_model_preset("tiny"), 1, gguf::TensorType::F16);
    const auto bad = llamacpp_violations(p);
    CHECK_MESSAGE(bad.empty(), joined(bad));
  }

  TEST_CASE("the real stories260K file (converted by llama.cpp's tools) passes the checker" * kveval::test::needs_model()) {
    const auto bad = llamacpp_violations(kveval::test::model_path());
    CHECK_MESSAGE(bad.empty(), joined(bad));
  }

  TEST_CASE("the checker finds each broken rule") {
    CHECK(llamacpp_violations(write_min_llama("ok.gguf", Break::None)).empty());
    struct Case {
      Break brk;
      const char* rule;
    };
    for (const Case c : {Case{Break::F16Norm, "T1: tensor blk.0.attn_norm.weight (1-D) has type 1"},
                         Case{Break::Alignment64, "C2: general.alignment is UINT64"},
                         Case{Break::NoRmsEps, "H4: missing llama.attention.layer_norm_rms_epsilon"},
                         Case{Break::F64Eps, "H4: llama.attention.layer_norm_rms_epsilon is FLOAT64"},
                         Case{Break::ExtraTensor, "S1: tensor blk.0.attn_q.bias_typo is not one"},
                         Case{Break::DuplicateToken, "V2: tokenizer.ggml.tokens has duplicate strings"},
                         Case{Break::BadRot, "H5: llama.rope.dimension_count 2 != head_dim 4"}}) {
      const auto bad = llamacpp_violations(write_min_llama(fmt::format("broken{}.gguf", static_cast<int>(c.brk)), c.brk));
      CAPTURE(c.rule);
      CAPTURE(joined(bad));
      REQUIRE(bad.size() >= 1);
      CHECK(bad[0].rfind(c.rule, 0) == 0);
    }
    // a file cut in its data section
    const std::string p = write_min_llama("cut.gguf", Break::None);
    fs::resize_file(p, fs::file_size(p) - 40);
    const auto bad = llamacpp_violations(p);
    REQUIRE(bad.size() == 1);
    CHECK(bad[0].rfind("C4: data section needs", 0) == 0);
  }
}
