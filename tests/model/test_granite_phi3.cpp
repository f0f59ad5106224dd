// Granite and Phi-3 (general.architecture granite, phi3): random models written
// by write_random_model (what `kveval make-model --arch granite|phi3` writes)
// against the float64 forward of reference_forward.hpp, cache-free (the loop
// and the oneDNN attention paths) and through the KV cache, with negative
// controls showing each feature moves the log-probs; files that break the
// architecture's rules are refused with one line naming the file and the key
// or tensor. Granite: embedding, residual, attention and logit scales. Phi-3:
// fused attn_qkv and gate/up ffn_up, NEOX RoPE over part of each head, LongRoPE
// (the long factors when the run's context exceeds
// rope.scaling.original_context_length, else the short ones; the attention
// factor on cos and sin), a sliding window on every layer.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "context_support.hpp"
#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/model.hpp"
#include "model/random_model.hpp"
#include "model/reference_forward.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;

namespace {

using test::log_softmax_rows;
using test::max_diff;
using test::reference_log_probs;
using test::token_ids;

/// Log-probs [T, V] of `ids` from one cache-free pass.
std::vector<double> cache_free(Context& m, const std::vector<int32_t>& ids) {
  const size_t V = static_cast<size_t>(m.model().hparams().n_vocab), T = ids.size();
  std::vector<float> logits(T * V);
  std::vector<int> n = {static_cast<int>(T)};
  m.forward(ids, 1, static_cast<int>(T), n, Context::Logits::All, logits);
  return log_softmax_rows(logits.data(), T, V);
}

/// Log-probs [T, V] of `ids` through the KV cache: a prompt of 8, then one token at a time.
std::vector<double> cached(Context& m, const std::vector<int32_t>& ids) {
  const size_t V = static_cast<size_t>(m.model().hparams().n_vocab);
  KvCacheScope scope(m, 1, static_cast<int>(ids.size()));
  const int P = 8;
  std::vector<float> logits(size_t(P) * V);
  std::vector<int> n = {P};
  m.forward(std::vector<int32_t>(ids.begin(), ids.begin() + P), 1, P, n, Context::Logits::All, logits);
  std::vector<double> got = log_softmax_rows(logits.data(), size_t(P), V);
  n = {1};
  for (size_t t = P; t < ids.size(); ++t) {
    std::vector<float> step(V);
    m.forward(std::vector<int32_t>{ids[t]}, 1, 1, n, Context::Logits::Last, step);
    const auto lp = log_softmax_rows(step.data(), 1, V);
    got.insert(got.end(), lp.begin(), lp.end());
  }
  return got;
}

using MetaEdit = std::function<void(gguf::Writer&, const std::string& key, const gguf::Value&)>;
using TensorEdit = std::function<void(gguf::Writer&, const gguf::TensorInfo&, std::vector<float>)>;

/// `src` rewritten to dir/name: `meta` writes (or drops) each key, `tensor` each tensor (default: as they are).
std::string rewritten(const std::string& src, const test::ScratchDir& dir, const std::string& name, const MetaEdit& meta,
                      const TensorEdit& tensor = {}) {
  gguf::File f(src);
  gguf::Writer w;
  for (const auto& [k, v] : f.metadata())
    if (k != "general.alignment") meta(w, k, v);
  for (const auto& t : f.tensors()) {
    auto data = f.tensor_f32(t.name, t.dims);
    if (tensor) tensor(w, t, std::move(data));
    else w.add_tensor(t.name, t.dims, data);
  }
  const std::string path = dir.file(name);
  w.write(path);
  return path;
}

void copy_key(gguf::Writer& w, const std::string& k, const gguf::Value& v) { w.add(k, v); }

void refused(const std::string& path, const std::string& msg) {
  CAPTURE(path);
  CHECK_THROWS_WITH_AS(Model::load(path, {}), (path + ": " + msg).c_str(), FormatError);
}

/// tiny granite with multipliers large enough that dropping any one moves the log-probs.
RandomModelSpec granite_spec() {
  RandomModelSpec s = random_model_flavour(random_model_preset("tiny"), "granite");
  s.n_layer = 3;
  s.embedding_scale = 4.0f;
  s.residual_scale = 0.5f;
  s.attention_scale = 0.6f;
  s.logit_scale = 2.5f;
  s.tied_output = false;
  return s;
}

const std::string& granite_path() { return test::cached_random_model("granite", [] { return granite_spec(); }, 11); }

}  // namespace

