// `kveval run spec.json`: validate the spec and its data, load the model, run
// the log-likelihood phase cache-free, then the generation phase in one
// scoped KV cache; print the metrics and phase tables; optionally write the
// results file, the per-request samples and compare against a baseline.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "eval/report.hpp"
#include "eval/runner.hpp"
#include "eval/spec.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"
#include "util/timer.hpp"

namespace kveval::cli {

namespace {

struct RunArgs {
  std::string spec;
  std::string model;
  std::string output;
  std::string log_samples;
  std::string baseline;
  double tolerance = 0.0;
  int threads = -1;
  int batch_size = -1;
  int limit = -1;
  bool quiet = false;
  std::string cache_policy = "release";
};

/// Progress on stderr: only when stderr is a terminal and the phase has run for more than a second.
class Progress {
 public:
  Progress() : tty_(isatty(fileno(stderr)) != 0) {}
  void operator()(std::string_view phase, size_t done, size_t total) {
    if (!tty_) return;
    if (phase != phase_) phase_ = std::string(phase), sw_.reset(), shown_ = false;
    if (sw_.seconds() < 1.0 && done < total) return;
    if (!shown_ && done == total && sw_.seconds() < 1.0) return;
    shown_ = true;
    fmt::print(stderr, "\r{}: {}/{}{}", phase_, done, total, done == total ? "\n" : "");
    std::fflush(stderr);
  }

 private:
  bool tty_;
  std::string phase_;
  Stopwatch sw_;
  bool shown_ = false;
};

int run(const RunArgs& a) {
  using namespace kveval::eval;
  // 1. the whole spec and every data file, before the model loads
  EvalSpec spec = load_spec(a.spec, a.model);
  if (a.threads >= 0) spec.threads = a.threads;
  if (a.batch_size > 0) spec.batch_size = a.batch_size;
  if (a.limit >= 0) {
    spec.limit = a.limit;
    for (auto& t : spec.tasks)
      if (t.docs.size() > static_cast<size_t>(a.limit)) t.docs.resize(static_cast<size_t>(a.limit));
  }
  nlohmann::json baseline;
  if (!a.baseline.empty()) {
    std::ifstream f(a.baseline, std::ios::binary);
    if (!f) throw ArgumentError(fmt::format("--baseline: {}: cannot open", a.baseline));
    std::stringstream ss;
    ss << f.rdbuf();
    baseline = parse_json_text(ss.str(), a.baseline);
    if (!baseline.is_object() || !baseline.contains("results"))
      throw SpecError(fmt::format("{}: not a kveval results file (no \"results\" object)", a.baseline));
  }
  std::ifstream probe(spec.model, std::ios::binary);
  if (!probe) throw ArgumentError(fmt::format("{}: model file not found (spec 'model' or --model)", spec.model));

  Progress progress;
  RunOptions opts;
  opts.cache_policy = parse_cache_policy(a.cache_policy);
  opts.progress = [&progress](std::string_view p, size_t d, size_t t) { progress(p, d, t); };
  opts.log = [&a](const std::string& line) {
    if (!a.quiet) fmt::print(stderr, "kveval: {}\n", line);
  };
  RunResult res = run_spec(spec, opts);

  fmt::print("{}\n{}", format_metrics_table(spec, res), format_phase_table(res));
  std::fflush(stdout);

  nlohmann::json results;
  if (!a.output.empty() || !a.baseline.empty()) results = results_json(spec, res, sha256_file(spec.model));
  if (!a.output.empty()) write_json(a.output, results);
  if (!a.log_samples.empty()) write_jsonl(a.log_samples, sample_records(spec, res));

  int code = kOk;
  if (res.n_request_errors > 0) {
    fmt::print(stderr, "kveval: {} request(s) failed (see the metrics table{})\n", res.n_request_errors,
               a.log_samples.empty() ? "" : " and " + a.log_samples);
    code = kRequestErrors;
  }
  if (!a.baseline.empty()) {
    std::vector<std::string> notes;
    auto regs = compare_baseline(baseline, results, a.tolerance, &notes);
    for (const auto& n : notes) fmt::print(stderr, "kveval: baseline: {}\n", n);
    for (const auto& r : regs)
      fmt::print(stderr, "kveval: regression: {} {}: {:.6g} -> {:.6g} (tolerance {})\n", r.task, r.metric, r.baseline,
                 r.current, a.tolerance);
    if (!regs.empty()) code = kRegression;
    else fmt::print(stderr, "kveval: baseline: no metric worse by more than {}\n", a.tolerance);
  }
  return code;
}

}  // namespace

void add_run_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Evaluate a model on the tasks of a JSON spec");
  cmd->add_option("spec", args->spec, "evaluation spec (JSON); see README")->required();
  cmd->add_option("--model", args->model, "GGUF model path (overrides the spec's 'model')");
  cmd->add_option("--output,-o", args->output, "write results (metrics, config, timings) as JSON");
  cmd->add_option("--log-samples", args->log_samples, "write one JSON line per request");
  cmd->add_option("--baseline", args->baseline, "results JSON of an earlier run; exit 3 if a metric got worse");
  cmd->add_option("--tolerance", args->tolerance, "allowed absolute worsening against --baseline (default 0)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", args->threads, "compute threads (overrides the spec; 0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--batch-size", args->batch_size, "rows per batch (overrides the spec)")->check(CLI::PositiveNumber);
  cmd->add_option("--limit", args->limit, "documents per task at most (overrides the spec)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--quiet,-q", args->quiet, "no informational lines on stderr");
  cmd->add_option("--cache-policy", args->cache_policy,
                  "generation cache on scope exit: release (delete, default) or reuse (keep the allocation, reset)")
      ->check(CLI::IsMember({"release", "reuse"}));
  cmd->callback([args, &action] { action = [args] { return run(*args); }; });
}

}  // namespace kveval::cli
