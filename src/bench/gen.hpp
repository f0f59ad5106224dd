#pragma once
// `kveval bench --tests gen-mixed`: generation throughput of a batch of
// prompts whose output lengths spread over 1..256 tokens, scheduled over the
// KV-cache rows statically (a group decodes until its longest row ends) and
// dynamically (a finished row takes the next prompt at once). Opt-in test.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "bench/plan.hpp"
#include "bench/report.hpp"
#include "bench/run.hpp"
#include "model/context.hpp"
#include "model/model.hpp"

namespace kveval::bench {

/// The lengths of the gen-mixed workload (gen_mixed_workload without the
/// token ids): per prompt its length (uniform in 4..32) and max_gen_toks
/// (uniform in [1, max_gen], capped to fit `n_ctx`), drawn in turn from
/// mt19937_64(`seed`). Needs n_ctx >= 33 (not checked here).
struct GenMixedLengths {
  std::vector<int> prompt_lens;
  std::vector<int> max_gen_toks;
  int positions = 0;  ///< cache positions per row: the longest prompt + max_gen_toks
  int capped = 0;     ///< prompts whose drawn max_gen_toks was capped to fit n_ctx
  int64_t gen_tokens() const;
};
GenMixedLengths gen_mixed_lengths(int n, int max_gen, uint64_t seed, int n_ctx);

/// The gen-mixed workload: `n` prompts of 4..32 tokens (synthetic ids as
/// synthetic_prompts) and per prompt a max_gen_toks uniform in [1, max_gen]
/// (mt19937_64 from `seed`, in drawing order, not sorted), capped so that
/// prompt + max_gen_toks fits `n_ctx`. EOS does not stop, so every prompt
/// generates exactly its max_gen_toks. Throws ArgumentError for n < 1,
/// max_gen < 1 or n_ctx < 33.
struct GenMixedWorkload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> max_gen_toks;
  int positions = 0;  ///< cache positions per row: the longest prompt + max_gen_toks
  int capped = 0;     ///< prompts whose drawn max_gen_toks was capped to fit n_ctx
  int64_t gen_tokens() const;
};
GenMixedWorkload gen_mixed_workload(const Model& model, int n, int max_gen, uint64_t seed);

/// gen-mixed: for every Test step of `steps` (plan.hpp: its batch B, the
/// rows), o.gen_mixed_prompts prompts through generate_greedy in a B-row cache
/// (CachePolicy::Reuse, set up outside the timing), Batching::Static and
/// Dynamic interleaved, one warm-up each then o.repetitions timed runs. Rows
/// "static" and "dynamic" (tok/s = generated tokens / wall seconds of the call,
/// prefill included; fields: forward passes, identical outputs) and "speedup"
/// (dynamic / static medians, x). A cache that does not fit the memory budget
/// is skipped with a warning (Report::add_warning); the Warning steps (a
/// context below 33 positions, capped max_gen_toks) are added in turn.
/// Throws what generate_greedy throws.
void run_gen_mixed(const Options& o, Context& ctx, int threads, Report& rep,
                   const std::function<void(const std::string&)>& say, std::span<const Instance> steps);

}  // namespace kveval::bench
