// `kveval run spec.json`: validate the spec and its data, load the model, run
// the log-likelihood phase cache-free, then the generation phase in one
// scoped KV cache; print the metrics and phase tables; optionally write the
// results file, the per-request samples and compare against a baseline.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/distributed.hpp"
#include "cli/lm_eval_args.hpp"
#include "cli/output_path.hpp"
#include "cli/progress.hpp"
#include "eval/chat_template.hpp"
#include "eval/report.hpp"
#include "eval/runner.hpp"
#include "eval/spec.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"
#include "util/input_file.hpp"
#include "util/number_format.hpp"
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
  std::string batch_size;  ///< --batch-size: an integer >= 1 or "auto" ("" = the spec's)
  int limit = -1;
  int max_length = -1;  ///< --max-length (-1: the spec's)
  int bootstrap_iters = -1;
  double progress_interval = 30;
  bool quiet = false;
  bool tolerance_given = false;
  std::string cache_policy = "release";
  std::string batching = "dynamic";
  bool no_prefix_packing = false;
  bool mmap = false;  ///< --mmap (over the spec's "mmap")
  std::string dtype, kv_cache_dtype, matmul;
  std::vector<std::string> tasks;          ///< --tasks: task, tag and group names (no spec file)
  std::vector<std::string> include_paths;  ///< --include-path
  int num_fewshot = -1;                    ///< --num-fewshot (-1: each task's own)
  std::string gen_kwargs;                  ///< --gen-kwargs as given ("" = none)
  double limit_fraction = 0;               ///< --limit in (0, 1): that share of each task's documents
  std::string limit_text;                  ///< --limit as given
  std::string output_path;                 ///< --output-path DIR: lm-eval's file layout (output_path.hpp)
  bool samples_to_dir = false;             ///< --log-samples with no value: samples files in --output-path
  std::string seed;                        ///< --seed as given ("" = not given)
  std::optional<std::string> chat_template;       ///< --apply-chat-template [NAME|FILE]: "" = the model's
  std::optional<std::string> system_instruction;  ///< --system-instruction
  bool fewshot_as_multiturn = false;              ///< --fewshot-as-multiturn
  std::string chat_template_text, system_instruction_text;  ///< the two options' values as CLI11 reads them
};

/// The value of a --log-samples given without one (no file name is a newline).
constexpr const char* kSamplesToOutputPath = "\n";
/// The value of an --apply-chat-template given without one: the model's own template.
constexpr const char* kModelChatTemplate = "\n";

/// Validator of --limit, as lm-eval's: an integer >= 1 (documents per task) or
/// a fraction in (0, 1) of each task's documents. 0 is refused: lm-eval slices
/// every task's requests to none and then fails on the empty list (IndexError
/// in evaluate(), lm_eval/evaluator.py).
CLI::Validator limit_validator() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        const bool number = !v.empty() && end && *end == '\0' && errno != ERANGE;
        const bool integer = v.find_first_not_of("0123456789") == std::string::npos && !v.empty();
        if (number && x == 0)
          return fmt::format("{} leaves no document to evaluate (lm-eval fails on it too); give N >= 1, a fraction in "
                             "(0, 1), or no --limit for every document",
                             v);
        if (integer && x <= 2147483647.0) return "";
        if (number && !integer && x > 0 && x < 1) return "";
        return fmt::format("expected an integer >= 1 or a fraction in (0, 1), got {}", v);
      },
      "N|FRACTION");
}

/// Validator for a number option: `lo` or more; an integer when `integer`.
/// Its message reads "--tolerance: must be >= 0, got -1" (CLI11 prefixes the option name).
CLI::Validator at_least(double lo, bool integer) {
  return CLI::Validator(
      [lo, integer](std::string& v) -> std::string {
        errno = 0;
        char* end = nullptr;
        double x = integer ? static_cast<double>(std::strtoll(v.c_str(), &end, 10)) : std::strtod(v.c_str(), &end);
        if (v.empty() || end == nullptr || *end != '\0' || errno == ERANGE || !std::isfinite(x))
          return fmt::format("expected {}, got '{}'", integer ? "an integer" : "a number", v);
        if (x < lo) return fmt::format("must be >= {}, got {}", lo, v);
        if (integer && x > 2147483647.0) return fmt::format("must be <= 2147483647, got {}", v);
        return "";
      },
      integer ? fmt::format("INT>={}", lo) : fmt::format("NUMBER>={}", lo));
}

