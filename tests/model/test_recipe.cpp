// The recipe fields no registered architecture uses yet, switched on together:
// a random llama model is rewritten as architecture "recipetest" with fused
// attn_qkv and ffn_up [gate | up], post-attention and post-FFN norms, and keys
// for the residual, attention and logit scales, the attention and final soft-caps
// and a sliding window on even layers; loaded with that recipe
// (ModelOptions::recipe, GeGLU, embedding scale sqrt(n_embd)), its log-probs
// are compared with a float64 forward written here from the GGUF weights and
// llama.cpp's Gemma 2 / Granite graphs, cache-free and through the KV cache.
// Negative controls: leaving any one feature out of the reference moves the
// log-probs far beyond the tolerance.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "context_support.hpp"
#include "model/arch/arch.hpp"
#include "model/context.hpp"
#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/model.hpp"
#include "model/random_model.hpp"
#include "test_support.hpp"

using namespace kveval;

namespace {

constexpr int kWindow = 6;
constexpr float kResidualScale = 0.75f, kAttnScale = 0.3f, kAttnSoftcap = 0.9f, kLogitScale = 1.5f,
                kFinalSoftcap = 4.0f;

const arch::Description& test_recipe() {
  static const arch::Description d{
      .name = "recipetest",
      .family = "test",
      .rope = arch::RopeStyle::Normal,
      .norm = arch::NormPlacement::PreAndPost,
      .fused_qkv = true,
      .fused_gate_up = true,
      .ffn_act = arch::FfnActivation::GeluTanh,
      .embd_scale = {.derive = [](const HParams& hp) { return std::sqrt(static_cast<float>(hp.n_embd)); }},
      .residual_scale = {.key = "residual_scale"},
      .attn_scale = {.key = "attention.scale"},
      .attn_softcap = {.key = "attn_logit_softcapping"},
      .sliding_window = {.key = "attention.sliding_window"},
      .sliding_layer = [](int layer) { return layer % 2 == 0; },
      .logit_scale = {.key = "logit_scale"},
      .final_softcap = {.key = "final_logit_softcapping"},
  };
  return d;
}

/// Writes a random llama model rewritten as "recipetest" (see the file comment) to `path`.
void write_recipe_model(const std::string& path, const std::string& scratch) {
  RandomModelSpec s;
  s.name = "recipe";
  s.n_embd = 64, s.n_layer = 2, s.n_head = 4, s.n_head_kv = 2, s.n_ff = 96, s.n_vocab = 300, s.n_ctx = 256;
  write_random_model(scratch, s, 7);
  gguf::File f(scratch);
  gguf::Writer w;
  for (const auto& [k, v] : f.metadata()) {
    if (k == "general.alignment") continue;
    if (k == "general.architecture") w.add_string(k, "recipetest");
    else if (k.starts_with("llama.")) w.add("recipetest." + k.substr(6), v);
    else w.add(k, v);
  }
  w.add_float32("recipetest.residual_scale", kResidualScale);
  w.add_float32("recipetest.attention.scale", kAttnScale);
  w.add_float32("recipetest.attn_logit_softcapping", kAttnSoftcap);
  w.add_uint32("recipetest.attention.sliding_window", kWindow);
  w.add_float32("recipetest.logit_scale", kLogitScale);
  w.add_float32("recipetest.final_logit_softcapping", kFinalSoftcap);
  auto get = [&](const std::string& n) { return f.tensor_f32(n, f.tensor(n).dims); };
  auto cat = [](std::vector<float> a, const std::vector<float>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const uint64_t E = 64, F = 96, Q = 64, KV = 32;
  for (const auto& t : f.tensors()) {
    const std::string& n = t.name;
    const auto dot = n.find('.', 4);  // "blk.N." prefix end for blk tensors
    const std::string base = n.starts_with("blk.") ? n.substr(dot + 1) : n;
    const std::string blk = n.starts_with("blk.") ? n.substr(0, dot + 1) : "";
    if (base == "attn_q.weight") {
      w.add_tensor(blk + "attn_qkv.weight", {E, Q + 2 * KV},
                   cat(cat(get(n), get(blk + "attn_k.weight")), get(blk + "attn_v.weight")));
    } else if (base == "ffn_gate.weight") {
      w.add_tensor(blk + "ffn_up.weight", {E, 2 * F}, cat(get(n), get(blk + "ffn_up.weight")));
    } else if (base == "attn_norm.weight") {
      w.add_tensor(n, t.dims, get(n));
      // Post-norm weights away from 1 so that they matter: 1 + 0.5 sin(i + layer), 1 - 0.4 cos(i).
      std::vector<float> pa(E), pf(E);
      for (uint64_t i = 0; i < E; ++i) {
        pa[i] = 1.0f + 0.5f * std::sin(static_cast<float>(i) + static_cast<float>(blk[4] - '0'));
        pf[i] = 1.0f - 0.4f * std::cos(static_cast<float>(i));
      }
      w.add_tensor(blk + "post_attention_norm.weight", {E}, pa);
      w.add_tensor(blk + "post_ffw_norm.weight", {E}, pf);
    } else if (base != "attn_k.weight" && base != "attn_v.weight" && base != "ffn_up.weight") {
      w.add_tensor(n, t.dims, get(n));
    }
  }
  w.write(path);
}

/// Features the reference can leave out (negative controls).
enum class Without { Nothing, PostNorm, Gelu, EmbdScale, ResidualScale, AttnScale, AttnSoftcap, Window, LogitScale,
                     FinalSoftcap };

/// The recipetest model's weights in double, read with gguf::File only, and its forward pass.
struct Reference {
  int E = 64, L = 2, H = 4, HKV = 2, HD = 16, F = 96, V = 0;
  double eps = 0;
  std::vector<double> tok_embd, output, output_norm;
  struct Layer {
    std::vector<double> attn_norm, wqkv, wo, post_attn, ffn_norm, wgu, wd, post_ffn;
  };
  std::vector<Layer> layers;

  explicit Reference(const std::string& path) {
    gguf::File f(path);
    eps = f.get_float("recipetest.attention.layer_norm_rms_epsilon");
    auto get = [&](const std::string& n) {
      const auto v = f.tensor_f32(n, f.tensor(n).dims);
      return std::vector<double>(v.begin(), v.end());
    };
    tok_embd = get("token_embd.weight");
    V = static_cast<int>(tok_embd.size() / E);
    output = f.find_tensor("output.weight") ? get("output.weight") : tok_embd;
    output_norm = get("output_norm.weight");
    for (int l = 0; l < L; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      layers.push_back({get(p + "attn_norm.weight"), get(p + "attn_qkv.weight"), get(p + "attn_output.weight"),
                        get(p + "post_attention_norm.weight"), get(p + "ffn_norm.weight"), get(p + "ffn_up.weight"),
                        get(p + "ffn_down.weight"), get(p + "post_ffw_norm.weight")});
    }
  }
  static std::vector<double> linear(const std::vector<double>& W, const std::vector<double>& x) {
    const size_t n_in = x.size(), n_out = W.size() / n_in;
    std::vector<double> y(n_out, 0.0);
    for (size_t o = 0; o < n_out; ++o)
      for (size_t i = 0; i < n_in; ++i) y[o] += W[o * n_in + i] * x[i];
    return y;
  }
  void rmsnorm(double* x, size_t n, const std::vector<double>& w) const {
    double ss = 0;
    for (size_t i = 0; i < n; ++i) ss += x[i] * x[i];
    const double s = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (size_t i = 0; i < n; ++i) x[i] = x[i] * s * w[i];
  }
  // RoPE NORM layout (adjacent pairs), base 10000, head of HD at position pos.
  void rope(double* v, int pos) const {
    for (int i = 0; i < HD / 2; ++i) {
      const double th = pos * std::pow(10000.0, -2.0 * i / HD), x0 = v[2 * i], x1 = v[2 * i + 1];
      v[2 * i] = x0 * std::cos(th) - x1 * std::sin(th);
      v[2 * i + 1] = x0 * std::sin(th) + x1 * std::cos(th);
    }
  }
  // x += rs * post_norm(branch) (llama.cpp Gemma 2: norm, then add; Granite: scale, then add).
  void add_branch(std::vector<double>& x, std::vector<double> b, const std::vector<double>& post, Without wo) const {
    if (wo != Without::PostNorm) rmsnorm(b.data(), b.size(), post);
    const double rs = wo == Without::ResidualScale ? 1.0 : kResidualScale;
    for (size_t i = 0; i < x.size(); ++i) x[i] += rs * b[i];
  }
  void attention_layer(std::vector<std::vector<double>>& x, int l, Without wo) const {
    const Layer& Ly = layers[size_t(l)];
    const size_t T = x.size(), Q = size_t(H) * HD, KV = size_t(HKV) * HD;
    std::vector<std::vector<double>> qkv(T);
    for (size_t t = 0; t < T; ++t) {
      std::vector<double> h = x[t];
      rmsnorm(h.data(), h.size(), Ly.attn_norm);
      qkv[t] = linear(Ly.wqkv, h);
      for (int hh = 0; hh < H + HKV; ++hh) rope(qkv[t].data() + hh * HD, static_cast<int>(t));  // q heads, k heads
    }
    const bool slides = l % 2 == 0 && wo != Without::Window;
    const double scale = wo == Without::AttnScale ? 1.0 / std::sqrt(double(HD)) : kAttnScale;
    std::vector<std::vector<double>> out(T);
    for (size_t t = 0; t < T; ++t) {
      std::vector<double> att(Q, 0.0);
      const size_t first = slides && t + 1 > kWindow ? t + 1 - kWindow : 0;
      for (int hh = 0; hh < H; ++hh) {
        const size_t kh = Q + size_t(hh / (H / HKV)) * HD, vh = kh + KV;
        std::vector<double> s;
        double mx = -1e300;
        for (size_t p = first; p <= t; ++p) {
          double d = 0;
          for (int i = 0; i < HD; ++i) d += qkv[t][size_t(hh * HD + i)] * qkv[p][kh + size_t(i)];
          d *= scale;
          if (wo != Without::AttnSoftcap) d = kAttnSoftcap * std::tanh(d / kAttnSoftcap);
          s.push_back(d);
          mx = std::max(mx, d);
        }
        double z = 0;
        for (auto& e : s) z += (e = std::exp(e - mx));
        for (size_t p = first; p <= t; ++p)
          for (int i = 0; i < HD; ++i) att[size_t(hh * HD + i)] += s[p - first] / z * qkv[p][vh + size_t(i)];
      }
      out[t] = linear(Ly.wo, att);
    }
    for (size_t t = 0; t < T; ++t) add_branch(x[t], out[t], Ly.post_attn, wo);
  }
  /// Log-probs [T, V] of `ids` at positions 0..T-1.
  std::vector<double> log_probs(const std::vector<int32_t>& ids, Without wo = Without::Nothing) const {
    const size_t T = ids.size();
    std::vector<std::vector<double>> x(T);
    const double es = wo == Without::EmbdScale ? 1.0 : std::sqrt(double(E));
    for (size_t t = 0; t < T; ++t)
      for (int i = 0; i < E; ++i) x[t].push_back(es * tok_embd[size_t(ids[t]) * E + size_t(i)]);
    for (int l = 0; l < L; ++l) {
      attention_layer(x, l, wo);
      const Layer& Ly = layers[size_t(l)];
      for (size_t t = 0; t < T; ++t) {
        std::vector<double> h = x[t];
        rmsnorm(h.data(), h.size(), Ly.ffn_norm);
        const auto gu = linear(Ly.wgu, h);
        std::vector<double> a(static_cast<size_t>(F));
        for (size_t i = 0; i < a.size(); ++i) {
          const double g = gu[i];
          a[i] = (wo == Without::Gelu ? g / (1.0 + std::exp(-g))
                                      : 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)))) *
                 gu[i + size_t(F)];
        }
        add_branch(x[t], linear(Ly.wd, a), Ly.post_ffn, wo);
      }
    }
    std::vector<double> lp;
    for (size_t t = 0; t < T; ++t) {
      rmsnorm(x[t].data(), x[t].size(), output_norm);
      auto lg = linear(output, x[t]);
      double mx = -1e300, z = 0;
      for (auto& v : lg) {
        if (wo != Without::LogitScale) v /= kLogitScale;
        if (wo != Without::FinalSoftcap) v = kFinalSoftcap * std::tanh(v / kFinalSoftcap);
        mx = std::max(mx, v);
      }
      for (double v : lg) z += std::exp(v - mx);
      for (double v : lg) lp.push_back(v - mx - std::log(z));
    }
    return lp;
  }
};

