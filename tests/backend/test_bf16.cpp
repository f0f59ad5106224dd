// bf16 weights: rounding of the conversion (hand-computed cases), the packed
// layout against oneDNN's own reorder, and the bf16 matmul against a naive
// double-precision reference.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "backend/backend.hpp"
#include "backend/random_values.hpp"

using namespace kveval::backend;

namespace {

using kveval::test::randv;

}  // namespace

TEST_SUITE("backend.bf16") {
  TEST_CASE("float -> bf16 rounds to nearest even") {
    CHECK(f32_to_bf16(1.0f) == 0x3f80);
    CHECK(f32_to_bf16(-2.0f) == 0xc000);
    CHECK(f32_to_bf16(1.0f + 1.0f / 256) == 0x3f80);  // halfway, even below: down
    CHECK(f32_to_bf16(1.0f + 3.0f / 256) == 0x3f82);  // halfway, odd below: up
    CHECK(f32_to_bf16(1.0f + 1.0f / 256 + 1.0f / 65536) == 0x3f81);  // above halfway: up
    CHECK(bf16_to_f32(0x3f81) == 1.0f + 1.0f / 128);
    CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
    std::vector<float> x = {1.0f, 1.0f + 3.0f / 256, -0.0f, 65504.0f};
    std::vector<uint16_t> y(x.size());
    to_bf16(x.data(), y.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) CHECK(y[i] == f32_to_bf16(x[i]));
  }

  TEST_CASE("bf16 matmul matches a naive double reference") {
    if (!kveval::backend::bf16_matmul_available()) {
      MESSAGE("SKIPPED: oneDNN has no bf16 matmul on this CPU (" << std::string(kveval::backend::cpu_isa_name()) << ")");
      return;
    }
    Engine eng(2);
    struct Shape { int64_t m, n, k; };
    for (Shape s : {Shape{1, 64, 64}, Shape{7, 172, 64}, Shape{33, 64, 172}, Shape{200, 512, 96}, Shape{5, 13, 17},
                    Shape{1, 2048, 768}, Shape{16, 2048, 64}}) {
      CAPTURE(s.m); CAPTURE(s.n); CAPTURE(s.k);
      auto x = randv(static_cast<size_t>(s.m * s.k), 1);
      auto w = randv(static_cast<size_t>(s.n * s.k), 2);
      Weight W(w, s.n, s.k, Dtype::BF16);
      CHECK(W.bytes() == static_cast<size_t>(s.n * s.k) * 2);
      for (bool acc : {false, true})
        for (bool inv : {false, true}) {
          CAPTURE(acc); CAPTURE(inv);
          std::vector<float> y = randv(static_cast<size_t>(s.m * s.n), 3);
          // exact: on the bf16-rounded inputs; full: on the original f32 inputs
          std::vector<double> exact(y.size()), full(y.size()), mag(y.size());
          for (int64_t i = 0; i < s.m; ++i)
            for (int64_t j = 0; j < s.n; ++j) {
              const double y0 = acc ? y[size_t(i * s.n + j)] : 0.0;
              double e = y0, f = y0, a = std::abs(y0);
              for (int64_t kk = 0; kk < s.k; ++kk) {
                const float xv = x[size_t(i * s.k + kk)], wv = w[size_t(j * s.k + kk)];
                e += double(bf16_to_f32(f32_to_bf16(xv))) * bf16_to_f32(f32_to_bf16(wv));
                f += double(xv) * wv;
                a += std::abs(double(xv) * wv);
              }
              exact[size_t(i * s.n + j)] = e;
              full[size_t(i * s.n + j)] = f;
              mag[size_t(i * s.n + j)] = a;
            }
          matmul(eng, x.data(), s.m, W, y.data(), acc, inv);
          double worst_exact = 0, worst_full = 0;
          for (size_t i = 0; i < y.size(); ++i) {
            worst_exact = std::max(worst_exact, std::abs(y[i] - exact[i]) / mag[i]);
            worst_full = std::max(worst_full, std::abs(y[i] - full[i]) / mag[i]);
          }
          // Products of bf16 values are exact in f32; only f32 accumulation rounds.
          CHECK(worst_exact <= 1e-5);
          // Against the unrounded inputs: two roundings of at most 2^-9 relative each.
          CHECK(worst_full <= 2.0 * std::ldexp(1.0, -9) + 1e-5);
          CHECK(worst_full > 0);  // the bf16 path really rounds
        }
    }
  }

  TEST_CASE("warm bf16 and f32 matmuls create no primitive and allocate nothing") {
    if (!kveval::backend::bf16_matmul_available()) {
      MESSAGE("SKIPPED: oneDNN has no bf16 matmul on this CPU (" << std::string(kveval::backend::cpu_isa_name()) << ")");
      return;
    }
    for (Dtype dt : {Dtype::F32, Dtype::BF16}) {
      const std::string dt_name = to_string(dt);
      CAPTURE(dt_name);
      Engine eng(2);
      auto w = randv(256 * 96, 4);
      Weight W(w, 256, 96, dt);
      std::vector<float> x(64 * 96, 0.25f), y(64 * 256);
      for (int64_t m : {64, 1, 4}) matmul(eng, x.data(), m, W, y.data(), true);
      const auto p0 = eng.primitives_created(), a0 = eng.buffer_allocations();
      // Runtime M for 64; fixed M = 4 only for f32 without AVX-512 and bf16 on
      // AMX: f32 on AVX-512 and bf16 with AVX512-BF16 run decode steps of up to
      // 8 rows in kveval's gemv_rows (decode_invariant_rows), other bf16 on the
      // runtime-M primitive; one-row products run kveval's gemv.
      const bool amx = std::string(cpu_isa_name()) == "avx512_core_amx";
      const bool fixed_m4 = dt == Dtype::F32 ? decode_invariant_rows(dt) < 4 : amx;
      CHECK(p0 == (fixed_m4 ? 2u : 1u));
      for (int step = 0; step < 20; ++step) matmul(eng, x.data(), 1 + step % 4 == 1 ? 1 : 4, W, y.data(), true);
      CHECK(eng.primitives_created() == p0);
      CHECK(eng.buffer_allocations() == a0);
    }
  }

  TEST_CASE("BF16 weights in panels hold oneDNN's BA16a64b2a layout: its reorder of row-major Wᵀ, padding zeros included") {
    if (!Weight(1, 1, Dtype::BF16).bf16_panels()) {
      MESSAGE("SKIPPED: bf16 weights stay row-major here (" << std::string(cpu_isa_name()) << ")");
      return;
    }
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream strm(eng);
    struct Shape {
      int64_t n_out, n_in;
    };
    for (Shape s : {Shape{300, 70}, Shape{64, 16}, Shape{128, 32}, Shape{1000, 200}, Shape{7, 1}, Shape{65, 33}}) {
      CAPTURE(s.n_out);
      CAPTURE(s.n_in);
      const auto wv = randv(static_cast<size_t>(s.n_out * s.n_in), 9);
      for (bool from_bits : {false, true}) {  // set_rows and set_rows_bf16
        Weight w(s.n_out, s.n_in, Dtype::BF16);
        std::vector<uint16_t> rows(wv.size()), ab(wv.size());  // W [n_out, n_in] and Wᵀ [n_in, n_out] as bf16
        for (size_t i = 0; i < wv.size(); ++i) rows[i] = f32_to_bf16(wv[i]);
        if (from_bits)
          w.set_rows_bf16(0, rows.data(), s.n_out);
        else
          w.set_rows(0, wv.data(), s.n_out);
        for (int64_t n = 0; n < s.n_out; ++n)
          for (int64_t k = 0; k < s.n_in; ++k) ab[static_cast<size_t>(k * s.n_out + n)] = rows[static_cast<size_t>(n * s.n_in + k)];
        const dnnl::memory::desc packed({s.n_in, s.n_out}, dt::bf16, tag::BA16a64b2a);
        std::vector<uint16_t> want(packed.get_size() / 2, 0xFFFF);
        dnnl::memory src({{s.n_in, s.n_out}, dt::bf16, tag::ab}, eng, ab.data()), dst(packed, eng, want.data());
        dnnl::reorder(src, dst).execute(strm, src, dst);
        strm.wait();
        REQUIRE(want.size() == static_cast<size_t>((s.n_out + 63) / 64 * w.ld()));
        int64_t differ = 0;
        for (size_t i = 0; i < want.size(); ++i) differ += want[i] != w.bf16()[i];
        CHECK(differ == 0);
        CHECK(w.bf16()[w.bf16_index(s.n_in - 1, s.n_out - 1)] == rows.back());
      }
    }
  }

  TEST_CASE("bf16 products on panels run one fixed-M primitive per block of 512, 256, 128, 64, 32, 16 or fewer rows") {
    if (!bf16_matmul_available() || !Weight(1, 1, Dtype::BF16).bf16_panels()) {
      MESSAGE("SKIPPED: bf16 weights stay row-major here (" << std::string(cpu_isa_name()) << ")");
      return;
    }
    Engine eng(2);
    const Weight W(randv(200 * 96, 5), 200, 96, Dtype::BF16);
    std::vector<float> x(700 * 96, 0.5f), y(700 * 200);
    matmul(eng, x.data(), 100, W, y.data(), false);  // 64 + 32 + 4
    CHECK(eng.primitives_created() == 3);
    matmul(eng, x.data(), 36, W, y.data(), false);  // 32 + 4
    CHECK(eng.primitives_created() == 3);
    matmul(eng, x.data(), 700, W, y.data(), false);  // 512 + 128 + 32 + 16 + 12: 4 new
    CHECK(eng.primitives_created() == 7);
    // every row of x is the same, so every row of y is too, whichever block computed it
    int64_t differ = 0;
    for (int64_t r = 1; r < 700; ++r) differ += std::memcmp(y.data(), y.data() + r * 200, 200 * sizeof(float)) != 0;
    CHECK(differ == 0);
  }

  TEST_CASE("the CPU's bf16 capability agrees with the ISA name") {
    const std::string isa = cpu_isa_name();
    CHECK(cpu_has_bf16() == (isa == "avx512_core_bf16" || isa == "avx512_core_amx"));
  }
}