/// Validator of --batch-size: an integer in the spec's batch_size range [1, kMaxBatchSize]
/// ("--batch-size: expected an integer in [1, 4096], got 5000"), or lm-eval's "auto" / "auto:N".
CLI::Validator batch_size_validator() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        if (v == "auto" || v.starts_with("auto:")) return {};
        std::string copy = v;
        return int_in(1, eval::kMaxBatchSize)(copy);
      },
      fmt::format("INT in [1, {}]|auto", eval::kMaxBatchSize));
}

/// Fault injection for the tests (KVEVAL_FAULT_INJECT="RANK:PHASE:throw|kill|term|int"):
/// rank RANK throws an Error, kills itself with SIGKILL, or raises SIGTERM or
/// SIGINT when PHASE starts: "load", "loglikelihood", "generation", or a stage
/// of writing the outputs: "samples-temp" (the samples' temporary file
/// written, not yet renamed), "samples-done" (samples in place, results not yet
/// written), "results-temp" (the results' temporary file written, not yet
/// renamed). Unset: nothing.
std::function<void(std::string_view)> fault_injector(int rank) {
  const char* v = std::getenv("KVEVAL_FAULT_INJECT");
  if (!v || !*v) return {};
  std::string spec(v);
  size_t a = spec.find(':'), b = spec.rfind(':');
  if (a == std::string::npos || a == b)
    throw ArgumentError(fmt::format("KVEVAL_FAULT_INJECT={}: expected RANK:PHASE:throw|kill|term|int", spec));
  int r = std::atoi(spec.substr(0, a).c_str());
  std::string phase = spec.substr(a + 1, b - a - 1), action = spec.substr(b + 1);
  if (r != rank) return {};
  return [phase, action](std::string_view p) {
    if (p != phase) return;
    if (action == "kill") ::kill(::getpid(), SIGKILL);
    if (action == "term") ::raise(SIGTERM);
    if (action == "int") ::raise(SIGINT);
    throw Error(fmt::format("injected fault in phase {} (KVEVAL_FAULT_INJECT)", phase));
  };
}

/// The files the tasks of `spec` read, as (what, path): each task's dataset_path,
/// fewshot_split and task file, where given, and a chat template file; the names used in messages.
std::vector<std::pair<std::string, std::string>> task_input_files(const eval::EvalSpec& spec) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& t : spec.tasks) {
    std::vector<std::pair<const char*, std::string>> own;  // a split of several files: each of them
    for (const auto& p : t.dataset_files.empty() ? std::vector<std::string>{t.dataset_path} : t.dataset_files)
      own.emplace_back("dataset_path", p);
    for (const auto& p : t.fewshot_files.empty() ? std::vector<std::string>{t.fewshot_split} : t.fewshot_files)
      own.emplace_back("fewshot_split", p);
    own.emplace_back("task file", t.source);
    for (const auto& [what, path] : own)
      if (!path.empty()) files.emplace_back(fmt::format("{} of task '{}'", what, t.name), path);
  }
  std::error_code ec;  // a template from a file is named by its path (one from the model by "model: key")
  if (spec.chat.tpl && std::filesystem::is_regular_file(spec.chat.tpl->origin, ec))
    files.emplace_back("the chat template file", spec.chat.tpl->origin);
  return files;
}

/// The spec file and every data file of `spec` that is a regular file (dataset_path,
/// fewshot_split, the task's YAML), each once, with its size and the sha256 of its bytes.
std::vector<eval::InputFingerprint> spec_inputs(const std::string& spec_path, const eval::EvalSpec& spec) {
  std::vector<std::pair<std::string, std::string>> files = {{"the spec file", spec_path}};
  for (auto& f : task_input_files(spec)) files.push_back(std::move(f));
  std::vector<eval::InputFingerprint> out;
  std::set<std::string> seen;
  for (const auto& [what, path] : files) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec) || !seen.insert(path).second) continue;
    const std::string sha = sha256_file(path);
    out.push_back({what, path, std::filesystem::file_size(path, ec), sha});
  }
  return out;
}

