#pragma once
// How the runner cuts its scoring requests into score() calls (score()'s
// rows kept whole) and the memory plan of those calls and of generation.
// Internal to the runner (runner.cpp); tests reach it through plan_memory().
#include <cstddef>
#include <vector>

#include "eval/requests.hpp"
#include "eval/runner.hpp"
#include "model/context.hpp"

namespace kveval::eval::detail {

/// The requests of `order` (canonical generation order) that generate
/// (max_gen_toks > 0), and the cache shape they need.
struct GenPlan {
  std::vector<size_t> gen;
  int rows = 0, positions = 0;
};
GenPlan plan_generation(const std::vector<size_t>& order, const std::vector<Request>& requests, int batch_size,
                        int max_length);

/// True for a request score() scores as a token tree (ScoreRequest::pack).
bool packable(const Request& r);
/// score()'s options for the runner: prefixes shared when `pack`, rows of at most min(max_length, 1024)
/// tokens and 128 scored tokens (score_chunks.cpp says why).
ScoreOptions score_options(bool pack, int max_length);
/// The scoring requests of `order` cut into the chunks handed to score(), on a
/// model of context length n_ctx (see score_chunks.cpp).
std::vector<std::vector<size_t>> score_chunks(const std::vector<size_t>& order, const std::vector<Request>& requests,
                                              size_t chunk, int n_ctx, const ScoreOptions& opts);
/// The ScoreRequests of one chunk.
std::vector<ScoreRequest> chunk_requests(const std::vector<size_t>& chunk, const std::vector<Request>& requests);
/// Requests score_phase hands to one score() call (a multiple of batch_size).
size_t score_chunk_size(int batch_size);
/// The memory plan of the scoring requests `score_order` and the generation requests `gen_order`.
MemoryPlan plan_for(const Model& model, const std::vector<Request>& requests, const std::vector<size_t>& score_order,
                    const std::vector<size_t>& gen_order, int batch_size, int max_length, bool pack);

}  // namespace kveval::eval::detail