/// log_softmax of each row of `logits` [rows, V], in double.
std::vector<double> log_softmax_rows(const std::vector<float>& logits, size_t V) {
  std::vector<double> out;
  for (size_t r = 0; r < logits.size() / V; ++r) {
    double mx = -1e300, z = 0;
    for (size_t i = 0; i < V; ++i) mx = std::max(mx, double(logits[r * V + i]));
    for (size_t i = 0; i < V; ++i) z += std::exp(logits[r * V + i] - mx);
    for (size_t i = 0; i < V; ++i) out.push_back(logits[r * V + i] - mx - std::log(z));
  }
  return out;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

std::vector<int32_t> token_ids(size_t n, int V) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((7919ll * (i + 3)) % V));
  return ids;
}

}  // namespace

TEST_SUITE("model.recipe") {
  TEST_CASE("post-norms, GeGLU, fused projections, scales, soft-caps and a sliding window match a float64 forward") {
    const test::ScratchDir dir("recipe");
    const std::string path = (dir.path / "recipetest.gguf").string();
    write_recipe_model(path, (dir.path / "llama.gguf").string());
    ModelOptions opts;
    opts.dtype = ComputeDtype::F32;
    opts.recipe = &test_recipe();
    auto m = test::load_context(path, opts);
    const HParams& hp = m.model().hparams();
    CHECK(hp.embd_scale == 8.0f);
    CHECK(hp.sliding_window == kWindow);
    CHECK(hp.final_softcap == kFinalSoftcap);
    const Reference ref(path);
    const size_t V = static_cast<size_t>(hp.n_vocab);
    // 40 positions: the loop attention (AVX-512 head kernel or the position-major
    // loop); 90: the oneDNN matmuls. Row 0 of the batch is shorter (padding).
    for (int T : {40, 90}) {
      CAPTURE(T);
      const auto ids = token_ids(size_t(T), hp.n_vocab);
      std::vector<int32_t> toks(2 * size_t(T), 0);
      std::copy(ids.begin(), ids.begin() + T / 2, toks.begin());
      std::copy(ids.begin(), ids.end(), toks.begin() + T);
      std::vector<int> n = {T / 2, T};
      std::vector<float> logits(2 * size_t(T) * V);
      m->forward(toks, 2, T, n, Context::Logits::All, logits);
      const auto got = log_softmax_rows(std::vector<float>(logits.begin() + T * V, logits.end()), V);
      const auto want = ref.log_probs(ids);
      CHECK(max_diff(got, want) <= 1e-4);
      const auto got0 = log_softmax_rows(std::vector<float>(logits.begin(), logits.begin() + (T / 2) * V), V);
      CHECK(max_diff(got0, ref.log_probs(std::vector<int32_t>(ids.begin(), ids.begin() + T / 2))) <= 1e-4);
      if (T != 40) continue;
      for (Without wo : {Without::PostNorm, Without::Gelu, Without::EmbdScale, Without::ResidualScale,
                         Without::AttnScale, Without::AttnSoftcap, Without::Window, Without::LogitScale,
                         Without::FinalSoftcap}) {
        CAPTURE(static_cast<int>(wo));
        CHECK(max_diff(got, ref.log_probs(ids, wo)) > 1e-2);
      }
    }
  }

  TEST_CASE("through the KV cache: a prompt, then one token at a time past the window, as the float64 forward") {
    const test::ScratchDir dir("recipe_cache");
    const std::string path = (dir.path / "recipetest.gguf").string();
    write_recipe_model(path, (dir.path / "llama.gguf").string());
    ModelOptions opts;
    opts.dtype = ComputeDtype::F32;
    opts.recipe = &test_recipe();
    auto m = test::load_context(path, opts);
    const size_t V = static_cast<size_t>(m.model().hparams().n_vocab);
    const auto ids = token_ids(30, m.model().hparams().n_vocab);
    const auto want = Reference(path).log_probs(ids);
    KvCacheScope scope(*m, 1, 64);
    const int P = 20;  // prompt
    std::vector<float> logits(size_t(P) * V);
    std::vector<int> n = {P};
    m->forward(std::vector<int32_t>(ids.begin(), ids.begin() + P), 1, P, n, Context::Logits::All, logits);
    std::vector<double> got = log_softmax_rows(logits, V);
    n = {1};
    for (size_t t = P; t < ids.size(); ++t) {
      std::vector<float> step(V);
      m->forward(std::vector<int32_t>{ids[t]}, 1, 1, n, Context::Logits::Last, step);
      const auto lp = log_softmax_rows(step, V);
      got.insert(got.end(), lp.begin(), lp.end());
    }
    CHECK(max_diff(got, want) <= 1e-4);
  }
}
