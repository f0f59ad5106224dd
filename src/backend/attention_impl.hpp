#pragma once
// Internals shared by the attention paths (attention.cpp: the loop paths,
// attention_matmul.cpp: the oneDNN batched matmuls). Not part of the backend's interface.
#include <cstdint>

#include "backend/backend.hpp"

namespace kveval::backend::detail {

/// Throws ArgumentError unless kv.dtype is F32, BF16 or F16.
void check_kv_dtype(const KvView& kv);

/// dst[d] = element d of the row at src (n 16-bit elements of `dtype`, BF16
/// or F16) widened exactly to float.
void widen_row(const uint16_t* src, Dtype dtype, float* dst, int64_t n);

}  // namespace kveval::backend::detail
