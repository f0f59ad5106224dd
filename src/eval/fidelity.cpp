// Fidelity of a compute dtype: see fidelity.hpp.
#include "eval/fidelity.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "eval/metrics.hpp"
#include "eval/requests.hpp"
#include "model/gguf.hpp"
#include "model/tokenizer.hpp"
#include "util/error.hpp"

namespace kveval::eval {

TokenDeltas token_deltas(std::span<const std::vector<double>> a, std::span<const std::vector<double>> b) {
  if (a.size() != b.size())
    throw ArgumentError(fmt::format("token_deltas: {} requests against {}", a.size(), b.size()));
  TokenDeltas d;
  double sum = 0;
  for (size_t r = 0; r < a.size(); ++r) {
    if (a[r].size() != b[r].size())
      throw ArgumentError(fmt::format("token_deltas: request {} has {} tokens against {}", r, a[r].size(), b[r].size()));
    for (size_t i = 0; i < a[r].size(); ++i) {
      const double x = std::fabs(a[r][i] - b[r][i]);
      d.max_abs = std::max(d.max_abs, x);
      sum += x;
    }
    d.tokens += static_cast<int64_t>(a[r].size());
  }
  d.requests = static_cast<int64_t>(a.size());
  d.mean_abs = d.tokens ? sum / static_cast<double>(d.tokens) : 0.0;
  return d;
}

std::vector<MetricFlips> metric_flips(const EvalSpec& spec, const RunResult& a, const RunResult& b) {
  if (a.docs.size() != spec.tasks.size() || b.docs.size() != spec.tasks.size())
    throw ArgumentError(fmt::format("metric_flips: runs of {} and {} tasks for a spec of {}", a.docs.size(),
                                    b.docs.size(), spec.tasks.size()));
  std::vector<MetricFlips> out;
  for (size_t t = 0; t < spec.tasks.size(); ++t) {
    const TaskSpec& task = spec.tasks[t];
    if (a.docs[t].size() != task.docs.size() || b.docs[t].size() != task.docs.size())
      throw ArgumentError(fmt::format("metric_flips: task '{}' has {} documents, the runs {} and {}", task.name,
                                      task.docs.size(), a.docs[t].size(), b.docs[t].size()));
    std::vector<MetricFlips> mine;
    auto entry = [&](const std::string& metric) -> MetricFlips& {
      for (auto& m : mine)
        if (m.metric == metric) return m;
      mine.push_back({task.name, metric, 0, 0});
      return mine.back();
    };
    const bool generation = task.output_type == OutputType::GenerateUntil;
    for (size_t d = 0; d < task.docs.size(); ++d) {
      const DocOutcome& oa = a.docs[t][d];
      const DocOutcome& ob = b.docs[t][d];
      if (!oa.ok || !ob.ok) continue;
      const auto va = doc_metric_values(task, task.docs[d], oa), vb = doc_metric_values(task, task.docs[d], ob);
      for (size_t k = 0; k < va.size() && k < vb.size(); ++k) {
        const std::string& name = va[k].first;
        if (name != "acc" && name != "acc_norm" && name != "acc_bytes" && name != "exact_match") continue;
        if (!va[k].second.is_number() || !vb[k].second.is_number()) continue;
        MetricFlips& m = entry(name);
        ++m.compared;
        if (va[k].second.get<double>() != vb[k].second.get<double>()) ++m.flipped;
      }
      if (generation) {
        MetricFlips& m = entry("greedy_text");
        ++m.compared;
        if (oa.output != ob.output) ++m.flipped;
      }
    }
    out.insert(out.end(), mine.begin(), mine.end());
  }
  return out;
}

namespace {

/// The scoring requests of a plan that ran.
std::vector<ScoreRequest> scoring_requests(const RunResult& plan) {
  std::vector<ScoreRequest> reqs;
  for (size_t i = 0; i < plan.requests.size(); ++i) {
    const Request& r = plan.requests[i];
    if (r.kind == RequestKind::Generate || !r.error.empty() || !plan.outcomes[i].ran) continue;
    reqs.push_back(r.score);
  }
  return reqs;
}

/// The scoring requests of a plan that ran, and their per-token log-probs in
/// `ctx`: cache-free (score) or, with `decode`, teacher-forced (decode_logprobs).
std::vector<std::vector<double>> per_token(Context& ctx, const RunResult& plan, int batch_size, bool decode) {
  const std::vector<ScoreRequest> reqs = scoring_requests(plan);
  std::vector<std::vector<double>> lp;
  if (decode) {
    for (const ScoreRequest& r : reqs) lp.push_back(decode_logprobs(ctx, r));
    return lp;
  }
  for (auto& s : score(ctx, reqs, batch_size)) lp.push_back(std::move(s.logprobs));
  return lp;
}

/// One run of a comparison: its load options.
struct Variant {
  ComputeDtype dtype;
  MatmulMode matmul;
};

FidelityReport compare(const EvalSpec& spec, const Variant (&v)[2], bool decode) {
  FidelityReport rep;
  std::vector<std::vector<double>> tok[2];
  RunResult res[2];
  for (int k = 0; k < 2; ++k) {
    auto model = Model::load(spec.model, {.threads = spec.threads, .dtype = v[k].dtype,
                                          .kv_cache_dtype = spec.kv_cache_dtype, .matmul = v[k].matmul,
                                          .map_weights = spec.map_weights});
    Context ctx(*model);
    res[k] = run_eval(spec, ctx);
    // the same requests (plan of the first run) through both models
    tok[k] = per_token(ctx, res[0], spec.batch_size, decode);
    (k == 0 ? rep.dtype_a : rep.dtype_b) = to_string(model->dtype());
    (k == 0 ? rep.matmul_a : rep.matmul_b) = backend::to_string(v[k].matmul);
    rep.failed[k] = res[k].n_request_errors;
    for (size_t i = 0; i < res[k].requests.size() && rep.first_error.empty(); ++i)
      rep.first_error = !res[k].requests[i].error.empty() ? res[k].requests[i].error
                        : i < res[k].outcomes.size()      ? res[k].outcomes[i].error
                                                          : "";
  }
  rep.scoring = decode ? "teacher-forced decode" : "cache-free";
  rep.requests = res[0].requests.size();
  const auto failed = [&](int k, size_t i) {
    return !res[k].requests[i].error.empty() || (i < res[k].outcomes.size() && !res[k].outcomes[i].ran);
  };
  for (size_t i = 0; i < rep.requests && i < res[1].requests.size(); ++i) rep.failed_either += failed(0, i) || failed(1, i);
  rep.tokens = token_deltas(tok[0], tok[1]);
  rep.flips = metric_flips(spec, res[0], res[1]);
  return rep;
}

}  // namespace

std::vector<double> decode_logprobs(Context& ctx, const ScoreRequest& r) {
  const int n = static_cast<int>(r.tokens.size());
  if (r.score_from < 1 || r.score_from >= n)
    throw ArgumentError(fmt::format("decode_logprobs: score_from {} outside [1, {})", r.score_from, n));
  const int64_t vocab = ctx.model().hparams().n_vocab;
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::vector<double> out;
  ctx.setup_caches(1, n - 1);
  struct Teardown {
    Context& c;
    ~Teardown() { c.delete_caches(); }
  } teardown{ctx};
  int pos = 0;  // tokens fed so far
  for (int next = r.score_from; next < n; ++next) {
    const int len = next - pos;  // feed tokens [pos, next): the prompt first, then one at a time
    ctx.forward(std::span<const int32_t>(r.tokens.data() + pos, static_cast<size_t>(len)), 1, len,
                std::span<const int>(&len, 1), Context::Logits::Last, logits);
    pos = next;
    double mx = -INFINITY;
    for (float l : logits) {
      if (!std::isfinite(l)) throw Error(fmt::format("decode_logprobs: non-finite logits before token {}", next));
      mx = std::max(mx, static_cast<double>(l));
    }
    double sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
    out.push_back(static_cast<double>(logits[static_cast<size_t>(r.tokens[static_cast<size_t>(next)])]) - mx - std::log(sum));
  }
  return out;
}

RequestPreview preview_requests(const EvalSpec& spec) {
  const gguf::File file(spec.model);
  int n_ctx = 0;
  try {  // a key of the wrong type is Model::load's error to report, in its words
    const std::string arch = file.get_string_or("general.architecture", "llama");
    n_ctx = static_cast<int>(std::min<uint64_t>(file.get_uint_or(arch + ".context_length", 0), 1 << 24));
  } catch (const FormatError&) {
  }
  if (n_ctx == 0 && !spec.max_length) return {};  // no window to build in: Model::load says why
  const Tokenizer tok = Tokenizer::from_gguf(file);
  RequestPreview p;
  for (const Request& r : build_requests(spec, tok, run_max_length(spec, n_ctx), nullptr)) {
    ++p.requests;
    if (r.error.empty()) continue;
    if (p.failed++ == 0) p.first_error = r.error;
  }
  return p;
}

FidelityReport compare_dtypes(const EvalSpec& spec, ComputeDtype a, ComputeDtype b) {
  const Variant v[2] = {{a, MatmulMode::Exact}, {b, MatmulMode::Exact}};
  return compare(spec, v, false);
}

FidelityReport compare_matmul(const EvalSpec& spec, ComputeDtype dtype) {
  const Variant v[2] = {{dtype, MatmulMode::Exact}, {dtype, MatmulMode::Int8}};
  return compare(spec, v, true);
}

}  // namespace kveval::eval