/// The command line's values over the spec's: threads, dtype, kv_cache_dtype, batch_size,
/// bootstrap_iters, max_length, limit (the documents cut to it), each key recorded in
/// spec.set_by so that a message about its value names the option. Throws ArgumentError
/// for a --max-length below a rolling task's context_length.
void apply_run_options(const RunArgs& a, const Distributed& dist, eval::EvalSpec& spec) {
  using namespace kveval::eval;
  if (a.threads >= 0) spec.threads = a.threads, spec.set_by["threads"] = "--threads";
  if (!a.dtype.empty()) spec.dtype = parse_compute_dtype(a.dtype, "--dtype"), spec.set_by["dtype"] = "--dtype";
  if (!a.kv_cache_dtype.empty())
    spec.kv_cache_dtype = parse_kv_cache_dtype(a.kv_cache_dtype, "--kv-cache-dtype"), spec.set_by["kv_cache_dtype"] = "--kv-cache-dtype";
  if (!a.matmul.empty()) spec.matmul = parse_matmul_mode(a.matmul, "--matmul"), spec.set_by["matmul"] = "--matmul";
  if (a.mmap) spec.map_weights = true, spec.set_by["mmap"] = "--mmap";
  // several ranks on one host share its cores unless --threads or the spec says otherwise
  if (a.threads < 0 && spec.threads == 0 && dist.local_size() > 1)
    spec.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / dist.local_size());
  if (a.batch_size == "auto" || a.batch_size.starts_with("auto:")) spec.batch_size_auto = true;  // lm-eval's auto[:N]
  else if (!a.batch_size.empty()) spec.batch_size = std::stoi(a.batch_size), spec.batch_size_auto = false;
  if (!a.batch_size.empty()) spec.set_by["batch_size"] = "--batch-size";
  if (a.bootstrap_iters >= 0) spec.bootstrap_iters = a.bootstrap_iters, spec.set_by["bootstrap_iters"] = "--bootstrap-iters";
  if (a.max_length >= 0) {
    spec.max_length = a.max_length, spec.set_by["max_length"] = "--max-length";
    for (const auto& t : spec.tasks)
      if (t.context_length > a.max_length)
        throw ArgumentError(fmt::format("--max-length {}: task '{}' has {} tokens per rolling chunk (context_length)",
                                        a.max_length, t.name, t.context_length));
  }
  if (!a.limit_text.empty()) spec.set_by["limit"] = "--limit";
  if (a.limit >= 0) {
    spec.limit = a.limit;
    for (auto& t : spec.tasks)
      if (t.docs.size() > static_cast<size_t>(a.limit)) t.docs.resize(static_cast<size_t>(a.limit));
  }
  if (a.limit_fraction > 0) spec.limit_fraction = a.limit_fraction;
  for (auto& t : spec.tasks)  // lm-eval: ceil(len(eval_docs) * limit) documents
    if (a.limit_fraction > 0)
      t.docs.resize(std::min(t.docs.size(), static_cast<size_t>(std::ceil(t.n_docs_total * a.limit_fraction))));
}

/// Where the model path came from, for its not-found line: "--model", or the spec's 'model' as written and,
/// when relative, the absolute path it resolved to against the spec's folder.
std::string model_origin(const RunArgs& a, const eval::EvalSpec& spec) {
  if (!a.model.empty()) return "--model";
  const nlohmann::json& m = spec.raw.is_object() && spec.raw.contains("model") ? spec.raw["model"] : nlohmann::json();
  if (m.is_string() && std::filesystem::path(m.get<std::string>()).is_relative())
    return fmt::format("spec 'model' \"{}\", resolved against the spec's folder: {}", m.get<std::string>(),
                       std::filesystem::weakly_canonical(std::filesystem::absolute(spec.model)).string());
  return "spec 'model'";
}

