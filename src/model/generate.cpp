// Generation (greedy or seeded sampling) on top of Context::forward (scoring: score.cpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "model/context.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace kveval {

namespace {

int max_toks_for(const GenerateOptions& opts, size_t row) {
  if (opts.max_gen_toks.empty()) throw ArgumentError("generate: max_gen_toks is empty");
  const int m = opts.max_gen_toks.size() == 1 ? opts.max_gen_toks[0] : opts.max_gen_toks.at(row);
  if (m < 0) throw ArgumentError(fmt::format("generate: max_gen_toks {} for row {} is negative", m, row));
  return m;
}

const SamplingParams& sampling_for(const GenerateOptions& opts, size_t i) {
  return opts.sampling.size() == 1 ? opts.sampling[0] : opts.sampling.at(i);
}

SampleKey sample_key_for(const GenerateOptions& opts, size_t i) {
  return opts.sample_keys.empty() ? SampleKey{i, 0} : opts.sample_keys.at(i);
}

void check_prompts(const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& opts) {
  if (opts.max_gen_toks.size() != 1 && opts.max_gen_toks.size() != prompts.size())
    throw ArgumentError(fmt::format("generate: {} max_gen_toks values for {} prompts", opts.max_gen_toks.size(),
                                    prompts.size()));
  if (opts.sampling.size() != 1 && opts.sampling.size() != prompts.size())
    throw ArgumentError(fmt::format("generate: {} sampling values for {} prompts", opts.sampling.size(), prompts.size()));
  if (!opts.sample_keys.empty() && opts.sample_keys.size() != prompts.size())
    throw ArgumentError(fmt::format("generate: {} sample keys for {} prompts", opts.sample_keys.size(), prompts.size()));
  for (const SamplingParams& p : opts.sampling)
    if (!(p.temperature >= 0) || p.top_k < 0 || !(p.top_p > 0 && p.top_p <= 1) || !(p.min_p >= 0 && p.min_p <= 1))
      throw ArgumentError(fmt::format("generate: sampling parameters out of range (temperature {} >= 0, top_k {} >= 0, "
                                      "top_p {} in (0, 1], min_p {} in [0, 1])",
                                      p.temperature, p.top_k, p.top_p, p.min_p));
  for (size_t i = 0; i < prompts.size(); ++i)
    if (prompts[i].empty()) throw ArgumentError(fmt::format("generate: prompt {} is empty (it needs at least BOS)", i));
}

/// Chooses the token of prompt `i` from its next-token `logits` [V] (the
/// argmax, or a seeded sample by opts.sampling), records it in `g` and decides
/// whether the prompt stops (sets g.reason); returns true when it does.
/// Non-finite logits stop it with StopReason::NonFinite and no token.
bool take_token(const Tokenizer& tok, const GenerateOptions& opts, size_t i, std::span<const float> logits,
                int capacity, Generation& g, GenerateTiming* timing) {
  // One vectorisable pass: the largest logit, and whether any is NaN or Inf
  // (v - v is NaN exactly for those); then the first index holding it (the
  // same token as argmax()).
  const float* p = logits.data();
  const int64_t n = static_cast<int64_t>(logits.size());
  float mx = -std::numeric_limits<float>::max();
  int bad = 0;
#pragma omp simd reduction(max : mx) reduction(| : bad)
  for (int64_t k = 0; k < n; ++k) {
    mx = std::max(mx, p[k]);
    bad |= (p[k] - p[k] != 0.0f) ? 1 : 0;
  }
  const bool finite = bad == 0;
  int32_t t = 0;
  if (finite) {
    const SamplingParams& sp = sampling_for(opts, i);
    if (sp.greedy()) {
      t = static_cast<int32_t>(std::find(p, p + n, mx) - p);
    } else {
      thread_local SamplingScratch scratch;
      const SampleKey key = sample_key_for(opts, i);
      t = sample_token(logits, sp, sample_uniform(sp.seed, key.request, key.repeat, static_cast<uint32_t>(g.ids.size())),
                       scratch);
    }
  }
  const double lp = finite && opts.logprobs ? token_logprob(logits, t) : 0.0;
  if (!finite) {
    g.reason = StopReason::NonFinite;
    return true;
  }
  g.ids.push_back(t);
  if (opts.logprobs) g.logprobs.push_back(lp);
  if (timing) ++timing->decode_tokens;
  const int produced = static_cast<int>(g.ids.size());
  if (opts.stop_at_eos && tok.is_eog(t)) g.reason = StopReason::Eos;  // EOS or EOT
  else if (opts.should_stop && opts.should_stop(static_cast<int>(i), g.ids)) g.reason = StopReason::StopString;
  else if (produced >= max_toks_for(opts, i)) g.reason = StopReason::MaxTokens;
  else if (g.prompt_tokens + produced >= capacity) g.reason = StopReason::ContextFull;
  else return false;
  return true;
}

// Shared decode loop (uncached generation). `step(live_rows, last_tokens, logits)` computes, for each
// row, the logits of the next token ([n_rows, V]); rows not live are skipped.
template <class Prefill, class Step>
std::vector<Generation> decode_loop(const Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                    const GenerateOptions& opts, int capacity, GenerateTiming* timing,
                                    Prefill&& prefill, Step&& step) {
  check_prompts(prompts, opts);
  const size_t n = prompts.size();
  const size_t V = static_cast<size_t>(model.hparams().n_vocab);
  const Tokenizer& tok = model.tokenizer();
  std::vector<Generation> gens(n);
  std::vector<uint8_t> live(n, 0);
  size_t n_live = 0;
  for (size_t r = 0; r < n; ++r) {
    gens[r].prompt_tokens = static_cast<int>(prompts[r].size());
    if (static_cast<int>(prompts[r].size()) > capacity)
      throw CacheError(fmt::format("generate: prompt {} has {} tokens but the context holds {}; set up caches with "
                                   "max_seq_len >= {}",
                                   r, prompts[r].size(), capacity, prompts[r].size()));
    if (max_toks_for(opts, r) == 0) {
      gens[r].reason = StopReason::MaxTokens;
      if (opts.on_finish) opts.on_finish(r, gens[r]);
    } else if (static_cast<int>(prompts[r].size()) >= capacity) {
      gens[r].reason = StopReason::ContextFull;
      if (opts.on_finish) opts.on_finish(r, gens[r]);
    } else {
      live[r] = 1;
      ++n_live;
    }
  }
  if (n_live == 0) return gens;
  for (size_t r = 0; r < n; ++r) {  // no reallocation while decoding
    const size_t most = static_cast<size_t>(std::min(max_toks_for(opts, r), capacity - gens[r].prompt_tokens));
    gens[r].ids.reserve(most);
    gens[r].logprobs.reserve(most);
  }
  std::vector<float> logits(n * V);
  Stopwatch sw;
  prefill(live, logits);
  if (timing) {
    ++timing->forward_passes;
    timing->prefill_seconds += sw.seconds();
    for (size_t r = 0; r < n; ++r)
      if (live[r]) timing->prefill_tokens += static_cast<int64_t>(prompts[r].size());
  }
  sw.reset();
  while (true) {
    // Choose and record one token per live row, then decide who stops.
    for (size_t r = 0; r < n; ++r) {
      if (!live[r]) continue;
      if (take_token(tok, opts, r, std::span<const float>(logits.data() + r * V, V), capacity, gens[r], timing)) {
        live[r] = 0;
        --n_live;
        if (opts.on_finish) opts.on_finish(r, gens[r]);
      }
    }
    if (n_live == 0) break;
    step(live, gens, logits);
    if (timing) ++timing->forward_passes;
  }
  if (timing) timing->decode_seconds += sw.seconds();
  return gens;
}

/// The longest prompt (at least 1); throws CacheError for a prompt longer than `capacity`.
size_t longest_prompt(const std::vector<std::vector<int32_t>>& prompts, int capacity) {
  size_t longest = 1;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (static_cast<int>(prompts[i].size()) > capacity)
      throw CacheError(fmt::format("generate: prompt {} has {} tokens but the context holds {}; set up caches with "
                                   "max_seq_len >= {}",
                                   i, prompts[i].size(), capacity, prompts[i].size()));
    longest = std::max(longest, prompts[i].size());
  }
  return longest;
}

