#include "eval/metrics.hpp"

#include "util/py_random.hpp"

#include "eval/filters.hpp"
#include "eval/task_hooks.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "util/error.hpp"
#include "util/number_format.hpp"
#include "util/whitespace.hpp"

namespace kveval::eval {

std::optional<double> mean(std::span<const double> x) {
  if (x.empty()) return std::nullopt;
  double s = 0;
  for (double v : x) s += v;
  return s / static_cast<double>(x.size());
}

std::optional<double> mean_stderr(std::span<const double> x) {
  if (x.size() < 2) return std::nullopt;
  double m = *mean(x), ss = 0;
  for (double v : x) ss += (v - m) * (v - m);
  double var = ss / static_cast<double>(x.size() - 1);
  return std::sqrt(var / static_cast<double>(x.size()));
}

int64_t count_words(std::string_view text) { return util::split_count(text); }

int argmax_first(std::span<const double> x) {
  int best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[static_cast<size_t>(best)]) best = static_cast<int>(i);
  return best;
}

bool higher_is_better(const std::string& m0) {
  std::string m = m0.substr(0, m0.find(','));  // "exact_match,strict-match"
  return m == "acc" || m == "acc_norm" || m == "acc_bytes" || m == "exact_match";
}

int64_t count_chars(std::string_view text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

std::string metric_key(const std::string& name, const std::string& filter) {
  return filter == "none" ? name : name + "," + filter;
}

namespace {

MetricValue mean_metric(const std::string& name, const std::vector<double>& v) {
  MetricValue m;
  m.name = name;
  m.higher_is_better = higher_is_better(name);
  m.n = static_cast<int>(v.size());
  m.value = mean(v);
  m.stderr_ = mean_stderr(v);
  if (!m.value) m.note = "no documents";
  else if (!m.stderr_) m.note = "stderr needs n >= 2";
  return m;
}

/// Note of an aggregate exp(x) beyond the double range (x > log(DBL_MAX) ~ 709.78).
std::string overflow_note(double x, int docs, int requests) {
  std::string who = fmt::format("{} document{}", docs, docs == 1 ? "" : "s");
  if (requests > 0) who += fmt::format(", {} request{}", requests, requests == 1 ? "" : "s");
  return fmt::format("overflow: exp({:.6g}) exceeds the double range ({})", x, who);
}

MetricValue ratio_metric(const std::string& name, double num, double den, int n, bool exp_neg, bool bits,
                         int requests) {
  MetricValue m;
  m.name = name;
  m.higher_is_better = false;
  m.n = n;
  if (n == 0 || den <= 0) {
    m.note = n == 0 ? "no documents" : "zero denominator";
    return m;
  }
  double r = -num / den;
  m.value = exp_neg ? std::exp(r) : (bits ? r / std::log(2.0) : r);
  if (!std::isfinite(*m.value)) {  // inputs are finite (checked), so this is a genuine overflow of exp
    m.value.reset();
    m.note = overflow_note(r, n, requests);
    return m;
  }
  m.note = "corpus-level ratio: no stderr";
  return m;
}

/// ll_i / length(choice_i): characters (lm-eval's completion_len) or UTF-8 bytes (byte_length).
std::vector<double> normalized(const std::vector<double>& ll, const std::vector<std::string>& choices, bool bytes) {
  std::vector<double> out(ll.size());
  for (size_t c = 0; c < out.size(); ++c) {
    int64_t len = bytes ? static_cast<int64_t>(choices[c].size()) : count_chars(choices[c]);
    out[c] = ll[c] / static_cast<double>(std::max<int64_t>(1, len));
  }
  return out;
}

/// lm-eval's multiple_choice acc/acc_norm: pred == gold, or pred in gold for a list of gold indices.
bool is_gold(const Doc& d, int pred) {
  return d.golds.empty() ? pred == d.gold : std::find(d.golds.begin(), d.golds.end(), pred) != d.golds.end();
}

/// lm-eval's exact_match of one output: against the target, or, for a list of references
/// (multiple_target), 1 when any reference matches; both sides after the exact_match options.
bool exact_match_hit(const ExactMatchOptions& o, const std::string& output, const Doc& d) {
  const std::string p = exact_match_normalize(o, output);
  if (d.targets.empty()) return p == exact_match_normalize(o, d.target);
  for (const auto& t : d.targets)
    if (p == exact_match_normalize(o, t)) return true;
  return false;
}

}  // namespace

double exact_match_value(const ExactMatchOptions& o, const FilteredResponses& f, const Doc& d) {
  if (f.items.empty()) return 0.0;
  double hits = 0;
  for (const auto& x : f.items) hits += exact_match_hit(o, x, d) ? 1.0 : 0.0;
  return hits / static_cast<double>(f.items.size());
}

std::vector<std::pair<std::string, nlohmann::json>> doc_metric_values(const TaskSpec& task, const Doc& d,
                                                                      const DocOutcome& o, const std::string* filtered,
                                                                      const FilteredResponses* filtered_n) {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  if (!o.ok) return out;
  if (task.hooks && task.hooks->scores()) {  // process_results / metric functions (a failing hook: no values here)
    try {
      return hook_doc_values(task, d, o, filtered);
    } catch (const std::exception&) {
      return out;
    }
  }
  for (const auto& name : task.metric_list) {
    nlohmann::json v;
    switch (task.output_type) {
      case OutputType::Loglikelihood:
        if (name == "perplexity") v = o.logprob;
        else if (name == "acc") v = o.is_greedy ? 1 : 0;
        break;
      case OutputType::MultipleChoice:
        if (name == "acc") v = is_gold(d, argmax_first(o.choice_logprobs)) ? 1.0 : 0.0;
        else if (name == "acc_norm") v = is_gold(d, argmax_first(normalized(o.choice_logprobs, d.choices, false))) ? 1.0 : 0.0;
        else if (name == "acc_bytes") v = is_gold(d, argmax_first(normalized(o.choice_logprobs, d.choices, true))) ? 1.0 : 0.0;
        break;
      case OutputType::LoglikelihoodRolling:
        if (name == "word_perplexity") v = {o.logprob, count_words(d.target)};
        else if (name == "byte_perplexity" || name == "bits_per_byte") v = {o.logprob, d.target.size()};
        else if (name == "token_perplexity") v = {o.logprob, o.tokens};
        break;
      case OutputType::GenerateUntil:
        if (name == "exact_match" && d.has_target && filtered_n) {
          v = exact_match_value(task.exact_match, *filtered_n, d);
        } else if (name == "exact_match" && d.has_target) {
          const std::string& out = filtered ? *filtered : o.output;
          v = exact_match_hit(task.exact_match, out, d) ? 1.0 : 0.0;
        }
        break;
    }
    if (!v.is_null()) out.emplace_back(name, std::move(v));
  }
  return out;
}

std::optional<double> bootstrap_stderr_perplexity(std::span<const double> ll, int iters) {
  if (iters < 1 || ll.empty()) return std::nullopt;
  const int chunk = std::min(1000, iters);
  const size_t count = static_cast<size_t>(iters / chunk) * static_cast<size_t>(chunk);
  if (count < 2) return std::nullopt;
  const auto n = static_cast<double>(ll.size());
  // The resamples in lm-eval's order; f(value) for each.
  const auto for_each_resample = [&](auto&& f) {
    for (int i = 0; i < iters / chunk; ++i) {
      PyRandom rnd(static_cast<uint64_t>(i));
      for (int c = 0; c < chunk; ++c) {
        double sum = 0;
        for (size_t idx : rnd.choices(ll.size(), ll.size())) sum += ll[idx];
        f(std::exp(-(sum / n)));
      }
    }
  };
  // sample_stddev (n - 1), summed left to right as Python's sum(). Up to
  // kStoredResamples the values are kept for the second pass; beyond, they are
  // drawn again (the same values: the draws are seeded per chunk), so 10^8
  // resamples need no 800 MB.
  constexpr size_t kStoredResamples = 1000000;
  const bool store = count <= kStoredResamples;
  std::vector<double> res;
  if (store) res.reserve(count);
  double mu = 0;
  for_each_resample([&](double x) {
    mu += x;
    if (store) res.push_back(x);
  });
  mu /= static_cast<double>(count);
  double ss = 0;
  if (store)
    for (double x : res) ss += (x - mu) * (x - mu);
  else
    for_each_resample([&](double x) { ss += (x - mu) * (x - mu); });
  return std::sqrt(ss / static_cast<double>(count - 1));
}

namespace {

/// llama-perplexity's final estimate: PPL = exp(mean nll) "+/-" ppl * sqrt(var / (count - 1))
/// with var = mean(nll^2) - mean(nll)^2 (tools/perplexity/perplexity.cpp, end of perplexity()).
MetricValue llamacpp_metric(const ChunkedOutcome* c) {
  MetricValue m;
  m.name = kPerplexityLlamaCpp;
  m.higher_is_better = false;
  if (!c || !c->ok || c->tokens == 0) {
    m.note = c && !c->error.empty() ? c->error : "no chunks";
    return m;
  }
  m.n = c->chunks;
  const double count = static_cast<double>(c->tokens);
  const double nll = c->sum_nll / count;
  if (!std::isfinite(nll))  // a chunk with non-finite logits fails upstream (runner), never sums here
    throw Error(fmt::format("internal: a non-finite log-prob reached {} (such chunks must fail upstream)",
                            kPerplexityLlamaCpp));
  const double ppl = std::exp(nll);
  if (!std::isfinite(ppl)) {  // a genuine overflow of exp: mean nll > log(DBL_MAX) ~ 709.78
    m.note = fmt::format("overflow: exp({:.6g}) exceeds the double range ({} chunk{}, {} tokens)", nll, c->chunks,
                         c->chunks == 1 ? "" : "s", c->tokens);
    return m;
  }
  m.value = ppl;
  const double var = c->sum_nll_sq / count - nll * nll;
  if (c->tokens > 1 && var > 0) m.stderr_ = ppl * std::sqrt(var / (count - 1));
  else m.note = "stderr needs 2 tokens with different log-probs";
  return m;
}

/// The per-document values a task's metrics aggregate, over its ok documents.
struct DocScores {
  std::vector<double> acc, acc_norm, acc_bytes, ll;  ///< per document: 0/1 hits; loglikelihood log-probs
  // generate_until: one exact_match list per filter pipeline ("none": the raw output)
  std::vector<FilterPipeline> pipes;
  std::vector<std::vector<double>> em;      ///< em[p]: hits of pipes[p]
  std::vector<std::string> filter_errors;   ///< the first error of pipes[p]
  std::vector<int> filter_failed;           ///< documents pipes[p] could not run on
  std::vector<std::vector<std::optional<FilterOutcome>>> filtered;  ///< filtered[p][i]: pipes[p] on document i
  double sum_ll = 0, sum_words = 0, sum_bytes = 0, sum_tokens = 0;  ///< loglikelihood_rolling sums
  int n_ok = 0, n_requests = 0;             ///< ok documents and their requests
};

/// exact_match of one generate_until document `i` under every filter pipeline of `s`
/// (its outputs after each pipeline: s.filtered).
void add_exact_match(const TaskSpec& task, size_t i, DocScores& s) {
  const Doc& d = task.docs[i];
  if (!d.has_target) return;
  for (size_t p = 0; p < s.pipes.size(); ++p) {
    const std::optional<FilterOutcome>& f = s.filtered[p][i];
    if (!f) continue;
    try {
      if (!f->error.empty()) throw SpecError(f->error);
      if (task.repeats > 1) {  // lm-eval's filters on the list of repeats
        s.em[p].push_back(exact_match_value(task.exact_match, f->filtered, d));
        continue;
      }
      bool hit = exact_match_hit(task.exact_match, f->filtered.items.at(0), d);
      s.em[p].push_back(hit ? 1.0 : 0.0);
    } catch (const std::exception& e) {
      // a regex the PCRE2 matcher cannot run (e.g. its match limit): left out of the metric, counted in its note
      if (s.filter_failed[p]++ == 0) s.filter_errors[p] = e.what();
    }
  }
}

/// generate_until: every pipeline of `s` on the ok documents' outputs, a custom filter
/// called once per pipeline for all of them (filter_docs).
void filter_outputs(const TaskSpec& task, std::span<const DocOutcome> outcomes, DocScores& s) {
  std::vector<std::optional<std::vector<std::string>>> responses(task.docs.size());
  for (size_t i = 0; i < outcomes.size() && i < task.docs.size(); ++i)
    if (outcomes[i].ok) responses[i] = task.repeats > 1 ? outcomes[i].outputs : std::vector<std::string>{outcomes[i].output};
  for (const auto& pipe : s.pipes) s.filtered.push_back(filter_docs(pipe, responses, task.docs, task.repeats <= 1));
}

/// The values of the ok documents of `outcomes` (document order). Throws Error
/// (internal) for a non-finite log-prob in a document marked ok.
DocScores collect_scores(const TaskSpec& task, std::span<const DocOutcome> outcomes) {
  DocScores s;
  s.pipes = task.filter_list;
  if (s.pipes.empty()) s.pipes.push_back({"none", {}});
  s.em.resize(s.pipes.size());
  s.filter_errors.resize(s.pipes.size());
  s.filter_failed.assign(s.pipes.size(), 0);
  if (task.output_type == OutputType::GenerateUntil) filter_outputs(task, outcomes, s);
  for (size_t i = 0; i < outcomes.size() && i < task.docs.size(); ++i) {
    const DocOutcome& o = outcomes[i];
    if (!o.ok) continue;
    bool finite = std::isfinite(o.logprob);
    for (double v : o.choice_logprobs) finite &= std::isfinite(v);
    if (!finite)
      throw Error(fmt::format("internal: task '{}' doc {}: a non-finite log-prob reached the metrics (such requests "
                              "must fail upstream)",
                              task.name, i));
    ++s.n_ok;
    s.n_requests += o.requests;
    const Doc& d = task.docs[i];
    switch (task.output_type) {
      case OutputType::Loglikelihood:
        s.acc.push_back(o.is_greedy ? 1.0 : 0.0);
        s.ll.push_back(o.logprob);
        break;
      case OutputType::MultipleChoice:
        s.acc.push_back(is_gold(d, argmax_first(o.choice_logprobs)) ? 1.0 : 0.0);
        s.acc_norm.push_back(is_gold(d, argmax_first(normalized(o.choice_logprobs, d.choices, false))) ? 1.0 : 0.0);
        s.acc_bytes.push_back(is_gold(d, argmax_first(normalized(o.choice_logprobs, d.choices, true))) ? 1.0 : 0.0);
        break;
      case OutputType::LoglikelihoodRolling:
        s.sum_ll += o.logprob;
        s.sum_words += static_cast<double>(count_words(d.target));
        s.sum_bytes += static_cast<double>(d.target.size());
        s.sum_tokens += static_cast<double>(o.tokens);
        break;
      case OutputType::GenerateUntil:
        add_exact_match(task, i, s);
        break;
    }
  }
  return s;
}

/// `perplexity` of loglikelihood tasks: exp(-mean log-prob) with lm-eval's
/// bootstrap stderr (a bootstrappable aggregation, lm_eval/api/metrics.py
/// stderr_for_metric); n/a with a note when there is nothing or it overflows.
MetricValue perplexity_metric(const std::string& name, const std::vector<double>& ll, int bootstrap_iters,
                              int n_requests) {
  MetricValue m;
  m.name = name;
  m.higher_is_better = false;
  m.n = static_cast<int>(ll.size());
  auto mu = mean(ll);
  if (!mu) {
    m.note = "no documents";
    return m;
  }
  double p = std::exp(-*mu);
  if (!std::isfinite(p)) {
    m.note = overflow_note(-*mu, m.n, n_requests);
    return m;
  }
  m.value = p;
  // lm-eval (evaluator_utils.py) bootstraps only for n >= 2: "N/A" for one
  // document, whose resamples are all alike (their spread is rounding, ~1e-13)
  if (ll.size() >= 2) m.stderr_ = bootstrap_stderr_perplexity(ll, bootstrap_iters);
  if (!m.stderr_)
    m.note = bootstrap_iters < 1 ? "bootstrap_iters 0: no stderr"
             : bootstrap_iters < 2 ? "bootstrap_iters 1: a stderr needs 2 resamples"
                                   : "stderr needs n >= 2";
  if (m.stderr_ && !std::isfinite(*m.stderr_)) {  // resamples beyond exp's range
    m.note = fmt::format("overflow: the bootstrap stderr of perplexity {:.6g} exceeds the double range", p);
    m.stderr_.reset();
  }
  return m;
}

/// mean_metric without a stderr when bootstrap_iters is 0 (lm-eval's --bootstrap_iters 0).
MetricValue mean_metric_iters(const std::string& name, const std::vector<double>& v, int bootstrap_iters) {
  MetricValue m = mean_metric(name, v);
  if (bootstrap_iters < 1 && m.value) m.stderr_.reset(), m.note = "bootstrap_iters 0: no stderr";
  return m;
}

}  // namespace

std::vector<MetricValue> compute_metrics(const TaskSpec& task, std::span<const DocOutcome> outcomes, int bootstrap_iters,
                                         const ChunkedOutcome* chunked) {
  if (task.hooks && task.hooks->scores()) return hook_metrics(task, outcomes, bootstrap_iters);
  std::vector<MetricValue> all;
  const DocScores s = collect_scores(task, outcomes);
  // loglikelihood_rolling: corpus-level ratios (lm-eval's weighted_perplexity, bits_per_byte)
  struct Ratio {
    const char* name;
    double denom;
    bool exp, bits;
  };
  const Ratio ratios[] = {{"word_perplexity", s.sum_words, true, false},
                          {"byte_perplexity", s.sum_bytes, true, false},
                          {"bits_per_byte", s.sum_bytes, false, true},
                          {"token_perplexity", s.sum_tokens, true, false}};
  for (const auto& name : task.metric_list) {
    if (name == "acc") {
      all.push_back(mean_metric_iters(name, s.acc, bootstrap_iters));
    } else if (name == "acc_norm") {
      all.push_back(mean_metric_iters(name, s.acc_norm, bootstrap_iters));
    } else if (name == "acc_bytes") {
      all.push_back(mean_metric_iters(name, s.acc_bytes, bootstrap_iters));
    } else if (name == "perplexity") {
      all.push_back(perplexity_metric(name, s.ll, bootstrap_iters, s.n_requests));
    } else if (name == kPerplexityLlamaCpp) {
      MetricValue m = llamacpp_metric(chunked);
      if (bootstrap_iters < 1 && m.value) m.stderr_.reset(), m.note = "bootstrap_iters 0: no stderr";
      all.push_back(m);
    } else if (name == "exact_match") {
      for (size_t p = 0; p < s.pipes.size(); ++p) {
        MetricValue m = mean_metric_iters(name, s.em[p], bootstrap_iters);
        m.filter = s.pipes[p].name;
        if (s.em[p].empty() && s.n_ok > 0 && !s.filter_failed[p]) m.note = "no doc_to_target: outputs only";
        if (s.filter_failed[p])
          m.note = fmt::format("{} left out: {}", count_of(s.filter_failed[p], "document"), s.filter_errors[p]);
        all.push_back(m);
      }
    } else {
      for (const Ratio& r : ratios)
        if (name == r.name) all.push_back(ratio_metric(name, s.sum_ll, r.denom, s.n_ok, r.exp, r.bits, s.n_requests));
    }
  }
  return all;
}

}  // namespace kveval::eval