/// Steps 0 and 1 of a run, on every rank: the command line, the spec and its
/// data, the baseline (rank 0) and the model file's presence. Throws SpecError /
/// ArgumentError like a one-process run.
void prepare(const RunArgs& a, const Distributed& dist, eval::EvalSpec& spec, nlohmann::json& baseline) {
  using namespace kveval::eval;
  // 0. the command line: output paths, before anything is read or run (rank 0 writes them)
  if (a.tolerance_given && a.baseline.empty()) throw ArgumentError("--tolerance needs --baseline");
  if (a.output == "-" && a.log_samples == "-")
    throw ArgumentError("--output - and --log-samples -: only one of them can go to stdout");
  if (dist.rank() == 0 && !a.output.empty() && a.output != "-") util::check_writable("--output", a.output);
  if (dist.rank() == 0 && !a.log_samples.empty() && a.log_samples != "-") util::check_writable("--log-samples", a.log_samples);
  if (!a.output.empty() && !a.log_samples.empty() && util::same_output_file(a.output, a.log_samples))
    throw ArgumentError(a.output == "-" || a.log_samples == "-"
                            ? std::string("--output and --log-samples both go to stdout: only one of them can")
                            : fmt::format("--output and --log-samples name the same file ({})", a.output));
  // 1. the whole spec and every data file, before the model loads
  std::error_code ec;
  if (!a.output_path.empty() && std::filesystem::exists(a.output_path, ec) && !std::filesystem::is_directory(a.output_path, ec))
    throw ArgumentError(fmt::format("--output-path {}: not a directory", a.output_path));
  TaskOverrides over;
  if (a.num_fewshot >= 0) over.num_fewshot = a.num_fewshot;
  over.include_paths = a.include_paths;
  std::optional<Seeds> seeds;
  if (!a.seed.empty()) seeds = parse_seed_arg(a.seed);
  if (seeds && (*seeds)[3]) over.fewshot_seed = static_cast<uint64_t>(*(*seeds)[3]);
  if (!a.gen_kwargs.empty()) over.gen_kwargs = parse_gen_kwargs_arg(a.gen_kwargs);
  over.apply_chat_template = a.chat_template;
  over.system_instruction = a.system_instruction;
  over.fewshot_as_multiturn = a.fewshot_as_multiturn;
  if (a.tasks.empty()) spec = load_spec(a.spec, a.model, over);
  else spec = parse_spec({{"model", a.model}, {"tasks", a.tasks}}, "--tasks", ".", a.model, over);
  if (dist.rank() == 0)  // also under --quiet: a name that resolves as lm-eval does, not as it reads
    for (const auto& n : spec.notes) fmt::print(stderr, "kveval: note: {}\n", n);
  // an output that names an input would replace it (the spec, the model, the baseline the gate reads, a task's data)
  for (const auto& [option, out] : {std::pair<const char*, const std::string&>{"--output", a.output}, {"--log-samples", a.log_samples}}) {
    if (out.empty() || out == "-") continue;
    std::vector<std::pair<std::string, std::string>> inputs = {{"the spec file", a.spec}, {"the model file", spec.model}};
    if (!a.baseline.empty()) inputs.emplace_back("the --baseline file", a.baseline);
    for (auto& f : task_input_files(spec)) inputs.push_back(std::move(f));
    for (const auto& [what, path] : inputs)
      if (util::same_output_file(out, path))
        throw ArgumentError(fmt::format("{} {} is {}{}: refusing to overwrite an input", option, out, what,
                                        path == out ? "" : " (" + path + ")"));
  }
  if (seeds) std::tie(spec.random_seed, spec.numpy_seed, spec.torch_seed) = std::tie((*seeds)[0], (*seeds)[1], (*seeds)[2]);
  apply_run_options(a, dist, spec);
  if (dist.rank() == 0 && !a.baseline.empty()) {
    std::string text;
    try {
      text = util::read_input_file(a.baseline, util::InputKind::Text);
    } catch (const SpecError& e) {
      throw SpecError(fmt::format("--baseline: {}", e.what()));
    }
    baseline = parse_json_text(text, a.baseline);
    if (!baseline.is_object() || !baseline.contains("results") || !baseline["results"].is_object())
      throw SpecError(fmt::format("{}: not a kveval results file (no \"results\" object)", a.baseline));
  }
  require_model_file(spec.model, model_origin(a, spec));
}

