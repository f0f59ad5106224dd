#include "eval/aggregate.hpp"

#include "eval/groups.hpp"
#include "util/number_format.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace kveval::eval {

namespace {

/// One outcome per document (all ok, multiple-choice log-probs zeroed) and
/// per task (llama.cpp perplexity), before the requests' outcomes are added.
void init_doc_outcomes(const EvalSpec& spec, RunResult& res) {
  res.docs.resize(spec.tasks.size());
  res.chunked.assign(spec.tasks.size(), ChunkedOutcome{});
  for (size_t t = 0; t < spec.tasks.size(); ++t) res.chunked[t].ok = true;
  res.task_errors.assign(spec.tasks.size(), 0);
  for (size_t t = 0; t < spec.tasks.size(); ++t) {
    res.docs[t].assign(spec.tasks[t].docs.size(), DocOutcome{});
    for (size_t d = 0; d < spec.tasks[t].docs.size(); ++d) {
      res.docs[t][d].ok = true;
      if (spec.tasks[t].output_type == OutputType::MultipleChoice)
        res.docs[t][d].choice_logprobs.assign(spec.tasks[t].docs[d].choices.size(), 0.0);
    }
  }
}

/// Adds the outcome `o` of the perplexity chunk `r` to its task's ChunkedOutcome
/// (or counts the failure).
void add_chunk_outcome(const Request& r, const RequestOutcome& o, RunResult& res) {
  ChunkedOutcome& c = res.chunked[static_cast<size_t>(r.task)];
  if (!r.error.empty() || !o.ran) {
    ++res.n_request_errors;
    ++res.task_errors[static_cast<size_t>(r.task)];
    if (c.ok) c.error = r.error.empty() ? "not run" : r.error;
    c.ok = false;
    return;
  }
  ++c.chunks;
  c.tokens += o.tokens;
  c.sum_nll -= o.logprob;
  c.sum_nll_sq += o.logprob_sq;
}

/// Adds the outcome `o` of the document request `r` to its DocOutcome (or
/// records the document's first error).
void add_doc_outcome(const Request& r, const RequestOutcome& o, RunResult& res) {
  DocOutcome& d = res.docs[static_cast<size_t>(r.task)][static_cast<size_t>(r.doc)];
  ++d.requests;
  if (!r.error.empty() || !o.ran) {
    ++res.n_request_errors;
    ++res.task_errors[static_cast<size_t>(r.task)];
    if (d.ok) d.error = !r.error.empty() ? r.error : !o.error.empty() ? o.error : "not run";
    d.ok = false;
    return;
  }
  switch (r.kind) {
    case RequestKind::Loglikelihood:
      if (r.index >= 0) {
        d.choice_logprobs[static_cast<size_t>(r.index)] = o.logprob;
      } else {
        d.logprob = o.logprob;
        d.is_greedy = o.is_greedy;
      }
      d.tokens += o.tokens;
      break;
    case RequestKind::RollingWindow:
      d.logprob += o.logprob;
      d.tokens += o.tokens;
      break;
    case RequestKind::Generate:
      if (r.index >= 0) {  // one repeat of several
        if (d.outputs.size() <= static_cast<size_t>(r.index)) d.outputs.resize(static_cast<size_t>(r.index) + 1);
        d.outputs[static_cast<size_t>(r.index)] = o.output;
        if (r.index == 0) d.output = o.output;
        d.tokens += o.tokens;
        break;
      }
      d.output = o.output;
      d.tokens = o.tokens;
      break;
    case RequestKind::PerplexityChunk:
      break;  // task-level: add_chunk_outcome
  }
}

}  // namespace

void collect_outcomes(const EvalSpec& spec, RunResult& res) {
  for (size_t i = 0; i < res.requests.size(); ++i)
    if (!res.outcomes[i].error.empty() && res.requests[i].error.empty()) res.requests[i].error = res.outcomes[i].error;
  init_doc_outcomes(spec, res);
  for (size_t i = 0; i < res.requests.size(); ++i) {
    const Request& r = res.requests[i];
    if (r.kind == RequestKind::PerplexityChunk)  // task-level, not a document's
      add_chunk_outcome(r, res.outcomes[i], res);
    else
      add_doc_outcome(r, res.outcomes[i], res);
  }
}

void compute_task_metrics(const EvalSpec& spec, RunResult& res) {
  std::vector<int> task_requests(spec.tasks.size(), 0);
  for (const Request& r : res.requests) ++task_requests[static_cast<size_t>(r.task)];
  for (size_t t = 0; t < spec.tasks.size(); ++t) {
    res.metrics.push_back(compute_metrics(spec.tasks[t], res.docs[t], spec.bootstrap_iters, &res.chunked[t]));
    // every document failed: say so instead of compute_metrics' "no documents"
    bool any_ok = std::any_of(res.docs[t].begin(), res.docs[t].end(), [](const DocOutcome& d) { return d.ok; });
    if (res.docs[t].empty() || any_ok) continue;
    // "all 3 requests failed", "its 1 request failed", "all 2 documents failed (2 of 4 requests)"
    auto all = [](uint64_t n, const char* noun) { return fmt::format("{} {}", n == 1 ? "its" : "all", count_of(n, noun)); };
    std::string why = res.task_errors[t] == task_requests[t]
                          ? all(task_requests[t], "request") + " failed"
                          : fmt::format("{} failed ({} of {})", all(res.docs[t].size(), "document"), res.task_errors[t],
                                        count_of(task_requests[t], "request"));
    for (auto& m : res.metrics.back())
      if (!m.value) m.note = why;
  }
  res.group_metrics = compute_group_metrics(spec, res);
}

}  // namespace kveval::eval
