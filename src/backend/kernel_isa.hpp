#pragma once
// Internal to src/backend: which vector path kveval's own kernels (qblocks,
// gemv) take on this CPU.

namespace kveval::backend {

enum class KernelIsa { Scalar, Avx2, Avx512 };

/// The widest path this CPU has, capped like oneDNN's own kernels (oneDNN's
/// effective ISA follows DNNL_MAX_CPU_ISA, so the tests' AVX2 runs cover the
/// AVX2 paths too): Avx512 needs AVX-512 F, DQ, BW and VL, Avx2 needs AVX2 and FMA.
/// Computed once.
KernelIsa kernel_isa();

/// "avx512", "avx2" or "scalar".
const char* kernel_isa_name(KernelIsa i);

}  // namespace kveval::backend
