// Compute dtype: the selection logic (ISA as a parameter), bf16 log-probs
// against f32 on the quant fixtures, and a warm decode step that creates no
// oneDNN primitive and allocates nothing in either dtype.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/dequantize.hpp"
#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/model.hpp"
#include "context_support.hpp"
#include "model/random_model.hpp"
#include "backend/backend.hpp"
#include "model/warm_decode.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;

namespace {

std::vector<double> rolling(Context& m, const std::vector<int32_t>& ids) {
  ScoreRequest r{ids, 1};
  return score(m, std::span<const ScoreRequest>(&r, 1), 1)[0].logprobs;
}

}  // namespace

TEST_SUITE("model.dtype") {
  TEST_CASE("auto picks bf16 only on a bf16 CPU with a non-F32 file; explicit requests are kept") {
    using D = ComputeDtype;
    CHECK(resolve_dtype(D::Auto, true, false) == D::BF16);
    CHECK(resolve_dtype(D::Auto, true, true) == D::F32);
    CHECK(resolve_dtype(D::Auto, false, false) == D::F32);  // e.g. AVX2 only: falls back to f32
    CHECK(resolve_dtype(D::Auto, false, true) == D::F32);
    for (bool cpu : {false, true})
      for (bool f32 : {false, true}) {
        CHECK(resolve_dtype(D::F32, cpu, f32) == D::F32);
        CHECK(resolve_dtype(D::BF16, cpu, f32) == D::BF16);
      }
    CHECK(parse_compute_dtype("bf16") == D::BF16);
    CHECK(parse_compute_dtype("auto") == D::Auto);
    CHECK(std::string(to_string(D::F32)) == "f32");
    CHECK_THROWS_WITH_AS(parse_compute_dtype("fp16", "--dtype"), "--dtype 'fp16': expected 'f32', 'bf16', 'q8_0', 'q4_0', 'blocks', 'blocks-bf16' or 'auto'",
                         ArgumentError);
  }

  TEST_CASE("resolve_dtype_for_file reads the file's matrix types as Model::load does") {
    using D = ComputeDtype;
    using T = gguf::TensorType;
    const bool cpu = kveval::backend::cpu_has_bf16();
    const kveval::test::ScratchDir dir("resolve");
    const std::string path = dir.file("m.gguf"), absent = dir.file("absent.gguf");
    for (T type : {T::F32, T::F16, T::Q8_0, T::Q4_0}) {
      write_random_llama(path, random_model_preset("tiny"), 5, type);
      // every matrix Q8_0 or Q4_0 (token_embd too): blocks on any CPU, scoring on bf16 tiles on a bf16 CPU
      const D blocks = cpu ? D::BlocksBf16 : D::Blocks;
      const D expected = type == T::F32 ? D::F32 : type != T::F16 ? blocks : (cpu ? D::BF16 : D::F32);
      CHECK(resolve_dtype_for_file(path, D::Auto) == expected);
      CHECK(Model::load(path, {.threads = 1, .dtype = D::Auto})->dtype() == expected);
      CHECK(resolve_dtype_for_file(path, D::Q4_0) == D::Q4_0);  // explicit: kept as asked
    }
    CHECK(resolve_dtype_for_file(absent, D::F32) == D::F32);  // explicit: the file is not read
    CHECK_THROWS(resolve_dtype_for_file(absent, D::Auto));
  }

  TEST_CASE("an F32 file loads in f32 under auto; bf16 halves the matrix bytes" * kveval::test::needs_model()) {
    if (!kveval::backend::bf16_matmul_available()) {
      MESSAGE("SKIPPED: oneDNN has no bf16 matmul on this CPU (" << std::string(kveval::backend::cpu_isa_name()) << ")");
      return;
    }
    auto f = test::load_context(test::model_path(), {.threads = 1, .dtype = ComputeDtype::Auto});
    CHECK(f->model().dtype() == ComputeDtype::F32);
    auto b = test::load_context(test::model_path(), {.threads = 1, .dtype = ComputeDtype::BF16});
    CHECK(b->model().dtype() == ComputeDtype::BF16);
    CHECK(b->model().weight_bytes() < f->model().weight_bytes());
    CHECK(b->model().dtype_note() == "bf16");  // a dtype given is named alone
    CHECK(f->model().dtype_note().find("auto -> f32 (file F32, oneDNN ISA ") == 0);
  }

  TEST_CASE("bf16 log-probs on the quant fixtures are within 2e-2 per token of f32 (the fixtures' own texts)") {
    if (!kveval::backend::bf16_matmul_available()) {
      MESSAGE("SKIPPED: oneDNN has no bf16 matmul on this CPU (" << std::string(kveval::backend::cpu_isa_name()) << ")");
      return;
    }
    const std::string shared = test::shared_dir();
    const auto dir = std::filesystem::path(shared) / "quant";
    if (shared.empty() || !std::filesystem::exists(dir / "expected.json")) {
      MESSAGE("SKIPPED: no " << dir << "/expected.json (set KVEVAL_SHARED_DIR)");
      return;
    }
    const auto ex = nlohmann::json::parse(std::ifstream(dir / "expected.json"));
    for (std::string name : {"model-F16.gguf", "model-BF16.gguf", "model-Q8_0.gguf", "model-Q4_K_M.gguf"}) {
      CAPTURE(name);
      auto f = test::load_context((dir / name).string(), {.threads = 2, .dtype = ComputeDtype::F32});
      auto b = test::load_context((dir / name).string(), {.threads = 2, .dtype = ComputeDtype::BF16});
      CHECK(b->model().dtype() == ComputeDtype::BF16);
      double worst = 0, diff = 0;
      size_t n = 0;
      for (const auto& r : ex["files"][name]["rolling"]) {
        const auto ids = r["ids"].get<std::vector<int32_t>>();
        auto lf = rolling(*f, ids), lb = rolling(*b, ids);
        REQUIRE(lf.size() == lb.size());
        for (size_t i = 0; i < lf.size(); ++i) {
          worst = std::max(worst, std::abs(lf[i] - lb[i]));
          diff += std::abs(lf[i] - lb[i]);
        }
        n += lf.size();
      }
      REQUIRE(n > 10);
      MESSAGE("bf16 vs f32 on " << name << ": max |Δ log-prob| " << worst << ", mean " << diff / n << " over " << n
                                << " tokens");
      CHECK(worst < 2e-2);
      CHECK(diff > 0);  // bf16 really computed in reduced precision
    }
  }

  TEST_CASE("a warm decode step creates no primitive and allocates nothing (f32 and bf16)" * kveval::test::needs_model()) {
    if (!kveval::backend::bf16_matmul_available()) {
      MESSAGE("SKIPPED: oneDNN has no bf16 matmul on this CPU (" << std::string(kveval::backend::cpu_isa_name()) << ")");
      return;
    }
    for (ComputeDtype dt : {ComputeDtype::F32, ComputeDtype::BF16}) {
      const std::string dt_name = to_string(dt);
      CAPTURE(dt_name);
      auto m = test::load_context(test::model_path(), {.threads = 2, .dtype = dt});
      KvCacheScope scope(*m, 2, 128);
      test::check_warm_decode(*m, {{1, 5, 9, 14}, {1, 20, 30}});
    }
  }
}

