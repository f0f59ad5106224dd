#pragma once
// Internal to src/eval: the generation keys of a task (generation_kwargs,
// repeats, the selection filters) and lm-eval's `--gen_kwargs` argument.
#include <string>

#include <nlohmann/json.hpp>

#include "eval/spec.hpp"
#include "eval/spec_check.hpp"

namespace kveval::eval {

/// generation_kwargs of task entry `tj` (generate_until tasks only), then the
/// spec's gen_kwargs override (named "--gen-kwargs" in messages): until,
/// max_gen_toks (fits max_length), do_sample, temperature (>= 0), top_k (>= 0),
/// top_p in (0, 1], min_p in [0, 1], seed (default: the spec's seed). Without
/// `until` a generate_until task stops at its fewshot_delimiter (lm-eval,
/// lm_eval/config/task.py). Throws SpecError naming the key.
void parse_generation_kwargs(const json& tj, const Where& w, const EvalSpec& spec, TaskSpec& t);

/// `repeats` (lm-eval's task key): an integer >= 1; above 1 only on generate_until tasks.
void parse_repeats(const json& tj, const Where& w, TaskSpec& t);

/// Whether `function` is one of lm-eval's selection filters (filters/selection.py):
/// take_first, take_first_k (key `k` >= 1), majority_vote; parses its keys into `fs`.
bool parse_selection_step(const json& st, const Where& sw, FilterStep& fs);

}  // namespace kveval::eval
