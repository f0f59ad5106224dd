#pragma once
// Internal to src/backend: which vector path kveval's own kernels (qblocks,
// gemv) take on this CPU, and from what size decode products use every thread.
#include <cstdint>

#include <oneapi/dnnl/dnnl.hpp>

namespace kveval::backend {

/// Multiply-adds from which a decode product (blocks, gemv, cached oneDNN
/// matmuls) is split among threads; smaller ones run on one. 2^16 lets s15m's
/// 288 x 288 and 288 x 768 products use both threads (measured against 2^20 and
/// 2^14: docs/design/matmul-paths.md).
inline constexpr int64_t kDecodeParallelMacs = int64_t(1) << 16;

/// Whether oneDNN's effective ISA (DNNL_MAX_CPU_ISA applied) includes `want`.
/// The cpu_isa values are bit sets, so this is not `>=`: avx2_vnni (0x407) is
/// numerically above avx512_core (0x27) and avx512_core_amx (0x3e7) but has neither.
bool onednn_isa_includes(dnnl::cpu_isa want);

enum class KernelIsa { Scalar, Avx2, Avx512 };

/// The widest path this CPU has, capped like oneDNN's own kernels (oneDNN's
/// effective ISA follows DNNL_MAX_CPU_ISA, so the tests' AVX2 runs cover the
/// AVX2 paths too): Avx512 needs AVX-512 F, DQ, BW and VL, Avx2 needs AVX2 and FMA.
/// Computed once.
KernelIsa kernel_isa();

/// Whether kveval's bf16 decode kernel (gemv.cpp) can run: the Avx512 path and
/// AVX512-BF16 (vdpbf16ps), with oneDNN's effective ISA including
/// avx512_core_bf16 (onednn_isa_includes; so DNNL_MAX_CPU_ISA turns it off too).
/// Computed once.
bool kernel_has_bf16_dot();

/// "avx512", "avx2" or "scalar".
const char* kernel_isa_name(KernelIsa i);

}  // namespace kveval::backend
