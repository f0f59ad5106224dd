// The runner's scoring chunks (prefix-packing groups kept whole) and its memory plan.
#include "eval/score_chunks.hpp"

#include <algorithm>
#include <map>

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

/// True for a request score() may pack with others of the same context:
/// a loglikelihood request (also a multiple_choice choice) that was not left-truncated.
bool packable(const Request& r) { return r.kind == RequestKind::Loglikelihood && r.truncated_tokens == 0; }

/// The scoring requests of `order` (canonical) cut into the chunks score_phase
/// hands to score(): requests with the same context (packable, identical
/// tokens[0, score_from)) follow the first of them, and a chunk of at least
/// `chunk` requests never splits such a group, so score() forms the same rows
/// whatever the chunk size.
std::vector<std::vector<size_t>> score_chunks(const std::vector<size_t>& order, const std::vector<Request>& requests,
                                              size_t chunk, bool pack) {
  std::map<std::vector<int32_t>, size_t> group_of;  // context -> its group
  std::vector<std::vector<size_t>> groups;
  for (size_t i : order) {
    const ScoreRequest& s = requests[i].score;
    if (!pack || !packable(requests[i])) {
      groups.push_back({i});
      continue;
    }
    auto [it, added] = group_of.try_emplace(std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + s.score_from),
                                            groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  std::vector<std::vector<size_t>> chunks;
  for (const auto& g : groups) {
    if (chunks.empty() || chunks.back().size() >= chunk) chunks.emplace_back();
    chunks.back().insert(chunks.back().end(), g.begin(), g.end());
  }
  return chunks;
}

/// The ScoreRequests of one chunk (with `pack`: pack set where packable).
std::vector<ScoreRequest> chunk_requests(const std::vector<size_t>& chunk, const std::vector<Request>& requests,
                                         bool pack) {
  std::vector<ScoreRequest> out;
  out.reserve(chunk.size());
  for (size_t i : chunk) {
    out.push_back(requests[i].score);
    out.back().pack = pack && packable(requests[i]);
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
  for (const auto& chunk : score_chunks(score_order, requests, score_chunk_size(batch_size), pack))
    for (const ScorePassShape& s : score_pass_shapes(chunk_requests(chunk, requests, pack), batch_size,
                                                     model.hparams().n_ctx_train))
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
