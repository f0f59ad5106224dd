#include "backend/kernel_isa.hpp"

#include <oneapi/dnnl/dnnl.hpp>

namespace kveval::backend {

KernelIsa kernel_isa() {
  static const KernelIsa v = [] {
    const auto cap = dnnl::get_effective_cpu_isa();
    if (cap >= dnnl::cpu_isa::avx512_core && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
      return KernelIsa::Avx512;
    if (cap >= dnnl::cpu_isa::avx2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return KernelIsa::Avx2;
    return KernelIsa::Scalar;
  }();
  return v;
}

const char* kernel_isa_name(KernelIsa i) {
  return i == KernelIsa::Avx512 ? "avx512" : (i == KernelIsa::Avx2 ? "avx2" : "scalar");
}

}  // namespace kveval::backend
