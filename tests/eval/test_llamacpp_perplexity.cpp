// rolling_method "llama.cpp": the perplexity of llama.cpp's `llama-perplexity`,
// checked against a naive re-implementation of its chunking written here from
// tools/perplexity/perplexity.cpp (perplexity()):
//   add_bos = llama_vocab_get_add_bos(vocab)
//   tokens = tokenize(text, add_special = true)      (BOS first when add_bos)
//   n_chunk = tokens.size() / n_ctx                   (needs tokens.size() >= 2 n_ctx)
//   first = n_ctx / 2
//   for each chunk i: batch = tokens[i n_ctx, (i+1) n_ctx), batch[0] = BOS when add_bos;
//     logits at positions first .. n_ctx-2 score the tokens at first+1 .. n_ctx-1
//     (process_logits over n_ctx - 1 - first rows); nll += -log_softmax
//   ppl = exp(nll / count)
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "eval/lm_eval_format.hpp"
#include "eval/report.hpp"
#include "eval/runner.hpp"
#include "model/random_model.hpp"
#include "test_support.hpp"
#include "util/error.hpp"
#include "context_support.hpp"
#include "util/hash.hpp"

using kveval::test::real_context;
using namespace kveval;
using namespace kveval::eval;
using nlohmann::json;

namespace {

/// The demo's short stories (tasks/short_stories.jsonl), in file order.
std::vector<std::string> demo_stories() {
  std::vector<std::string> out;
  std::ifstream f(kveval::test::source_dir() + "/tasks/short_stories.jsonl");
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(json::parse(line)["text"].get<std::string>());
  return out;
}

struct Naive {
  double ppl = 0;
  double nll_sum = 0;
  int64_t count = 0;
  int chunks = 0;
};

/// llama-perplexity's loop, written out with Context::forward and a double log-softmax;
/// `add_bos` as llama_vocab_get_add_bos (BOS first and in each chunk's first position).
Naive naive_llamacpp_perplexity(Context& m, const std::string& text, int n_ctx, bool add_bos) {
  std::vector<int32_t> tokens = m.model().tokenizer().encode(text, add_bos);
  Naive r;
  REQUIRE(static_cast<int>(tokens.size()) >= 2 * n_ctx);
  const int n_chunk = static_cast<int>(tokens.size()) / n_ctx;
  const int first = n_ctx / 2;
  const int n_vocab = m.model().hparams().n_vocab;
  std::vector<float> logits(static_cast<size_t>(n_ctx) * static_cast<size_t>(n_vocab));
  for (int i = 0; i < n_chunk; ++i) {
    const int start = i * n_ctx;
    std::vector<int32_t> batch(tokens.begin() + start, tokens.begin() + start + n_ctx);
    if (add_bos) batch[0] = m.model().tokenizer().bos();  // "add BOS token for the first batch of each chunk"
    const int n[] = {n_ctx};
    m.forward(batch, 1, n_ctx, n, Context::Logits::All, logits);
    for (int j = first; j < n_ctx - 1; ++j) {
      const float* row = logits.data() + static_cast<size_t>(j) * static_cast<size_t>(n_vocab);
      double mx = row[0];
      for (int v = 1; v < n_vocab; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      double se = 0;
      for (int v = 0; v < n_vocab; ++v) se += std::exp(static_cast<double>(row[v]) - mx);
      const int32_t target = tokens[static_cast<size_t>(start + j + 1)];
      r.nll_sum += -(static_cast<double>(row[target]) - mx - std::log(se));
      ++r.count;
    }
    ++r.chunks;
  }
  r.ppl = std::exp(r.nll_sum / static_cast<double>(r.count));
  return r;
}

json rolling_task(const std::vector<std::string>& texts, int n_ctx,
                  json metric_list = {"word_perplexity", "token_perplexity", "perplexity_llamacpp"}) {
  json docs = json::array();
  for (const auto& t : texts) docs.push_back({{"text", t}});
  json task = {{"name", "stories"},
               {"output_type", "loglikelihood_rolling"},
               {"docs", docs},
               {"doc_to_target", "text"},
               {"rolling_method", "llama.cpp"},
               {"context_length", n_ctx}};
  if (!metric_list.is_null()) task["metric_list"] = metric_list;
  return task;
}

EvalSpec spec_of(json tasks, int batch_size = 4, const std::string& model_path = kveval::test::model_path(),
                 int max_length = 256) {
  json j = {{"model", model_path}, {"batch_size", batch_size}, {"max_length", max_length}, {"tasks", tasks}};
  return parse_spec(j, "test.json", ".");
}

const MetricValue& metric(const RunResult& r, const std::string& name) {
  for (const auto& m : r.metrics[0])
    if (m.name == name) return m;
  FAIL("no metric " << name);
  static MetricValue none;
  return none;
}

}  // namespace

TEST_SUITE("eval.llamacpp_perplexity") {
  TEST_CASE("chunks: whole chunks of n_ctx tokens, BOS first, second half scored, tail dropped") {
    std::vector<int32_t> seq;
    for (int i = 0; i < 11; ++i) seq.push_back(100 + i);
    seq[0] = 1;
    auto c = llamacpp_chunks(seq, 4, 1);
    REQUIRE(c.size() == 2);  // 11 / 4; tokens 108..110 are dropped
    CHECK(c[0].tokens == std::vector<int32_t>{1, 101, 102, 103});
    CHECK(c[1].tokens == std::vector<int32_t>{1, 105, 106, 107});  // 104 replaced by BOS
    CHECK(c[0].score_from == 3);  // first = 2: the logit at 2 scores token 3 (n_ctx - 1 - first = 1 token)
    auto c5 = llamacpp_chunks(seq, 5, 1);
    REQUIRE(c5.size() == 2);
    CHECK(c5[1].tokens == std::vector<int32_t>{1, 106, 107, 108, 109});
    CHECK(c5[1].score_from == 3);  // first = 2: tokens 3 and 4 scored
    CHECK(llamacpp_chunks(std::span(seq).first(7), 4, 1).empty());  // fewer than 2 n_ctx tokens
    CHECK(llamacpp_chunks(std::span(seq).first(8), 4, 1).size() == 2);
    CHECK_THROWS_AS(llamacpp_chunks(seq, 3, 1), ArgumentError);
  }

  TEST_CASE("spec: rolling_method and context_length") {
    auto bad = [](json task, const std::string& msg) {
      CAPTURE(msg);
      json j = {{"model", "m.gguf"}, {"max_length", 128}, {"tasks", {task}}};
      CHECK_THROWS_WITH_AS(parse_spec(j, "s.json", "."), msg.c_str(), SpecError);
    };
    json t = rolling_task({"a b c"}, 64, nullptr);
    EvalSpec s = parse_spec({{"model", "m.gguf"}, {"tasks", {t}}}, "s.json", ".");
    CHECK(s.tasks[0].rolling_method == RollingMethod::LlamaCpp);
    CHECK(s.tasks[0].context_length == 64);
    CHECK(s.tasks[0].metric_list ==
          std::vector<std::string>{"word_perplexity", "byte_perplexity", "bits_per_byte", "perplexity_llamacpp"});
    json u = t;
    u.erase("context_length");
    bad(u, "s.json: tasks[0]: rolling_method \"llama.cpp\" needs 'context_length' (tokens per chunk, llama-perplexity's -c)");
    u = t;
    u["rolling_method"] = "llamacpp";
    bad(u, "s.json: tasks[0].rolling_method: unknown rolling_method \"llamacpp\"; expected \"lm-eval\" or \"llama.cpp\"");
    u = t;
    u["rolling_method"] = "lm-eval";
    bad(u, "s.json: tasks[0].context_length: only rolling_method \"llama.cpp\" takes a context_length");
    u = t;
    u["context_length"] = 3;
    bad(u, "s.json: tasks[0].context_length: expected an integer in [4, 16777216], got 3");
    u = t;
    u["context_length"] = 129;
    bad(u, "s.json: tasks[0].context_length: 129 tokens per chunk do not fit max_length 128");
    u = t;
    u.erase("rolling_method");
    u.erase("context_length");
    u["metric_list"] = {"perplexity_llamacpp"};
    bad(u, "s.json: tasks[0].metric_list[0]: metric \"perplexity_llamacpp\" needs \"rolling_method\": \"llama.cpp\" "
           "and \"context_length\" on a loglikelihood_rolling task");
    json g = {{"name", "g"}, {"output_type", "generate_until"}, {"docs", {{{"p", "x"}}}}, {"doc_to_text", "p"},
              {"rolling_method", "llama.cpp"}};
    bad(g, "s.json: tasks[0].rolling_method: only loglikelihood_rolling tasks take a rolling_method (this task is "
           "generate_until)");
  }

  TEST_CASE("stories260K, the demo's stories joined: equals the naive llama.cpp loop within 1e-6 relative" * kveval::test::needs_model()) {
    const std::vector<std::string> stories = demo_stories();
    REQUIRE(stories.size() == 12);
    std::string joined;
    for (size_t i = 0; i < stories.size(); ++i) joined += (i ? "\n\n" : "") + stories[i];
    for (int n_ctx : {64, 128, 37}) {
      CAPTURE(n_ctx);
      REQUIRE(real_context().model().tokenizer().add_bos());  // the SentencePiece vocabulary adds BOS
      const Naive want = naive_llamacpp_perplexity(real_context(), joined, n_ctx, true);
      for (int bs : {1, 8}) {
        EvalSpec s = spec_of({rolling_task(stories, n_ctx)}, bs);
        RunResult r = run_eval(s, real_context());
        REQUIRE(r.n_request_errors == 0);
        const MetricValue& m = metric(r, "perplexity_llamacpp");
        REQUIRE(m.value);
        CHECK(std::abs(*m.value / want.ppl - 1) < 1e-6);
        CHECK(m.n == want.chunks);
        CHECK(r.chunked[0].tokens == want.count);
        CHECK(r.chunked[0].tokens == static_cast<int64_t>(want.chunks) * (n_ctx - 1 - n_ctx / 2));
        REQUIRE(m.stderr_);
        CHECK(*m.stderr_ > 0);
        CHECK(*m.stderr_ < *m.value);
        // lm-eval's rolling metrics are still reported beside it, and differ
        // (every token once with maximal left context, documents scored apart)
        const MetricValue& tp = metric(r, "token_perplexity");
        REQUIRE(tp.value);
        CHECK(std::abs(*tp.value / *m.value - 1) > 1e-3);
        // the results file carries it with the lm-eval names
        const auto j = results_json(s, r, "sha");
        CHECK(j["results"]["stories"]["perplexity_llamacpp,none"].get<double>() == *m.value);
        CHECK(j["configs"]["stories"]["rolling_method"] == "llama.cpp");
        CHECK(j["configs"]["stories"]["context_length"] == n_ctx);
      }
    }
  }

  TEST_CASE("equals the values llama-perplexity printed on the same text (tests/data/llamacpp_perplexity.json)" * kveval::test::needs_model()) {
    std::ifstream f(kveval::test::source_dir() + "/tests/data/llamacpp_perplexity.json");
    REQUIRE(f);
    const json expect = json::parse(f);
    for (const auto& run : expect["runs"]) {
      const int n_ctx = run["context_length"].get<int>();
      CAPTURE(n_ctx);
      RunResult r = run_eval(spec_of({rolling_task(demo_stories(), n_ctx, {"perplexity_llamacpp"})}), real_context());
      const MetricValue& m = metric(r, "perplexity_llamacpp");
      REQUIRE(m.value);
      REQUIRE(m.stderr_);
      CHECK(m.n == run["chunks"].get<int>());
      // llama-perplexity prints "%.4lf +/- %.5lf": kveval's value rounds to the same digits
      CHECK(std::abs(*m.value - run["ppl"].get<double>()) <= 0.5e-4 + 1e-9);
      CHECK(std::abs(*m.stderr_ - run["stderr"].get<double>()) <= 0.5e-5 + 1e-9);
    }
  }

  TEST_CASE("only perplexity_llamacpp listed; a text too short is a per-request error, not NaN" * kveval::test::needs_model()) {
    const std::vector<std::string> stories = demo_stories();
    EvalSpec s = spec_of({rolling_task(stories, 64, {"perplexity_llamacpp"})});
    RunResult r = run_eval(s, real_context());
    int chunks = 0;
    for (const auto& q : r.requests) chunks += q.kind == RequestKind::PerplexityChunk;
    CHECK(chunks == 12);  // whole chunks of 64 tokens in the joined stories
    REQUIRE(r.metrics[0].size() == 1);
    CHECK(r.metrics[0][0].value);
    // the per-document samples still carry each document's own log-likelihood
    for (const auto& d : r.docs[0]) CHECK(d.logprob < 0);

    EvalSpec short_spec = spec_of({rolling_task({"Once upon a time, there was a little girl."}, 64)});
    RunResult rs = run_eval(short_spec, real_context());
    CHECK(rs.n_request_errors == 1);
    const MetricValue& m = metric(rs, "perplexity_llamacpp");
    CHECK(!m.value);
    CHECK(m.note.find("needs at least 2 x context_length = 128 tokens") != std::string::npos);
    CHECK(metric(rs, "token_perplexity").value);  // the lm-eval metrics still come out
    const std::string table = format_metrics_table(short_spec, rs);
    CHECK(table.find("nan") == std::string::npos);
    CHECK(sample_records(short_spec, rs).size() == 1);  // one per document; chunks belong to none
  }

  TEST_CASE("qwen2 vocabulary (add_bos false): no BOS added or substituted; equals the naive llama.cpp loop") {
    const std::string shared = kveval::test::shared_dir();
    const std::string vocab = shared + "/tokenizers/ggml-vocab-qwen2.gguf";
    if (shared.empty() || !std::filesystem::exists(vocab)) {
      MESSAGE("skipping: " << vocab << " not found");
      return;
    }
    kveval::test::ScratchDir dir("llamacpp_qwen2");
    RandomModelSpec s = random_model_flavour(random_model_preset("tiny"), "qwen2");
    s.vocab = vocab;
    s.n_vocab = random_model_vocab_size(vocab);
    s.n_ctx = 256;  // the spec's max_length
    const std::string path = dir.file("qwen2.gguf");
    write_random_model(path, s, 5);
    auto m = Model::load(path, ModelOptions{2});
    REQUIRE_FALSE(m->tokenizer().add_bos());
    REQUIRE(m->tokenizer().bos() >= 0);  // a BOS id exists (Qwen2's <|endoftext|>) but is not added
    Context ctx(*m);

    const std::vector<std::string> stories = demo_stories();
    const std::vector<std::string> two(stories.begin(), stories.begin() + 2);
    const std::string joined = two[0] + "\n\n" + two[1];
    const int n_ctx = 16;
    const Naive want = naive_llamacpp_perplexity(ctx, joined, n_ctx, false);
    const Naive with_bos = naive_llamacpp_perplexity(ctx, joined, n_ctx, true);
    // the text's own first token is kept: the chunks are not those of a BOS vocabulary
    CHECK(std::abs(with_bos.ppl / want.ppl - 1) > 1e-3);
    EvalSpec sp = spec_of({rolling_task(two, n_ctx, {"perplexity_llamacpp"})}, 4, path);
    RunResult r = run_eval(sp, ctx);
    REQUIRE(r.n_request_errors == 0);
    const MetricValue& v = metric(r, "perplexity_llamacpp");
    REQUIRE(v.value);
    CHECK(std::abs(*v.value / want.ppl - 1) < 1e-6);
    CHECK(v.n == want.chunks);
    CHECK(r.chunked[0].tokens == want.count);
    // the chunks kveval scored: token for token the text's, no BOS anywhere
    const std::vector<int32_t> tokens = m->tokenizer().encode(joined, false);
    int seen = 0;
    for (const auto& q : r.requests) {
      if (q.kind != RequestKind::PerplexityChunk) continue;
      const auto start = tokens.begin() + static_cast<long>(q.index) * n_ctx;
      CHECK(q.score.tokens == std::vector<int32_t>(start, start + n_ctx));
      ++seen;
    }
    CHECK(seen == want.chunks);
  }

  TEST_CASE("random tiny models with real vocabularies equal the values llama-perplexity printed "
            "(tests/data/llamacpp_perplexity_vocabs.json)") {
    const std::string shared = kveval::test::shared_dir();
    if (shared.empty()) {
      MESSAGE("skipping: no shared fixtures folder, so no real vocabularies");
      return;
    }
    std::ifstream f(kveval::test::source_dir() + "/tests/data/llamacpp_perplexity_vocabs.json");
    REQUIRE(f);
    const json expect = json::parse(f);
    const std::vector<std::string> stories = demo_stories();
    const std::vector<std::string> two(stories.begin(), stories.begin() + 2);
    REQUIRE(expect["runs"].size() >= 3);
    for (const auto& run : expect["runs"]) {
      const std::string vocab = shared + "/tokenizers/" + run["vocab"].get<std::string>();
      CAPTURE(vocab);
      REQUIRE_MESSAGE(std::filesystem::exists(vocab), vocab << " is missing from the shared fixtures");
      // the file `kveval make-model --preset P --arch A --vocab V --seed S` writes, byte for byte
      kveval::test::ScratchDir dir("llamacpp_vocabs");
      const RandomModelSpec s = kveval::test::recorded_model_spec(run, vocab);
      const std::string path = dir.file("m.gguf");
      write_random_model(path, s, run["seed"].get<uint64_t>());
      REQUIRE(sha256_file(path) == run["model_sha256"].get<std::string>());
      auto m = Model::load(path, ModelOptions{2});
      CHECK(m->tokenizer().add_bos() == run["add_bos"].get<bool>());
      Context ctx(*m);
      const int n_ctx = run["context_length"].get<int>();
      RunResult r = run_eval(spec_of({rolling_task(two, n_ctx, {"perplexity_llamacpp"})}, 4, path, s.n_ctx), ctx);
      REQUIRE(r.n_request_errors == 0);
      const MetricValue& v = metric(r, "perplexity_llamacpp");
      REQUIRE(v.value);
      REQUIRE(v.stderr_);
      CHECK(v.n == run["chunks"].get<int>());
      // the same digits as llama-perplexity's "%.4lf +/- %.5lf" up to float32 rounding of the forward pass
      // (a run's rel_tol says why it is wider)
      const double tol = run.value("rel_tol", 1e-6);
      CHECK(std::abs(*v.value / run["ppl"].get<double>() - 1) < tol);
      CHECK(std::abs(*v.stderr_ / run["stderr"].get<double>() - 1) < 10 * tol);
    }
  }

  TEST_CASE("phi3 LongRoPE: the spec's max_length picks the factor set (run_spec loads with it)") {
    kveval::test::ScratchDir dir("llamacpp_phi3");
    RandomModelSpec s = random_model_flavour(random_model_preset("tiny"), "phi3");
    s.longrope.original_context = 8;
    const std::string path = dir.file("phi3.gguf");
    write_random_model(path, s, 3);
    const std::vector<std::string> stories = demo_stories();
    const std::vector<std::string> two(stories.begin(), stories.begin() + 2);
    const std::string joined = two[0] + "\n\n" + two[1];
    const int n_ctx = 8;  // chunks of 8 tokens whatever max_length is
    double ppl[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      const int max_length = i == 0 ? 8 : 16;  // 8 <= 8: short factors; 16 > 8: long
      CAPTURE(max_length);
      RunResult r = run_spec(spec_of({rolling_task(two, n_ctx, {"perplexity_llamacpp"})}, 4, path, max_length));
      REQUIRE(r.n_request_errors == 0);
      const MetricValue& v = metric(r, "perplexity_llamacpp");
      REQUIRE(v.value);
      ppl[i] = *v.value;
      auto m = Model::load(path, {.threads = 2, .n_ctx = max_length});
      REQUIRE(m->hparams().rope_factors_set == (max_length > 8 ? "long" : "short"));
      Context ctx(*m);
      const Naive want = naive_llamacpp_perplexity(ctx, joined, n_ctx, m->tokenizer().add_bos());
      CHECK(std::abs(ppl[i] / want.ppl - 1) < 1e-6);
    }
    CHECK(std::abs(ppl[0] / ppl[1] - 1) > 1e-3);  // the two sets give other numbers
  }

  TEST_CASE("chunks without BOS: every chunk keeps its own first token") {
    std::vector<int32_t> seq;
    for (int i = 0; i < 9; ++i) seq.push_back(100 + i);
    auto c = llamacpp_chunks(seq, 4, std::nullopt);
    REQUIRE(c.size() == 2);
    CHECK(c[0].tokens == std::vector<int32_t>{100, 101, 102, 103});
    CHECK(c[1].tokens == std::vector<int32_t>{104, 105, 106, 107});
    CHECK(c[1].score_from == 3);
  }
}
