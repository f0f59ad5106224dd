// Matrices of files quantized by llama.cpp (../shared/quant) in the types kept
// as the file's blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K ... Q6_K) held in a
// backend::Weight: widened rows equal the model layer's dequantizer
// (bit-identical to gguf-py's numpy) element for element, the exact-mode block
// kernel matches a float64 product of those values within f32 rounding, and
// rows looked up from kept token_embd blocks (every quantized type; random
// blocks with extreme scales too) equal the dequantizer's rows bit for bit. A
// weight viewing the mapped file (Weight::view_file_blocks, at any alignment)
// gives the copied weight's products bit for bit and outlives the gguf::File.
// Skipped, with a message, when ../shared (KVEVAL_SHARED_DIR) is absent.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/backend.hpp"
#include "backend/int8_dot.hpp"
#include "backend/qblocks.hpp"
#include "model/copy_blocks.hpp"
#include "model/dequantize.hpp"
#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;

namespace {

/// Tensor `t` (a type with a kept-block kernel) in a block weight, built as the loader builds it.
backend::Weight kept_weight(const gguf::File& f, const gguf::TensorInfo& t) {
  const auto K = static_cast<int64_t>(t.row_length()), N = static_cast<int64_t>(t.n_rows());
  const backend::Dtype dt = *gguf::type_info(t.type).kept;
  backend::Weight w(N, K, dt);
  copy_file_block_rows(f, t, w, 0);
  return w;
}

/// Looks up rows `ids` of `w` (gather_rows) and compares each with `want` ([n_out, n_in], the dequantizer's
/// values) bit for bit; returns the rows that differ.
int rows_differing(const backend::Weight& w, const std::vector<int32_t>& ids, const std::vector<float>& want) {
  const auto K = static_cast<size_t>(w.n_in());
  std::vector<float> got(ids.size() * K);
  backend::gather_rows(w, ids, got.data());
  int differ = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    differ += std::memcmp(got.data() + i * K, want.data() + static_cast<size_t>(ids[i]) * K, K * sizeof(float)) != 0;
  return differ;
}

/// Writes a Q6_K tensor "big" of 30,000 rows of 256 to `path` (19,972 rows per 4 MiB chunk: two chunks on two
/// threads) and returns the file's bytes.
std::vector<char> write_big_q6k(const std::string& path) {
  gguf::Writer wr;
  wr.add_tensor("big", {256, 30000}, [](uint64_t first, std::span<float> out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>((first + i) % 997) * 1e-3f - 0.5f;
  }, gguf::TensorType::Q6_K);
  const std::vector<uint8_t> bytes = wr.bytes();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return {reinterpret_cast<const char*>(bytes.data()), reinterpret_cast<const char*>(bytes.data()) + bytes.size()};
}

/// Sets the f16 d of row `row` of write_big_q6k's tensor (whose data starts at byte `base` of `bytes`): one
/// super-block of 210 bytes per row, d in its last two.
void set_big_q6k_d(std::vector<char>& bytes, size_t base, size_t row, uint16_t h) {
  std::memcpy(bytes.data() + base + row * 210 + 208, &h, 2);
}

}  // namespace

