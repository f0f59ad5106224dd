// Roofline measurements: the figures are timings (never asserted), but what
// they read and compute is checked exactly.
#include <doctest/doctest.h>

#include <cmath>

#include "backend/roofline.hpp"
#include "util/error.hpp"

using namespace kveval;
using namespace kveval::backend;

TEST_SUITE("backend.roofline") {
  TEST_CASE("stream read sums every float of the buffer exactly once") {
    // 1 MiB of 1.0f, rounded down to whole 64-float blocks: 262144 floats.
    const size_t bytes = size_t{1} << 20;
    for (int threads : {1, 2}) {
      StreamResult r = stream_read_bandwidth(threads, bytes, 2);
      CHECK(r.buffer_bytes == bytes);
      CHECK(r.checksum == doctest::Approx(262144.0));
      CHECK(r.passes == 2);
      CHECK(r.best_gb_per_s >= r.median_gb_per_s);
      CHECK(r.median_gb_per_s > 0);
    }
    // An odd size keeps only whole 64-float blocks: 5000 bytes -> 1250 floats -> 1216 floats.
    StreamResult odd = stream_read_bandwidth(1, 5000, 1);
    CHECK(odd.buffer_bytes == 1216 * 4);
    CHECK(odd.checksum == doctest::Approx(1216.0));
  }

  TEST_CASE("stream read refuses a tiny buffer or zero passes") {
    CHECK_THROWS_AS(stream_read_bandwidth(1, 100, 1), ArgumentError);
    CHECK_THROWS_AS(stream_read_bandwidth(1, 1 << 20, 0), ArgumentError);
  }

  TEST_CASE("stream buffer is larger than the last-level cache") {
    const size_t b = stream_buffer_bytes();
    CHECK(b % 4096 == 0);
    CHECK(b >= (size_t{256} << 20));
    CHECK(b <= (size_t{2048} << 20));
    const size_t llc = last_level_cache_bytes();
    if (llc > 0 && llc <= (size_t{512} << 20)) CHECK(b >= 4 * llc);
  }

  TEST_CASE("gemm shape flops are 2*m*n*k*count") {
    GemmShape s{3, 5, 7, 2};
    CHECK(s.flops() == doctest::Approx(2.0 * 3 * 5 * 7 * 2));
  }

  TEST_CASE("sgemm computes the product (checked against a naive dot product)") {
    std::vector<GemmShape> shapes = {{1, 64, 96, 1}, {17, 33, 130, 2}, {64, 256, 288, 1}};
    SgemmResult r = sgemm_throughput(1, shapes, 1);
    CHECK(r.flops_per_pass == doctest::Approx(2.0 * (64 * 96 + 17 * 33 * 130 * 2 + 64 * 256 * 288)));
    CHECK(r.seconds_per_pass > 0);
    CHECK(r.gflops > 0);
    // Entries are sums of up to 288 products of numbers in [-1, 1); float error stays far below 1e-3.
    CHECK(r.max_abs_error < 1e-3);
  }

  TEST_CASE("sgemm refuses invalid shapes") {
    CHECK_THROWS_AS(sgemm_throughput(1, {}, 1), ArgumentError);
    CHECK_THROWS_AS(sgemm_throughput(1, {{0, 4, 4, 1}}, 1), ArgumentError);
    CHECK_THROWS_AS(sgemm_throughput(1, {{4, 4, 4, 1}}, 0), ArgumentError);
  }
}
