// `kveval bench` tests without a KV cache: "roofline" (stream bandwidth and
// oneDNN sgemm at the model's shapes), "pp" (cache-free prompt forward) and
// "ll" (scoring throughput).
#include <algorithm>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "bench/ctx.hpp"
#include "bench/stats.hpp"
#include "util/error.hpp"
#include "util/memory.hpp"
#include "util/number_format.hpp"
#include "util/timer.hpp"

namespace kveval::bench::detail {

// ---- roofline -------------------------------------------------------------

void run_roofline(Ctx& c) {
  c.roofline = true;
  const size_t wanted = c.o.stream_bytes ? c.o.stream_bytes : backend::stream_buffer_bytes();
  const size_t llc = backend::last_level_cache_bytes(), mib = size_t{1} << 20;
  const size_t least = llc ? 4 * llc : 256 * mib;  // stream_buffer_bytes' margin over the cache
  const MemoryBudget budget = memory_budget();
  const size_t bytes = fit_stream_buffer(wanted, budget.available, least);
  if (bytes == 0) {
    c.fits("roofline stream read", {{"stream buffer", wanted}},
           fmt::format("a buffer that fits would be below {} MiB ({}), too small to measure memory rather than cache",
                       least >> 20, llc ? "4 x the last-level cache" : "the default when the last-level cache is unknown"),
           budget);
  } else {
    if (bytes < wanted)
      c.warn(fmt::format("roofline: stream buffer shrunk from {} MiB to {} MiB to fit the {} available ({}); still at "
                         "least {} MiB ({})",
                         wanted >> 20, bytes >> 20, format_bytes(*budget.available), budget.source, least >> 20,
                         llc ? "4 x the last-level cache" : "the default when the last-level cache is unknown"));
    c.say(fmt::format("roofline: stream read over {} MiB", bytes >> 20));
    c.stream = backend::stream_read_bandwidth(c.threads, bytes, std::max(3, c.o.repetitions));
    Row r = c.row("roofline", "stream read");
    r.unit = "GB/s";
    r.value = exact(c.stream->best_gb_per_s);
    r.with("median_GB_per_s", c.stream->median_gb_per_s).with("buffer_MiB", static_cast<double>(c.stream->buffer_bytes >> 20));
    c.rep.rows.push_back(r);
  }
  c.sgemm_at(1);
  c.note("roofline: 'stream read' is the best of the passes summing a float buffer larger than the last-level cache "
         "(1e9 bytes/s); 'sgemm m=M' is oneDNN f32 matmul over the model's weight shapes (7 per layer + output) "
         "with M rows, weights pre-reordered, median pass; both are measured again for each --dtype, just before "
         "its tests (the dtype in a roofline row names those tests; pp's frac_of_sgemm divides by it), and sgemm is "
         "f32 whatever the dtype; tg's frac_of_stream divides by a stream read over a buffer of the same size taken "
         "just before each of its repetitions (see tg).");
}

// ---- pp ---------------------------------------------------------------------

void run_pp(Ctx& c, Steps steps) {
  drop_caches(c.context);
  const int64_t V = c.hp.n_vocab;
  bool frac = false;  // some row has frac_of_sgemm (the roofline ran and its sgemm fit): the note explains it
  for (const Instance& step : steps) {
    if (step.kind == Instance::Kind::Warning) {
      c.warn(step.warning);
      continue;
    }
    const int b = step.batch, p = step.n_prompt;
    const size_t tokens_bv = static_cast<size_t>(b) * static_cast<size_t>(p) * static_cast<size_t>(V);
    if (!c.fits(fmt::format("pp{} batch {}", p, b),
                {{"logits", sizeof(float) * tokens_bv}, {"activations", c.model.activation_bytes_for(b, p, true)}}))
      continue;
    c.say(fmt::format("pp{} batch {}", p, b));
    const auto prompts = synthetic_prompts(c.model, b, p, c.o.seed);
    std::vector<int32_t> tokens;
    for (const auto& pr : prompts) tokens.insert(tokens.end(), pr.begin(), pr.end());
    std::vector<int> n_tokens(static_cast<size_t>(b), p);
    std::vector<float> logits(static_cast<size_t>(b) * static_cast<size_t>(p) * static_cast<size_t>(V));
    const auto secs = repeat(c.o.repetitions, [&] {
      Stopwatch sw;
      c.context.forward(tokens, b, p, n_tokens, Context::Logits::All, logits);
      return sw.seconds();
    });
    const double tok = static_cast<double>(b) * p;
    Row r = c.row("pp", fmt::format("pp{}", p));
    r.batch = b;
    r.n_prompt = p;
    r.unit = "tok/s";
    r.value = summarize(map_samples(secs, [&](double s) { return tok / s; }));
    const double flops = prompt_flops(c.hp, p, b);
    const double gflops = flops / median(secs) / 1e9;
    r.with("GFLOP_per_s", gflops);
    if (c.roofline) {  // compare with sgemm at the same M (when its matrices fit)
      if (const auto* g = c.sgemm_at(static_cast<int64_t>(b) * p)) {
        r.with("sgemm_GFLOP_per_s", g->gflops).with("frac_of_sgemm", gflops / g->gflops);
        frac = true;
      }
    }
    c.rep.rows.push_back(r);
    // The same prompts with logits at the last position only: what llama-bench's
    // pp measures (llama_batch_get_one leaves batch.logits null, so llama_decode
    // outputs only the last token), the prefill before generation.
    const auto secs_last = repeat(c.o.repetitions, [&] {
      Stopwatch sw;
      c.context.forward(tokens, b, p, n_tokens, Context::Logits::Last, logits);
      return sw.seconds();
    });
    Row rl = c.row("pp", fmt::format("pp{} last", p));
    rl.batch = b;
    rl.n_prompt = p;
    rl.unit = "tok/s";
    rl.value = summarize(map_samples(secs_last, [&](double s) { return tok / s; }));
    const double flops_last = flops - static_cast<double>(b) * (p - 1) * output_matmul_flops_per_token(c.hp);
    rl.with("GFLOP_per_s", flops_last / median(secs_last) / 1e9);
    c.rep.rows.push_back(rl);
  }
  c.note(fmt::format(
      "pp: logits at every position (scoring); 'ppP last': logits at the last position only, as llama-bench's "
      "pp (prefill). GFLOP/s counts 2*M*N*K per weight matrix (7 per layer and the output layer at every position) plus "
      "causal attention 2*2*(P^2/2)*n_embd per layer and row (QK^T and PV over the lower triangle; softmax, "
      "norms and RoPE not counted; the output layer only at the last position for 'last'){}.",
      frac ? "; frac_of_sgemm divides by oneDNN sgemm at the same shapes and M = batch*P (weight matmuls only)" : ""));
}

// ---- ll -----------------------------------------------------------------------

void run_ll(Ctx& c, Steps steps) {
  drop_caches(c.context);
  if (steps.front().kind == Instance::Kind::Warning) {  // the context cannot hold a request
    c.warn(steps.front().warning);
    return;
  }
  std::mt19937_64 rng(c.o.seed + 17);
  const int lo = std::min(32, c.hp.n_ctx_train), hi = std::min(160, c.hp.n_ctx_train);
  std::uniform_int_distribution<int> len(lo, hi);
  std::vector<ScoreRequest> reqs;
  double tokens = 0, scored = 0;
  for (int i = 0; i < c.o.ll_requests; ++i) {
    const int n = len(rng);
    ScoreRequest r;
    r.tokens = synthetic_prompts(c.model, 1, n, c.o.seed + 1000 + static_cast<uint64_t>(i))[0];
    r.score_from = std::max(1, n - std::max(1, n / 4));  // context 3/4, continuation 1/4
    tokens += n;
    scored += n - r.score_from;
    reqs.push_back(std::move(r));
  }
  for (const Instance& step : steps) {
    const int b = step.batch;
    // score()'s largest pass: its rows' tokens and the logits of their scored positions
    size_t acts = 0;
    for (const ScorePassShape& s : score_pass_shapes(reqs, b, c.model.hparams().n_ctx_train))
      acts = std::max(acts, c.model.activation_bytes_for(s.rows, s.seq, false, s.tokens, s.logit_rows));
    if (!c.fits(fmt::format("ll batch {}", b), {{"activations", acts}})) continue;
    c.say(fmt::format("ll: {}, batch {}", count_of(reqs.size(), "request"), b));
    const auto secs = repeat(c.o.repetitions, [&] {
      Stopwatch sw;
      score(c.context, reqs, b);
      return sw.seconds();
    });
    Row r = c.row("ll", "score");
    r.batch = b;
    r.unit = "req/s";
    r.value = summarize(map_samples(secs, [&](double s) { return reqs.size() / s; }));
    r.with("tok_s", tokens / median(secs)).with("scored_tok_s", scored / median(secs)).with("requests", static_cast<double>(reqs.size()));
    c.rep.rows.push_back(r);
  }
  c.note(fmt::format("ll: {} synthetic requests of {}..{} tokens (last quarter scored), kveval::score in batches; "
                     "tok_s counts every token forwarded.",
                     c.o.ll_requests, lo, hi));
}

}  // namespace kveval::bench::detail