/// One empty Generation per prompt, its ids (and log-probs) reserved for the
/// most tokens it can produce: no reallocation while decoding.
std::vector<Generation> new_generations(const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& opts,
                                        int capacity) {
  std::vector<Generation> gens(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    gens[i].prompt_tokens = static_cast<int>(prompts[i].size());
    const size_t most = static_cast<size_t>(std::max(0, std::min(max_toks_for(opts, i), capacity - gens[i].prompt_tokens)));
    gens[i].ids.reserve(most);
    if (opts.logprobs) gens[i].logprobs.reserve(most);
  }
  return gens;
}

/// The cache rows of a cached greedy generation and the prompts they serve:
/// each round takes a token for the rows with new logits, admits waiting
/// prompts into free rows and runs one forward pass.
class RowScheduler {
 public:
  RowScheduler(Context& ctx, const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& opts,
               GenerateTiming* timing, std::vector<Generation>& gens, size_t longest)
      : ctx_(ctx), prompts_(prompts), opts_(opts), timing_(timing), gens_(gens), tok_(ctx.model().tokenizer()),
        capacity_(ctx.capacity()),
        rows_(static_cast<int>(std::min(prompts.size(), static_cast<size_t>(ctx.cache_batch_size())))),
        R_(static_cast<size_t>(rows_)), V_(static_cast<size_t>(ctx.model().hparams().n_vocab)),
        slot_(R_, -1), fresh_(R_, 0), prefill_(R_, 0), logits_(R_ * V_), n_tokens_(R_, 0) {
    tokens_.reserve(R_ * longest);
  }

