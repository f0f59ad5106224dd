// Element-wise operations: RMSNorm, RoPE, biases, SwiGLU (OpenMP loops).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "backend/simd_exp.hpp"
#include "util/error.hpp"

namespace kveval::backend {

namespace {

/// y[i] = x[i] / sqrt(mean(x²) + eps) * weight[i] for one vector of `dim` floats (y may be x).
inline void rmsnorm_vector(const float* x, const float* weight, float* y, int64_t dim, float eps) {
  float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < dim; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
#pragma omp simd
  for (int64_t i = 0; i < dim; ++i) y[i] = x[i] * scale * weight[i];
}

}  // namespace

void rmsnorm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps) {
#pragma omp parallel for schedule(static) if (rows * dim > 16384)
  for (int64_t r = 0; r < rows; ++r) rmsnorm_vector(x + r * dim, weight, y + r * dim, dim, eps);
}

namespace {

void check_rope(int64_t n_rot, int64_t head_dim) {
  if (n_rot < 2 || n_rot % 2 != 0 || n_rot > head_dim || n_rot / 2 > 512)
    throw ArgumentError(fmt::format("rope: n_rot {} must be even, in [2, min(head_dim {}, 1024)]", n_rot, head_dim));
}

// cos/sin per pair of position `pos`, computed in double:
// theta_i = pos * base^(-2i/n_rot) * freq_scale / factor_i; cos and sin times attn_factor.
void rope_angles(int32_t pos, const RopeParams& p, float* cs, float* sn) {
  for (int64_t i = 0; i < p.n_rot / 2; ++i) {
    // scale and factor are exactly 1 without scaling: bit-identical to the unscaled angle
    const double scale = static_cast<double>(p.freq_scale) / (p.freq_factors ? static_cast<double>(p.freq_factors[i]) : 1.0);
    const double theta = static_cast<double>(pos) *
                         std::pow(static_cast<double>(p.freq_base), -2.0 * static_cast<double>(i) / static_cast<double>(p.n_rot)) *
                         scale;
    // attn_factor 1 (every model but LongRoPE's) multiplies exactly: the unscaled cos and sin
    cs[i] = static_cast<float>(std::cos(theta) * static_cast<double>(p.attn_factor));
    sn[i] = static_cast<float>(std::sin(theta) * static_cast<double>(p.attn_factor));
  }
}

// Rotates the heads of one token (x: n_heads vectors head_dim apart).
void rope_rotate(float* x, int64_t n_heads, int64_t head_dim, int64_t half, bool neox, const float* cs, const float* sn) {
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    if (neox) {  // pairs (i, i + n_rot/2)
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

}  // namespace

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos, const RopeParams& p,
          int64_t token_stride) {
  check_rope(p.n_rot, head_dim);
  if (token_stride == 0) token_stride = n_heads * head_dim;
#pragma omp parallel for schedule(static) if (n_tokens * n_heads * head_dim > 16384)
  for (int64_t t = 0; t < n_tokens; ++t) {
    float cs[512], sn[512];
    rope_angles(pos[t], p, cs, sn);
    rope_rotate(x + t * token_stride, n_heads, head_dim, p.n_rot / 2, p.neox, cs, sn);
  }
}

void rope_table(const int32_t* pos, int64_t n_tokens, const RopeParams& p, RopeTable& t) {
  check_rope(p.n_rot, p.n_rot);
  t.n_tokens = n_tokens;
  t.half = p.n_rot / 2;
  t.neox = p.neox;
  const size_t n = static_cast<size_t>(n_tokens * t.half);
  if (t.cs.size() < n) {
    t.cs.resize(n);
    t.sn.resize(n);
  }
#pragma omp parallel for schedule(static) if (n_tokens * t.half > 4096)
  for (int64_t i = 0; i < n_tokens; ++i) rope_angles(pos[i], p, t.cs.data() + i * t.half, t.sn.data() + i * t.half);
}

void rope(float* x, int64_t n_heads, int64_t head_dim, const RopeTable& t, int64_t token_stride) {
  check_rope(2 * t.half, head_dim);
  if (token_stride == 0) token_stride = n_heads * head_dim;
#pragma omp parallel for schedule(static) if (t.n_tokens * n_heads * head_dim > 16384)
  for (int64_t i = 0; i < t.n_tokens; ++i)
    rope_rotate(x + i * token_stride, n_heads, head_dim, t.half, t.neox, t.cs.data() + i * t.half,
                t.sn.data() + i * t.half);
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
      rmsnorm_vector(v, weight, v, head_dim, eps);
    }
}

void swiglu_fused(const float* gate_up, float* out, int64_t rows, int64_t n) {
#pragma omp parallel for schedule(static) if (rows * n > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up + r * 2 * n;
    const float* u = g + n;
    float* o = out + r * n;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = g[i] / (1.0f + detail::simd_exp(-g[i])) * u[i];
  }
}

void geglu_fused(const float* gate_up, float* out, int64_t rows, int64_t n) {
#pragma omp parallel for schedule(static) if (rows * n > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up + r * 2 * n;
    const float* u = g + n;
    float* o = out + r * n;
    for (int64_t i = 0; i < n; ++i) o[i] = gelu_tanh(g[i]) * u[i];
  }
}

void scale_softcap(float* x, int64_t n, float scale, float softcap) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) x[i] = backend::scale_softcap(x[i], scale, softcap);
}

void scale(float* x, int64_t n, float scale) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

void add_scaled(float* y, const float* x, int64_t n, float scale) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) y[i] += scale * x[i];
}

}  // namespace kveval::backend
