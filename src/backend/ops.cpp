// Element-wise operations: RMSNorm, RoPE, biases, SwiGLU (OpenMP loops).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "util/error.hpp"

namespace kveval::backend {

void rmsnorm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps) {
#pragma omp parallel for schedule(static) if (rows * dim > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float scale = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * scale * weight[i];
  }
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos, const RopeParams& p,
          int64_t token_stride) {
  const int64_t n_rot = p.n_rot, half = n_rot / 2;
  if (n_rot < 2 || n_rot % 2 != 0 || n_rot > head_dim || half > 512)
    throw ArgumentError(fmt::format("rope: n_rot {} must be even, in [2, min(head_dim {}, 1024)]", n_rot, head_dim));
  if (token_stride == 0) token_stride = n_heads * head_dim;
#pragma omp parallel for schedule(static) if (n_tokens * n_heads * head_dim > 16384)
  for (int64_t t = 0; t < n_tokens; ++t) {
    // cos/sin per pair, computed in double: theta_i = pos * base^(-2i/n_rot) * freq_scale / factor_i
    float cs[512], sn[512];
    for (int64_t i = 0; i < half; ++i) {
      // scale and factor are exactly 1 without scaling: bit-identical to the unscaled angle
      const double scale = static_cast<double>(p.freq_scale) / (p.freq_factors ? static_cast<double>(p.freq_factors[i]) : 1.0);
      const double theta = static_cast<double>(pos[t]) *
                           std::pow(static_cast<double>(p.freq_base), -2.0 * static_cast<double>(i) / static_cast<double>(n_rot)) *
                           scale;
      cs[i] = static_cast<float>(std::cos(theta));
      sn[i] = static_cast<float>(std::sin(theta));
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + t * token_stride + h * head_dim;
      if (p.neox) {  // pairs (i, i + n_rot/2)
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * cs[i] - b * sn[i];
          v[i + half] = a * sn[i] + b * cs[i];
        }
      } else {
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * cs[i] - b * sn[i];
          v[2 * i + 1] = a * sn[i] + b * cs[i];
        }
      }
    }
  }
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot, const int32_t* pos,
          float freq_base, int64_t token_stride) {
  RopeParams p;
  p.n_rot = n_rot;
  p.freq_base = freq_base;
  rope(x, n_tokens, n_heads, head_dim, pos, p, token_stride);
}

void add_bias(float* y, const float* bias, int64_t rows, int64_t n, int64_t row_stride) {
  if (row_stride == 0) row_stride = n;
#pragma omp parallel for schedule(static) if (rows * n > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * row_stride;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) yr[i] += bias[i];
  }
}

void rmsnorm_heads(float* x, const float* weight, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                   int64_t token_stride, float eps) {
#pragma omp parallel for schedule(static) if (n_tokens * n_heads * head_dim > 16384)
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + t * token_stride + h * head_dim;
      float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < head_dim; ++i) ss += v[i] * v[i];
      const float scale = 1.0f / std::sqrt(ss / static_cast<float>(head_dim) + eps);
#pragma omp simd
      for (int64_t i = 0; i < head_dim; ++i) v[i] = v[i] * scale * weight[i];
    }
}

void swiglu_fused(const float* gate_up, float* out, int64_t rows, int64_t n) {
#pragma omp parallel for schedule(static) if (rows * n > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up + r * 2 * n;
    const float* u = g + n;
    float* o = out + r * n;
    for (int64_t i = 0; i < n; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

}  // namespace kveval::backend
