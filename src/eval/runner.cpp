#include "eval/runner.hpp"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "eval/aggregate.hpp"
#include "eval/score_chunks.hpp"
#include "model/cost.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"
#include "util/number_format.hpp"
#include "util/timer.hpp"

namespace kveval::eval {

namespace {

using detail::chunk_requests;
using detail::GenPlan;
using detail::plan_for;
using detail::plan_generation;
using detail::score_chunk_size;
using detail::score_chunks;
using detail::score_options;

/// Earliest position of any stop string in `text` at or after `from`, npos if none.
size_t find_stop(const std::string& text, const std::vector<std::string>& until, size_t from = 0) {
  size_t best = std::string::npos;
  for (const auto& s : until) {
    size_t p = text.find(s, from);
    if (p < best) best = p;
  }
  return best;
}

/// Incremental stop-string state of one generation row.
struct RowState {
  explicit RowState(const Tokenizer& tok) : detok(tok) {}
  IncrementalDetokenizer detok;
  std::string text;
  size_t consumed = 0;
  const std::vector<std::string>* until = nullptr;
  size_t longest_stop = 0;
};

void log_line(const RunOptions& o, const std::string& s) {
  if (o.log) o.log(s);
}

/// Keeps the indices this rank owns (all of them when `owner` is empty).
std::vector<size_t> mine(std::vector<size_t> order, const std::vector<int>& owner, int rank) {
  if (owner.empty()) return order;
  std::erase_if(order, [&](size_t i) { return owner[i] != rank; });
  return order;
}

/// "task 'x' doc 3 (data.jsonl:4) choice 2" for per-request errors.
std::string request_label(const EvalSpec& spec, const Request& r) {
  const TaskSpec& t = spec.tasks[static_cast<size_t>(r.task)];
  if (r.kind == RequestKind::PerplexityChunk)  // task-level: the documents joined, cut into chunks
    return fmt::format("task '{}' perplexity chunk {} (rolling_method llama.cpp)", t.name, r.index);
  std::string s = fmt::format("task '{}' doc {}", t.name, r.doc);
  if (static_cast<size_t>(r.doc) < t.docs.size() && !t.docs[static_cast<size_t>(r.doc)].origin.empty())
    s += fmt::format(" ({})", t.docs[static_cast<size_t>(r.doc)].origin);
  if (r.index >= 0)
    s += fmt::format(" {} {}",
                     r.kind == RequestKind::RollingWindow ? "window" : r.kind == RequestKind::Generate ? "repeat" : "choice",
                     r.index);
  return s;
}

/// Refuses (MemoryError, one line with the figures) a spec whose requests
/// cannot be built in the memory left: the kept token ids and the largest
/// tokenizer call (plan_requests), before any text is tokenized.
void check_requests_memory(const EvalSpec& spec, const Model& model, const RunOptions& opts, int max_length) {
  std::exception_ptr no_memory;
  try {
    const RequestsPlan rp = plan_requests(spec, max_length);
    const MemoryPart parts[] = {
        {"weights", model.weight_bytes(), true},
        {"token ids", rp.token_ids},
        {fmt::format("tokenizer (longest text {})", format_bytes(rp.longest_text)), rp.tokenizer}};
    check_memory_plan(fmt::format("building the requests of {}", spec.path), parts,
                      opts.memory_budget ? *opts.memory_budget : memory_budget(),
                      "shorten the longest documents: a text is tokenized whole before it is truncated to max_length");
  } catch (...) {
    if (!opts.shard.agree) throw;
    no_memory = std::current_exception();
  }
  if (opts.shard.agree) opts.shard.agree(no_memory);
}

/// The loglikelihood phase: scores this rank's requests cache-free in
/// canonical order (batches of batch_size), a row with non-finite logits
/// failing alone; no progress line when the run scores nothing. Throws
/// CacheError when caches are set up on entry.
void score_phase(const EvalSpec& spec, Context& ctx, const RunOptions& opts, const std::vector<int>& owner,
                 RunResult& res) {
  if (ctx.caches_are_setup())
    throw CacheError("loglikelihood phase: caches are set up; log-likelihood requests must run cache-free");
  if (opts.on_phase) opts.on_phase("loglikelihood");
  const std::vector<size_t> all = canonical_score_order(spec, res.requests);
  std::vector<size_t> order = mine(all, owner, res.rank);
  if (opts.progress && !all.empty()) opts.progress("loglikelihood", 0, order.size(), 0);  // no line when nothing scores
  const ContextStats s0 = ctx.stats();
  Stopwatch sw;
  int64_t tokens = 0;
  size_t done = 0;
  const ScoreOptions sopts = score_options(opts.pack_prefixes, res.max_length);
  const int n_ctx = ctx.model().hparams().n_ctx_train;
  for (const auto& chunk : score_chunks(order, res.requests, score_chunk_size(res.batch_size), n_ctx, sopts)) {
    const std::vector<ScoreRequest> batch = chunk_requests(chunk, res.requests);
    for (const ScoreRequest& r : batch) {
      tokens += static_cast<int64_t>(r.tokens.size());
      res.ll_tokens_requested += r.tokens.size() - 1;
    }
    std::vector<ScoreResult> out = score(ctx, batch, res.batch_size, sopts);
    if (out.size() != batch.size())
      throw Error(fmt::format("internal: score() returned {} results for {} requests", out.size(), batch.size()));
    for (size_t k = 0; k < chunk.size(); ++k) {
      const Request& r = res.requests[chunk[k]];
      const ScoreResult& sr = out[k];
      RequestOutcome& o = res.outcomes[chunk[k]];
      if (sr.nonfinite_at >= 0) {  // fails alone: the rest of the batch is unaffected (rows are independent)
        o.error = fmt::format("{}: non-finite logits (NaN or Inf) predicting token position {} of {} (BOS = 0); "
                              "the request is not scored",
                              request_label(spec, r), sr.nonfinite_at, r.score.tokens.size());
        continue;
      }
      size_t expect = r.score.tokens.size() - static_cast<size_t>(r.score.score_from);
      if (sr.logprobs.size() != expect || sr.is_greedy.size() != expect)
        throw Error(fmt::format("internal: score() returned {} log-probs for {} scored tokens", sr.logprobs.size(), expect));
      o.ran = true;
      o.logprob = sr.sum();
      for (double lp : sr.logprobs) o.logprob_sq += lp * lp;
      o.is_greedy = sr.all_greedy();
      o.tokens = static_cast<int>(expect);
    }
    done += chunk.size();
    if (opts.progress) opts.progress("loglikelihood", done, order.size(), tokens);
  }
  const ContextStats s1 = ctx.stats();
  res.ll_forward_calls = s1.forward_calls - s0.forward_calls;
  res.ll_forward_with_cache_setup = s1.forward_with_cache_setup - s0.forward_with_cache_setup;
  res.ll_forward_cached = s1.forward_cached - s0.forward_cached;
  res.ll_tokens_computed = s1.tokens_processed - s0.tokens_processed;
  res.ll_logit_rows = s1.logit_rows - s0.logit_rows;
  res.phases.push_back({"loglikelihood", sw.seconds(), tokens});
  if (res.ll_forward_with_cache_setup != 0 || res.ll_forward_cached != 0)
    throw Error(fmt::format("internal: {} log-likelihood forward passes ran with caches set up ({} cached)",
                            res.ll_forward_with_cache_setup, res.ll_forward_cached));
}

/// The rows of one generate_greedy call: prompts, the stop-string state of
/// each and the progress counters its callbacks update.
struct GenerationRows {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RowState> states;  ///< states[k] of prompts[k]
  size_t done = 0;               ///< generations finished
  int64_t done_tokens = 0;       ///< their prompt and generated tokens
};

/// The generation requests of `gen` (canonical order) as one generate_greedy
/// call over `batch` (filled here; it must outlive the options): their prompts,
/// token budgets and stop strings (checked incrementally by should_stop),
/// progress and batch callbacks.
GenerateOptions generation_options(const std::vector<size_t>& gen, const std::vector<Request>& requests,
                                   const RunOptions& opts, int rows, const Tokenizer& tok, GenerationRows& batch) {
  std::vector<std::vector<int32_t>>& prompts = batch.prompts;
  std::vector<RowState>& states = batch.states;
  prompts.reserve(gen.size());
  states.reserve(gen.size());
  GenerateOptions go;
  go.max_gen_toks.clear();
  go.stop_at_eos = true;
  go.batching = opts.batching;
  go.logprobs = false;  // the results use ids, texts and stop reasons only
  go.sampling.clear();
  for (size_t i : gen) {
    const Request& r = requests[i];
    prompts.push_back(r.prompt);
    go.max_gen_toks.push_back(r.max_gen_toks);
    go.sampling.push_back(r.sampling);
    // the global request index: draws independent of batching, schedule, threads and ranks
    go.sample_keys.push_back({i, static_cast<uint32_t>(std::max(r.index, 0))});
    states.emplace_back(tok);
    states.back().until = &r.until;
    for (const auto& s : r.until) states.back().longest_stop = std::max(states.back().longest_stop, s.size());
  }
  go.should_stop = [&states](int index, std::span<const int32_t> generated) {
    RowState& st = states.at(static_cast<size_t>(index));
    if (st.until->empty()) return false;
    size_t before = st.text.size();
    while (st.consumed < generated.size()) st.text += st.detok.push(generated[st.consumed++]);
    if (st.text.size() == before) return false;
    // only a match that ends in the new text can be new
    size_t from = before >= st.longest_stop ? before - st.longest_stop + 1 : 0;
    return find_stop(st.text, *st.until, from) != std::string::npos;
  };
  go.on_admit = [&opts, rows](size_t k) {
    if (opts.before_generation_batch && k % static_cast<size_t>(rows) == 0)
      opts.before_generation_batch(k / static_cast<size_t>(rows));
  };
  go.on_finish = [&opts, &batch, n = gen.size()](size_t, const Generation& g) {
    ++batch.done;
    batch.done_tokens += g.prompt_tokens + static_cast<int64_t>(g.ids.size());
    if (opts.progress) opts.progress("generation", batch.done, n, batch.done_tokens);
  };
  return go;
}

/// Records the generations `out` of the requests `gen` as their outcomes: the
/// detokenized text cut at the first stop string and the stop reason, or a
/// per-request error for a row whose logits became non-finite.
void record_generations(const EvalSpec& spec, const Tokenizer& tok, const std::vector<size_t>& gen,
                        std::vector<Generation>& out, RunResult& res) {
  for (size_t k = 0; k < gen.size(); ++k) {
    const Request& r = res.requests[gen[k]];
    Generation& g = out[k];
    RequestOutcome& o = res.outcomes[gen[k]];
    if (g.reason == StopReason::NonFinite) {  // stopped: its text is never scored
      // An f16 cache stores K/V values with |x| >= 65520 as Inf: say so when this row's did.
      const std::string overflow_hint =
          g.kv_f16_overflows == 0 ? std::string() : " (" + kv_f16_overflow_note(g.kv_f16_overflows) + ")";
      o.error = fmt::format("{}: non-finite logits (NaN or Inf) at token position {} (after {}); "
                            "generation stopped and the output is not scored{}",
                            request_label(spec, r), g.prompt_tokens + static_cast<int>(g.ids.size()),
                            count_of(g.ids.size(), "generated token"),
                            overflow_hint);
      continue;
    }
    o.ran = true;
    o.tokens = static_cast<int>(g.ids.size());
    IncrementalDetokenizer d(tok);
    std::string text;
    for (int32_t id : g.ids) text += d.push(id);
    text += d.flush();
    size_t cut = find_stop(text, r.until);
    if (cut != std::string::npos) {
      text.resize(cut);
      o.stop_reason = to_string(StopReason::StopString);
    } else {
      o.stop_reason = to_string(g.reason == StopReason::StopString ? StopReason::MaxTokens : g.reason);
    }
    o.output = std::move(text);
    o.output_ids = std::move(g.ids);
  }
}

/// The generate_until phase: requests with max_gen_toks 0 finish without a
/// forward pass; the others run in one KV-cache scope sized by plan_generation
/// (phases "cache setup", "prefill", "decode", "cache teardown", all zero when
/// nothing generates).
void generation_phase(const EvalSpec& spec, Context& ctx, const RunOptions& opts, const std::vector<int>& owner,
                      RunResult& res) {
  if (opts.on_phase) opts.on_phase("generation");
  std::vector<size_t> order = mine(canonical_generate_order(spec, res.requests), owner, res.rank);
  for (size_t i : order) {
    if (res.requests[i].max_gen_toks == 0) {  // nothing to generate: no forward pass, no cache row
      RequestOutcome& o = res.outcomes[i];
      o.ran = true;
      o.stop_reason = to_string(StopReason::MaxTokens);
    }
  }
  const GenPlan plan = plan_generation(order, res.requests, res.batch_size, res.max_length);
  const std::vector<size_t>& gen = plan.gen;
  res.cache_bytes_before = ctx.bytes();
  if (gen.empty()) {
    res.phases.push_back({"cache setup", 0, 0});
    res.phases.push_back({"prefill", 0, 0});
    res.phases.push_back({"decode", 0, 0});
    res.phases.push_back({"cache teardown", 0, 0});
    res.cache_bytes_after = ctx.bytes();
    return;
  }
  const int positions = plan.positions, rows = plan.rows;
  res.cache_rows = rows;
  res.cache_positions = positions;

  const Tokenizer& tok = ctx.model().tokenizer();
  GenerateTiming timing;
  Stopwatch sw_setup;
  std::optional<KvCacheScope> scope;
  scope.emplace(ctx, rows, positions, opts.cache_policy);
  double setup_s = sw_setup.seconds();
  res.cache_bytes_setup = ctx.bytes();
  res.phases.push_back({"cache setup", setup_s, 0});
  log_line(opts, fmt::format("generation cache: {} x {} = {} bytes (K+V, {})", count_of(rows, "row"),
                             count_of(positions, "position"),
                             res.cache_bytes_setup, to_string(ctx.kv_cache_dtype())));
  // One call over every generation request: with Batching::Dynamic a row that
  // ends is rewound and refilled with the next request while the others decode.
  GenerationRows batch;
  const GenerateOptions go = generation_options(gen, res.requests, opts, rows, tok, batch);
  std::vector<Generation> out = generate_greedy(ctx, batch.prompts, go, &timing);
  if (out.size() != batch.prompts.size())
    throw Error(fmt::format("internal: generate_greedy returned {} results for {} prompts", out.size(),
                            batch.prompts.size()));
  // decode steps as generate and bench's tg count them: each sequence's tokens but its first, whose logits the prefill gave
  int64_t steps = 0;
  for (const Generation& g : out) steps += std::max<int64_t>(0, static_cast<int64_t>(g.ids.size()) - 1);
  record_generations(spec, tok, gen, out, res);
  res.phases.push_back({"prefill", timing.prefill_seconds, timing.prefill_tokens});
  res.phases.push_back({"decode", timing.decode_seconds, steps});
  Stopwatch sw_down;
  scope.reset();
  res.phases.push_back({"cache teardown", sw_down.seconds(), 0});
  res.cache_bytes_after = ctx.bytes();
}

/// Distributed run: sends this rank's outcomes and phases to rank 0; on rank 0
/// merges them into `res` (outcomes of every request, phases as the slowest
/// rank's seconds and all ranks' tokens, counters summed).
void gather_ranks(const Shard& shard, const std::vector<int>& owner, RunResult& res) {
  RankReport mine_r;
  for (size_t i = 0; i < res.outcomes.size(); ++i)
    if (owner[i] == res.rank) mine_r.outcomes.emplace_back(i, res.outcomes[i]);
  mine_r.phases = res.phases;
  mine_r.ll_forward_calls = res.ll_forward_calls;
  mine_r.ll_forward_with_cache_setup = res.ll_forward_with_cache_setup;
  mine_r.ll_forward_cached = res.ll_forward_cached;
  mine_r.ll_tokens_requested = res.ll_tokens_requested;
  mine_r.ll_tokens_computed = res.ll_tokens_computed;
  mine_r.ll_logit_rows = res.ll_logit_rows;
  mine_r.cache_bytes_setup = res.cache_bytes_setup;
  std::vector<std::string> all = shard.gather(encode_rank_report(mine_r));
  res.hosts = shard.hosts;
  if (!res.is_root()) return;
  if (all.size() != static_cast<size_t>(shard.size))
    throw Error(fmt::format("internal: gathered {} rank reports for {} ranks", all.size(), shard.size));
  res.rank_phases.clear();
  res.ll_forward_calls = res.ll_forward_with_cache_setup = res.ll_forward_cached = 0;
  res.ll_tokens_requested = res.ll_tokens_computed = res.ll_logit_rows = 0;
  for (int r = 0; r < shard.size; ++r) {
    RankReport rep = decode_rank_report(all[static_cast<size_t>(r)]);
    for (auto& [i, o] : rep.outcomes) {
      if (i >= res.outcomes.size() || owner[i] != r)
        throw Error(fmt::format("internal: rank {} reported request {} it does not own", r, i));
      res.outcomes[i] = std::move(o);
    }
    res.ll_forward_calls += rep.ll_forward_calls;
    res.ll_forward_with_cache_setup += rep.ll_forward_with_cache_setup;
    res.ll_forward_cached += rep.ll_forward_cached;
    res.ll_tokens_requested += rep.ll_tokens_requested;
    res.ll_tokens_computed += rep.ll_tokens_computed;
    res.ll_logit_rows += rep.ll_logit_rows;
    res.rank_phases.push_back(std::move(rep.phases));
  }
  // wall seconds of a phase = the slowest rank's; tokens = all ranks'
  for (size_t p = 0; p < res.phases.size(); ++p) {
    double wall = 0;
    int64_t tokens = 0;
    for (const auto& ph : res.rank_phases) {
      if (p >= ph.size() || ph[p].name != res.phases[p].name)
        throw Error(fmt::format("internal: ranks disagree on phase {} ('{}')", p, res.phases[p].name));
      wall = std::max(wall, ph[p].seconds);
      tokens += ph[p].tokens;
    }
    res.phases[p].seconds = wall;
    // every rank loads the model and builds every request: those tokens count once
    if (res.phases[p].name != "load" && res.phases[p].name != "requests") res.phases[p].tokens = tokens;
  }
}

/// The model's facts, the shard and the resolved max_length in a new result
/// whose phases start with `phases`. Throws ArgumentError for an invalid shard,
/// SpecError for a max_length the model's context cannot hold.
RunResult start_result(const EvalSpec& spec, const Context& ctx, const RunOptions& opts, std::vector<Phase> phases) {
  const Model& model = ctx.model();
  RunResult res;
  res.phases = std::move(phases);
  res.rank = opts.shard.rank;
  res.n_ranks = opts.shard.size;
  if (res.n_ranks < 1 || res.rank < 0 || res.rank >= res.n_ranks || (res.n_ranks > 1 && !opts.shard.gather))
    throw ArgumentError(fmt::format("run_eval: invalid shard (rank {} of {})", res.rank, res.n_ranks));
  res.model_path = model.path();
  res.load = model.load_summary();
  res.model_sha256 = model.sha256();
  res.threads = model.threads();
  res.dtype = to_string(model.dtype());
  res.kv_cache_dtype = to_string(ctx.kv_cache_dtype());
  if (opts.log) opts.log(fmt::format("compute dtype {}; KV cache {}", model.dtype_note(), res.kv_cache_dtype));
  res.batch_size = spec.batch_size;
  res.max_length = run_max_length(spec, model.hparams().n_ctx_train);
  return res;
}

/// Phase "requests": tokenizes the spec into res.requests once its memory is
/// planned (every rank stops if one cannot), with the model's and the
/// requests' warnings, and one empty outcome per request.
void requests_phase(const EvalSpec& spec, const Model& model, const RunOptions& opts, RunResult& res) {
  check_requests_memory(spec, model, opts, res.max_length);
  Stopwatch sw;
  res.warnings = model.load_summary().warnings;  // the model file's own (gguf::File::warnings)
  res.requests = build_requests(spec, model.tokenizer(), res.max_length, &res.warnings);
  int64_t built_tokens = 0;
  for (const auto& r : res.requests) built_tokens += static_cast<int64_t>(r.score.tokens.size() + r.prompt.size());
  res.phases.push_back({"requests", sw.seconds(), built_tokens});
  for (const auto& w : res.warnings) log_line(opts, "warning: " + w);
  res.outcomes.assign(res.requests.size(), RequestOutcome{});
}

/// Refuses (MemoryError) this rank's share of the run when its KV cache and
/// activations do not fit the memory budget, before any forward pass (every
/// rank stops if one cannot); returns the plan checked. `budget`: the one reading of the memory available
/// that `--batch-size auto` also picks against, so the check agrees with the pick.
MemoryPlan check_run_memory(const EvalSpec& spec, const Context& ctx, const RunOptions& opts,
                            const std::vector<int>& owner, const RunResult& res, const MemoryBudget& budget) {
  std::exception_ptr no_memory;
  MemoryPlan mp;
  try {
    mp = plan_for(ctx.model(), res.requests,
                                   mine(canonical_score_order(spec, res.requests), owner, res.rank),
                                   mine(canonical_generate_order(spec, res.requests), owner, res.rank), res.batch_size,
                                   res.max_length, opts.pack_prefixes);
    const MemoryPart parts[] = {
        {"weights", mp.weights, true},
        {fmt::format("KV cache ({} x {})", count_of(mp.cache_rows, "row"), count_of(mp.cache_positions, "position")),
         mp.kv_cache},
        {fmt::format("activations (batch_size {})", res.batch_size), mp.activations}};
    check_memory_plan(fmt::format("the run of {}", spec.path), parts,
                      budget,
                      ctx.kv_cache_dtype() == KvCacheDtype::F32
                          ? "lower batch_size, max_length or max_gen_toks, or set kv_cache_dtype (--kv-cache-dtype) bf16 or f16 (half the KV cache)"
                          : "lower batch_size, max_length or max_gen_toks");
  } catch (...) {
    if (!opts.shard.agree) throw;
    no_memory = std::current_exception();
  }
  if (opts.shard.agree) opts.shard.agree(no_memory);
  return mp;
}

/// `--batch-size auto`: the largest batch_size up to kAutoBatchMax whose plan
/// (KV cache and activations of this rank's share) fits auto_batch_budget() of
/// `budget` (1 when none does: check_run_memory, given the same `budget`, then
/// says why); kAutoBatchMax when the budget is unknown. Logged with the bytes it plans.
int auto_batch_size(const Context& ctx, const EvalSpec& spec, const RunOptions& opts, const std::vector<int>& owner,
                    const RunResult& res, const MemoryBudget& budget) {
  const std::vector<size_t> score = mine(canonical_score_order(spec, res.requests), owner, res.rank),
                            gen = mine(canonical_generate_order(spec, res.requests), owner, res.rank);
  auto need = [&](int b) {
    const MemoryPlan mp = plan_for(ctx.model(), res.requests, score, gen, b, res.max_length, opts.pack_prefixes);
    return static_cast<uint64_t>(mp.kv_cache) + mp.activations;
  };
  int lo = 1;
  if (!budget.available) {
    lo = kAutoBatchMax;
  } else {
    const uint64_t room = auto_batch_budget(*budget.available);
    int hi = kAutoBatchMax;  // the plan grows with the batch: the largest that fits, by bisection
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (need(mid) <= room) lo = mid;
      else hi = mid - 1;
    }
  }
  log_line(opts, fmt::format("batch_size auto: {} ({} bytes of KV cache and activations; {}; at most {})", lo, need(lo),
                             budget.available ? fmt::format("{} of the {} bytes available ({})",
                                                            auto_batch_budget(*budget.available), *budget.available,
                                                            budget.source)
                                              : std::string("memory available unknown"),
                             kAutoBatchMax));
  return lo;
}

/// Records the peak RSS in `res` and logs it beside the plan: "memory: peak RSS
/// 1.2 GiB measured; planned 1.0 GiB = weights 762.8 MiB + KV cache 25.0 MiB +
/// activations 250.3 MiB (planned bytes count only once written; the
/// tokenizer, other engine buffers and the libraries are not planned)".
void log_memory(const RunOptions& opts, RunResult& res) {
  res.peak_rss = peak_rss_bytes();
  if (res.peak_rss == 0) return;
  const uint64_t planned = res.load.resident_bytes + res.planned_kv_cache + res.planned_activations;
  log_line(opts, fmt::format("memory: peak RSS {} measured; planned {} = weights {} + KV cache {} + activations {} "
                             "(planned bytes count only once written; the tokenizer, other engine buffers and the "
                             "libraries are not planned)",
                             format_bytes(res.peak_rss), format_bytes(planned), format_bytes(res.load.resident_bytes),
                             format_bytes(res.planned_kv_cache), format_bytes(res.planned_activations)));
}

/// The phases of a run: requests, the loglikelihood phase (cache-free), the
/// generation phase in its KV-cache scope, the ranks' gathering, the outcomes
/// and the metrics (rank 0).
RunResult run_eval_impl(const EvalSpec& spec, Context& ctx, const RunOptions& opts, std::vector<Phase> phases) {
  const Model& model = ctx.model();
  RunResult res = start_result(spec, ctx, opts, std::move(phases));
  requests_phase(spec, model, opts, res);
  std::vector<int> owner;
  if (res.n_ranks > 1) {
    const HParams& hp = model.hparams();
    owner = assign_requests(res.requests, res.n_ranks, matmul_params(hp), hp.n_layer, hp.n_embd);
  }
  // One reading of the memory available serves auto's pick and the check, so the check never refuses the pick.
  const MemoryBudget budget = opts.memory_budget ? *opts.memory_budget : memory_budget();
  if (spec.batch_size_auto) res.batch_size = auto_batch_size(ctx, spec, opts, owner, res, budget);
  const MemoryPlan mp = check_run_memory(spec, ctx, opts, owner, res, budget);
  res.planned_kv_cache = mp.kv_cache;
  res.planned_activations = mp.activations;
  score_phase(spec, ctx, opts, owner, res);
  generation_phase(spec, ctx, opts, owner, res);
  log_memory(opts, res);
  if (res.n_ranks > 1) {
    gather_ranks(opts.shard, owner, res);
    if (!res.is_root()) return res;
  }
  collect_outcomes(spec, res);
  compute_task_metrics(spec, res);
  return res;
}

}  // namespace

