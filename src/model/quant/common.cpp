// Helpers shared by the block codecs (see quant.hpp).
#include <cmath>

#include "model/gguf.hpp"
#include "model/quant/quant.hpp"

namespace kveval::quant {

float load_f16(const std::byte* p) { return gguf::f16_to_f32(load_u16(p)); }

int round_away(float x) { return static_cast<int>(std::round(x)); }

float signed_absmax(const float* x, int n) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

// 12 bytes for 8 six-bit scales and 8 six-bit mins (ggml-common.h block_q4_K):
//   bytes 0-3: sc[0..3] (bits 0-5) | sc[4..7] >> 4 (bits 6-7)
//   bytes 4-7: m[0..3]  (bits 0-5) | m[4..7] >> 4  (bits 6-7)
//   bytes 8-11: sc[4..7] & 15 (bits 0-3) | (m[4..7] & 15) << 4
void pack_scale_min_k4(const uint8_t sc[8], const uint8_t m[8], std::byte out[12]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<std::byte>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<std::byte>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<std::byte>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

void unpack_scale_min_k4(const std::byte in[12], uint8_t sc[8], uint8_t m[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = u8(in, j) & 63;
    m[j] = u8(in, j + 4) & 63;
    sc[j + 4] = static_cast<uint8_t>((u8(in, j + 8) & 15) | ((u8(in, j) >> 6) << 4));
    m[j + 4] = static_cast<uint8_t>((u8(in, j + 8) >> 4) | ((u8(in, j + 4) >> 6) << 4));
  }
}

}  // namespace kveval::quant
