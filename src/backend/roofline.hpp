#pragma once
// Machine ceilings for `kveval bench` (the "roofline"): streaming read
// bandwidth from memory and oneDNN sgemm throughput at given shapes. The
// bench divides its achieved GB/s and GFLOP/s by these to say how close the
// engine gets to what the machine allows (Williams, Waterman & Patterson 2009).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kveval::backend {

/// Bytes of the last-level data cache as the C library reports it
/// (sysconf _SC_LEVEL3_CACHE_SIZE, else L2); 0 if unknown.
size_t last_level_cache_bytes();

/// Buffer size for a read-bandwidth run that cannot be served from cache:
/// max(4 x LLC, 256 MiB), capped at 2 GiB, rounded to 4 KiB.
size_t stream_buffer_bytes();

/// Result of a streaming read-bandwidth measurement.
struct StreamResult {
  size_t buffer_bytes = 0;   ///< bytes read per pass
  int threads = 0;           ///< OpenMP threads used
  int passes = 0;            ///< timed passes
  double best_gb_per_s = 0;  ///< max over passes, 1e9 bytes/s (STREAM's convention)
  double median_gb_per_s = 0;  ///< median over passes, 1e9 bytes/s
  double checksum = 0;       ///< sum of the buffer read in the last pass (keeps the reads alive)
};

/// A read-bandwidth probe that keeps its buffer, so that it can be measured
/// again between other work (`kveval bench`'s tg pairs each repetition with
/// one measurement: the ratio of the two is then taken at the same moment).
class StreamReader {
 public:
  /// Allocates a float buffer of `bytes` bytes (rounded down to whole 64-float
  /// blocks), filled with 1.0f, each page first touched by the thread that
  /// later reads it; `threads` OpenMP threads (0 = all cores). Throws
  /// ArgumentError if bytes < 4096, std::bad_alloc if it cannot be allocated.
  StreamReader(int threads, size_t bytes);
  ~StreamReader();
  StreamReader(const StreamReader&) = delete;
  StreamReader& operator=(const StreamReader&) = delete;
  /// One warm-up pass, then `passes` timed passes summing the buffer. Throws
  /// ArgumentError if passes < 1.
  StreamResult measure(int passes) const;
  /// Bytes read per pass.
  size_t bytes() const { return n_ * sizeof(float); }

 private:
  int threads_;
  size_t n_;      // floats, a multiple of 64
  float* x_;      // 64-byte aligned, n_ floats
};

/// StreamReader(threads, bytes).measure(passes): reads a float buffer of
/// `bytes` bytes `passes` times after one warm-up pass. Throws ArgumentError if
/// bytes < 4096 or passes < 1.
StreamResult stream_read_bandwidth(int threads, size_t bytes, int passes = 5);

/// One matmul shape: C[m, n] = A[m, k] · B[k, n], repeated `count` times per
/// pass (e.g. once per layer).
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  int count = 1;
  /// 2·m·n·k·count floating-point operations.
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) * count; }
};

/// Result of an sgemm throughput measurement over a set of shapes.
struct SgemmResult {
  int threads = 0;
  double flops_per_pass = 0;     ///< sum of GemmShape::flops()
  double seconds_per_pass = 0;   ///< median wall time of one pass over all shapes
  double gflops = 0;             ///< flops_per_pass / seconds_per_pass / 1e9
  double max_abs_error = 0;      ///< largest |C - naive A·B| over sampled entries (a correctness check)
};

/// oneDNN f32 matmul primitives (created once per shape, weights in the
/// layout the primitive prefers, reordered once, user-mode scratchpad) run
/// over all `shapes` per pass; the median over `passes` timed passes after a
/// warm-up pass. A, B are uniform in [-1, 1). Sets the OpenMP thread count to
/// `threads` (0 = all cores) for the run and restores it. Throws
/// ArgumentError for empty/invalid shapes, BackendError on oneDNN failure.
SgemmResult sgemm_throughput(int threads, const std::vector<GemmShape>& shapes, int passes = 5);

}  // namespace kveval::backend