/// The samples (--log-samples), then the results (--output), each all or
/// nothing (util::AtomicFile; `-` is stdout, every write checked). The results
/// name the samples they describe ("kveval"."samples": path and sha256 of the
/// bytes written), and are written only once those samples are in place: a
/// crash or signal between the two leaves the old results (whose sha256 no
/// longer matches) or none, never results newer than the samples.
void write_outputs(const RunArgs& a, const eval::EvalSpec& spec, const eval::RunResult& res,
                   const std::function<void(std::string_view)>& inject) {
  using namespace kveval::eval;
  const auto stage = [&inject](std::string_view s) {
    if (inject) inject(s);
  };
  nlohmann::ordered_json samples_link;
  if (!a.log_samples.empty()) {
    std::string text;
    for (const auto& l : sample_records(spec, res))
      text += l.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    samples_link = {{"path", a.log_samples}, {"sha256", sha256_hex(text)}};
    if (a.log_samples == "-") {
      util::write_all(STDOUT_FILENO, text, "stdout");
    } else {
      util::AtomicFile f(a.log_samples);
      f.write(text);
      stage("samples-temp");
      f.commit();
    }
    stage("samples-done");
  }
  if (a.output.empty() && a.output_path.empty()) return;
  nlohmann::ordered_json results = results_json(spec, res, res.model_sha256);
  if (!samples_link.is_null()) results["kveval"]["samples"] = samples_link;
  if (!a.output.empty()) {
    const std::string text = results.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (a.output == "-") {
      util::write_all(STDOUT_FILENO, text, "stdout");
    } else {
      util::AtomicFile f(a.output);
      f.write(text);
      stage("results-temp");
      f.commit();
    }
  }
  if (!a.output_path.empty()) {  // lm-eval's layout: samples files first, then results (output_path.hpp)
    const std::vector<nlohmann::ordered_json> recs =
        a.samples_to_dir ? sample_records(spec, res) : std::vector<nlohmann::ordered_json>{};
    write_output_path(a.output_path, a.model.empty() ? spec.model : a.model,
                      lm_eval_date_id(std::chrono::system_clock::now()), results, a.samples_to_dir ? &recs : nullptr);
  }
}

int run(const RunArgs& a) {
  using namespace kveval::eval;
  Distributed& dist = Distributed::get();
  EvalSpec spec;
  nlohmann::json baseline;
  // A failure on any rank stops all of them with that rank's message (a model
  // missing on one host names the host).
  collectively(dist, [&] { prepare(a, dist, spec, baseline); });
  // every rank read the same spec and data files, or all stop before the model loads
  std::vector<eval::InputFingerprint> agreed;
  if (dist.size() > 1) {
    collectively(dist, [&] { agreed = spec_inputs(a.spec, spec); });
    dist.same_inputs(agreed);
  }

  ProgressMeter progress(stderr, !a.quiet && dist.rank() == 0, isatty(fileno(stderr)) != 0, a.progress_interval);
  RunOptions opts;
  opts.cache_policy = parse_cache_policy(a.cache_policy);
  opts.batching = a.batching == "static" ? Batching::Static : Batching::Dynamic;
  opts.pack_prefixes = !a.no_prefix_packing;
  // the results record it, and ranks compare it: hashed at load, from the bytes loaded
  opts.hash_model = !a.output.empty() || !a.output_path.empty() || !a.baseline.empty() || dist.size() > 1;
  opts.progress = [&progress](std::string_view p, size_t d, size_t t, int64_t tok) { progress.update(p, d, t, tok); };
  opts.log = [&a, &dist](const std::string& line) {
    if (!a.quiet && dist.rank() == 0) fmt::print(stderr, "kveval: {}\n", line);
  };
  opts.shard = dist.shard();
  const std::function<void(std::string_view)> inject = fault_injector(dist.rank());
  opts.on_phase = inject;
  if (dist.rank() != 0) opts.progress = nullptr;
  RunResult res = run_spec(spec, opts);
  if (!res.is_root()) return dist.broadcast_exit_code(kOk);  // rank 0 reports and decides
  res.agreed_inputs.insert(res.agreed_inputs.begin(), agreed.begin(), agreed.end());

  // `-o -` / `--log-samples -`: that file goes to stdout, the tables to stderr
  const bool json_on_stdout = a.output == "-" || a.log_samples == "-";
  const std::string groups = format_groups_table(spec, res);  // lm-eval prints its groups table after the tasks
  fmt::print(json_on_stdout ? stderr : stdout, "{}\n{}{}", format_metrics_table(spec, res),
             groups.empty() ? "" : groups + "\n", format_phase_table(res));
  std::fflush(stdout);

  write_outputs(a, spec, res, inject);

  int code = kOk;
  if (res.n_request_errors > 0) {
    fmt::print(stderr, "kveval: {} failed (see the metrics table{})\n", count_of(res.n_request_errors, "request"),
               a.log_samples.empty() ? "" : " and " + a.log_samples);
    code = kRequestErrors;
  }
  if (!a.baseline.empty()) {
    BaselineCheck check = compare_baseline(baseline, nlohmann::json::parse(results_json(spec, res, res.model_sha256).dump()),
                                           a.tolerance);
    for (const auto& w : check.warnings) fmt::print(stderr, "kveval: baseline: warning: {}\n", w);
    for (const auto& f : check.failures) fmt::print(stderr, "kveval: baseline: not compared: {}\n", f);
    for (const auto& r : check.regressions)
      fmt::print(stderr, "kveval: regression: {} {}: {:.6g} -> {:.6g} (tolerance {})\n", r.task, r.metric, r.baseline,
                 r.current, a.tolerance);
    if (!check.ok()) code = kRegression;
    else if (!a.quiet) fmt::print(stderr, "kveval: baseline: no metric worse by more than {}\n", a.tolerance);
  }
  return dist.broadcast_exit_code(code);
}

}  // namespace