// ---- the loader's BF16 target dtype (dequantize_rows) -----------------------

namespace {

/// Reference bf16 rounding written independently of the backend's bit trick:
/// the two bf16 neighbours of x (truncation and one ulp away from zero), the
/// nearer in double precision, ties to the even mantissa. Finite x only.
uint16_t ref_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint16_t lo = static_cast<uint16_t>(u >> 16), hi = static_cast<uint16_t>(lo + 1);
  auto val = [](uint16_t h) {
    const uint32_t w = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &w, 4);
    return static_cast<double>(f);
  };
  const double dl = std::fabs(static_cast<double>(x) - val(lo)), dh = std::fabs(static_cast<double>(x) - val(hi));
  if (dl != dh) return dl < dh ? lo : hi;
  return (lo & 1) == 0 ? lo : hi;
}

}  // namespace

TEST_SUITE("model.dtype") {
  TEST_CASE("dequantize_rows to BF16 is the F32 dequantization rounded to nearest even; a BF16 file is copied bit for bit") {
    const std::string shared = test::shared_dir();
    const auto dir = std::filesystem::path(shared) / "quant";
    if (shared.empty() || !std::filesystem::exists(dir / "model-Q8_0.gguf")) {
      MESSAGE("SKIPPED: no " << dir << " (set KVEVAL_SHARED_DIR)");
      return;
    }
    for (const char* name : {"model-F32.gguf", "model-F16.gguf", "model-BF16.gguf", "model-Q8_0.gguf", "model-Q4_K.gguf"}) {
      CAPTURE(name);
      gguf::File f((dir / name).string());
      const auto& t = f.tensor("blk.0.ffn_down.weight");
      const uint64_t rows = 3, n = rows * t.row_length();
      std::vector<float> f32(n);
      std::vector<uint16_t> b16(n);
      dequantize_rows(f, t, 5, rows, DType::F32, f32.data());
      dequantize_rows(f, t, 5, rows, DType::BF16, b16.data(), {.check_finite = true, .threads = 2});
      int bad = 0;
      for (uint64_t i = 0; i < n; ++i)
        if (b16[i] != ref_bf16(f32[i]) && bad++ < 3) FAIL_CHECK("element " << i << ": " << b16[i] << " vs " << ref_bf16(f32[i]));
      CHECK(bad == 0);
      if (std::string(name) == "model-BF16.gguf")
        CHECK(std::memcmp(b16.data(), t.data + 5 * t.row_bytes(), n * 2) == 0);
    }
    CHECK(dtype_size(DType::BF16) == 2);
    CHECK(std::string(dtype_name(DType::BF16)) == "BF16");
  }

  TEST_CASE("a finite F32 weight beyond the bf16 range is refused when converting to BF16, accepted in F32") {
    test::ScratchDir d("dtype_range");
    const std::string p = (d.path / "big.gguf").string();
    gguf::Writer w;
    w.add_string("general.architecture", "test");
    std::vector<float> v(64, 0.5f);
    v[37] = 3.4e38f;  // finite in f32, above the midpoint (3.3961e38) between bf16's largest finite and +Inf
    w.add_tensor("big", {32, 2}, v);
    w.write(p);
    gguf::File f(p);
    std::vector<float> f32(64);
    std::vector<uint16_t> b16(64);
    dequantize_rows(f, f.tensor("big"), 0, 2, DType::F32, f32.data());
    CHECK(f32[37] == 3.4e38f);
    CHECK_THROWS_WITH_AS(dequantize_rows(f, f.tensor("big"), 0, 2, DType::BF16, b16.data()),
                         doctest::Contains("tensor 'big' holds +Inf at element 37 (row 1, column 5)"), FormatError);
    dequantize_rows(f, f.tensor("big"), 0, 2, DType::BF16, b16.data(), {.check_finite = false});
    CHECK(b16[37] == 0x7f80);
  }

  TEST_CASE("a bf16 load reports BF16 weights and the resident bytes of bf16 matrices, f32 embeddings and norms") {
    if (!kveval::backend::bf16_matmul_available()) {
      MESSAGE("SKIPPED: oneDNN has no bf16 matmul on this CPU (" << std::string(kveval::backend::cpu_isa_name()) << ")");
      return;
    }
    const std::string shared = test::shared_dir();
    const auto file = std::filesystem::path(shared) / "quant" / "model-Q8_0.gguf";
    if (shared.empty() || !std::filesystem::exists(file)) {
      MESSAGE("SKIPPED: no " << file << " (set KVEVAL_SHARED_DIR)");
      return;
    }
    auto m = test::load_context(file.string(), {.threads = 1, .dtype = ComputeDtype::BF16});
    const HParams& hp = m->model().hparams();
    // fixture: 2 layers, n_embd 256, 4 heads, 2 KV heads (kv dim 128), n_ff 768, untied output, 512 tokens
    REQUIRE(hp.n_layer == 2);
    REQUIRE(hp.n_embd == 256);
    REQUIRE(!hp.tied_output);
    const uint64_t D = 256, F = 768, KV = 128, V = 512, L = 2;
    const uint64_t f32_elems = V * D + D + L * 2 * D;                       // token_embd, output_norm, attn/ffn norms
    const uint64_t mat_elems = V * D + L * (2 * D * D + 2 * KV * D + 3 * D * F);  // output, q/o, k/v, gate/up/down
    CHECK(m->model().load_summary().weight_dtype == "BF16");
    CHECK(m->model().load_summary().resident_bytes == f32_elems * 4 + mat_elems * 2);
    CHECK(m->model().weight_bytes() == f32_elems * 4 + mat_elems * 2);
    CHECK(format_load_summary(m->model().load_summary()).find("weights BF16 in memory") != std::string::npos);
    auto f = test::load_context(file.string(), {.threads = 1, .dtype = ComputeDtype::F32});
    CHECK(f->model().load_summary().weight_dtype == "F32");
    CHECK(f->model().load_summary().resident_bytes == (f32_elems + mat_elems) * 4);
  }
}
