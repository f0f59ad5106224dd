// llama.cpp's conventions for GGUF files: the checker behind
// test_gguf_conventions.cpp (see gguf_conventions.hpp for the rules).
#include "model/gguf_conventions.hpp"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kveval::test {

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
/// What the loader of one architecture creates beyond the common block (S1).
struct ArchTensors {
  const char* name;
  bool q_is_n_embd;      ///< attn_q {n_embd, n_embd}, attn_output {n_embd, n_embd} (qwen2) instead of n_head*hk
  bool qk_norm;          ///< attn_q_norm, attn_k_norm {hk} required (qwen3)
  bool llama_extras;     ///< optional attn_output/ffn biases and rope_freqs {n_rot/2} (llama)
  bool output_bias;      ///< optional output.bias {n_vocab} (qwen2)
  /// gemma2, gemma3: post_attention_norm, post_ffw_norm {n_embd} required; final_logit_softcapping
  /// FLOAT32, attention.sliding_window UINT32, rope.freq_base_swa FLOAT32 (load_arch_hparams).
  bool gemma = false;
  /// gemma2: no output.weight (the output is token_embd, TENSOR_DUPLICATED); attn_logit_softcapping FLOAT32.
  bool gemma2 = false;
  /// granite: logit_scale FLOAT32 required; embedding_scale, residual_scale, attention.scale FLOAT32.
  bool granite = false;
  /// phi3: attn_qkv {n_embd, n_embd + 2 kv} and ffn_up {n_embd, 2 n_ff} instead of attn_q/k/v and
  /// ffn_gate/ffn_up; rope.dimension_count even and <= head_dim; optional rope_factors_long/short
  /// {n_rot / 2}; rope.scaling.attn_factor FLOAT32, rope.scaling.original_context_length and
  /// attention.sliding_window UINT32.
  bool phi3 = false;
};
// src/models/llama.cpp, qwen2.cpp, qwen3.cpp, gemma2.cpp, gemma3.cpp, granite.cpp and phi3.cpp, load_arch_tensors.
constexpr ArchTensors kArchs[] = {
    {"llama", false, false, true, false},
    {"qwen2", true, false, false, true},
    {"qwen3", false, true, false, false},
    {"gemma2", false, false, false, false, true, true},
    {"gemma3", false, true, false, false, true, false},
    {"granite", false, false, true, false, false, false, true, false},
    {"phi3", true, false, false, false, false, false, false, true},
};

}  // namespace

