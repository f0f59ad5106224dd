#pragma once
// Spreading one evaluation over several processes ("ranks"): which rank runs
// which request (balanced by token cost), and the byte format in which ranks
// send their outcomes and phase timings to rank 0. The transport (MPI) lives in
// the CLI layer; this module only sees the callbacks of a Shard, so it is
// tested without MPI by running the ranks one after another in one process.
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "eval/outcome.hpp"
#include "eval/requests.hpp"

namespace kveval::eval {

/// One input file as this rank read it: the spec, a data file, the model.
struct InputFingerprint {
  std::string what;    ///< for messages: "the spec file", "dataset_path of task 'x'", "the model file"
  std::string path;    ///< as given (relative paths resolve per rank)
  uint64_t size = 0;   ///< bytes
  std::string sha256;  ///< of the file's bytes (the model's: taken while loading, Model::sha256())
};

/// This process's place in a distributed run. size 1 (the default) is a plain run.
struct Shard {
  int rank = 0;  ///< 0 .. size-1; rank 0 gathers, computes the metrics and writes the reports
  int size = 1;  ///< number of ranks
  /// Collective: every rank passes its byte string; rank 0 receives all of them
  /// in rank order (its own first), other ranks receive an empty vector.
  std::function<std::vector<std::string>(const std::string& mine)> gather;
  /// Collective checkpoint: every rank passes what it caught since the last one
  /// (nullptr when it succeeded). When any rank failed, it throws on every rank
  /// (the failing rank's error names it and its host); otherwise it returns.
  std::function<void(std::exception_ptr)> agree;
  /// Collective: every rank passes the fingerprints of the same inputs, in the
  /// same order. When any rank's differ from rank 0's, it throws on every rank
  /// (the lowest such rank's SpecError names it, its host, the file and both
  /// hashes); otherwise it returns. Unset in a one-rank run.
  std::function<void(const std::vector<InputFingerprint>&)> same_inputs;
  /// Host name of each rank (for the results), filled by the transport; may be empty.
  std::vector<std::string> hosts;
};

/// Relative cost of one forward pass over `n` positions of a model with
/// `matmul_params` weights in its matrix products and `n_layer` layers of width
/// `n_embd`: 2·P·n multiply-adds for the products plus 2·n_layer·n_embd·n² for
/// attention's two causal products (each about n²/2 dot products of n_embd).
/// Units: floating-point operations (an estimate, used only to balance work).
double forward_cost(int64_t n, double matmul_params, int n_layer, int n_embd);

/// Longest-processing-time assignment: items sorted by cost (descending, index
/// ascending on ties) each go to the rank with the least total so far (lowest
/// rank on ties). Deterministic. Returns owner[i] in [0, size) for each item.
/// Throws ArgumentError for size < 1 or a negative / non-finite cost.
std::vector<int> balance_by_cost(const std::vector<double>& costs, int size);

/// owner[i] for every request: scoring requests and generation requests are
/// balanced separately (each phase ends with every rank done), by forward_cost
/// of the positions each runs (scoring: tokens - 1; generation: prompt +
/// max_gen_toks). Requests that do not run (errors) belong to rank 0.
std::vector<int> assign_requests(const std::vector<Request>& reqs, int size, double matmul_params, int n_layer,
                                 int n_embd);

/// What one rank sends to rank 0: the outcomes of the requests it ran, its
/// phases and its log-likelihood instrumentation counters.
struct RankReport {
  std::vector<std::pair<size_t, RequestOutcome>> outcomes;  ///< (request index, outcome)
  std::vector<Phase> phases;
  uint64_t ll_forward_calls = 0, ll_forward_with_cache_setup = 0, ll_forward_cached = 0;
  uint64_t ll_tokens_requested = 0, ll_tokens_computed = 0, ll_logit_rows = 0;
  size_t cache_bytes_setup = 0;  ///< bytes of this rank's generation cache
};

/// Little-endian byte encoding of a RankReport; doubles travel as their 64 bits
/// (exact). decode throws Error("internal: ...") on a malformed buffer.
std::string encode_rank_report(const RankReport& r);
RankReport decode_rank_report(const std::string& bytes);

}  // namespace kveval::eval
