// `kveval bench`: cached vs uncached throughput, KV-cache lifecycle cost and
// a roofline report (llama-bench style; see bench/run.hpp).
#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench/run.hpp"
#include "cli/commands.hpp"
#include "util/atomic_file.hpp"
#include "model/model.hpp"
#include "util/error.hpp"

namespace kveval::cli {

namespace {

/// "8x4096" -> {8, 4096}; throws ArgumentError naming the option.
std::array<int, 2> parse_shape(const std::string& s) {
  const auto x = s.find('x');
  try {
    if (x == std::string::npos) throw std::invalid_argument("no x");
    size_t used_a = 0, used_b = 0;
    const int a = std::stoi(s.substr(0, x), &used_a);
    const int b = std::stoi(s.substr(x + 1), &used_b);
    if (used_a != x || used_b != s.size() - x - 1) throw std::invalid_argument("trailing");
    return {a, b};
  } catch (const std::exception&) {
    throw ArgumentError(fmt::format("--cache-shapes: '{}' is not BATCHxPOSITIONS (e.g. 8x4096)", s));
  }
}

/// Drops repeated values, keeping the first of each in order (-t 1,1, --dtype
/// f32,f32, --matmul int8,int8 and -p 8,8 measure once).
template <class T>
void drop_repeats(std::vector<T>& v) {
  std::vector<T> out;
  for (const T& x : v)
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  v = std::move(out);
}

/// Validator of bench's -o: a report format (md, csv, json or jsonl). A value that looks like a file name (it has a
/// '.' or a '/') gets the option that writes a file: "-o: 'r.json' is not a format (md, csv, json or jsonl); to
/// write the JSON report to a file, use --json-out r.json".
CLI::Validator report_format() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        for (const char* f : {"md", "csv", "json", "jsonl"})
          if (v == f) return "";
        if (v.find_first_of("./") != std::string::npos)
          return fmt::format("'{}' is not a format (md, csv, json or jsonl); to write the JSON report to a file, use "
                             "--json-out {}",
                             v, v);
        return fmt::format("'{}' is not a format: expected md, csv, json or jsonl", v);
      },
      "md|csv|json|jsonl");
}

/// The bench command's parsed options.
struct BenchState {
  bench::Options o;
  std::vector<std::string> shapes = {"1x512", "4x2048", "8x4096"};
  std::string output = "md";
  int stream_mib = 0;
  bool progress = false;
  std::string json_out;
};

