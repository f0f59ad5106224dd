// `kveval bench` test "mc": multiple-choice scoring (lm-eval's
// loglikelihood requests of multiple_choice documents) with the requests
// sharing prefixes packed into token tries against each scored alone.
#include <algorithm>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "bench/ctx.hpp"
#include "bench/stats.hpp"
#include "util/number_format.hpp"
#include "util/timer.hpp"

namespace kveval::bench {

McCounts mc_counts(const McShape& s, int row_tokens) {
  McCounts c;
  const int64_t D = s.docs, P = s.prefix, C = s.context, K = s.choices, L = s.choice_tokens;
  c.requests = D * K;
  c.requested = D * K * (P + C + L - 1);
  c.logit_rows_alone = D * K * L;
  // score()'s rows: the requests in token order (document by document, choice by choice), each row
  // taking the next while its trie holds at most row_tokens: the prefix once, each document's C
  // tokens once per row it reaches, each choice's L - 1 tokens before its last
  int64_t row = 0;  // tokens of the open row (0: none open)
  for (int64_t d = 0; d < D; ++d) {
    bool doc_in_row = false;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t add = (doc_in_row ? 0 : C) + (L - 1);
      if (row > 0 && row + add > row_tokens) {
        c.computed_shared += row;
        row = 0;
        doc_in_row = false;
      }
      if (!doc_in_row) ++c.logit_rows_shared;  // the context's last token, once per row
      const int64_t add_now = (row == 0 ? P : 0) + (doc_in_row ? 0 : C) + (L - 1);
      row += add_now;
      doc_in_row = true;
      c.logit_rows_shared += L - 1;
    }
  }
  c.computed_shared += row;
  return c;
}

std::vector<ScoreRequest> mc_requests(const Model& model, const McShape& s, uint64_t seed) {
  // distinct first tokens of each document's own part and of each choice (ids 3 + i, away from BOS/EOS in
  // synthetic_prompts' range), so that no two share more than the prefix by chance
  const int V = model.hparams().n_vocab;
  const std::vector<int32_t> prefix = synthetic_prompts(model, 1, s.prefix, seed)[0];
  std::vector<ScoreRequest> out;
  for (int d = 0; d < s.docs; ++d) {
    std::vector<int32_t> ctx = prefix;
    const auto own = synthetic_prompts(model, 1, s.context + 1, seed + 1 + static_cast<uint64_t>(d))[0];  // BOS first
    ctx.push_back(static_cast<int32_t>(3 + d % (V - 3)));
    ctx.insert(ctx.end(), own.begin() + 2, own.end());
    for (int k = 0; k < s.choices; ++k) {
      const auto ch = synthetic_prompts(model, 1, s.choice_tokens + 1, seed + 7919 * (d + 1) + static_cast<uint64_t>(k))[0];
      ScoreRequest r;
      r.tokens = ctx;
      r.tokens.push_back(static_cast<int32_t>(3 + k % (V - 3)));
      r.tokens.insert(r.tokens.end(), ch.begin() + 2, ch.end());
      r.score_from = static_cast<int>(ctx.size());
      r.pack = true;
      out.push_back(std::move(r));
    }
  }
  return out;
}

namespace detail {

void run_mc(Ctx& c, Steps steps) {
  drop_caches(c.context);
  if (steps.front().kind == Instance::Kind::Warning) {  // the context cannot hold a request
    c.warn(steps.front().warning);
    return;
  }
  const McShape& s = c.o.mc;
  const std::vector<ScoreRequest> reqs = mc_requests(c.model, s, c.o.seed + 29);
  const int n_ctx = c.model.hparams().n_ctx_train, row_tokens = std::min(kMcRowTokens, n_ctx);
  for (const Instance& step : steps) {
    const int b = step.batch;
    for (bool shared : {true, false}) {
      const ScoreOptions opts{shared, row_tokens};
      size_t acts = 0;
      for (const ScorePassShape& p : score_pass_shapes(reqs, b, n_ctx, opts))
        acts = std::max(acts, c.model.activation_bytes_for(p.rows, p.seq, false, p.tokens, p.logit_rows));
      const char* name = shared ? "packed" : "unpacked";
      if (!c.fits(fmt::format("mc {} batch {}", name, b), {{"activations", acts}})) continue;
      c.say(fmt::format("mc: {} {}, batch {}", count_of(reqs.size(), "request"), name, b));
      const ContextStats s0 = c.context.stats();
      score(c.context, reqs, b, opts);  // the warm-up, counted
      const ContextStats s1 = c.context.stats();
      std::vector<double> secs;
      for (int i = 0; i < c.o.repetitions; ++i) {
        Stopwatch sw;
        score(c.context, reqs, b, opts);
        secs.push_back(sw.seconds());
      }
      const McCounts n = mc_counts(s, row_tokens);
      const auto computed = static_cast<double>(s1.tokens_processed - s0.tokens_processed);
      Row r = c.row("mc", name);
      r.batch = b;
      r.unit = "tok/s";
      r.value = summarize(map_samples(secs, [&](double t) { return static_cast<double>(n.requested) / t; }));
      r.with("requests", static_cast<double>(reqs.size()))
          .with("tokens_requested", static_cast<double>(n.requested))
          .with("tokens_computed", computed)
          .with("logit_rows", static_cast<double>(s1.logit_rows - s0.logit_rows))
          .with("computed_tok_s", summarize(map_samples(secs, [&](double t) { return computed / t; })).median);
      c.rep.rows.push_back(r);
    }
  }
  c.note(fmt::format("mc: {} documents sharing a prefix of {} tokens, then {} own tokens each, {} choices of {} tokens "
                     "(kveval::score, rows of at most {} tokens); tok/s = the median over repetitions of tokens requested "
                     "(each request's own, all but its last) / that repetition's time, computed_tok_s likewise of "
                     "tokens_computed; packed shares prefixes in token tries, unpacked scores each request "
                     "alone (the same bits); tokens_computed and logit_rows as the forward passes count them.",
                     s.docs, s.prefix, s.context, s.choices, s.choice_tokens, row_tokens));
}

}  // namespace detail

}  // namespace kveval::bench