  /// Rows serving a prompt.
  int busy() const { return busy_; }

  /// Chooses a token for every row whose logits are new; frees the rows that stop.
  void take_tokens() {
    for (size_t r = 0; r < R_; ++r) {
      if (!fresh_[r]) continue;
      fresh_[r] = 0;
      const size_t i = static_cast<size_t>(slot_[r]);
      if (take_token(tok_, opts_, i, std::span<const float>(logits_.data() + r * V_, V_), capacity_, gens_[i], timing_)) {
        if (gens_[i].reason == StopReason::NonFinite) gens_[i].kv_f16_overflows = ctx_.kv_f16_overflows(static_cast<int>(r));
        slot_[r] = -1;
        --busy_;
        finish(i);
      }
    }
  }

  /// Admits waiting prompts into the free rows (each row reset first); a
  /// prompt with nothing to generate or no room finishes without a row.
  void admit() {
    for (size_t r = 0; r < R_; ++r) {
      while (slot_[r] < 0 && next_ < prompts_.size()) {
        const size_t i = next_++;
        if (opts_.on_admit) opts_.on_admit(i);
        if (max_toks_for(opts_, i) == 0) {
          gens_[i].reason = StopReason::MaxTokens;
          finish(i);
        } else if (gens_[i].prompt_tokens >= capacity_) {
          gens_[i].reason = StopReason::ContextFull;
          finish(i);
        } else {
          ctx_.reset_cache_row(static_cast<int>(r));  // torchtune-style per-row reset: n_past(r) = 0
          slot_[r] = static_cast<ptrdiff_t>(i);
          prefill_[r] = 1;
          ++busy_;
        }
      }
    }
  }

  /// One forward pass: new rows take their prompt, the others their last
  /// token. Returns the prompt tokens' share of its seconds.
  double forward_pass() {
    int seq = 1;
    for (size_t r = 0; r < R_; ++r)
      if (prefill_[r]) seq = std::max(seq, gens_[static_cast<size_t>(slot_[r])].prompt_tokens);
    tokens_.assign(R_ * static_cast<size_t>(seq), 0);
    int64_t pt = 0, dt = 0;
    for (size_t r = 0; r < R_; ++r) {
      n_tokens_[r] = 0;
      if (slot_[r] < 0) continue;
      const size_t i = static_cast<size_t>(slot_[r]);
      if (prefill_[r]) {
        std::copy(prompts_[i].begin(), prompts_[i].end(), tokens_.begin() + static_cast<ptrdiff_t>(r * static_cast<size_t>(seq)));
        n_tokens_[r] = gens_[i].prompt_tokens;
        pt += n_tokens_[r];
      } else {
        tokens_[r * static_cast<size_t>(seq)] = gens_[i].ids.back();
        n_tokens_[r] = 1;
        ++dt;
      }
    }
    Stopwatch pass;
    ctx_.forward(tokens_, rows_, seq, n_tokens_, Context::Logits::Last, logits_);
    const double prefill_s = pass.seconds() * static_cast<double>(pt) / static_cast<double>(pt + dt);
    if (timing_) {
      timing_->prefill_tokens += pt;
      ++timing_->forward_passes;
    }
    for (size_t r = 0; r < R_; ++r) {
      fresh_[r] = slot_[r] >= 0 ? 1 : 0;
      prefill_[r] = 0;
    }
    return prefill_s;
  }

 private:
  void finish(size_t i) {
    if (opts_.on_finish) opts_.on_finish(i, gens_[i]);
  }

