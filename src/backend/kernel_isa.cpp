#include "backend/kernel_isa.hpp"

#include <oneapi/dnnl/dnnl.hpp>

namespace kveval::backend {

bool onednn_isa_includes(dnnl::cpu_isa want) {
  const auto cap = static_cast<unsigned>(dnnl::get_effective_cpu_isa()), w = static_cast<unsigned>(want);
  return (cap & w) == w;
}

KernelIsa kernel_isa() {
  static const KernelIsa v = [] {
    if (onednn_isa_includes(dnnl::cpu_isa::avx512_core) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
      return KernelIsa::Avx512;
    if (onednn_isa_includes(dnnl::cpu_isa::avx2) && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return KernelIsa::Avx2;
    return KernelIsa::Scalar;
  }();
  return v;
}

bool kernel_has_bf16_dot() {
  static const bool v = kernel_isa() == KernelIsa::Avx512 && __builtin_cpu_supports("avx512bf16") &&
                        onednn_isa_includes(dnnl::cpu_isa::avx512_core_bf16);
  return v;
}

const char* kernel_isa_name(KernelIsa i) {
  return i == KernelIsa::Avx512 ? "avx512" : (i == KernelIsa::Avx2 ? "avx2" : "scalar");
}

}  // namespace kveval::backend
