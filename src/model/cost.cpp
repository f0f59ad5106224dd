// Parameter, FLOP and byte counts of a forward pass (see cost.hpp).
#include "model/cost.hpp"

#include "model/gguf.hpp"

namespace kveval {

namespace {
double kv_dim(const HParams& hp) { return static_cast<double>(hp.n_head_kv) * hp.head_dim(); }
/// Elements of one layer's weight matrices.
double layer_matrix_params(const HParams& hp) {
  const double e = hp.n_embd, f = hp.n_ff, q = hp.n_embd_q();
  return 2 * q * e + 2 * kv_dim(hp) * e + 3 * e * f;  // wq, wo; wk, wv; gate, up, down
}
}  // namespace

uint64_t file_parameters(const gguf::File& f) {
  uint64_t n = 0;
  for (const auto& t : f.tensors()) n += t.n_elements;
  return n;
}

double n_params(const HParams& hp) {
  const double e = hp.n_embd, v = hp.n_vocab;
  double p = v * e;                                               // token_embd
  p += hp.n_layer * (layer_matrix_params(hp) + 2 * e);            // matrices + attn_norm, ffn_norm
  p += e;                                                          // output_norm
  if (!hp.tied_output) p += v * e;                                 // output
  return p;
}

double matmul_params(const HParams& hp) {
  return hp.n_layer * layer_matrix_params(hp) + static_cast<double>(hp.n_embd) * hp.n_vocab;
}

double layer_matmul_flops_per_token(const HParams& hp) { return 2.0 * hp.n_layer * layer_matrix_params(hp); }

double output_matmul_flops_per_token(const HParams& hp) {
  return 2.0 * static_cast<double>(hp.n_embd) * static_cast<double>(hp.n_vocab);
}

double attention_flops_causal(const HParams& hp, int64_t n) {
  const double nd = static_cast<double>(n);
  return 2.0 * nd * nd * hp.n_embd_q() * hp.n_layer;
}

double prompt_flops(const HParams& hp, int64_t n_prompt, int64_t batch) {
  const double p = static_cast<double>(n_prompt);
  return static_cast<double>(batch) *
         (p * (layer_matmul_flops_per_token(hp) + output_matmul_flops_per_token(hp)) + attention_flops_causal(hp, n_prompt));
}

double generate_matmul_flops(const HParams& hp, int64_t n_prompt, int64_t n_gen, bool cached) {
  const double p = static_cast<double>(n_prompt), g = static_cast<double>(n_gen);
  const double tokens = cached ? p + g - 1 : g * p + g * (g - 1) / 2;
  return layer_matmul_flops_per_token(hp) * tokens + output_matmul_flops_per_token(hp) * g;
}

double streamed_weight_bytes(const LoadSummary& s) {
  return static_cast<double>(s.resident_bytes) - static_cast<double>(s.lookup_only_bytes);
}

std::vector<backend::GemmShape> weight_gemm_shapes(const HParams& hp, int64_t m_layers, int64_t m_output) {
  const int64_t e = hp.n_embd, f = hp.n_ff, kv = static_cast<int64_t>(kv_dim(hp)), q = hp.n_embd_q();
  const int l = hp.n_layer;
  std::vector<backend::GemmShape> s;
  s.push_back({m_layers, q, e, l});        // wq
  s.push_back({m_layers, e, q, l});        // wo
  s.push_back({m_layers, kv, e, 2 * l});   // wk, wv
  s.push_back({m_layers, f, e, 2 * l});    // w1 (gate), w3 (up)
  s.push_back({m_layers, e, f, l});        // w2 (down)
  s.push_back({m_output, hp.n_vocab, e, 1});  // output
  return s;
}

uint64_t sgemm_bytes(const std::vector<backend::GemmShape>& shapes) {
  uint64_t floats = 0;
  for (const auto& g : shapes) {
    const auto m = static_cast<uint64_t>(g.m), n = static_cast<uint64_t>(g.n), k = static_cast<uint64_t>(g.k);
    floats += 2 * m * k + 2 * k * n + m * n;
  }
  return floats * sizeof(float);
}

}  // namespace kveval