TEST_SUITE("model.granite") {
  TEST_CASE("log-probs equal the float64 forward within 1e-4, cache-free and cached; each multiplier matters") {
    auto m = test::load_context(granite_path(), ModelOptions{.dtype = ComputeDtype::F32});
    const HParams& hp = m.model().hparams();
    CHECK(hp.embd_scale == 4.0f);
    CHECK(hp.residual_scale == 0.5f);
    CHECK(hp.attn_scale == 0.6f);
    CHECK(hp.logit_scale == 2.5f);
    CHECK_FALSE(hp.tied_output);
    const test::ReferenceModel ref(granite_path());
    for (int T : {40, 90}) {  // the loop attention and the oneDNN matmul path
      CAPTURE(T);
      const auto ids = token_ids(size_t(T), hp.n_vocab);
      const auto got = cache_free(*m, ids);
      CHECK(max_diff(got, reference_log_probs(ref, ids)) <= 1e-4);
      if (T != 40) continue;
      CHECK(max_diff(cached(*m, ids), reference_log_probs(ref, ids)) <= 1e-4);
      for (const test::Ablation ab : {test::Ablation{.no_embd_scale = true}, test::Ablation{.no_residual_scale = true},
                                      test::Ablation{.no_attn_scale = true}, test::Ablation{.no_logit_scale = true}})
        CHECK(max_diff(got, reference_log_probs(ref, ids, ab)) > 1e-2);
    }
  }

  TEST_CASE("the make-model flavour: Granite 3.0's multipliers, tied output; only the logit scale is required") {
    const RandomModelSpec s = random_model_flavour(random_model_preset("tiny"), "granite");
    CHECK(s.embedding_scale == 12.0f);
    CHECK(s.residual_scale == 0.22f);
    CHECK(s.attention_scale == 0.015625f);
    CHECK(s.logit_scale == 8.0f);
    CHECK(s.tied_output);
    const test::ScratchDir dir("granite_flavour");
    const std::string path = dir.file("g.gguf");
    write_random_model(path, s, 1);
    auto m = Model::load(path, {});
    CHECK(m->hparams().attn_scale == 0.015625f);
    CHECK(m->hparams().tied_output);
    // absent optional multipliers are off (llama.cpp reads them as optional)
    const std::string bare = rewritten(path, dir, "bare.gguf", [](gguf::Writer& w, const std::string& k, const gguf::Value& v) {
      if (k != "granite.embedding_scale" && k != "granite.residual_scale" && k != "granite.attention.scale") w.add(k, v);
    });
    auto b = Model::load(bare, {});
    CHECK(b->hparams().embd_scale == 0.0f);
    CHECK(b->hparams().residual_scale == 0.0f);
    CHECK(b->hparams().attn_scale == 0.0f);
    CHECK(b->hparams().logit_scale == 8.0f);
    RandomModelSpec no_logit = s;
    no_logit.logit_scale = 0;
    CHECK_THROWS_WITH_AS(write_random_model(dir.file("x.gguf"), no_logit, 1), doctest::Contains("needs a logit scale"),
                         ArgumentError);
  }

  TEST_CASE("bad files: no logit scale, a logit scale of 0, a negative residual scale, partial rotary, a Q/K norm") {
    const test::ScratchDir dir("granite_bad");
    auto set_key = [](const std::string& key, float value) -> MetaEdit {
      return [key, value](gguf::Writer& w, const std::string& k, const gguf::Value& v) {
        if (k == key) w.add_float32(k, value);
        else w.add(k, v);
      };
    };
    refused(rewritten(granite_path(), dir, "nologit.gguf",
                      [](gguf::Writer& w, const std::string& k, const gguf::Value& v) {
                        if (k != "granite.logit_scale") w.add(k, v);
                      }),
            "key 'granite.logit_scale' (logit scale) is missing; architecture 'granite' needs it");
    refused(rewritten(granite_path(), dir, "logit0.gguf", set_key("granite.logit_scale", 0.0f)),
            "logit scale = 0 (key 'granite.logit_scale') must be positive for architecture 'granite'");
    refused(rewritten(granite_path(), dir, "resneg.gguf", set_key("granite.residual_scale", -0.5f)),
            "residual scale = -0.5 (key 'granite.residual_scale') must be 0 (off) or a positive finite number");
    refused(rewritten(granite_path(), dir, "embinf.gguf", set_key("granite.embedding_scale", INFINITY)),
            "embedding scale = inf (key 'granite.embedding_scale') must be 0 (off) or a positive finite number");
    refused(rewritten(granite_path(), dir, "rot.gguf",
                      [](gguf::Writer& w, const std::string& k, const gguf::Value& v) {
                        if (k == "granite.rope.dimension_count") w.add_uint32(k, 8);
                        else w.add(k, v);
                      }),
            "granite.rope.dimension_count 8 must equal the head size 16 for architecture 'granite'");
    const std::string qnorm = rewritten(granite_path(), dir, "qnorm.gguf", copy_key,
                                        [](gguf::Writer& w, const gguf::TensorInfo& t, std::vector<float> d) {
                                          w.add_tensor(t.name, t.dims, d);
                                          if (t.name == "blk.0.attn_norm.weight")
                                            w.add_tensor("blk.0.attn_q_norm.weight", {16}, std::vector<float>(16, 1.0f));
                                        });
    CHECK_THROWS_WITH_AS(Model::load(qnorm, {}),
                         doctest::Contains("tensor 'blk.0.attn_q_norm.weight' is not used by architecture 'granite'"),
                         FormatError);
  }

  TEST_CASE("rope.scaling.finetuned: true (llama.cpp's RoPE on) loads with the same logits; false (no RoPE) is refused") {
    const test::ScratchDir dir("granite_finetuned");
    auto with_key = [](bool value) -> MetaEdit {
      return [value](gguf::Writer& w, const std::string& k, const gguf::Value& v) {
        w.add(k, v);
        if (k == "granite.logit_scale") w.add_bool("granite.rope.scaling.finetuned", value);
      };
    };
    const std::string on = rewritten(granite_path(), dir, "on.gguf", with_key(true));
    REQUIRE(gguf::File(on).get_bool_or("granite.rope.scaling.finetuned", false));
    auto a = test::load_context(granite_path(), ModelOptions{.dtype = ComputeDtype::F32});
    auto b = test::load_context(on, ModelOptions{.dtype = ComputeDtype::F32});
    const auto ids = token_ids(30, a.model().hparams().n_vocab);
    CHECK(cache_free(*b, ids) == cache_free(*a, ids));
    refused(rewritten(granite_path(), dir, "off.gguf", with_key(false)),
            "key 'granite.rope.scaling.finetuned' is false: architecture 'granite' then runs without RoPE (llama.cpp's "
            "switch), which kveval does not support");
  }
}