/// lm-eval's chat options: --apply-chat-template [NAME], --system-instruction, --fewshot-as-multiturn
/// (also with lm-eval's underscores). Returns the --apply-chat-template and --system-instruction options.
std::pair<CLI::Option*, CLI::Option*> add_chat_options(CLI::App* cmd, RunArgs& a) {
  CLI::Option* apply = cmd->add_option("--apply-chat-template,--apply_chat_template", a.chat_template_text,
                                       "render prompts with the model's chat template (NAME: its tokenizer.chat_template.NAME, "
                                       "or a template FILE), as lm-eval's --apply_chat_template")
                           ->expected(0, 1)
                           ->default_str(kModelChatTemplate)
                           ->option_text("[NAME|FILE]");
  CLI::Option* system = cmd->add_option("--system-instruction,--system_instruction", a.system_instruction_text,
                                        "system instruction of every prompt (a system message with --apply-chat-template, "
                                        "else put before the prompt)");
  cmd->add_flag("--fewshot-as-multiturn,--fewshot_as_multiturn", a.fewshot_as_multiturn,
                "few-shot examples as user/assistant turns (needs --apply-chat-template)");
  return {apply, system};
}

/// The chat options' values as given: --apply-chat-template with no value is the model's template, "" is refused.
/// Its optional value takes the next argument, so `run --apply-chat-template spec.json` reads the spec as the
/// template: a value that is an existing .json or .yaml file, or one that leaves no spec and no --tasks, is
/// refused with the two ways to write it. `has_spec`: a spec or --tasks was given.
void read_chat_options(RunArgs& a, const CLI::Option* chat_opt, const CLI::Option* system_opt, bool has_spec) {
  if (chat_opt->count() > 0) {
    if (a.chat_template_text.empty()) throw CLI::ValidationError("--apply-chat-template", "empty name");
    const std::string& v = a.chat_template_text;
    std::error_code ec;
    const std::string ext = std::filesystem::path(v).extension().string();
    const bool spec_file = (ext == ".json" || ext == ".yaml" || ext == ".yml") && std::filesystem::is_regular_file(v, ec);
    if (v != kModelChatTemplate && (spec_file || !has_spec))
      throw CLI::ValidationError(
          "--apply-chat-template",
          fmt::format("took '{}' as the template{}: write --apply-chat-template=NAME for a template, or put the spec "
                      "before --apply-chat-template for the model's own",
                      v, spec_file ? ", but it is a spec file" : ", leaving no spec or --tasks"));
    a.chat_template = a.chat_template_text == kModelChatTemplate ? "" : a.chat_template_text;
  }
  if (system_opt->count() > 0) a.system_instruction = a.system_instruction_text;
}