/// Registers the bench options on `sub`, bound to `st`.
void add_bench_options(CLI::App* sub, const std::shared_ptr<BenchState>& st) {
  sub->add_option("-m,--model", st->o.model_path, "GGUF model")->required();
  sub->add_option("-t,--threads", st->o.threads, "thread counts, comma-separated (default and 0: all cores)")
      ->delimiter(',')
      ->check(int_in(0, kMaxThreads));
  std::string reduced;  // "bf16/q8_0/q4_0": the dtypes fidelity compares with f32
  for (const std::string& n : compute_dtype_name_list(true)) reduced += (reduced.empty() ? "" : "/") + n;
  sub->add_option("--dtype", st->o.dtypes,
                  fmt::format("compute dtypes, comma-separated: {} (default auto); fidelity compares f32 with the "
                              "first of {} named (default bf16)",
                              join_names(compute_dtype_name_list(), ", "), reduced))
      ->delimiter(',')->capture_default_str();
  sub->add_option("--kv-cache-dtype", st->o.kv_cache_dtypes,
                  fmt::format("KV-cache element types, comma-separated: {} (bf16 when the compute dtype is bf16, "
                  "else f32); tg (interleaved), cache, switch and gen-mixed run once per type, the other tests once per --dtype "
                  "and thread count with the first type; fidelity takes one type; a type whose generation stops early "
                  "(non-finite logits) is skipped with a warning",
                              join_names(kv_cache_dtype_name_list())))
      ->delimiter(',')->capture_default_str();
  sub->add_option("--matmul", st->o.matmul,
                  "decode steps on kept Q8_0/Q4_0/Q4_K/Q5_K/Q6_K blocks, comma-separated: exact (f32) and/or int8 "
                  "(llama.cpp's int8 activations, not exact; docs/dtypes.md); the tests run once per mode, in order, "
                  "each row records its mode; with int8 listed, fidelity compares exact with int8 in the first --dtype")
      ->delimiter(',')->capture_default_str();
  add_mmap_flag(sub, st->o.map_weights, "in every load, ", "");
  sub->add_option("-b,--batch-size", st->o.batches, "rows per forward, comma-separated")->delimiter(',')->capture_default_str();
  sub->add_option("-p,--n-prompt", st->o.n_prompt, "pp: prompt tokens, comma-separated")->delimiter(',')->capture_default_str();
  sub->add_option("-n,--n-gen", st->o.n_gen, "tg/tg-nocache: generated tokens, comma-separated")->delimiter(',')->capture_default_str();
  sub->add_option("--tg-prompt", st->o.tg_prompt, "tg/tg-nocache: prompt tokens before generating")->delimiter(',')->capture_default_str();
  sub->add_option("-r,--repetitions", st->o.repetitions, "timed repetitions after one warm-up")->capture_default_str();
  sub->add_option("--tests", st->o.tests, "tests to run: roofline,pp,tg,tg-nocache,cache,switch,ll (default: all of these), mc, load, dequant, fidelity, gen-mixed")
      ->delimiter(',');
  sub->add_option("--cache-shapes", st->shapes, "cache test: BATCHxPOSITIONS list")->delimiter(',')->capture_default_str();
  sub->add_option("--switch-rounds", st->o.switch_rounds, "switch: timed rounds per policy")->capture_default_str();
  sub->add_option("--switch-batch", st->o.switch_batch, "switch: rows per round")->capture_default_str();
  sub->add_option("--switch-prompt", st->o.switch_prompt, "switch: prompt tokens per row")->capture_default_str();
  sub->add_option("--switch-gen", st->o.switch_gen, "switch: generated tokens per row")->capture_default_str();
  sub->add_option("--ll-requests", st->o.ll_requests, "ll: synthetic requests")->capture_default_str();
  sub->add_option("--mc-docs", st->o.mc.docs, "mc: documents")->capture_default_str();
  sub->add_option("--mc-prefix", st->o.mc.prefix, "mc: tokens of the prefix all documents share (BOS first)")
      ->capture_default_str();
  sub->add_option("--mc-context", st->o.mc.context, "mc: tokens of each document's own context")->capture_default_str();
  sub->add_option("--mc-choices", st->o.mc.choices, "mc: choices per document")->capture_default_str();
  sub->add_option("--mc-choice-tokens", st->o.mc.choice_tokens, "mc: tokens per choice")->capture_default_str();
  sub->add_option("--gen-mixed-prompts", st->o.gen_mixed_prompts, "gen-mixed: prompts per run")->capture_default_str();
  sub->add_option("--gen-mixed-max-gen", st->o.gen_mixed_max_gen, "gen-mixed: max_gen_toks drawn in [1, this]")
      ->capture_default_str();
  sub->add_option("--gen-mixed-rows", st->o.gen_mixed_rows, "gen-mixed: cache rows (default when -b has no value >= 2)")
      ->capture_default_str();
  sub->add_option("--stream-mib", st->stream_mib, "roofline: read buffer in MiB (default: max(4 x LLC, 256 MiB), <= 2 GiB)");
  sub->add_option("--spec", st->o.spec, fmt::format("fidelity: evaluation spec scored in f32 and in the first of {} --dtype names (its tasks; "
                              "the model is --model)",
                              reduced));
  sub->add_option("--seed", st->o.seed, "seed of the synthetic token ids")->check(seed_validator())->capture_default_str();
  sub->add_option("-o,--output", st->output, "report format on stdout: md, csv, json or jsonl (a file: --json-out)")
      ->check(report_format())
      ->capture_default_str();
  sub->add_option("--json-out", st->json_out, "also write the JSON report to this file")->check(non_empty_path());
  sub->add_flag("--progress", st->progress, "print each measurement to stderr as it starts");
}

