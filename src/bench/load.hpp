#pragma once
// `kveval bench --tests load,dequant`: the cost of loading a model (with and
// without the finite-weight scan) and the dequantization throughput of every
// supported tensor type. Opt-in tests: not part of the default set.
#include <functional>
#include <string>

#include "bench/report.hpp"
#include "bench/run.hpp"

namespace kveval::bench {

/// load: Model::load(o.model_path) with `threads` threads and compute dtype
/// `dtype` (conversion included), one warm-up then o.repetitions timed loads
/// with the finite-weight scan and as many without, interleaved; the file is in
/// the page cache after the warm-up. Rows "load" (seconds, with resident and
/// file MiB) and "load (no finite scan)", and a "finite scan" row with the
/// difference of the medians (0 when that is negative: the scan costs less
/// than the noise), each tagged with the resolved dtype. A load that does not
/// fit the memory budget (MemoryError) skips the test with a warning; throws
/// what else Model::load throws.
void run_load(const Options& o, int threads, ComputeDtype dtype, Report& rep,
              const std::function<void(const std::string&)>& say);

/// dequant: for every supported type, 64 MiB of float32 output (16 Mi
/// elements, N(0, 0.02) weights quantized once by kveval's quantizers) decoded
/// o.repetitions times after a warm-up, with the finite scan; GB/s of float32
/// written (value), GB/s of blocks read, and GB/s without the scan. Skipped
/// with a warning (Report::add_warning: planned and available bytes) when its
/// buffers do not fit the memory budget.
void run_dequant(const Options& o, int threads, Report& rep, const std::function<void(const std::string&)>& say);

}  // namespace kveval::bench