TEST_SUITE("model.file_blocks") {
  TEST_CASE("token_embd rows looked up from kept blocks equal the dequantizer's rows, bit for bit") {
    const std::string shared = test::shared_dir();
    if (shared.empty() || !std::ifstream(shared + "/quant/model-Q4_K_M.gguf")) {
      MESSAGE("skipped: no ../shared/quant fixtures (KVEVAL_SHARED_DIR or <source>/../shared)");
      return;
    }
    std::set<std::string> types;
    for (const char* name : {"model-Q4_K.gguf", "model-Q5_K.gguf", "model-Q6_K.gguf", "model-Q4_K_M.gguf",
                             "model-Q5_K_M.gguf", "model-Q8_0.gguf", "model-Q4_0.gguf", "model-Q4_1.gguf",
                             "model-Q5_0.gguf", "model-Q5_1.gguf", "model-Q2_K.gguf", "model-Q3_K.gguf"}) {
      const gguf::File file(shared + "/quant/" + name);
      const gguf::TensorInfo& t = file.tensor("token_embd.weight");
      INFO(name << " " << gguf::type_name(t.type));
      REQUIRE(gguf::type_info(t.type).kept.has_value());
      const backend::Weight w = kept_weight(file, t);
      std::vector<float> want(t.n_elements);
      dequantize(t.type, t.data, want.data(), t.n_elements, 1);
      const auto V = static_cast<int32_t>(t.n_rows());
      std::vector<int32_t> ids = {0, V - 1, 1, 2, 3, V - 2, 7, 7};
      std::mt19937 g(3);
      for (int i = 0; i < 64; ++i) ids.push_back(std::uniform_int_distribution<int32_t>(0, V - 1)(g));
      CHECK(rows_differing(w, ids, want) == 0);
      types.insert(gguf::type_name(t.type));
    }
    MESSAGE("token_embd types checked: " << fmt::format("{}", fmt::join(types, ", ")));
    CHECK(types.size() >= 9);
  }

  TEST_CASE("rows looked up from random file blocks (extreme and subnormal scales, zero blocks) equal dequantize()") {
    using gguf::TensorType;
    for (const TensorType type : {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0,
                                  TensorType::Q5_1, TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K,
                                  TensorType::Q5_K, TensorType::Q6_K}) {
      const gguf::TypeInfo& ti = gguf::type_info(type);
      INFO(ti.name);
      const int64_t N = 12, K = 512, bb = ti.type_size, nb = N * K / ti.block_size;
      std::vector<std::byte> b(static_cast<size_t>(nb * bb));
      std::mt19937 g(17);
      for (auto& v : b) v = static_cast<std::byte>(g() & 0xFF);
      for (int64_t i = 0; i < nb; ++i) {  // super-block kinds by i % 4: random, largest d, subnormal d, zero
        std::byte* p = b.data() + i * bb;
        const int kind = static_cast<int>(i % 4);
        if (kind == 3) std::fill(p, p + bb, std::byte{0});
        const uint16_t d = kind == 1 ? 0x7BFF : kind == 2 ? 0x0001 : 0x1C00;  // 65504, 2^-24, 2^-8
        // the f16 d, and the second f16 (m, dmin) where the format has one
        const int64_t at = type == TensorType::Q6_K ? 208 : type == TensorType::Q3_K ? 108 : type == TensorType::Q2_K ? 80 : 0;
        const bool second = type == TensorType::Q4_1 || type == TensorType::Q5_1 || type == TensorType::Q2_K ||
                            type == TensorType::Q4_K || type == TensorType::Q5_K;
        if (kind == 3) continue;
        p[at] = std::byte(d & 0xFF), p[at + 1] = std::byte(d >> 8);
        if (second) p[at + 2] = p[at], p[at + 3] = p[at + 1];  // m or dmin = d
      }
      backend::Weight w(N, K, *ti.kept);
      w.set_rows_file_blocks(0, b.data(), N);
      std::vector<float> want(static_cast<size_t>(N * K));
      dequantize(type, b.data(), want.data(), static_cast<uint64_t>(N * K), 1);
      CHECK(rows_differing(w, {11, 0, 1, 5, 5, 10}, want) == 0);
    }
  }


  TEST_CASE("llama.cpp's tensors kept as the file's blocks: widened rows equal the dequantizer, products the float64 reference") {
    const std::string shared = test::shared_dir();
    if (shared.empty() || !std::ifstream(shared + "/quant/model-Q4_K_M.gguf")) {
      MESSAGE("skipped: no ../shared/quant fixtures (KVEVAL_SHARED_DIR or <source>/../shared)");
      return;
    }
    std::set<std::string> checked;
    for (const char* name : {"model-Q4_K.gguf", "model-Q5_K.gguf", "model-Q6_K.gguf", "model-Q4_K_M.gguf", "model-Q5_K_M.gguf",
                             "model-Q8_0.gguf", "model-Q4_0.gguf", "model-Q4_1.gguf", "model-Q5_0.gguf", "model-Q5_1.gguf",
                             "model-Q2_K.gguf", "model-Q3_K.gguf"}) {
      const gguf::File file(shared + "/quant/" + name);
      for (const auto& t : file.tensors()) {
        if (t.dims.size() != 2) continue;
        const auto kept = gguf::type_info(t.type).kept;
        if (!kept || !backend::is_file_blocks(*kept)) continue;
        const backend::Dtype dt = *kept;
        const auto K = static_cast<int64_t>(t.row_length()), N = static_cast<int64_t>(t.n_rows());
        INFO(name << " " << t.name);
        backend::Weight w(N, K, dt);
        w.set_rows_file_blocks(0, t.data, N);
        CHECK(w.bytes() == t.n_bytes);
        std::vector<float> want(static_cast<size_t>(N * K)), got(want.size());
        dequantize(t.type, t.data, want.data(), t.n_elements, 1);
        backend::widen_rows(w, 0, N, got.data(), K, 2);
        CHECK(std::memcmp(want.data(), got.data(), sizeof(float) * want.size()) == 0);
        std::vector<float> x(static_cast<size_t>(3 * K)), y(static_cast<size_t>(3 * N));
        std::mt19937 g(7);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (float& v : x) v = u(g);
        backend::blocks_matmul(x.data(), 3, w, y.data(), false, 2);
        double worst = 0;
        for (int64_t r = 0; r < 3; ++r)
          for (int64_t n = 0; n < N; ++n) {
            double s = 0, a = 0;
            for (int64_t k = 0; k < K; ++k) {
              const double p = double(want[static_cast<size_t>(n * K + k)]) * x[static_cast<size_t>(r * K + k)];
              s += p;
              a += std::fabs(p);
            }
            worst = std::max(worst, std::fabs(double(y[static_cast<size_t>(r * N + n)]) - s) / (a + 1e-30));
          }
        CHECK(worst < double(K / 32 + 5) * 0x1p-24);
        checked.insert(gguf::type_name(t.type));
      }
    }
    CHECK(checked == std::set<std::string>{"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"});
  }

  TEST_CASE("block_scales_finite reads each format's f16 scale fields (ggml-common.h offsets) and nothing else") {
    struct Case {
      gguf::TensorType type;
      std::vector<int> fields;  // byte offsets of the f16 scales
    };
    using T = gguf::TensorType;
    for (const Case& c : {Case{T::Q2_K, {80, 82}}, Case{T::Q3_K, {108}}, Case{T::Q4_K, {0, 2}}, Case{T::Q5_K, {0, 2}},
                          Case{T::Q6_K, {208}}, Case{T::Q4_1, {0, 2}}, Case{T::Q5_0, {0}}, Case{T::Q5_1, {0, 2}},
                          Case{T::Q8_0, {0}}, Case{T::Q4_0, {0}}}) {
      const size_t ts = gguf::type_info(c.type).type_size;
      INFO(gguf::type_name(c.type));
      std::vector<std::byte> b(3 * ts, std::byte{0xff});  // quants and 6-bit scales all ones: still finite
      const auto put = [&](size_t at, uint16_t h) { std::memcpy(b.data() + at, &h, 2); };
      for (size_t i = 0; i < 3; ++i)
        for (int f : c.fields) put(i * ts + f, 0x7bff);  // 65504, the largest finite f16
      CHECK(block_scales_finite(c.type, b.data(), 3));
      for (int f : c.fields)
        for (uint16_t bad : {uint16_t{0x7c00}, uint16_t{0xfc00}, uint16_t{0x7e00}}) {  // +Inf, -Inf, NaN in block 2
          put(2 * ts + f, bad);
          CHECK_FALSE(block_scales_finite(c.type, b.data(), 3));
          CHECK(block_scales_finite(c.type, b.data(), 2));  // blocks 0 and 1 only
          put(2 * ts + f, 0x7bff);
        }
    }
    std::vector<std::byte> z(64, std::byte{0});
    CHECK_FALSE(block_scales_finite(T::F16, z.data(), 1));  // no fields known: the caller decodes
    CHECK_FALSE(block_scales_finite(T::F32, z.data(), 1));
  }

  TEST_CASE("copy_file_block_rows copies the tensor as it is and refuses the first non-finite weight across chunks") {
    const test::ScratchDir dir("copy_rows");
    const std::string p = dir.file("copy_rows_q6k.gguf");
    std::vector<char> bytes = write_big_q6k(p);
    {
      const gguf::File f(p);
      const gguf::TensorInfo& t = f.tensor("big");
      backend::Weight w(30002, 256, backend::Dtype::Q6_K);
      copy_file_block_rows(f, t, w, 2, {.check_finite = true, .threads = 2});
      CHECK(std::memcmp(static_cast<const std::byte*>(w.raw()) + 2 * 210, t.data, t.n_bytes) == 0);
      CHECK_THROWS_AS(copy_file_block_rows(f, t, w, 3), ArgumentError);  // one row too many
    }
    const gguf::File clean(p);
    const size_t base = clean.data_offset() + clean.tensor("big").offset;
    set_big_q6k_d(bytes, base, 25000, 0x7e00);  // NaN d in the second chunk
    set_big_q6k_d(bytes, base, 20000, 0x7c00);  // +Inf d, also in the second chunk, first
    const std::string bad = dir.file("copy_rows_q6k_bad.gguf");
    std::ofstream(bad, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    const gguf::File f(bad);
    backend::Weight w(30000, 256, backend::Dtype::Q6_K);
    // d = Inf times the group scale, times q - 32: the row's first element is ±Inf or NaN (0 · Inf).
    const auto message = [&] {
      try {
        copy_file_block_rows(f, f.tensor("big"), w, 0, {.check_finite = true, .threads = 2});
      } catch (const FormatError& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    const std::string msg = message();
    CHECK(msg.find("tensor 'big' holds ") != std::string::npos);
    CHECK(msg.find("at element 5120000 (row 20000, column 0)") != std::string::npos);
    copy_file_block_rows(f, f.tensor("big"), w, 0, {.check_finite = false, .threads = 2});  // unchecked: copied
    CHECK(std::memcmp(w.raw(), f.tensor("big").data, f.tensor("big").n_bytes) == 0);
  }

  TEST_CASE("a weight viewing the mapped file (alignment 1, odd offsets) multiplies as the copy, bit for bit, after the File is gone") {
    using gguf::TensorType;
    const test::ScratchDir dir("view_blocks");
    const std::string p = dir.file("view.gguf");
    const std::vector<TensorType> types = {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0,
                                           TensorType::Q5_1, TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K,
                                           TensorType::Q5_K, TensorType::Q6_K};
    gguf::Writer wr;
    wr.add_uint32("general.alignment", 1);  // tensors back to back: offsets of any residue
    wr.add_tensor("odd", {1}, std::vector<float>{1}, TensorType::F16);  // 2 bytes: what follows is 2-byte aligned
    for (const TensorType type : types)  // 37 rows of 512: 37 · row bytes, odd for Q5_0 (22 per block)
      wr.add_tensor(gguf::type_name(type), {512, 37}, [](uint64_t first, std::span<float> out) {
        for (size_t i = 0; i < out.size(); ++i) out[i] = std::sin(0.37f * static_cast<float>(first + i)) * 1.5f;
      }, type);
    wr.write(p);
    const int64_t K = 512, N = 37;
    std::vector<backend::Weight> views, copies;
    std::set<uint64_t> residues;  // address mod 32 of the viewed tensors
    {
      const gguf::File f(p);
      for (const TensorType type : types) {
        const gguf::TensorInfo& t = f.tensor(gguf::type_name(type));
        const backend::Dtype dt = *gguf::type_info(type).kept;
        residues.insert(reinterpret_cast<uintptr_t>(t.data) % 32);
        views.push_back(backend::Weight::view_file_blocks(N, K, dt, t.data, f.mapping()));
        copies.emplace_back(N, K, dt);
        copy_file_block_rows(f, t, copies.back(), 0);
        CHECK(views.back().raw() == static_cast<const void*>(t.data));
        CHECK(views.back().is_view());
        CHECK(views.back().bytes() == t.n_bytes);
        CHECK_THROWS_AS(copy_file_block_rows(f, t, views.back(), 0), ArgumentError);  // a view is read-only
      }
    }  // the File is gone: the views' bytes stay mapped through their owner
    CHECK(residues.size() >= 2);  // not all at one alignment: some are not 32-byte aligned
    backend::Engine eng(2);
    std::vector<float> x(static_cast<size_t>(40 * K));
    std::mt19937 g(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& v : x) v = u(g);
    for (size_t i = 0; i < types.size(); ++i) {
      INFO(gguf::type_name(types[i]));
      for (const backend::MatmulMode mode : {backend::MatmulMode::Exact, backend::MatmulMode::Int8}) {
        eng.set_matmul_mode(mode);
        for (const int64_t m : {1, 3, 40}) {  // decode steps in the block (or int8) kernel, 40 rows widened
          std::vector<float> yv(static_cast<size_t>(m * N)), yc(yv.size(), 1.0f);
          backend::matmul(eng, x.data(), m, views[i], yv.data());
          backend::matmul(eng, x.data(), m, copies[i], yc.data());
          CHECK(std::memcmp(yv.data(), yc.data(), yv.size() * sizeof(float)) == 0);
        }
      }
      std::vector<float> rv(static_cast<size_t>(N * K)), rc(rv.size(), 1.0f);
      backend::widen_rows(views[i], 0, N, rv.data(), K, 2);
      backend::widen_rows(copies[i], 0, N, rc.data(), K, 2);
      CHECK(std::memcmp(rv.data(), rc.data(), rv.size() * sizeof(float)) == 0);
      CHECK(rows_differing(views[i], {0, 36, 17}, rc) == 0);
    }
  }

  TEST_CASE("check_file_block_rows names the first non-finite weight without copying; view_file_blocks refuses other dtypes") {
    const test::ScratchDir dir("check_rows");
    const std::string p = dir.file("check_rows_q6k.gguf");
    std::vector<char> bytes = write_big_q6k(p);
    {
      const gguf::File clean(p);
      check_file_block_rows(clean, clean.tensor("big"), {.check_finite = true, .threads = 2});  // no throw
      const size_t base = clean.data_offset() + clean.tensor("big").offset;
      set_big_q6k_d(bytes, base, 25000, 0x7e00);  // NaN d in the second chunk
      set_big_q6k_d(bytes, base, 20001, 0xfc00);  // -Inf d, also in the second chunk, first
    }
    const std::string bad = dir.file("check_rows_q6k_bad.gguf");
    std::ofstream(bad, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    const gguf::File f(bad);
    CHECK_THROWS_WITH_AS(check_file_block_rows(f, f.tensor("big"), {.check_finite = true, .threads = 2}),
                         doctest::Contains("at element 5120256 (row 20001, column 0)"), FormatError);
    check_file_block_rows(f, f.tensor("big"), {.check_finite = false, .threads = 2});  // unchecked: nothing read
    CHECK_THROWS_AS(backend::Weight::view_file_blocks(4, 64, backend::Dtype::F32, f.bytes().data(), f.mapping()),
                    ArgumentError);
    CHECK_THROWS_AS(backend::Weight::view_file_blocks(4, 100, backend::Dtype::Q4_K, f.bytes().data(), f.mapping()),
                    ArgumentError);  // 100 is not a whole number of super-blocks
  }

  TEST_CASE("copy_file_block_rows copies Q8_0 and Q4_0 tensors as they are (resident bytes = file bytes); names the first NaN") {
    for (const gguf::TensorType type : {gguf::TensorType::Q8_0, gguf::TensorType::Q4_0}) {
      INFO(gguf::type_name(type));
      const backend::Dtype dt = *gguf::type_info(type).kept;
      gguf::Writer wr;
      wr.add_tensor("m", {256, 10001}, [](uint64_t first, std::span<float> out) {
        for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>((first + i) % 101) * 1e-2f - 0.5f;
      }, type);
      const test::ScratchDir dir("copy_q8_rows");
      std::vector<uint8_t> bytes = wr.bytes();
      const std::string p = dir.file("m.gguf"), bad = dir.file("bad.gguf");
      std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      const gguf::File f(p);
      const gguf::TensorInfo& t = f.tensor("m");
      backend::Weight w(10005, 256, dt);
      copy_file_block_rows(f, t, w, 2, {.check_finite = true, .threads = 2});
      const size_t bb = gguf::type_info(type).type_size;  // 34 or 18 bytes per 32 elements
      CHECK(t.n_bytes == 10001 * 8 * bb);
      CHECK(w.bytes() == 10005 * 8 * bb);  // the weight's rows hold the file's bytes, no more
      CHECK(std::memcmp(static_cast<const std::byte*>(w.raw()) + 2 * w.ld(), t.data, t.n_bytes) == 0);
      CHECK_THROWS_AS(copy_file_block_rows(f, t, w, 5), ArgumentError);  // past the weight's rows
      const size_t base = f.data_offset() + t.offset;
      const auto set_d = [&](size_t block, uint16_t h) { std::memcpy(bytes.data() + base + block * bb, &h, 2); };
      set_d(9000 * 8 + 3, 0x7e00);  // NaN d
      set_d(8500 * 8 + 1, 0x7c00);  // +Inf d earlier
      std::ofstream(bad, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      const gguf::File fb(bad);
      CHECK_THROWS_WITH_AS(copy_file_block_rows(fb, fb.tensor("m"), w, 0, {.check_finite = true, .threads = 2}),
                           doctest::Contains("at element 2176032 (row 8500, column 32)"), FormatError);
    }
  }
}
