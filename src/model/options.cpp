// Names and parsing of the model's option enums (model.hpp): stop reasons,
// batching, cache policies, compute dtypes. Kept apart from the forward pass
// so that the spec loader (and its fuzz target) does not link the backend.
#include <iterator>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "model/context.hpp"
#include "util/error.hpp"

namespace kveval {

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

const char* to_string(Batching b) { return b == Batching::Static ? "static" : "dynamic"; }

const char* to_string(CachePolicy p) { return p == CachePolicy::Release ? "release" : "reuse"; }

namespace {

/// Names of the KV-cache element types, in the order the help and the parse error list them.
struct KvCacheDtypeName {
  KvCacheDtype dtype;
  const char* name;
};
constexpr KvCacheDtypeName kKvCacheDtypes[] = {
    {KvCacheDtype::F32, "f32"}, {KvCacheDtype::BF16, "bf16"}, {KvCacheDtype::F16, "f16"}, {KvCacheDtype::Auto, "auto"}};

}  // namespace

std::vector<std::string> compute_dtype_name_list(bool reduced) {
  std::vector<std::string> v;
  for (const ComputeDtypeInfo& i : kComputeDtypes)
    if (!reduced || (i.dtype != ComputeDtype::F32 && i.dtype != ComputeDtype::Auto)) v.emplace_back(i.name);
  return v;
}

std::vector<std::string> kv_cache_dtype_name_list() {
  std::vector<std::string> v;
  for (const KvCacheDtypeName& i : kKvCacheDtypes) v.emplace_back(i.name);
  return v;
}

std::string join_names(const std::vector<std::string>& names, const std::string& last, const std::string& quote) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) s += i + 1 == names.size() ? last : ", ";
    s += quote + names[i] + quote;
  }
  return s;
}

const char* to_string(ComputeDtype d) { return compute_dtype_info(d).name; }

ComputeDtype parse_compute_dtype(const std::string& s, const std::string& what) {
  for (const ComputeDtypeInfo& i : kComputeDtypes)
    if (s == i.name) return i.dtype;
  throw ArgumentError(fmt::format("{} '{}': expected {}", what, s, join_names(compute_dtype_name_list(), " or ", "'")));
}

const char* to_string(KvCacheDtype d) {
  for (const KvCacheDtypeName& i : kKvCacheDtypes)
    if (i.dtype == d) return i.name;
  return "?";
}

KvCacheDtype parse_kv_cache_dtype(const std::string& s, const std::string& what) {
  for (const KvCacheDtypeName& i : kKvCacheDtypes)
    if (s == i.name) return i.dtype;
  throw ArgumentError(fmt::format("{} '{}': expected {}", what, s, join_names(kv_cache_dtype_name_list(), " or ", "'")));
}

MatmulMode parse_matmul_mode(const std::string& s, const std::string& what) {
  if (s == "exact") return MatmulMode::Exact;
  if (s == "int8") return MatmulMode::Int8;
  throw ArgumentError(fmt::format("{} '{}': expected 'exact' or 'int8'", what, s));
}

KvCacheDtype resolve_kv_cache_dtype(KvCacheDtype requested, ComputeDtype compute) {
  if (requested != KvCacheDtype::Auto) return requested;
  return compute_dtype_info(compute).kv_cache;
}

ComputeDtype resolve_dtype(ComputeDtype requested, bool cpu_bf16, bool file_f32,
                           std::optional<gguf::TensorType> file_type, bool file_all_kept) {
  if (requested != ComputeDtype::Auto) return requested;
  if (file_all_kept) return cpu_bf16 ? ComputeDtype::BlocksBf16 : ComputeDtype::Blocks;
  if (file_type && !cpu_bf16)
    for (const ComputeDtypeInfo& i : kComputeDtypes)
      if (i.auto_candidate && i.kept == file_type) return i.dtype;
  return cpu_bf16 && !file_f32 ? ComputeDtype::BF16 : ComputeDtype::F32;
}

ComputeDtype resolve_dtype(ComputeDtype requested, bool cpu_bf16, bool file_f32, bool file_q8_0) {
  return resolve_dtype(requested, cpu_bf16, file_f32,
                       file_q8_0 ? std::optional(gguf::TensorType::Q8_0) : std::nullopt);
}

CachePolicy parse_cache_policy(const std::string& s) {
  if (s == "release") return CachePolicy::Release;
  if (s == "reuse") return CachePolicy::Reuse;
  throw ArgumentError(fmt::format("cache policy '{}': expected 'release' or 'reuse'", s));
}

}  // namespace kveval
