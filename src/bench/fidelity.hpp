#pragma once
// `kveval bench --tests fidelity --spec SPEC`: the evaluation SPEC scored in
// f32 and in bf16 (eval/fidelity.hpp), reported as bench rows. Opt-in.
#include <functional>
#include <string>

#include "bench/report.hpp"
#include "bench/run.hpp"
#include "eval/spec.hpp"

namespace kveval::bench {

/// The spec fidelity scores: o.spec with the model o.model_path, read before
/// any test runs; its requests are built with the file's tokenizer alone
/// (eval::preview_requests). Throws ArgumentError naming --spec when o.spec is
/// empty or cannot be read, has no document, or every request fails before
/// scoring (too long for max_length); SpecError for a bad spec or a max_length
/// beyond the file's context_length; what reading the file's header and tokenizer throws.
eval::EvalSpec load_fidelity_spec(const Options& o);

/// fidelity: runs `spec` (load_fidelity_spec; `threads` threads) with --dtype
/// f32 and bf16 and adds rows of test
/// "fidelity": "max abs dlogprob" and "mean abs dlogprob" (nats per token, fields
/// tokens and requests) and one "flips <task> <metric>" row per task and 0/1
/// metric or greedy text (documents whose value differs; field "docs"
/// compared). Requests that failed in either run are left out, with a warning
/// giving their count and the first error; a spec with no loglikelihood or rolling
/// token compared gives no dlogprob rows (a warning). Throws ArgumentError
/// naming --spec when nothing at all was compared, and what Model::load and
/// run_eval throw.
void run_fidelity(const Options& o, eval::EvalSpec spec, int threads, Report& rep,
                  const std::function<void(const std::string&)>& say);

}  // namespace kveval::bench
