// Quantized GGUF files made by llama.cpp's quantizer (../shared/quant/: one
// random Llama model in every supported type, pure and the Q4_K_M/Q5_K_M
// mixes) against values computed independently with gguf-py's numpy
// dequantizers and a float64 numpy forward pass (expected.json):
// - dequantized elements [0, 64) and [middle_from, +64) of every tensor: bit-exact
//   for F32/F16/BF16/Q8_0, within a relative 1e-6 for the others;
// - the rolling log-probs of two texts through Model::load + score(): within
//   1e-4 nats per token.
// Skipped, with a message, when ../shared (KVEVAL_SHARED_DIR) is absent.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "model/dequantize.hpp"
#include "model/gguf.hpp"
#include "model/model.hpp"
#include "context_support.hpp"
#include "test_support.hpp"

using namespace kveval;

namespace {

/// ../shared/quant, or "" (after a MESSAGE saying why the test is skipped).
std::string quant_dir() {
  const std::string shared = test::shared_dir();
  if (shared.empty()) {
    MESSAGE("skipped: no shared fixtures folder (KVEVAL_SHARED_DIR or <source>/../shared)");
    return "";
  }
  const std::string d = shared + "/quant";
  if (!std::ifstream(d + "/expected.json")) {
    MESSAGE("skipped: " << d << "/expected.json not found");
    return "";
  }
  return d;
}

const nlohmann::json& expected(const std::string& dir) {
  static const nlohmann::json j = nlohmann::json::parse(std::ifstream(dir + "/expected.json"));
  return j;
}

bool exact_type(const std::string& t) { return t == "F32" || t == "F16" || t == "BF16" || t == "Q8_0"; }

/// Elements [from, from + n) of tensor `t` (flat GGUF order), dequantized through
/// dequantize_rows over the rows that hold them.
std::vector<float> elements(const gguf::File& f, const gguf::TensorInfo& t, uint64_t from, uint64_t n) {
  const uint64_t len = t.row_length();
  const uint64_t r0 = from / len, r1 = (from + n + len - 1) / len;
  std::vector<float> rows((r1 - r0) * len);
  dequantize_rows(f, t, r0, r1 - r0, DType::F32, rows.data());
  const auto first = rows.begin() + static_cast<std::ptrdiff_t>(from - r0 * len);
  return {first, first + static_cast<std::ptrdiff_t>(n)};
}

}  // namespace

TEST_SUITE("model.quant_shared") {
  TEST_CASE("dequantized values of every tensor of every file equal gguf-py's") {
    const std::string dir = quant_dir();
    if (dir.empty()) return;
    const auto& files = expected(dir)["files"];
    REQUIRE(files.size() == 15);
    std::set<std::string> types_seen;
    for (const auto& [file, fx] : files.items()) {
      CAPTURE(file);
      gguf::File f(dir + "/" + file);
      REQUIRE(f.tensors().size() == fx["tensors"].size());
      for (const auto& [name, tx] : fx["tensors"].items()) {
        CAPTURE(name);
        const gguf::TensorInfo& t = f.tensor(name);
        const std::string type = tx["type"];
        CHECK(gguf::type_name(t.type) == type);
        CHECK(t.dims == tx["shape"].get<std::vector<uint64_t>>());
        types_seen.insert(type);
        for (const char* part : {"first", "middle"}) {
          CAPTURE(part);
          const auto want = tx[part].get<std::vector<double>>();
          const uint64_t from = std::string(part) == "first" ? 0 : tx["middle_from"].get<uint64_t>();
          const auto got = elements(f, t, from, want.size());
          int bad = 0;
          for (size_t i = 0; i < want.size(); ++i) {
            const float w = static_cast<float>(want[i]);  // the numpy float32 value, exactly
            const bool ok = exact_type(type) ? got[i] == w
                                             : std::fabs(got[i] - w) <= 1e-6 * std::fabs(w) + 1e-30;
            if (!ok && bad++ < 3) FAIL_CHECK(type << " element " << from + i << ": got " << got[i] << ", expected " << w);
          }
          CHECK(bad == 0);
        }
      }
    }
    CHECK(types_seen == std::set<std::string>{"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K",
                                              "Q3_K", "Q4_K", "Q5_K", "Q6_K"});
  }

  TEST_CASE("rolling log-probs of every file agree with the float64 reference within 1e-4 nats per token") {
    const std::string dir = quant_dir();
    if (dir.empty()) return;
    for (const auto& [file, fx] : expected(dir)["files"].items()) {
      CAPTURE(file);
      auto model = test::load_context(dir + "/" + file, {.threads = 1});
      const LoadSummary& s = model->model().load_summary();
      CHECK(s.architecture == "llama");
      CHECK(s.weight_dtype == "F32");
      const auto& rolling = fx["rolling"];
      REQUIRE(rolling.size() == 2);
      std::vector<ScoreRequest> reqs;
      for (size_t k = 0; k < rolling.size(); ++k) {
        const auto ids = rolling[k]["ids"].get<std::vector<int32_t>>();
        // The ids are the tokenizer's: the texts tokenize to them.
        CHECK(model->model().tokenizer().encode(expected(dir)["texts"][k].get<std::string>(), true) == ids);
        reqs.push_back({ids, 1});
      }
      const auto res = score(*model, reqs, 2);
      for (size_t k = 0; k < rolling.size(); ++k) {
        const auto want = rolling[k]["token_logprobs"].get<std::vector<double>>();
        REQUIRE(res[k].logprobs.size() == want.size());
        double worst = 0;
        for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(res[k].logprobs[i] - want[i]));
        CAPTURE(k);
        CHECK(worst < 1e-4);
        CHECK(std::fabs(res[k].sum() - rolling[k]["sum_logprob"].get<double>()) < 1e-4 * static_cast<double>(want.size()));
      }
    }
  }
}
