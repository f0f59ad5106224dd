// The runner's scoring chunks (score()'s rows kept whole) and its memory plan.
#include "eval/score_chunks.hpp"

#include <algorithm>

#include "model/cost.hpp"

namespace kveval::eval::detail {

GenPlan plan_generation(const std::vector<size_t>& order, const std::vector<Request>& requests, int batch_size,
                        int max_length) {
  GenPlan p;
  for (size_t i : order)
    if (requests[i].max_gen_toks > 0) p.gen.push_back(i);
  if (p.gen.empty()) return p;
  for (size_t i : p.gen)
    p.positions = std::max(p.positions, static_cast<int>(requests[i].prompt.size()) + requests[i].max_gen_toks);
  p.positions = std::min(p.positions, max_length);
  p.rows = static_cast<int>(std::min<size_t>(static_cast<size_t>(batch_size), p.gen.size()));
  return p;
}

/// True for a request score() scores as a token tree and may pack with others
/// sharing a prefix: a loglikelihood request (also a multiple_choice choice,
/// left-truncated or not).
bool packable(const Request& r) { return r.kind == RequestKind::Loglikelihood; }

/// score()'s options for the runner: prefixes shared when `pack`, rows of at
/// most min(max_length, 1024) tokens and 128 scored tokens, so that a pass of
/// batch_size rows holds about as many activations and logits rows as one
/// document's choices per row would (logits are n_vocab floats per row: 128
/// rows of a 128k vocabulary are 64 MiB), while few-shot prefixes are still
/// shared by the documents that fit.
ScoreOptions score_options(bool pack, int max_length) { return ScoreOptions{pack, std::min(max_length, 1024), 128}; }

/// The scoring requests of `order` (canonical) cut into the chunks score_phase
/// hands to score(): score()'s rows over all of them (score_rows), whole rows
/// per chunk of at least `chunk` requests, so score() forms the same rows
/// whatever the chunk size.
std::vector<std::vector<size_t>> score_chunks(const std::vector<size_t>& order, const std::vector<Request>& requests,
                                              size_t chunk, int n_ctx, const ScoreOptions& opts) {
  std::vector<std::vector<size_t>> chunks;
  for (const auto& row : score_rows(chunk_requests(order, requests), n_ctx, opts)) {
    if (chunks.empty() || chunks.back().size() >= chunk) chunks.emplace_back();
    for (size_t m : row) chunks.back().push_back(order[m]);
  }
  return chunks;
}

/// The ScoreRequests of one chunk (pack set where packable).
std::vector<ScoreRequest> chunk_requests(const std::vector<size_t>& chunk, const std::vector<Request>& requests) {
  std::vector<ScoreRequest> out;
  out.reserve(chunk.size());
  for (size_t i : chunk) {
    out.push_back(requests[i].score);
    out.back().pack = packable(requests[i]);
  }
  return out;
}

/// Requests score_phase hands to one score() call (a multiple of batch_size).
size_t score_chunk_size(int batch_size) { return static_cast<size_t>(std::max(batch_size, 1)) * 8; }

/// The memory plan of the scoring requests `score_order` and the generation requests `gen_order` (canonical orders).
MemoryPlan plan_for(const Model& model, const std::vector<Request>& requests, const std::vector<size_t>& score_order,
                    const std::vector<size_t>& gen_order, int batch_size, int max_length, bool pack) {
  MemoryPlan p;
  p.weights = model.weight_bytes();
  // scoring: the passes score() runs on score_phase's chunks (forward_rows packs the valid tokens and
  // materialises logits only for the scored positions)
  const int n_ctx = model.hparams().n_ctx_train;
  const ScoreOptions opts = score_options(pack, max_length);
  for (const auto& chunk : score_chunks(score_order, requests, score_chunk_size(batch_size), n_ctx, opts))
    for (const ScorePassShape& s : score_pass_shapes(chunk_requests(chunk, requests), batch_size, n_ctx, opts))
      p.activations = std::max(p.activations, model.activation_bytes_for(s.rows, s.seq, false, s.tokens, s.logit_rows));
  // generation: the cache of the scope and each batch's prefill (last-position logits)
  const GenPlan g = plan_generation(gen_order, requests, batch_size, max_length);
  if (!g.gen.empty()) {
    p.cache_rows = g.rows;
    p.cache_positions = g.positions;
    p.kv_cache = model.cache_bytes_for(g.rows, g.positions);
    for (size_t b0 = 0; b0 < g.gen.size(); b0 += static_cast<size_t>(g.rows)) {
      const size_t b1 = std::min(g.gen.size(), b0 + static_cast<size_t>(g.rows));
      int seq = 1;
      int64_t tokens = 0;
      for (size_t k = b0; k < b1; ++k) {
        seq = std::max(seq, static_cast<int>(requests[g.gen[k]].prompt.size()));
        tokens += static_cast<int64_t>(requests[g.gen[k]].prompt.size());
      }
      p.activations = std::max(p.activations, model.activation_bytes_for(g.rows, seq, false, tokens));
    }
  }
  return p;
}

}  // namespace kveval::eval::detail