/// lm-eval's run options that reach into the tasks: --include-path, --num-fewshot, --seed, --gen-kwargs.
void add_lm_eval_run_options(CLI::App* cmd, RunArgs& a) {
  cmd->add_option("--include-path,--include_path", a.include_paths,
                  "directory of lm-eval task YAMLs where task names are looked up (repeatable)")
      ->allow_extra_args(false)
      ->check(non_empty_path());
  cmd->add_option("--num-fewshot,--num_fewshot", a.num_fewshot, "few-shot examples for every task (overrides each task's)")
      ->check(int_in(0, 1 << 20));
  cmd->add_option("--seed", a.seed, "lm-eval's seeds: N for all four, or R,N,T,F (random, numpy, torch, few-shot; "
                                        "None = unset); only the few-shot seed changes what kveval computes (it is also sampling's default seed)");
  cmd->add_option("--gen-kwargs,--gen_kwargs", a.gen_kwargs,
                  "generation_kwargs for every generate_until task, as lm-eval: key=value,... or a JSON object "
                  "(until, max_gen_toks, do_sample, temperature, top_k, top_p, min_p, seed)");
  cmd->add_option("--max-length,--max_length", a.max_length,
                  "context window in tokens (overrides the spec's max_length; default the model's context_length): "
                  "longer requests are left-truncated as lm-eval's max_length")
      ->check(int_in(2, 1 << 24));  // the spec's max_length range
}

/// run's --dtype, --kv-cache-dtype, --matmul and --mmap (each overrides the spec's key).
void add_dtype_options(CLI::App* cmd, RunArgs& a) {
  cmd->add_option("--dtype", a.dtype,
                  fmt::format("compute dtype: {} (overrides the spec; default auto: blocks-bf16 on a bf16 CPU, else "
                              "blocks, when every matrix has a kept-block type, else bf16 on a bf16 CPU for a non-F32 "
                              "file; docs/dtypes.md)",
                              join_names(compute_dtype_name_list())));
  cmd->add_option("--kv-cache-dtype", a.kv_cache_dtype,
                  fmt::format("KV-cache element type: {} (overrides the spec; default auto: bf16 when the compute "
                              "dtype is bf16, else f32)",
                              join_names(kv_cache_dtype_name_list())));
  cmd->add_option("--matmul", a.matmul, "decode steps on kept Q8_0/Q4_0/Q4_K/Q5_K/Q6_K blocks: exact (f32, the default) or int8 (llama.cpp's int8 activations, not exact; docs/dtypes.md)");
  add_mmap_flag(cmd, a.mmap, "", "overrides the spec's mmap; ");
}