int run_max_length(const EvalSpec& spec, int n_ctx) {
  int max_length = n_ctx;
  if (spec.max_length) {
    if (n_ctx > 0 && *spec.max_length > n_ctx)
      throw SpecError(fmt::format("{}: {} exceeds the model's context_length {}", value_origin(spec, "max_length"),
                                  *spec.max_length, n_ctx));
    max_length = *spec.max_length;
  }
  if (max_length < 2)
    throw SpecError(fmt::format("{}: max_length: the model's context_length {} is too small; set max_length >= 2",
                                spec.path, max_length));
  return max_length;
}

MemoryPlan plan_memory(const EvalSpec& spec, const Model& model, const std::vector<Request>& requests, int batch_size,
                       int max_length) {
  return plan_for(model, requests, canonical_score_order(spec, requests), canonical_generate_order(spec, requests),
                  batch_size, max_length, true);
}

RunResult run_eval(const EvalSpec& spec, Context& ctx, const RunOptions& opts) {
  return run_eval_impl(spec, ctx, opts, {});
}

RunResult run_spec(const EvalSpec& spec, const RunOptions& opts) {
  Stopwatch sw;
  ModelOptions mo;
  mo.threads = spec.threads;
  mo.dtype = spec.dtype;
  mo.kv_cache_dtype = spec.kv_cache_dtype;
  mo.matmul = spec.matmul;
  mo.map_weights = spec.map_weights;
  mo.hash = opts.hash_model;
  mo.n_ctx = spec.max_length.value_or(0);  // LongRoPE's factor set follows the run's context
  std::unique_ptr<Model> model;
  std::exception_ptr failed;
  try {
    if (opts.on_phase) opts.on_phase("load");
    model = Model::load(spec.model, mo);
  } catch (...) {
    if (!opts.shard.agree) throw;
    failed = std::current_exception();
  }
  if (opts.shard.agree) opts.shard.agree(failed);  // every rank has its model, or all stop
  // every rank loaded the same bytes, or all stop before any work (the hash taken while loading)
  std::vector<InputFingerprint> agreed;
  if (opts.shard.same_inputs) {
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(spec.model, ec);
    const std::string sha = model->sha256().empty() ? sha256_file(spec.model) : model->sha256();
    agreed.push_back({"the model file", spec.model, ec ? 0 : size, sha});
    opts.shard.same_inputs(agreed);
  }
  double load_s = sw.seconds();
  if (opts.log) opts.log(format_load_summary(model->load_summary()));
  Context ctx(*model);
  RunResult res = run_eval_impl(spec, ctx, opts, {Phase{"load", load_s, 0}});
  res.agreed_inputs = std::move(agreed);
  return res;
}

}  // namespace kveval::eval
