#pragma once
// What running a request produced, and the timed phases of a run: the data
// the runner fills, ranks exchange (eval/shard.hpp) and reports format.
#include <cstdint>
#include <string>
#include <vector>

namespace kveval::eval {

/// One timed phase: wall seconds and tokens processed (0 where tokens do not apply).
struct Phase {
  std::string name;     ///< "load", "requests", "loglikelihood", "cache setup", "prefill", "decode", "cache teardown"
  double seconds = 0;
  int64_t tokens = 0;
};

/// What one request produced.
struct RequestOutcome {
  bool ran = false;                 ///< false: per-request error (Request::error or `error`) or not reached
  double logprob = 0;               ///< scoring: summed log-prob of the scored tokens (nats)
  double logprob_sq = 0;            ///< scoring: summed squared log-probs (for llama.cpp's "+/-")
  bool is_greedy = false;           ///< scoring: every scored token was the argmax
  int tokens = 0;                   ///< scoring: tokens scored; generation: tokens generated (EOS included)
  std::vector<int32_t> output_ids;  ///< generation: generated ids
  std::string output;               ///< generation: decoded text cut before the first stop string
  std::string stop_reason;          ///< generation: "until", "max_gen_toks", "eos" or "context full"
  /// A failure while running (non-finite logits), naming task, doc and token
  /// position; `ran` is then false. The runner copies it to Request::error.
  std::string error;
};

}  // namespace kveval::eval
