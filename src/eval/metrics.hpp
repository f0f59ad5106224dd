#pragma once
// Per-task metrics with lm-evaluation-harness names and formulas
// (lm_eval/api/metrics.py): acc, acc_norm, perplexity, word_perplexity,
// byte_perplexity, bits_per_byte, exact_match, plus token_perplexity.
// No value is ever NaN: an empty set gives std::nullopt and a reason.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "eval/filters.hpp"  // FilteredResponses
#include "eval/spec.hpp"

namespace kveval::eval {

/// Outcome of one document after its requests ran.
struct DocOutcome {
  bool ok = false;                   ///< false: a request of this doc failed (excluded from metrics)
  std::string error;                 ///< the first request error of the doc
  double logprob = 0;                ///< loglikelihood / rolling: summed log-prob (nats)
  bool is_greedy = false;            ///< loglikelihood: every continuation token was the argmax
  int64_t tokens = 0;                ///< tokens scored (loglikelihood, rolling)
  std::vector<double> choice_logprobs;  ///< multiple_choice: per choice, summed log-prob (nats)
  std::string output;                ///< generate_until: the generated text, cut at the first stop string
  std::vector<std::string> outputs;  ///< generate_until with repeats > 1: every repeat's text, in repeat order
  int requests = 0;                  ///< requests of this document (choices, windows); 0 = unknown
};

/// Name of a metric in reports: "exact_match" for filter "none", else "exact_match,strict-match" (lm-eval's key).
std::string metric_key(const std::string& name, const std::string& filter);
/// The llama.cpp chunked perplexity of one rolling task (rolling_method
/// "llama.cpp"): sums over the scored tokens of all its chunks.
struct ChunkedOutcome {
  bool ok = false;          ///< every chunk was built and scored
  std::string error;        ///< why not (e.g. a text shorter than 2 * context_length tokens)
  int chunks = 0;           ///< chunks scored
  int64_t tokens = 0;       ///< tokens scored (n_ctx - 1 - n_ctx/2 per chunk)
  double sum_nll = 0;       ///< sum of -log p over the scored tokens (nats)
  double sum_nll_sq = 0;    ///< sum of (log p)^2 over the scored tokens
};

/// One reported metric.
struct MetricValue {
  std::string name;
  std::string filter = "none";       ///< lm-eval filter pipeline the value was computed after ("none": the raw output)
  std::optional<double> value;       ///< nullopt when there is nothing to aggregate
  std::optional<double> stderr_;     ///< standard error; nullopt when undefined (n < 2 or corpus-level ratio)
  int n = 0;                         ///< documents aggregated
  std::string note;                  ///< why value/stderr is missing, "" otherwise
  bool higher_is_better = true;
};

/// Mean of `x` (nullopt when empty).
std::optional<double> mean(std::span<const double> x);
/// Standard error of the mean: sample standard deviation (n-1) / sqrt(n), as
/// lm-eval's mean_stderr; nullopt for n < 2.
std::optional<double> mean_stderr(std::span<const double> x);

/// Words of a text as lm-eval counts them (Task.count_words, lm_eval/api/task.py):
/// len(re.split(r"\s+", text)), i.e. the number of whitespace runs + 1 (leading or
/// trailing whitespace counts a run). Whitespace is Python's (util/whitespace.hpp:
/// Unicode, e.g. U+00A0 and U+3000 split words).
int64_t count_words(std::string_view text);

/// Index of the largest value, the first on ties (numpy.argmax).
int argmax_first(std::span<const double> x);

/// True when the metric improves as it grows (acc, acc_norm, acc_bytes, exact_match).
bool higher_is_better(const std::string& metric);

/// Characters of a UTF-8 text (code points; a byte that does not start a
/// sequence is not counted): Python's len(str) for valid UTF-8.
int64_t count_chars(std::string_view text);

/// lm-eval's per-document metric values (ConfigurableTask.process_results in
/// lm_eval/api/task.py) for the metrics of task.metric_list, in that order:
/// loglikelihood {perplexity: ll, acc: 0|1}; multiple_choice {acc, acc_norm,
/// acc_bytes: 1.0|0.0}; loglikelihood_rolling {word_perplexity: [ll, words],
/// byte_perplexity/bits_per_byte: [ll, bytes], token_perplexity: [ll, tokens]};
/// generate_until {exact_match: 1.0|0.0} (only with a target; of `filtered`, the
/// output after one filter pipeline, or of the raw output when null; with
/// `filtered_n` (repeats > 1), exact_match_value of it). Empty for a failed doc.
std::vector<std::pair<std::string, nlohmann::json>> doc_metric_values(const TaskSpec& task, const Doc& doc,
                                                                      const DocOutcome& o,
                                                                      const std::string* filtered = nullptr,
                                                                      const FilteredResponses* filtered_n = nullptr);

/// exact_match of a pipeline's result on a document's repeats: 1.0|0.0 for one
/// response; for a list (no take_first at the end) the mean over its items, as
/// lm-eval's exact_match compares a list prediction element-wise (numpy
/// broadcasting) and averages; 0 for an empty list.
double exact_match_value(const ExactMatchOptions& o, const FilteredResponses& f, const Doc& d);

/// Metrics of one task from its documents' outcomes (outcomes[i] belongs to
/// task.docs[i]), restricted to task.metric_list, in that order.
/// - loglikelihood: acc = mean(is_greedy); perplexity = exp(-mean(logprob)) over
///   requests (lm-eval `perplexity`), stderr by lm-eval's bootstrap (none for n < 2, lm-eval's "N/A").
/// - multiple_choice: acc = mean(argmax(ll) == gold); acc_norm = mean(argmax(ll_i /
///   characters(choice_i)) == gold); acc_bytes = mean(argmax(ll_i / utf8_bytes(choice_i)) == gold)
///   (lm-eval's pred_norm and pred_byte).
/// - loglikelihood_rolling: word_perplexity = exp(-sum(ll)/sum(words)), byte_perplexity =
///   exp(-sum(ll)/sum(bytes)), bits_per_byte = -sum(ll)/(sum(bytes) ln 2) (lm-eval
///   weighted_perplexity / bits_per_byte), token_perplexity = exp(-sum(ll)/sum(tokens));
///   corpus-level ratios have no stderr (as lm-eval).
/// - generate_until: exact_match = mean(em(f(output)) == em(target)) (no whitespace stripping, as lm-eval),
///   where em applies the task's exact_match options (exact_match_normalize) and f
///   is each filter pipeline of task.filter_list (one value per pipeline, named by
///   MetricValue::filter), or the raw output when there is none (filter "none").
/// Non-finite inputs are errors upstream (the runner fails such requests):
/// a NaN/Inf log-prob in a document marked ok throws kveval::Error naming the
/// task and document. An aggregate that overflows the double range (e.g.
/// perplexity = exp(800)) is n/a with the note "overflow: exp(X) exceeds the
/// double range (N documents, M requests)".
/// `bootstrap_iters` as lm-eval's --bootstrap_iters: the stderr of `perplexity` is
/// bootstrap_stderr_perplexity; 0 gives no stderr for any metric.
/// - perplexity_llamacpp (rolling_method "llama.cpp", from `chunked`): exp(sum_nll / tokens),
///   n = chunks, stderr as llama-perplexity's "+/-": ppl * sqrt((E[nll^2] - E[nll]^2) / (tokens - 1))
///   (tools/perplexity/perplexity.cpp); n/a with chunked->error when it did not run, and with
///   "overflow: exp(X) exceeds the double range (N chunks, T tokens)" when exp overflows.
std::vector<MetricValue> compute_metrics(const TaskSpec& task, std::span<const DocOutcome> outcomes,
                                         int bootstrap_iters = 100000, const ChunkedOutcome* chunked = nullptr);

/// lm-eval's bootstrap_stderr(perplexity, ll, iters) (lm_eval/api/metrics.py,
/// single-process path, which the pool reproduces): iters // min(1000, iters)
/// chunks; chunk i draws min(1000, iters) resamples with random.Random(i).choices,
/// each giving exp(-mean); the result is their sample standard deviation.
/// nullopt for fewer than 2 resamples (iters < 2) or an empty list. Cost:
/// iters x n draws (twice beyond 10^6 resamples, which are not kept in memory).
std::optional<double> bootstrap_stderr_perplexity(std::span<const double> ll, int iters);

}  // namespace kveval::eval
