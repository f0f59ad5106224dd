// `kveval bench --tests fidelity`: see bench_fidelity.hpp.
#include "cli/bench_fidelity.hpp"

#include <algorithm>
#include <fstream>

#include <fmt/format.h>

#include "eval/fidelity.hpp"
#include "eval/runner.hpp"
#include "eval/spec.hpp"
#include "model/model.hpp"
#include "util/error.hpp"

namespace kveval::bench {

eval::EvalSpec load_fidelity_spec(const Options& o) {
  if (o.spec.empty())
    throw ArgumentError("--tests fidelity: needs --spec SPEC.json (the tasks to score in f32 and a reduced dtype)");
  if (!std::ifstream(o.spec)) throw ArgumentError(fmt::format("--spec {}: not found or not readable", o.spec));
  eval::EvalSpec spec = eval::load_spec(o.spec, o.model_path);
  size_t docs = 0;
  for (const auto& t : spec.tasks) docs += t.docs.size();
  if (docs == 0)
    throw ArgumentError(fmt::format("--spec {}: no document to compare (every task has 0 documents after 'limit')", o.spec));
  return spec;
}

namespace {

/// eval::compare_dtypes (the same steps), keeping both runs: their failed requests are reported.
struct Compared {
  eval::FidelityReport f;
  int failed[2] = {0, 0};  ///< requests with a per-request error in the run of dtype a, b
  size_t requests = 0;     ///< requests of the plan
  int failed_either = 0;   ///< requests that failed in either run: left out of the comparison
  std::string first_error; ///< of the first run with a failure
};

Compared compare(const eval::EvalSpec& spec, ComputeDtype a, ComputeDtype b) {
  Compared out;
  eval::RunResult res[2];
  std::vector<std::vector<double>> tok[2];
  const ComputeDtype dts[2] = {a, b};
  for (int k = 0; k < 2; ++k) {
    auto model = Model::load(spec.model, {.threads = spec.threads, .dtype = dts[k]});
    res[k] = eval::run_eval(spec, *model);
    // the scoring requests that ran in the first run, through both models
    std::vector<ScoreRequest> reqs;
    for (size_t i = 0; i < res[0].requests.size(); ++i) {
      const eval::Request& r = res[0].requests[i];
      if (r.kind == eval::RequestKind::Generate || !r.error.empty() || !res[0].outcomes[i].ran) continue;
      reqs.push_back(r.score);
    }
    for (auto& sr : score(*model, reqs, spec.batch_size)) tok[k].push_back(std::move(sr.logprobs));
    (k == 0 ? out.f.dtype_a : out.f.dtype_b) = to_string(model->dtype());
    out.failed[k] = res[k].n_request_errors;
    for (size_t i = 0; i < res[k].requests.size() && out.first_error.empty(); ++i)
      out.first_error = !res[k].requests[i].error.empty() ? res[k].requests[i].error
                        : i < res[k].outcomes.size()      ? res[k].outcomes[i].error
                                                          : "";
  }
  out.requests = res[0].requests.size();
  auto failed = [&](int k, size_t i) {
    return !res[k].requests[i].error.empty() || (i < res[k].outcomes.size() && !res[k].outcomes[i].ran);
  };
  for (size_t i = 0; i < out.requests && i < res[1].requests.size(); ++i) out.failed_either += failed(0, i) || failed(1, i);
  out.f.tokens = eval::token_deltas(tok[0], tok[1]);
  out.f.flips = eval::metric_flips(spec, res[0], res[1]);
  return out;
}

}  // namespace

void run_fidelity(const Options& o, eval::EvalSpec spec, int threads, Report& rep,
                  const std::function<void(const std::string&)>& say) {
  spec.threads = threads;
  // f32 against the first reduced dtype of --dtype (bf16 when none is named).
  ComputeDtype reduced = ComputeDtype::BF16;
  for (const auto& d : o.dtypes) {
    const ComputeDtype c = parse_compute_dtype(d, "--dtype");
    if (c != ComputeDtype::F32 && c != ComputeDtype::Auto) {
      reduced = c;
      break;
    }
  }
  if (say) say(fmt::format("[t={}] fidelity: {} in f32 and {}", threads, o.spec, to_string(reduced)));
  const Compared cmp = compare(spec, ComputeDtype::F32, reduced);
  const eval::FidelityReport& f = cmp.f;
  int64_t docs = 0;  // documents compared by some metric
  for (const auto& m : f.flips) docs = std::max(docs, m.compared);
  const std::string failed =
      cmp.failed_either == 0
          ? ""
          : fmt::format("{} of the {} requests failed ({} run: {}, {} run: {}; first: {})", cmp.failed_either,
                        cmp.requests, f.dtype_a, cmp.failed[0], f.dtype_b, cmp.failed[1], cmp.first_error);
  if (f.tokens.tokens == 0 && docs == 0)
    throw ArgumentError(fmt::format("--spec {}: fidelity compared no token and no document{}", o.spec,
                                    failed.empty() ? "" : ": " + failed));
  if (!failed.empty()) rep.add_warning(fmt::format("fidelity: {}; they are left out of the comparison", failed));
  auto row = [&](const std::string& name, const std::string& unit, double v) {
    Row r;
    r.test = "fidelity";
    r.name = name;
    r.threads = threads;
    r.dtype = f.dtype_b;
    r.batch = spec.batch_size;
    r.unit = unit;
    r.value = exact(v);
    return r;
  };
  const auto& t = f.tokens;
  if (t.tokens > 0) {
    for (const bool mx : {true, false})
      rep.rows.push_back(row(mx ? "max abs dlogprob" : "mean abs dlogprob", "nats", mx ? t.max_abs : t.mean_abs)
                             .with("tokens", static_cast<double>(t.tokens))
                             .with("requests", static_cast<double>(t.requests))
                             .with("failed_requests", static_cast<double>(cmp.failed_either)));
  } else {
    rep.add_warning(fmt::format("fidelity: no loglikelihood or rolling token of {} was scored in both runs: no dlogprob rows",
                                o.spec));
  }
  for (const auto& m : f.flips)
    rep.rows.push_back(row(fmt::format("flips {} {}", m.task, m.metric), "docs", static_cast<double>(m.flipped))
                           .with("docs", static_cast<double>(m.compared)));
  const std::string note = fmt::format(
      "fidelity: {} scored with --dtype {} and {} (one load each); abs dlogprob = |log p({}) - log p({})| over every scored token of the "
      "loglikelihood and rolling requests (nats), flips = documents whose acc/acc_norm/acc_bytes/exact_match value "
      "or generated text (greedy_text) differs between the two runs.",
      o.spec, f.dtype_a, f.dtype_b, f.dtype_a, f.dtype_b);
  rep.add_note(note);
}

}  // namespace kveval::bench