  Context& ctx_;
  const std::vector<std::vector<int32_t>>& prompts_;
  const GenerateOptions& opts_;
  GenerateTiming* timing_;
  std::vector<Generation>& gens_;
  const Tokenizer& tok_;
  const int capacity_, rows_;
  const size_t R_, V_;
  // Row state: the prompt it serves (-1: free), whether its logits hold an
  // unconsumed next-token distribution, whether the next pass prefills it.
  std::vector<ptrdiff_t> slot_;
  std::vector<uint8_t> fresh_, prefill_;
  std::vector<float> logits_;  ///< [rows, V]: each row's last-position logits
  std::vector<int32_t> tokens_;
  std::vector<int> n_tokens_;
  size_t next_ = 0;  ///< first prompt not yet admitted
  int busy_ = 0;
};

}  // namespace

std::string kv_f16_overflow_note(uint64_t overflows) {
  return fmt::format("{} K/V value{} of its cache row exceeded the f16 KV cache's range of ±65504; use "
                     "--kv-cache-dtype bf16 or f32",
                     overflows, overflows == 1 ? "" : "s");
}

std::vector<Generation> generate_greedy(Context& ctx, const std::vector<std::vector<int32_t>>& prompts,
                                        const GenerateOptions& opts, GenerateTiming* timing) {
  if (!ctx.caches_are_setup())
    throw CacheError("generate_greedy: KV caches are not set up; enter a KvCacheScope or call setup_caches first");
  if (!ctx.caches_are_enabled())
    throw CacheError("generate_greedy: KV caches are disabled; leave the KvCacheDisabled scope first");
  check_prompts(prompts, opts);
  const int capacity = ctx.capacity();
  const size_t longest = longest_prompt(prompts, capacity);
  std::vector<Generation> gens = new_generations(prompts, opts, capacity);
  if (prompts.empty()) return gens;
  RowScheduler rows(ctx, prompts, opts, timing, gens, longest);
  Stopwatch total;
  double prefill_s = 0;
  while (true) {
    rows.take_tokens();
    // any free row (dynamic), or all rows once the whole group has ended (static)
    if (opts.batching == Batching::Dynamic || rows.busy() == 0) rows.admit();
    if (rows.busy() == 0) break;  // every row free and nothing waiting
    prefill_s += rows.forward_pass();
  }
  if (timing) {
    const double all = total.seconds();
    timing->prefill_seconds += prefill_s;
    timing->decode_seconds += std::max(0.0, all - prefill_s);
  }
  return gens;
}

std::vector<Generation> generate_greedy_uncached(Context& ctx, const std::vector<std::vector<int32_t>>& prompts,
                                                 const GenerateOptions& opts, int max_seq_len, GenerateTiming* timing) {
  const Model& model = ctx.model();
  if (ctx.caches_are_enabled())
    throw CacheError("generate_greedy_uncached: KV caches are enabled; use KvCacheDisabled or leave the cache scope");
  if (max_seq_len < 1 || max_seq_len > model.hparams().n_ctx_train)
    throw ArgumentError(fmt::format("generate_greedy_uncached: max_seq_len {} outside [1, {}]", max_seq_len,
                                    model.hparams().n_ctx_train));
  const int n = static_cast<int>(prompts.size());
  std::vector<int32_t> tokens;
  std::vector<int> n_tokens;
  auto run = [&](const std::vector<uint8_t>& live, const std::vector<Generation>* gens, std::vector<float>& logits) {
    int seq = 1;
    auto len = [&](int r) {
      return static_cast<int>(prompts[static_cast<size_t>(r)].size() + (gens ? (*gens)[static_cast<size_t>(r)].ids.size() : 0));
    };
    for (int r = 0; r < n; ++r)
      if (live[static_cast<size_t>(r)]) seq = std::max(seq, len(r));
    tokens.assign(static_cast<size_t>(n) * seq, 0);
    n_tokens.assign(static_cast<size_t>(n), 0);
    for (int r = 0; r < n; ++r) {
      if (!live[static_cast<size_t>(r)]) continue;
      const auto& p = prompts[static_cast<size_t>(r)];
      auto it = std::copy(p.begin(), p.end(), tokens.begin() + static_cast<std::ptrdiff_t>(r) * seq);
      if (gens) std::copy((*gens)[static_cast<size_t>(r)].ids.begin(), (*gens)[static_cast<size_t>(r)].ids.end(), it);
      n_tokens[static_cast<size_t>(r)] = len(r);
    }
    ctx.forward(tokens, n, seq, n_tokens, Context::Logits::Last, logits);
  };
  auto prefill = [&](const std::vector<uint8_t>& live, std::vector<float>& logits) { run(live, nullptr, logits); };
  auto step = [&](const std::vector<uint8_t>& live, const std::vector<Generation>& gens, std::vector<float>& logits) {
    run(live, &gens, logits);
  };
  return decode_loop(model, prompts, opts, max_seq_len, timing, prefill, step);
}

}  // namespace kveval
