// Load-time and run-time checks of the model layer: hyper-parameter ranges,
// the file's SHA-256 and a file changing under the load, the weights' memory
// estimate against a budget, non-finite logits failing requests and
// generations, and KV-cache pages that stay unmapped until written.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "model/gguf.hpp"
#include "model/model.hpp"
#include "context_support.hpp"
#include "gguf_copy.hpp"
#include "test_support.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"
#include "util/memory.hpp"

using namespace kveval;
namespace fs = std::filesystem;

namespace {

// sha256 of ggml-org/tiny-llamas stories260K.gguf (scripts/fetch-model.sh).
const char* kStoriesSha = "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d";

/// Sets an environment variable for the scope.
struct ScopedEnv {
  std::string name;
  ScopedEnv(std::string n, const std::string& v) : name(std::move(n)) { ::setenv(name.c_str(), v.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

/// Bytes of [p, p + bytes) resident in memory (mincore), whole pages.
size_t resident_bytes(const float* p, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const size_t len = bytes + (reinterpret_cast<uintptr_t>(p) - a);
  std::vector<unsigned char> v((len + page - 1) / page);
  REQUIRE(::mincore(reinterpret_cast<void*>(a), len, v.data()) == 0);
  size_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n * page;
}

std::string one_line(const std::string& s) { return s.find('\n') == std::string::npos ? "" : "message has a newline: " + s; }

}  // namespace

TEST_SUITE("model.runtime_checks") {
  TEST_CASE("every out-of-range or unsupported hyper-parameter is refused by key, in one line" * test::needs_model()) {
    test::ScratchDir d("hparams");
    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    struct Case {
      std::string key;
      gguf::Value value;
      std::string expect;
    };
    using gguf::Value;
    using gguf::ValueType;
    std::vector<Case> cases = {
        {"llama.attention.layer_norm_rms_epsilon", test::f32_value(inf), "key 'llama.attention.layer_norm_rms_epsilon' = inf out of range (0, 1]"},
        {"llama.attention.layer_norm_rms_epsilon", test::f32_value(nan), "= nan out of range (0, 1]"},
        {"llama.attention.layer_norm_rms_epsilon", test::f32_value(0.0), "= 0 out of range (0, 1]"},
        {"llama.attention.layer_norm_rms_epsilon", test::f32_value(-1e-5), "out of range (0, 1]"},
        {"llama.attention.layer_norm_rms_epsilon", test::f32_value(2.0), "= 2 out of range (0, 1]"},
        {"llama.attention.layer_norm_rms_epsilon", Value{ValueType::FLOAT64, 1e-50}, "out of range (0, 1]"},  // 0 as float
        {"llama.rope.freq_base", test::f32_value(inf), "key 'llama.rope.freq_base' = inf out of range (1, 1000000000000]"},
        {"llama.rope.freq_base", test::f32_value(nan), "key 'llama.rope.freq_base' = nan"},
        {"llama.rope.freq_base", test::f32_value(0.0), "key 'llama.rope.freq_base' = 0 out of range"},
        {"llama.rope.freq_base", test::f32_value(0.5), "key 'llama.rope.freq_base' = 0.5 out of range"},
        {"llama.rope.freq_base", test::f32_value(1e13), "key 'llama.rope.freq_base' = 9999999827968 out of range (1, 1000000000000]"},
        {"llama.rope.dimension_count", Value{ValueType::UINT32, uint64_t{7}}, "llama.rope.dimension_count 7 must be even"},
        {"llama.rope.dimension_count", Value{ValueType::UINT32, uint64_t{16}}, "llama.rope.dimension_count 16 must be even and <= the head size 8"},
        {"llama.attention.head_count_kv", Value{ValueType::UINT32, uint64_t{3}}, "is not a multiple of llama.attention.head_count_kv 3"},
        {"llama.context_length", Value{ValueType::UINT32, uint64_t{0}}, "key 'llama.context_length' = 0 out of range"},
        {"llama.rope.scaling.type", Value{ValueType::STRING, std::string("yarn")}, "rope scaling type 'yarn' (key 'llama.rope.scaling.type') is not supported"},
        {"llama.rope.scale_linear", test::f32_value(1e4), "key 'llama.rope.scale_linear' = 10000 out of range"},
        {"llama.expert_count", Value{ValueType::UINT32, uint64_t{8}}, "(llama.expert_count = 8) is not supported"},
        {"llama.attention.key_length", Value{ValueType::UINT32, uint64_t{16}}, "llama.attention.key_length 16 differs from llama.attention.value_length 8"},
    };
    for (const auto& c : cases) {
      CAPTURE(c.key);
      CAPTURE(c.expect);
      test::GgufEdit e;
      e.set.emplace(c.key, c.value);
      const std::string path = (d.path / "bad.gguf").string();
      test::write_variant(test::model_path(), path, e);
      try {
        Model::load(path, {.threads = 1});
        FAIL("accepted");
      } catch (const FormatError& err) {
        const std::string m = err.what();
        CHECK(m.find(c.expect) != std::string::npos);
        CHECK(m.rfind(path + ": ", 0) == 0);
        CHECK(one_line(m) == "");
      }
    }
    // the values real models use load
    for (double base : {10000.0, 500000.0, 1e6}) {
      test::GgufEdit e;
      e.set.emplace("llama.rope.freq_base", test::f32_value(base));
      e.set.emplace("llama.attention.layer_norm_rms_epsilon", test::f32_value(1e-6));
      e.set.emplace("llama.rope.scaling.type", gguf::Value{gguf::ValueType::STRING, std::string("none")});
      test::write_variant(test::model_path(), (d.path / "ok.gguf").string(), e);
      auto m = test::load_context((d.path / "ok.gguf").string(), {.threads = 1});
      CHECK(m->model().hparams().rope_freq_base == static_cast<float>(base));
      CHECK(m->model().hparams().rms_eps == 1e-6f);
    }
  }

  TEST_CASE("the SHA-256 is of the bytes loaded, taken at load; a file changed afterwards does not change it" * test::needs_model()) {
    test::ScratchDir d("sha");
    const std::string copy = (d.path / "m.gguf").string();
    fs::copy_file(test::model_path(), copy);
    auto m = test::load_context(copy, {.threads = 1});
    CHECK(m->model().sha256() == kStoriesSha);
    CHECK(sha256_file(copy) == kStoriesSha);
    fs::resize_file(copy, 1000);  // truncated after the load
    CHECK(m->model().sha256() == kStoriesSha);
    CHECK(sha256_file(copy) != kStoriesSha);
    CHECK(Model::load(test::model_path(), {.threads = 1, .hash = false})->sha256().empty());
  }

  TEST_CASE("a file truncated or rewritten during the load: 'file changed while loading', never SIGBUS" * test::needs_model()) {
    test::ScratchDir d("changed");
    const std::string path = (d.path / "m.gguf").string();
    const auto size = fs::file_size(test::model_path());
    struct Case {
      const char* stage;
      bool hash;
      bool rewrite;  // same size, new bytes and mtime (else: truncate to 4 KiB)
      std::string expect;
    };
    std::vector<Case> cases = {
        {"mapped", true, false, "file changed while loading (it was truncated while being hashed)"},
        {"mapped", false, false, fmt::format("file changed while loading ({} bytes at open, {} bytes now)", size, 4096)},
        {"copy", false, false, "file changed while loading (truncated while reading tensor 'token_embd.weight')"},
        {"copy", true, true, "file changed while loading (modified since it was opened)"},
    };
    for (const auto& c : cases) {
      CAPTURE(c.stage);
      CAPTURE(c.hash);
      fs::remove(path);
      fs::copy_file(test::model_path(), path);
      ModelOptions o;
      o.threads = 1;
      o.hash = c.hash;
      o.on_load_stage = [&](const char* stage) {
        if (std::string(stage) != c.stage) return;
        if (c.rewrite) {
          std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
          f.seekp(static_cast<std::streamoff>(size - 4));
          f.write("\x01\x02\x03\x04", 4);
          f.close();
          const struct timespec later[2] = {{0, UTIME_OMIT}, {2000000000, 0}};
          REQUIRE(::utimensat(AT_FDCWD, path.c_str(), later, 0) == 0);
        } else {
          fs::resize_file(path, 4096);  // the header (with the vocabulary) is longer
        }
      };
      CHECK_THROWS_WITH_AS(Model::load(path, o), doctest::Contains(c.expect.c_str()), FormatError);
    }
  }

  TEST_CASE("weights are checked against the memory budget before they are copied" * test::needs_model()) {
    auto m = test::load_context(test::model_path(), {.threads = 1});
    gguf::File f(test::model_path());
    // stories260K stores output.weight: the estimate is every element x 4 bytes, as loaded
    CHECK(estimate_weight_bytes(f) == m->model().weight_bytes());
    uint64_t elements = 0;
    for (const auto& t : f.tensors()) elements += t.n_elements;
    CHECK(estimate_weight_bytes(f) == elements * 4);
    {
      ScopedEnv limit("KVEVAL_MEMORY_LIMIT_BYTES", "1048576");  // 1 MiB for the whole process: less than it holds
      try {
        Model::load(test::model_path(), {.threads = 1});
        FAIL("loaded");
      } catch (const MemoryError& e) {
        const std::string msg = e.what();
        CHECK(msg.find(fmt::format("weights {}", format_bytes(elements * 4))) != std::string::npos);
        CHECK(msg.find("is available (KVEVAL_MEMORY_LIMIT_BYTES 1.0 MiB less") != std::string::npos);
        CHECK(one_line(msg) == "");
      }
      CHECK_NOTHROW(Model::load(test::model_path(), {.threads = 1, .check_memory = false}));
    }
  }

  TEST_CASE("activation bytes of a forward pass, by hand for stories260K" * test::needs_model()) {
    auto m = test::load_context(test::model_path(), {.threads = 1});
    // D 64, KV 32, F 172, V 512, group 2: T = 3 x 10 tokens
    const size_t T = 30;
    const size_t floats = T * (64 + 64 + (64 + 64) + 64 + 2 * 172 + 172) + 3 * 64 + 2 * 10 * 10 + T * 512;
    CHECK(m->model().activation_bytes_for(3, 10, true) == floats * 4 + T * 8);
    CHECK(m->model().activation_bytes_for(3, 10, false) == (floats - T * 512 + 2 * 3 * 512) * 4 + T * 8);
  }

  TEST_CASE("token_logprob is NaN when any logit is NaN or +-Inf, else the log-softmax") {
    std::vector<float> l = {1.0f, 2.0f, 0.5f, -3.0f};
    double lse = 0;
    for (float v : l) lse += std::exp(static_cast<double>(v));
    CHECK(token_logprob(l, 1) == doctest::Approx(2.0 - std::log(lse)).epsilon(1e-6));
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      std::vector<float> b = l;
      b[3] = bad;
      CHECK(std::isnan(token_logprob(b, 1)));  // even for a token whose own logit is finite
    }
  }

  TEST_CASE("finite weights that overflow the activations: every request fails at its first position, generation stops" * test::needs_model()) {
    test::ScratchDir d("overflow");
    const std::string path = (d.path / "overflow.gguf").string();
    test::GgufEdit e;
    // a huge but finite norm weight: q.k overflows float in layer 0, softmax gives NaN
    e.tensor = [](const std::string& name, std::vector<float>& w) {
      if (name == "blk.0.attn_norm.weight") std::fill(w.begin(), w.end(), 1e30f);
    };
    test::write_variant(test::model_path(), path, e);
    auto m = test::load_context(path, {.threads = 1});
    std::vector<ScoreRequest> reqs = {{{1, 403, 407, 261, 378}, 1}, {{1, 261, 378}, 2}};
    auto r = score(*m, reqs, 2);
    CHECK(r[0].nonfinite_at == 1);
    CHECK(r[0].logprobs.empty());
    CHECK(r[1].nonfinite_at == 2);
    KvCacheScope scope(*m, 2, 32);
    GenerateOptions o;
    o.max_gen_toks = {8};
    auto g = generate_greedy(*m, {{1, 261}, {1}}, o);
    for (const auto& x : g) {
      CHECK(x.reason == StopReason::NonFinite);
      CHECK(x.ids.empty());
    }
    CHECK(std::string(to_string(StopReason::NonFinite)) == "non-finite logits");
  }

  TEST_CASE("one NaN in a token's embedding: only the requests that read that token fail, at the right position" * test::needs_model()) {
    test::ScratchDir d("nan_embd");
    const std::string path = (d.path / "nan.gguf").string();
    test::GgufEdit e;
    e.tensor = [](const std::string& name, std::vector<float>& w) {
      if (name == "token_embd.weight") w[403 * 64 + 5] = std::numeric_limits<float>::quiet_NaN();
    };
    test::write_variant(test::model_path(), path, e);
    // by default the load refuses it by name; without the scan the forward pass meets the NaN
    CHECK_THROWS_WITH_AS(Model::load(path, {.threads = 1}), doctest::Contains("token_embd.weight"), FormatError);
    ModelOptions no_scan;
    no_scan.threads = 1;
    no_scan.check_finite = false;
    auto m = test::load_context(path, no_scan);
    auto clean = test::load_context(test::model_path(), {.threads = 1});
    std::vector<ScoreRequest> reqs = {{{1, 261, 403, 407, 378}, 1}, {{1, 261, 378, 300}, 1}, {{1, 407, 403}, 1}};
    auto r = score(*m, reqs, 3);
    auto want = score(*clean, reqs, 3);
    CHECK(r[0].nonfinite_at == 3);  // token 403 sits at position 2: the logits after it predict position 3
    CHECK(r[0].logprobs == std::vector<double>(want[0].logprobs.begin(), want[0].logprobs.begin() + 2));
    CHECK(r[1].nonfinite_at == -1);  // never reads 403: bit-identical to the clean model
    CHECK(r[1].logprobs == want[1].logprobs);
    CHECK(r[2].nonfinite_at == -1);  // 403 is only the last target: its embedding is never read
    CHECK(r[2].logprobs == want[2].logprobs);
  }

  TEST_CASE("an untouched KV cache stays unmapped; a written position maps 4 KiB pages, not the cache" * test::needs_model()) {
    auto loaded = test::load_context(test::model_path(), {.threads = 1});
    Context& m = *loaded;
    const int rows = 8, cap = 2048;
    m.setup_caches(rows, cap);
    const size_t half = m.bytes() / 2;  // K (or V): 5 layers x 8 rows x 4 heads x 2048 x 8 floats = 10 MiB
    REQUIRE(half == size_t{5} * rows * 4 * cap * 8 * 4);
    CHECK(resident_bytes(m.cache_data(0), half) == 0);
    CHECK(resident_bytes(m.cache_data(1), half) == 0);
    std::vector<int32_t> t(rows, 1);
    std::vector<int> n(rows, 1);
    std::vector<float> logits(rows * 512);
    m.forward(t, rows, 1, n, Context::Logits::Last, logits);
    // one position per (layer, row, head) block: 160 pages of 4 KiB each for K and for V
    // (with transparent huge pages each write would map 2 MiB: the whole 10 MiB)
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    CHECK(resident_bytes(m.cache_data(0), half) == 5 * rows * 4 * page);
    CHECK(resident_bytes(m.cache_data(1), half) == 5 * rows * 4 * page);
    m.delete_caches();
  }

  TEST_CASE("threads outside [0, 4096] are refused at load" * test::needs_model()) {
    CHECK_THROWS_WITH_AS(Model::load(test::model_path(), {.threads = 65536}),
                         "threads: expected an integer in [0, 4096], got 65536", ArgumentError);
    CHECK_THROWS_AS(Model::load(test::model_path(), {.threads = -1}), ArgumentError);
  }
}
