#pragma once
// The zero-cost check of a warm decode step, shared by the dtype suites.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "model/context.hpp"
#include "model/model.hpp"

namespace kveval::test {

/// Warms `m` (a KV cache scope must be open, rows >= prompts) with 3 greedy
/// tokens per prompt, then generates 40 more and checks that those steps
/// created no oneDNN primitive and allocated no engine or context buffer.
inline void check_warm_decode(Context& m, const std::vector<std::vector<int32_t>>& prompts) {
  GenerateOptions go;
  go.max_gen_toks = {3};
  go.stop_at_eos = false;
  go.logprobs = false;
  generate_greedy(m, prompts, go);  // warm-up: prefill and decode shapes
  const auto p0 = m.model().primitives_created(), a0 = m.model().backend_allocations(), b0 = m.stats().buffer_allocations;
  const auto steps0 = m.stats().forward_calls;
  go.max_gen_toks = {40};
  generate_greedy(m, prompts, go);
  CHECK(m.stats().forward_calls - steps0 >= 40);
  CHECK(m.model().primitives_created() == p0);
  CHECK(m.model().backend_allocations() == a0);
  CHECK(m.stats().buffer_allocations == b0);
}

}  // namespace kveval::test
