// Streaming read bandwidth and oneDNN sgemm throughput (see roofline.hpp).
#include "backend/roofline.hpp"

#include <immintrin.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <utility>

#include <oneapi/dnnl/dnnl.hpp>

#include "util/error.hpp"

namespace kveval::backend {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};
using AlignedFloats = std::unique_ptr<float, AlignedFree>;

AlignedFloats alloc_floats(size_t n) {
  const size_t bytes = ((n * sizeof(float) + 4095) / 4096) * 4096;
  void* p = std::aligned_alloc(4096, bytes);
  if (!p) throw std::bad_alloc();
  return AlignedFloats(static_cast<float*>(p));
}

/// Sum of x[0, n): several independent vector accumulators so the loop is
/// bound by loads, not by the add latency.
float sum_floats(const float* x, size_t n) {
  size_t i = 0;
  float tail = 0.0f;
#if defined(__AVX512F__)
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(x + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(x + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(x + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(x + i + 48));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  for (float l : lanes) tail += l;
#elif defined(__AVX2__)
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(x + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(x + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(x + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(x + i + 24));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (float l : lanes) tail += l;
#endif
  for (; i < n; ++i) tail += x[i];
  return tail;
}

/// Thread t's part [lo, hi) of n floats (n a multiple of 64) in whole 64-float blocks.
std::pair<size_t, size_t> thread_range(size_t n, int t, int nt) {
  const size_t blocks = n / 64;
  return {blocks * static_cast<size_t>(t) / static_cast<size_t>(nt) * 64,
          blocks * static_cast<size_t>(t + 1) / static_cast<size_t>(nt) * 64};
}

/// Sets the OpenMP thread count for a scope and restores it.
class OmpThreads {
 public:
  explicit OmpThreads(int threads) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(threads > 0 ? threads : omp_get_num_procs());
  }
  ~OmpThreads() { omp_set_num_threads(saved_); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_;
};

}  // namespace

size_t last_level_cache_bytes() {
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) return static_cast<size_t>(l3);
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return l2 > 0 ? static_cast<size_t>(l2) : 0;
}

size_t stream_buffer_bytes() {
  const size_t mib = size_t{1} << 20;
  size_t b = std::max(4 * last_level_cache_bytes(), 256 * mib);
  b = std::min(b, 2048 * mib);
  return (b / 4096) * 4096;
}

StreamReader::StreamReader(int threads, size_t bytes) : threads_(threads) {
  if (bytes < 4096) throw ArgumentError("stream_read_bandwidth: buffer of " + std::to_string(bytes) + " bytes is below 4096");
  n_ = (bytes / sizeof(float)) / 64 * 64;  // whole 16-float (64-byte) blocks, split evenly over the threads
  x_ = alloc_floats(n_).release();
  OmpThreads scope(threads_);
  const int nt = omp_get_max_threads();
#pragma omp parallel num_threads(nt)
  {
    const auto [lo, hi] = thread_range(n_, omp_get_thread_num(), nt);
    std::fill(x_ + lo, x_ + hi, 1.0f);
  }
}

StreamReader::~StreamReader() { std::free(x_); }

StreamResult StreamReader::measure(int passes) const {
  if (passes < 1) throw ArgumentError("stream_read_bandwidth: passes must be >= 1, got " + std::to_string(passes));
  OmpThreads scope(threads_);
  const int nt = omp_get_max_threads();
  std::vector<double> rates;
  StreamResult r;
  r.buffer_bytes = bytes();
  r.threads = nt;
  r.passes = passes;
  for (int p = 0; p <= passes; ++p) {
    std::vector<double> partial(static_cast<size_t>(nt), 0.0);
    const double t0 = now_seconds();
#pragma omp parallel num_threads(nt)
    {
      const int t = omp_get_thread_num();
      const auto [lo, hi] = thread_range(n_, t, nt);
      partial[static_cast<size_t>(t)] = sum_floats(x_ + lo, hi - lo);
    }
    const double dt = now_seconds() - t0;
    double sum = 0;
    for (double s : partial) sum += s;
    r.checksum = sum;
    if (p > 0) rates.push_back(static_cast<double>(r.buffer_bytes) / dt / 1e9);  // pass 0 is the warm-up
  }
  r.best_gb_per_s = *std::max_element(rates.begin(), rates.end());
  r.median_gb_per_s = median_of(rates);
  return r;
}

StreamResult stream_read_bandwidth(int threads, size_t bytes, int passes) {
  return StreamReader(threads, bytes).measure(passes);
}

namespace {

/// One shape's matmul, its weights reordered once (as a model's at load), and plain copies for the check.
struct PreparedGemm {
  GemmShape shape;
  dnnl::matmul prim;
  dnnl::memory a, b, c, scratch;
  std::vector<float> a_host, b_host;
};

PreparedGemm prepare_gemm(const GemmShape& s, dnnl::engine& eng, dnnl::stream& strm, std::mt19937& rng) {
  using namespace dnnl;
  using tag = memory::format_tag;
  using dt = memory::data_type;
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  PreparedGemm p;
  p.shape = s;
  memory::desc a_md({s.m, s.k}, dt::f32, tag::ab);
  memory::desc b_plain({s.k, s.n}, dt::f32, tag::ab);
  memory::desc b_any({s.k, s.n}, dt::f32, tag::any);
  memory::desc c_md({s.m, s.n}, dt::f32, tag::ab);
  primitive_attr attr;
  attr.set_scratchpad_mode(scratchpad_mode::user);
  matmul::primitive_desc pd(matmul::desc(a_md, b_any, c_md), attr, eng);
  p.prim = matmul(pd);
  p.a_host.resize(static_cast<size_t>(s.m * s.k));
  p.b_host.resize(static_cast<size_t>(s.k * s.n));
  for (auto& v : p.a_host) v = uni(rng);
  for (auto& v : p.b_host) v = uni(rng);
  p.a = memory(a_md, eng);
  std::copy(p.a_host.begin(), p.a_host.end(), static_cast<float*>(p.a.get_data_handle()));
  memory b_user(b_plain, eng, p.b_host.data());
  p.b = memory(pd.weights_desc(), eng);
  reorder(b_user, p.b).execute(strm, b_user, p.b);  // once, like a model's weights at load
  p.c = memory(c_md, eng);
  p.scratch = memory(pd.scratchpad_desc(), eng);
  return p;
}

/// Largest |error| of 16 sampled entries per shape against a naive double-precision dot product.
double sampled_max_error(const std::vector<PreparedGemm>& prep) {
  double err = 0;
  std::mt19937 pick(7);
  for (const auto& p : prep) {
    const float* c = static_cast<const float*>(p.c.get_data_handle());
    for (int t = 0; t < 16; ++t) {
      const int64_t i = static_cast<int64_t>(pick() % static_cast<uint64_t>(p.shape.m));
      const int64_t j = static_cast<int64_t>(pick() % static_cast<uint64_t>(p.shape.n));
      double ref = 0;
      for (int64_t q = 0; q < p.shape.k; ++q)
        ref += static_cast<double>(p.a_host[static_cast<size_t>(i * p.shape.k + q)]) *
               p.b_host[static_cast<size_t>(q * p.shape.n + j)];
      err = std::max(err, std::abs(ref - c[i * p.shape.n + j]));
    }
  }
  return err;
}

}  // namespace

SgemmResult sgemm_throughput(int threads, const std::vector<GemmShape>& shapes, int passes) {
  using namespace dnnl;
  if (shapes.empty()) throw ArgumentError("sgemm_throughput: no shapes");
  if (passes < 1) throw ArgumentError("sgemm_throughput: passes must be >= 1, got " + std::to_string(passes));
  for (const auto& s : shapes) {
    if (s.m < 1 || s.n < 1 || s.k < 1 || s.count < 1)
      throw ArgumentError("sgemm_throughput: invalid shape m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                          " k=" + std::to_string(s.k) + " count=" + std::to_string(s.count));
  }
  OmpThreads scope(threads);
  SgemmResult r;
  r.threads = omp_get_max_threads();
  try {
    engine eng(engine::kind::cpu, 0);
    stream strm(eng);
    std::vector<PreparedGemm> prep;
    std::mt19937 rng(12345);
    for (const auto& s : shapes) {
      prep.push_back(prepare_gemm(s, eng, strm, rng));
      r.flops_per_pass += s.flops();
    }
    strm.wait();
    auto run_pass = [&] {
      for (auto& p : prep) {
        for (int i = 0; i < p.shape.count; ++i) {
          p.prim.execute(strm, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c},
                                {DNNL_ARG_SCRATCHPAD, p.scratch}});
        }
      }
      strm.wait();
    };
    run_pass();  // warm-up
    std::vector<double> times;
    for (int i = 0; i < passes; ++i) {
      const double t0 = now_seconds();
      run_pass();
      times.push_back(now_seconds() - t0);
    }
    r.seconds_per_pass = median_of(times);
    r.gflops = r.flops_per_pass / r.seconds_per_pass / 1e9;
    r.max_abs_error = sampled_max_error(prep);
  } catch (const dnnl::error& e) {
    throw BackendError(std::string("sgemm_throughput: oneDNN error: ") + e.what() + " (status " +
                       std::to_string(static_cast<int>(e.status)) + ")");
  }
  return r;
}

}  // namespace kveval::backend
