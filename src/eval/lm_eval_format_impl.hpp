#pragma once
// Internals shared by the results file (lm_eval_format.cpp) and the samples
// file (lm_eval_samples.cpp). Not part of the eval layer's interface.
#include <nlohmann/json.hpp>

#include "eval/spec.hpp"

namespace kveval::eval::detail {

/// lm-eval's name of "no filter" (the `filter` of a sample, the `,none` of a results key).
inline constexpr const char* kNoFilter = "none";

/// A task's generation_kwargs as lm-eval logs them (TaskConfig, a sample's
/// arguments): until, max_gen_toks, do_sample, and with do_sample the sampling keys and seed.
nlohmann::ordered_json generation_kwargs_json(const GenerationKwargs& g);

}  // namespace kveval::eval::detail