/// `kveval bench` with the parsed options: checks, measures, prints; the exit code.
int run_bench_command(const BenchState& st) {
  bench::Options o = st.o;
  const int all_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (o.threads.empty()) o.threads = {all_cores};
  for (int& t : o.threads)
    if (t == 0) t = all_cores;
  o.cache_shapes.clear();
  for (const auto& s : st.shapes) o.cache_shapes.push_back(parse_shape(s));
  drop_repeats(o.threads);  // after 0 became the core count: -t 0,2 on 2 cores is -t 2
  drop_repeats(o.batches);
  drop_repeats(o.n_prompt);
  drop_repeats(o.n_gen);
  drop_repeats(o.tg_prompt);
  drop_repeats(o.tests);
  drop_repeats(o.dtypes);
  drop_repeats(o.cache_shapes);
  drop_repeats(o.kv_cache_dtypes);
  drop_repeats(o.matmul);
  for (const auto& k : o.kv_cache_dtypes) parse_kv_cache_dtype(k, "--kv-cache-dtype");  // before anything is read
  if (st.stream_mib < 0) throw ArgumentError(fmt::format("--stream-mib: must be >= 0, got {}", st.stream_mib));
  o.stream_bytes = static_cast<size_t>(st.stream_mib) << 20;
  require_model_file(o.model_path, "--model");
  if (!st.json_out.empty()) {  // before measuring anything
    util::check_writable("--json-out", st.json_out);
    for (const auto& [what, path] : {std::pair<const char*, const std::string&>{"the model file", st.o.model_path},
                                     {"the --spec file", st.o.spec}})
      if (!path.empty() && util::same_output_file(st.json_out, path))
        throw ArgumentError(fmt::format("--json-out {} is {}: refusing to overwrite an input", st.json_out, what));
  }
  if (std::find(o.tests.begin(), o.tests.end(), "fidelity") == o.tests.end() && !o.spec.empty()) {
    fmt::print(stderr, "kveval bench: warning: --spec is read only by --tests fidelity; ignored\n");
  }
  std::function<void(const std::string&)> progress;
  if (st.progress) progress = [](const std::string& s) { fmt::print(stderr, "kveval bench: {}\n", s); };
  const bench::Report rep =
      bench::run_bench(o, progress, [](const std::string& s) { fmt::print(stderr, "kveval: {}\n", s); });
  // Skipped or capped sizes go to stderr in every format (csv and jsonl
  // have no place for notes; md and json also keep them with the notes).
  for (const auto& w : rep.warnings) fmt::print(stderr, "kveval bench: warning: {}\n", w);
  if (rep.rows.empty()) {  // nothing measured: no empty report, no --json-out file
    fmt::print(stderr, "kveval: error: bench measured nothing (every selected test was skipped{})\n",
               rep.warnings.empty() ? "" : "; the warnings above say why");
    return kUsage;
  }
  const std::string text = bench::format_report(rep, st.output);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  // The report is out before the file is written: a failing write loses nothing measured.
  if (!st.json_out.empty()) util::write_file_atomic(st.json_out, bench::format_report(rep, "json"));
  return kOk;
}

}  // namespace

void add_bench_command(CLI::App& app, Action& action) {
  auto st = std::make_shared<BenchState>();
  auto* sub = app.add_subcommand(
      "bench", "Measure throughput (pp, tg, tg-nocache), KV-cache lifecycle cost (cache, switch), scoring (ll) and the "
               "machine's roofline (stream bandwidth, oneDNN sgemm)");
  add_bench_options(sub, st);
  sub->callback([st, &action] { action = [st]() -> int { return run_bench_command(*st); }; });
}

}  // namespace kveval::cli