// ---- the rules -------------------------------------------------------------

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
  const RawValue* arch_kv = f.find("general.architecture");
  if (!arch_kv || arch_kv->type != kStr) {
    add("H1: general.architecture missing or not a STRING");
    return bad;
  }
  const ArchTensors* arch = nullptr;
  for (const ArchTensors& a : kArchs)
    if (arch_kv->s == a.name) arch = &a;
  if (!arch) {
    add("H1: no conventions listed here for architecture '" + arch_kv->s + "' (add its rules)");
    return bad;
  }
  const std::string pre = arch_kv->s + ".";
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
  // H2..H5
  u32(pre + "context_length", true, "H2");
  const auto n_embd = u32(pre + "embedding_length", true, "H2");
  const auto n_layer = u32(pre + "block_count", true, "H2");
  const auto n_ff = u32(pre + "feed_forward_length", true, "H3");
  const auto n_head = u32(pre + "attention.head_count", true, "H3");
  f32(pre + "attention.layer_norm_rms_epsilon", true, "H4");
  f32(pre + "rope.freq_base", false, "H5");
  if (arch->gemma2) f32(pre + "attn_logit_softcapping", false, "H5");
  if (arch->granite) {
    f32(pre + "logit_scale", true, "H5");
    for (const char* k : {"embedding_scale", "residual_scale", "attention.scale"}) f32(pre + k, false, "H5");
  }
  if (arch->phi3) {
    f32(pre + "rope.scaling.attn_factor", false, "H5");
    u32(pre + "rope.scaling.original_context_length", false, "H5");
    u32(pre + "attention.sliding_window", false, "H5");
  }
  if (arch->gemma) {
    f32(pre + "final_logit_softcapping", false, "H5");
    u32(pre + "attention.sliding_window", false, "H5");
    f32(pre + "rope.freq_base_swa", false, "H5");
  }
  auto n_head_kv = u32(pre + "attention.head_count_kv", false, "H5");
  if (!n_head_kv) n_head_kv = n_head;
  if (n_head && n_head_kv && (*n_head_kv == 0 || *n_head % *n_head_kv != 0))
    add(fmt::format("H5: head_count {} not a multiple of head_count_kv {}", *n_head, *n_head_kv));
  std::optional<uint64_t> hk, hv, n_rot;
  if (n_embd && n_head && *n_head > 0) {
    hk = u32(pre + "attention.key_length", false, "H5").value_or(*n_embd / *n_head);
    hv = u32(pre + "attention.value_length", false, "H5").value_or(*n_embd / *n_head);
    if (*hk != *hv) add(fmt::format("H5: key_length {} != value_length {}", *hk, *hv));
    n_rot = u32(pre + "rope.dimension_count", false, "H5").value_or(*hk);
    if (arch->phi3 ? (*n_rot > *hk || *n_rot % 2 != 0) : *n_rot != *hk)
      add(fmt::format("H5: {}rope.dimension_count {} != head_dim {}", pre, *n_rot, *hk));
  }

  // V1..V7
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
  if (model && model->s == "gpt2") {
    const RawValue* m = f.find("tokenizer.ggml.merges");
    if (!m || m->type != kArr || m->arr_type != kStr || m->arr_n == 0)
      add("V7: tokenizer.ggml.merges missing or not a non-empty ARRAY of STRING (tokenizer.ggml.model gpt2)");
  }
  if (const RawValue* v = f.find("tokenizer.ggml.pre"); v && v->type != kStr)
    add("V7: tokenizer.ggml.pre is not a STRING");
  if (auto v = u32(pre + "vocab_size", false, "H5"); v && *v != n_tokens)
    add(fmt::format("H5: {}vocab_size {} != {} tokens", pre, *v, n_tokens));

  // S1
  if (!n_embd || !n_layer || !n_ff || !n_head || !n_head_kv || !hk || !hv || !n_rot) return bad;
  const uint64_t e = *n_embd, ff = *n_ff, V = n_tokens;
  const uint64_t q = arch->q_is_n_embd ? e : *n_head * *hk, kv = *n_head_kv * *hv;
  using Dims = std::vector<uint64_t>;
  std::map<std::string, Dims> want = {{"token_embd.weight", {e, V}}, {"output_norm.weight", {e}}};
  std::map<std::string, Dims> optional;
  if (!arch->gemma2) optional["output.weight"] = {e, V};
  if (arch->output_bias) optional["output.bias"] = {V};
  if (arch->llama_extras) optional["rope_freqs.weight"] = {*n_rot / 2};
  if (arch->phi3) {
    optional["rope_factors_long.weight"] = {*n_rot / 2};
    optional["rope_factors_short.weight"] = {*n_rot / 2};
  }
  for (uint64_t l = 0; l < *n_layer; ++l) {
    auto n = [&](const char* s, const char* kind = "weight") { return fmt::format("blk.{}.{}.{}", l, s, kind); };
    want[n("attn_norm")] = {e};
    if (arch->phi3) {
      want[n("attn_qkv")] = {e, q + 2 * kv};
      optional[n("attn_qkv", "bias")] = {q + 2 * kv};
      want[n("ffn_up")] = {e, 2 * ff};
    } else {
      want[n("attn_q")] = {e, q};
      want[n("attn_k")] = {e, kv};
      want[n("attn_v")] = {e, kv};
      want[n("ffn_gate")] = {e, ff};
      want[n("ffn_up")] = {e, ff};
      optional[n("attn_q", "bias")] = {q};
      optional[n("attn_k", "bias")] = {kv};
      optional[n("attn_v", "bias")] = {kv};
    }
    want[n("attn_output")] = {q, e};
    want[n("ffn_norm")] = {e};
    want[n("ffn_down")] = {ff, e};
    if (arch->gemma) {
      want[n("post_attention_norm")] = {e};
      want[n("post_ffw_norm")] = {e};
    }
    if (arch->qk_norm) {
      want[n("attn_q_norm")] = {*hk};
      want[n("attn_k_norm")] = {*hk};
    }
    if (arch->llama_extras) {
      optional[n("attn_output", "bias")] = {e};
      optional[n("ffn_gate", "bias")] = {ff};
      optional[n("ffn_up", "bias")] = {ff};
      optional[n("ffn_down", "bias")] = {e};
    }
  }
  for (const auto& t : f.tensors) {
    auto it = want.find(t.name);
    auto opt = optional.find(t.name);
    if (it == want.end() && opt == optional.end()) {
      add("S1: tensor " + t.name + " is not one llama.cpp loads for " + arch->name + " (wrong number of tensors)");
      continue;
    }
    const auto& dims = it != want.end() ? it->second : opt->second;
    if (t.ne != dims) add(fmt::format("S1: tensor {} has dims {}, expected {}", t.name, fmt::join(t.ne, "x"), fmt::join(dims, "x")));
    if (it != want.end()) want.erase(it);
  }
  for (const auto& [name, dims] : want) add("S1: missing tensor " + name);
  return bad;
}

}  // namespace kveval::test
