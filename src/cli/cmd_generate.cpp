// `kveval generate`: greedy or seeded sampled generation from a prompt,
// streamed to stdout, with llama.cpp-style per-phase timings on stderr.
#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "eval/spec.hpp"
#include "model/context.hpp"
#include "model/model.hpp"
#include "util/error.hpp"
#include "util/memory.hpp"
#include "util/number_format.hpp"
#include "util/timer.hpp"
#include "util/utf8.hpp"

namespace kveval::cli {

namespace {

/// The options of `kveval generate`.
struct GenerateArgs {
  std::string model, prompt, dtype = "auto", kv_cache_dtype = "auto", matmul = "exact";
  int max_gen_toks = 128, threads = 0, max_length = 0;
  bool no_cache = false, ignore_eos = false, mmap = false;
  /// --temperature, --top-k, --top-p, --min-p, --seed as given (generation_kwargs' keys;
  /// do_sample when any but the seed is given), checked by eval::parse_sampling_kwargs.
  nlohmann::json sampling_kwargs = nlohmann::json::object();
  std::string temperature, top_k, top_p, min_p, seed;  ///< the options' text
  SamplingParams sampling;  ///< the parameters they give (greedy when none)
};

/// The options' own checks (ArgumentError; SpecError for a sampling value), before the model is read.
void check_args(GenerateArgs& o) {
  o.sampling = eval::parse_sampling_kwargs(o.sampling_kwargs, "generate");
  if (o.max_gen_toks < 1)  // as bench's -n: a generation makes a token (the prompt alone is bench's pp)
    throw ArgumentError(fmt::format("--max-gen-toks: must be >= 1, got {} (a generation makes at least one token; "
                                    "to time the prompt alone: kveval bench --tests pp)",
                                    o.max_gen_toks));
  if (const size_t bad = first_invalid_utf8(o.prompt); bad != std::string::npos)
    throw ArgumentError(fmt::format("--prompt: invalid UTF-8 at byte {} (0x{:02x}); prompts must be UTF-8 text",
                                    bad, static_cast<unsigned char>(o.prompt[bad])));
  if (o.max_length < 0) throw ArgumentError(fmt::format("--max-length: must be >= 0, got {}", o.max_length));
  require_model_file(o.model, "--model");
}

/// The context positions --max-length gives (the model's context_length when 0);
/// ArgumentError when it exceeds the model's.
int resolve_max_length(const Model& model, const GenerateArgs& o) {
  const int n_ctx = model.hparams().n_ctx_train;
  if (o.max_length > n_ctx)
    throw ArgumentError(fmt::format("--max-length {} exceeds the model's context_length {}", o.max_length, n_ctx));
  return o.max_length > 0 ? o.max_length : n_ctx;
}

/// Refuses a generation whose weights, KV cache and prefill activations do not
/// fit the memory budget (MemoryError), before allocating them; then a prompt
/// the context cannot hold with room for a generated token (ArgumentError).
void check_fits(const Model& model, const GenerateArgs& o, size_t prompt_tokens, int max_length) {
  const int ctx_plan = static_cast<int>(std::min<int64_t>(max_length, static_cast<int64_t>(prompt_tokens) + o.max_gen_toks));
  const MemoryPart parts[] = {
      {"weights", model.weight_bytes(), true},
      {fmt::format("KV cache (1 row x {})", count_of(ctx_plan, "position")), o.no_cache ? 0 : model.cache_bytes_for(1, std::max(ctx_plan, 1))},
      {"activations", model.activation_bytes_for(1, std::max(ctx_plan, 1), false)}};
  check_memory_plan("the generation", parts, memory_budget(), "lower --max-gen-toks or --max-length");
  if (static_cast<int64_t>(prompt_tokens) >= max_length) {  // no room for the first generated token
    if (o.prompt.empty())  // the BOS token alone fills the context
      throw ArgumentError(fmt::format("--max-length {} holds only the BOS token (no --prompt given): no room for a "
                                      "generated token", max_length));
    throw ArgumentError(fmt::format("--prompt has {} (BOS included); the context holds {} (--max-length){}",
                                    count_of(prompt_tokens, "token"), max_length,
                                    static_cast<int64_t>(prompt_tokens) == max_length ? ", no room for a generated token" : ""));
  }
}

/// The load summary, its warnings and the compute dtype and KV cache on stderr.
void print_setup(const Model& model, const GenerateArgs& o) {
  fmt::print(stderr, "kveval: {}\n", format_load_summary(model.load_summary()));
  for (const auto& w : model.load_summary().warnings) fmt::print(stderr, "kveval: warning: {}\n", w);
  fmt::print(stderr, "kveval: compute dtype {}; {}\n", model.dtype_note(),
             o.no_cache ? fmt::format("no KV cache (--no-cache{})",
                                      o.kv_cache_dtype == "auto"
                                          ? std::string()
                                          : fmt::format("; --kv-cache-dtype {} ignored", o.kv_cache_dtype))
                        : fmt::format("KV cache {}", to_string(model.kv_cache_dtype())));
  const SamplingParams& p = o.sampling;
  if (!p.greedy())
    fmt::print(stderr, "kveval: sampling: temperature {}, top_k {}, top_p {}, min_p {}, seed {}\n", p.temperature, p.top_k,
               p.top_p, p.min_p, p.seed);
}

/// One generation and its timings (seconds).
struct GenerateRun {
  Generation g;
  GenerateTiming t;
  double setup_s = 0, teardown_s = 0;  ///< KV-cache scope set-up and teardown
};

/// Generates greedily from `prompt` in a context of `ctx` positions (a KV
/// cache scope of 1 row x ctx, or none with --no-cache), streaming the prompt
/// text and each generated token's text to stdout.
GenerateRun generate_streamed(const Model& model, const GenerateArgs& o, const std::vector<int32_t>& prompt, int ctx) {
  IncrementalDetokenizer detok(model.tokenizer());
  std::fputs(o.prompt.c_str(), stdout);
  size_t shown = 0;
  GenerateOptions go;
  go.max_gen_toks = {o.max_gen_toks};
  go.stop_at_eos = !o.ignore_eos;
  go.sampling = {o.sampling};
  go.should_stop = [&](int, std::span<const int32_t> ids) {
    for (; shown < ids.size(); ++shown) std::fputs(detok.push(ids[shown]).c_str(), stdout);
    std::fflush(stdout);
    return false;
  };
  Context context(model);
  GenerateRun run;
  std::vector<Generation> g;
  if (o.no_cache) {
    g = generate_greedy_uncached(context, {prompt}, go, std::max(ctx, 1), &run.t);
  } else {
    Stopwatch sw;
    auto scope = std::make_unique<KvCacheScope>(context, 1, ctx);
    run.setup_s = sw.seconds();
    g = generate_greedy(context, {prompt}, go, &run.t);
    sw.reset();
    scope.reset();
    run.teardown_s = sw.seconds();
  }
  std::fputs(detok.flush().c_str(), stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  run.g = std::move(g[0]);
  return run;
}

/// The stop reason and llama.cpp-style per-phase timings on stderr, each line
/// "kveval: ..." like every other diagnostic line; decode counts n_gen - 1 steps (bench's tg). The prefill is the
/// process's first forward pass, so its time includes oneDNN's one-time kernel generation; its line says so.
void print_timings(const Model& model, const GenerateArgs& o, const GenerateRun& run, double load_s, int ctx) {
  auto rate = [](int64_t n, double s) { return s > 0 ? n / s : 0.0; };
  auto tokens = [&](const char* phase, double s, int64_t n, const char* note) {
    fmt::print(stderr, "kveval: {:<15}{:9.2f} ms / {:5} {:<6} ({:9.1f} tokens/s){}\n", phase, s * 1e3, n,
               noun_for(static_cast<uint64_t>(n), "token"), rate(n, s), note);
  };
  const GenerateTiming& t = run.t;
  fmt::print(stderr, "kveval: stop: {} after {}\n", to_string(run.g.reason), count_of(run.g.ids.size(), "token"));
  fmt::print(stderr, "kveval: {:<15}{:9.2f} ms\n", "load", load_s * 1e3);
  if (!o.no_cache)
    fmt::print(stderr, "kveval: {:<15}{:9.3f} ms ({} bytes)\n", "cache setup", run.setup_s * 1e3,
               model.cache_bytes_for(1, ctx));
  tokens("prefill", t.prefill_seconds, t.prefill_tokens, ", oneDNN's one-time kernel generation included");
  // decode steps as bench's tg counts them: every generated token but the first, whose logits come from the prefill
  tokens("decode", t.decode_seconds, std::max<int64_t>(0, t.decode_tokens - 1), "");
  if (!o.no_cache) fmt::print(stderr, "kveval: {:<15}{:9.3f} ms\n", "cache teardown", run.teardown_s * 1e3);
}

/// `kveval generate`: checks, loads the model, generates and reports.
int run_generate(GenerateArgs& o) {
  check_args(o);
  Stopwatch sw;
  auto model = Model::load(o.model, {.threads = o.threads,
                                     .dtype = parse_compute_dtype(o.dtype, "--dtype"),
                                     .kv_cache_dtype = parse_kv_cache_dtype(o.kv_cache_dtype, "--kv-cache-dtype"),
                                     .matmul = parse_matmul_mode(o.matmul, "--matmul"),
                                     .hash = false,
                                     .map_weights = o.mmap,
                                     .n_ctx = o.max_length});
  const double load_s = sw.seconds();
  const int max_length = resolve_max_length(*model, o);
  auto prompt = model->tokenizer().encode(o.prompt, true);
  check_fits(*model, o, prompt.size(), max_length);
  print_setup(*model, o);
  // The cache holds what this generation can use, never more than the context.
  const int ctx = static_cast<int>(std::min<int64_t>(max_length, static_cast<int64_t>(prompt.size()) + o.max_gen_toks));
  const GenerateRun run = generate_streamed(*model, o, prompt, ctx);
  const Generation& g = run.g;
  if (g.reason == StopReason::NonFinite)
    throw Error(fmt::format(
        "non-finite logits (NaN or Inf) at token position {} (after {}): generation stopped; {}",
        g.prompt_tokens + static_cast<int>(g.ids.size()), count_of(g.ids.size(), "generated token"),
        g.kv_f16_overflows > 0 ? kv_f16_overflow_note(g.kv_f16_overflows)
                               : std::string("the model's activations overflowed")));
  print_timings(*model, o, run, load_s, ctx);
  return kOk;
}

}  // namespace

void add_generate_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Greedy or sampled generation from a prompt (KV cache on by default)");
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("-p,--prompt", o->prompt, "prompt text (BOS is prepended)");
  cmd->add_option("-n,--max-gen-toks", o->max_gen_toks, "tokens to generate at most, >= 1 (default 128)");
  cmd->add_option("-t,--threads", o->threads, "compute threads (0 = all cores)")->check(int_in(0, kMaxThreads));
  cmd->add_option("--dtype", o->dtype,
                  fmt::format("compute dtype: {} (auto: blocks-bf16 on a bf16 CPU, else blocks, when every matrix has a "
                              "kept-block type, else bf16 on a bf16 CPU for a non-F32 file; docs/dtypes.md)",
                              join_names(compute_dtype_name_list())))
      ->capture_default_str();
  cmd->add_option("--kv-cache-dtype", o->kv_cache_dtype,
                  fmt::format("KV-cache element type: {} (bf16 when the compute dtype is bf16, else f32)",
                              join_names(kv_cache_dtype_name_list())))
      ->capture_default_str();
  cmd->add_option("--matmul", o->matmul, "decode steps on kept Q8_0/Q4_0/Q4_K/Q5_K/Q6_K blocks: exact (f32, the default) or int8 (llama.cpp's int8 activations, not exact; docs/dtypes.md)")->capture_default_str();
  cmd->add_option("--max-length", o->max_length,
                  "context positions, prompt included (0 = the model's context_length); the KV cache holds "
                  "min(max-length, prompt + max-gen-toks) positions");
  add_mmap_flag(cmd, o->mmap, "", "");
  cmd->add_flag("--no-cache", o->no_cache, "re-run the whole sequence every step (no KV cache)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "keep generating after EOS");
  auto* temperature = cmd->add_option("--temperature", o->temperature, "sample at this temperature (0: greedy)");
  auto* top_k = cmd->add_option("--top-k", o->top_k, "sample from the K most likely tokens (0: all; default 50 when sampling)");
  auto* top_p = cmd->add_option("--top-p", o->top_p, "sample from the smallest set of probability >= P, in (0, 1]");
  auto* min_p = cmd->add_option("--min-p", o->min_p, "drop tokens below P x the top probability, in [0, 1]");
  auto* seed = cmd->add_option("--seed", o->seed, "the sampling seed (default 1234)");
  cmd->callback([o, temperature, top_k, top_p, min_p, seed, &action] {
    // the given options as generation_kwargs: numbers as JSON reads them, so a bad one is named by its key
    const std::tuple<CLI::Option*, const char*, const std::string*> keys[] = {{temperature, "temperature", &o->temperature},
                                                                            {top_k, "top_k", &o->top_k},
                                                                            {top_p, "top_p", &o->top_p},
                                                                            {min_p, "min_p", &o->min_p},
                                                                            {seed, "seed", &o->seed}};
    for (const auto& [opt, key, text] : keys) {
      if (opt->count() == 0) continue;
      const std::string& v = *text;
      const nlohmann::json x = nlohmann::json::parse(v, nullptr, false);
      o->sampling_kwargs[key] = x.is_number() ? x : nlohmann::json(v);
      if (std::string(key) != "seed") o->sampling_kwargs["do_sample"] = true;
    }
    action = [o] { return run_generate(*o); };
  });
}

}  // namespace kveval::cli
