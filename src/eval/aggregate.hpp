#pragma once
// The last steps of a run (rank 0): the requests' outcomes gathered into
// per-document and per-task outcomes, then each task's metrics.
#include "eval/runner.hpp"
#include "eval/spec.hpp"

namespace kveval::eval {

/// Fills res.docs, res.chunked, res.task_errors and res.n_request_errors from
/// res.requests and res.outcomes (every rank's, after gathering): a document
/// (or a task's llama.cpp perplexity chunks) is ok when all its requests ran;
/// otherwise it keeps its first error. A failure while running (non-finite
/// logits, RequestOutcome::error) first becomes its request's error.
void collect_outcomes(const EvalSpec& spec, RunResult& res);

/// Appends each task's compute_metrics to res.metrics (spec order), after
/// collect_outcomes. A task whose documents all failed gets a note on every
/// metric without a value ("all N requests failed" or "all N documents
/// failed (E of R requests)"). Then each group's metrics in res.group_metrics
/// (compute_group_metrics).
void compute_task_metrics(const EvalSpec& spec, RunResult& res);

}  // namespace kveval::eval
