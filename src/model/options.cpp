// Names and parsing of the model's option enums (model.hpp): stop reasons,
// batching, cache policies, compute dtypes. Kept apart from the forward pass
// so that the spec loader (and its fuzz target) does not link the backend.
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

const char* to_string(ComputeDtype d) {
  switch (d) {
    case ComputeDtype::F32: return "f32";
    case ComputeDtype::BF16: return "bf16";
    case ComputeDtype::Auto: return "auto";
    case ComputeDtype::Q8_0: return "q8_0";
    case ComputeDtype::Q4_0: return "q4_0";
  }
  return "?";
}

ComputeDtype parse_compute_dtype(const std::string& s, const std::string& what) {
  if (s == "f32") return ComputeDtype::F32;
  if (s == "bf16") return ComputeDtype::BF16;
  if (s == "auto") return ComputeDtype::Auto;
  if (s == "q8_0") return ComputeDtype::Q8_0;
  if (s == "q4_0") return ComputeDtype::Q4_0;
  throw ArgumentError(fmt::format("{} '{}': expected 'f32', 'bf16', 'q8_0', 'q4_0' or 'auto'", what, s));
}

const char* to_string(KvCacheDtype d) {
  switch (d) {
    case KvCacheDtype::Auto: return "auto";
    case KvCacheDtype::F32: return "f32";
    case KvCacheDtype::BF16: return "bf16";
    case KvCacheDtype::F16: return "f16";
  }
  return "?";
}

KvCacheDtype parse_kv_cache_dtype(const std::string& s, const std::string& what) {
  if (s == "auto") return KvCacheDtype::Auto;
  if (s == "f32") return KvCacheDtype::F32;
  if (s == "bf16") return KvCacheDtype::BF16;
  if (s == "f16") return KvCacheDtype::F16;
  throw ArgumentError(fmt::format("{} '{}': expected 'f32', 'bf16', 'f16' or 'auto'", what, s));
}

KvCacheDtype resolve_kv_cache_dtype(KvCacheDtype requested, ComputeDtype compute) {
  if (requested != KvCacheDtype::Auto) return requested;
  return compute == ComputeDtype::BF16 ? KvCacheDtype::BF16 : KvCacheDtype::F32;
}

ComputeDtype resolve_dtype(ComputeDtype requested, bool cpu_bf16, bool file_f32, bool file_q8_0) {
  if (requested != ComputeDtype::Auto) return requested;
  if (file_q8_0 && !cpu_bf16) return ComputeDtype::Q8_0;
  return cpu_bf16 && !file_f32 ? ComputeDtype::BF16 : ComputeDtype::F32;
}

CachePolicy parse_cache_policy(const std::string& s) {
  if (s == "release") return CachePolicy::Release;
  if (s == "reuse") return CachePolicy::Reuse;
  throw ArgumentError(fmt::format("cache policy '{}': expected 'release' or 'reuse'", s));
}

}  // namespace kveval