namespace {

/// tiny phi3 (heads of 16, 12 rotated dimensions), 3 layers, untied, LongRoPE switching at 8 positions.
RandomModelSpec phi3_spec(int window = 0) {
  RandomModelSpec s = random_model_flavour(random_model_preset("tiny"), "phi3");
  s.n_layer = 3;
  s.tied_output = false;
  s.longrope.original_context = 8;
  s.sliding_window = window;
  return s;
}

const std::string& phi3_path() { return test::cached_random_model("phi3", [] { return phi3_spec(); }, 12); }

}  // namespace

TEST_SUITE("model.phi3") {
  TEST_CASE("the make-model flavour: partial rotary, LongRoPE keys and factor tensors, fused projections") {
    const RandomModelSpec s = random_model_flavour(random_model_preset("tiny"), "phi3");
    CHECK(s.n_rot == 12);  // int(0.75 * 64) // 4
    CHECK(s.longrope.original_context == 32);
    CHECK(std::abs(s.longrope.attn_factor - 1.1902380714f) < 1e-6f);
    gguf::File f(phi3_path());
    CHECK(f.get_uint("phi3.rope.dimension_count") == 12);
    CHECK(f.get_uint("phi3.rope.scaling.original_context_length") == 8);
    CHECK(f.tensor_f32("rope_factors_long.weight", std::vector<uint64_t>{6}) == std::vector<float>{1, 3, 5, 7, 9, 11});
    CHECK(f.tensor("blk.0.attn_qkv.weight").dims == std::vector<uint64_t>{64, 64 + 2 * 32});
    CHECK(f.tensor("blk.0.ffn_up.weight").dims == std::vector<uint64_t>{64, 2 * 96});
    CHECK(f.find_tensor("blk.0.ffn_gate.weight") == nullptr);
    CHECK(f.find_tensor("blk.0.attn_q.weight") == nullptr);
  }

  TEST_CASE("log-probs equal the float64 forward within 1e-4 on both sides of original_context_length") {
    for (int n_ctx : {8, 16}) {  // 8 <= 8: the short factors; 16 > 8: the long ones
      CAPTURE(n_ctx);
      auto m = test::load_context(phi3_path(), ModelOptions{.dtype = ComputeDtype::F32, .n_ctx = n_ctx});
      const HParams& hp = m.model().hparams();
      CHECK(hp.n_rot == 12);
      CHECK(hp.n_ctx_orig == 8);
      CHECK(hp.rope_factors_set == (n_ctx > 8 ? "long" : "short"));
      CHECK(std::abs(hp.rope_attn_factor - 1.1902380714f) < 1e-6f);
      CHECK(m.model().load_summary().longrope ==
            (n_ctx > 8 ? "LongRoPE long factors (context 16 > original 8), attention factor 1.19"
                       : "LongRoPE short factors (context 8 <= original 8), attention factor 1.19"));
      const test::ReferenceModel ref(phi3_path(), n_ctx);
      REQUIRE(ref.longrope_set == hp.rope_factors_set);
      for (int T : {40, 90}) {
        CAPTURE(T);
        const auto ids = token_ids(size_t(T), hp.n_vocab);
        const auto got = cache_free(*m, ids);
        CHECK(max_diff(got, reference_log_probs(ref, ids)) <= 1e-4);
        if (T != 40) continue;
        CHECK(max_diff(cached(*m, ids), reference_log_probs(ref, ids)) <= 1e-4);
        for (const test::Ablation ab : {test::Ablation{.swap_rope_style = true}, test::Ablation{.other_longrope_set = true},
                                        test::Ablation{.no_rope_attn_factor = true}, test::Ablation{.swap_gate_up = true}})
          CHECK(max_diff(got, reference_log_probs(ref, ids, ab)) > 1e-2);
      }
    }
    // the default context is context_length (128 > 8): the long factors
    auto d = Model::load(phi3_path(), {});
    CHECK(d->hparams().rope_factors_set == "long");
  }

  TEST_CASE("a sliding window on every layer, cache-free and through the KV cache") {
    const test::ScratchDir dir("phi3_window");
    const std::string path = dir.file("w.gguf");
    write_random_model(path, phi3_spec(5), 12);
    auto m = test::load_context(path, ModelOptions{.dtype = ComputeDtype::F32});
    CHECK(m.model().hparams().sliding_window == 5);
    CHECK(m.model().load_summary().sliding.starts_with("sliding window 5 on 3 of 3 layers"));
    const test::ReferenceModel ref(path);
    const auto ids = token_ids(40, m.model().hparams().n_vocab);
    const auto got = cache_free(*m, ids);
    CHECK(max_diff(got, reference_log_probs(ref, ids)) <= 1e-4);
    CHECK(max_diff(got, reference_log_probs(ref, ids, {.no_window = true})) > 1e-2);
    CHECK(max_diff(cached(*m, ids), reference_log_probs(ref, ids)) <= 1e-4);
  }

  TEST_CASE("bad files: one factor set, factors of the wrong length, fused projections of the wrong width") {
    const test::ScratchDir dir("phi3_bad");
    auto drop = [](const std::string& name) -> TensorEdit {
      return [name](gguf::Writer& w, const gguf::TensorInfo& t, std::vector<float> d) {
        if (t.name != name) w.add_tensor(t.name, t.dims, d);
      };
    };
    auto resize = [](const std::string& name, uint64_t rows) -> TensorEdit {
      return [name, rows](gguf::Writer& w, const gguf::TensorInfo& t, std::vector<float> d) {
        if (t.name != name) {
          w.add_tensor(t.name, t.dims, d);
          return;
        }
        std::vector<uint64_t> dims = t.dims;
        dims.back() = rows;
        d.resize(dims.size() == 1 ? rows : dims[0] * rows, 1.0f);
        w.add_tensor(t.name, dims, d);
      };
    };
    refused(rewritten(phi3_path(), dir, "onlylong.gguf", copy_key, drop("rope_factors_short.weight")),
            "tensor 'rope_factors_long.weight' without 'rope_factors_short.weight' (LongRoPE needs both factor sets)");
    refused(rewritten(phi3_path(), dir, "short5.gguf", copy_key, resize("rope_factors_short.weight", 5)),
            "tensor 'rope_factors_short.weight' has shape [5], expected [6]");
    refused(rewritten(phi3_path(), dir, "qkv.gguf", copy_key, resize("blk.1.attn_qkv.weight", 96)),
            "tensor 'blk.1.attn_qkv.weight' has shape [64, 96], expected [64, 128]");
    refused(rewritten(phi3_path(), dir, "up.gguf", copy_key, resize("blk.2.ffn_up.weight", 96)),
            "tensor 'blk.2.ffn_up.weight' has shape [64, 96], expected [64, 192]");
    refused(rewritten(phi3_path(), dir, "neg.gguf", copy_key,
                      [](gguf::Writer& w, const gguf::TensorInfo& t, std::vector<float> d) {
                        if (t.name == "rope_factors_long.weight") d[2] = -1.0f;
                        w.add_tensor(t.name, t.dims, d);
                      }),
            "tensor 'rope_factors_long.weight' element 2 = -1 (frequency factors must be in [0.001, 1000])");
    refused(rewritten(phi3_path(), dir, "attn0.gguf",
                      [](gguf::Writer& w, const std::string& k, const gguf::Value& v) {
                        if (k == "phi3.rope.scaling.attn_factor") w.add_float32(k, 0.0f);
                        else w.add(k, v);
                      }),
            "RoPE attention factor = 0 (key 'phi3.rope.scaling.attn_factor') must be positive for architecture 'phi3'");
    refused(rewritten(phi3_path(), dir, "orig0.gguf",
                      [](gguf::Writer& w, const std::string& k, const gguf::Value& v) {
                        if (k == "phi3.rope.scaling.original_context_length") w.add_uint32(k, 0);
                        else w.add(k, v);
                      }),
            "key 'phi3.rope.scaling.original_context_length' = 0 out of range [1, 16777216]");
    // a separate ffn_gate is not Phi-3's layout
    const std::string gate = rewritten(phi3_path(), dir, "gate.gguf", copy_key,
                                       [](gguf::Writer& w, const gguf::TensorInfo& t, std::vector<float> d) {
                                         w.add_tensor(t.name, t.dims, d);
                                         if (t.name == "blk.0.ffn_down.weight")
                                           w.add_tensor("blk.0.ffn_gate.weight", {64, 96}, std::vector<float>(64 * 96, 0.1f));
                                       });
    CHECK_THROWS_WITH_AS(Model::load(gate, {}),
                         doctest::Contains("tensor 'blk.0.ffn_gate.weight' is not used by architecture 'phi3'"), FormatError);
    CHECK_THROWS_AS(Model::load(phi3_path(), {.n_ctx = -1}), ArgumentError);
  }
}