void add_run_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Evaluate a model on the tasks of a JSON spec");
  CLI::Option* spec_opt = cmd->add_option("spec", args->spec, "evaluation spec (JSON); see docs/spec.md");
  CLI::Option* tasks_opt = cmd->add_option("--tasks", args->tasks,
                                           "task, tag or group names, comma-separated, run without a spec file (needs --model)")
                               ->delimiter(',')
                               ->allow_extra_args(false);
  add_lm_eval_run_options(cmd, *args);
  const auto [chat_opt, system_opt] = add_chat_options(cmd, *args);
  cmd->add_option("-m,--model", args->model, "GGUF model path (overrides the spec's 'model')");
  cmd->add_option("--output,-o", args->output, "write results as JSON in lm-eval's shape ('-' = stdout)")
      ->check(non_empty_path());
  CLI::Option* samples_opt = cmd->add_option("--log-samples,--log_samples", args->log_samples,
                  "write lm-eval samples, one JSON line per document ('-' = stdout; no value: per task in --output-path)")
      ->expected(0, 1)
      ->default_str(kSamplesToOutputPath)
      ->option_text("[FILE]")
      ->check(non_empty_path());
  cmd->add_option("--output-path,--output_path", args->output_path,
                  "write DIR/<model>/results_<date>.json as lm-eval does (and samples_<task>_<date>.jsonl with --log-samples)")
      ->check(non_empty_path());
  cmd->add_option("--baseline", args->baseline, "results JSON of an earlier run; exit 3 if a metric got worse")
      ->check(non_empty_path());
  CLI::Option* tol = cmd->add_option("--tolerance", args->tolerance,
                                     "allowed absolute worsening against --baseline (default 0)")
                          ->check(at_least(0, false));
  cmd->add_option("-t,--threads", args->threads, "compute threads (overrides the spec; 0 = all cores)")
      ->check(int_in(0, kMaxThreads));
  add_dtype_options(cmd, *args);
  cmd->add_option("--batch-size,--batch_size", args->batch_size,
                  "rows per batch (overrides the spec), or auto: the largest (at most 64) the memory plan allows")
      ->check(batch_size_validator());
  cmd->add_option("--limit", args->limit_text,
                  "documents per task at most (N >= 1), or a fraction in (0, 1) of each task's (overrides the spec)")
      ->check(limit_validator());
  cmd->add_option("--bootstrap-iters", args->bootstrap_iters,
                  "bootstrap resamples for the stderr of perplexity (lm-eval's default 100000; 0 = no stderr)")
      ->check(int_in(0, 100000000));  // the spec's bootstrap_iters range
  cmd->add_flag("--quiet,-q", args->quiet, "no progress and no informational lines on stderr");
  cmd->add_option("--progress-interval", args->progress_interval,
                  "seconds between progress lines when stderr is not a terminal (default 30)")
      ->check(at_least(0.1, false));
  cmd->add_option("--cache-policy", args->cache_policy,
                  "generation cache on scope exit: release (delete, default) or reuse (keep the allocation, reset)")
      ->check(CLI::IsMember({"release", "reuse"}));
  cmd->add_option("--batching", args->batching,
                  "generation rows: dynamic (a finished row takes the next request at once, default) or static "
                  "(batches of batch_size decode until their longest row ends); same outputs")
      ->check(CLI::IsMember({"dynamic", "static"}));
  cmd->add_flag("--no-prefix-packing", args->no_prefix_packing, "score each request alone (no prefix packing); the same numbers in f32 (bf16 on AMX: see docs/engine.md)");
  cmd->callback([args, tol, spec_opt, tasks_opt, samples_opt, chat_opt = chat_opt, system_opt = system_opt, &action] {
    args->tolerance_given = tol->count() > 0;
    if (!args->limit_text.empty()) {
      const double x = std::strtod(args->limit_text.c_str(), nullptr);
      if (x < 1) args->limit_fraction = x;
      if (args->limit_text.find_first_not_of("0123456789") == std::string::npos) args->limit = static_cast<int>(x), args->limit_fraction = 0;
    }
    // an empty value is refused, not read as "no samples" (CLI11 takes '' as no value given)
    if (samples_opt->count() > 0 && args->log_samples.empty()) throw CLI::ValidationError("--log-samples", "empty path");
    if (args->log_samples == kSamplesToOutputPath) {
      if (args->output_path.empty()) throw CLI::ValidationError("--log-samples", "needs a file, or --output-path DIR to write into");
      args->log_samples.clear(), args->samples_to_dir = true;
    }
    read_chat_options(*args, chat_opt, system_opt, spec_opt->count() > 0 || tasks_opt->count() > 0);
    if (spec_opt->count() == 0 && tasks_opt->count() == 0)
      throw CLI::ValidationError("run", "give a spec file or --tasks NAMES");
    if (spec_opt->count() > 0 && tasks_opt->count() > 0)
      throw CLI::ValidationError("--tasks", fmt::format("cannot be combined with a spec file ({}): give either the spec "
                                                        "file or --tasks NAMES with --model",
                                                        args->spec));
    if (tasks_opt->count() > 0 && args->model.empty()) throw CLI::ValidationError("--tasks", "needs --model (-m)");
    // stdout by another name is "-" (the tables go to stderr); two of them are refused by prepare()
    const bool o_stdout = !args->output.empty() && util::names_stdout(args->output);
    const bool l_stdout = !args->log_samples.empty() && util::names_stdout(args->log_samples);
    if (o_stdout != l_stdout) (o_stdout ? args->output : args->log_samples) = "-";
    action = [args] { return run(*args); };
  });
}

}  // namespace kveval::cli
