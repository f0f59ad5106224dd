// `kveval bench` at the edges of what a model and the machine allow: a short
// context skips one test (not the whole bench), the roofline's stream buffer
// fitted to the memory budget, capped cache shapes measured once, the compute
// dtype note on stderr, and fidelity refusing a comparison without data. All on
// tiny random models (no model file needed); nothing here is timed.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/run.hpp"
#include "cli_run.hpp"
#include "model/random_model.hpp"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

/// The "tiny" preset (context 128) with context length `n_ctx`, written to `dir`.
std::string tiny_model(const ScratchDir& dir, int n_ctx) {
  kveval::RandomModelSpec s = kveval::random_model_preset("tiny");
  s.n_ctx = n_ctx;
  const std::string path = dir.file("tiny_ctx" + std::to_string(n_ctx) + ".gguf");
  kveval::write_random_model(path, s, 1);
  return path;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

/// A loglikelihood task over `docs` ({"c": context, "x": continuation}) in a window of `max_length` tokens.
std::string ll_spec(const json& docs, int max_length, std::optional<int> limit = std::nullopt) {
  json s = {{"model", "given by -m"},
            {"max_length", max_length},
            {"tasks", {{{"name", "ll"}, {"output_type", "loglikelihood"}, {"docs", docs}, {"doc_to_text", "c"},
                        {"doc_to_target", "x"}}}}};
  if (limit) s["limit"] = *limit;
  return s.dump();
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

}  // namespace

TEST_SUITE("cli.bench_limits") {
  TEST_CASE("fit_stream_buffer: kept when it fits, else 7/8 of what is available in whole MiB, or 0 below the margin") {
    using kveval::bench::fit_stream_buffer;
    CHECK(fit_stream_buffer(2032 * kMiB, std::nullopt, 2032 * kMiB) == 2032 * kMiB);  // no budget known
    CHECK(fit_stream_buffer(256 * kMiB, uint64_t{256} * kMiB, 64 * kMiB) == 256 * kMiB);  // fits exactly
    CHECK(fit_stream_buffer(2032 * kMiB, uint64_t{1024} * kMiB, 128 * kMiB) == 896 * kMiB);
    CHECK(fit_stream_buffer(2032 * kMiB, uint64_t{1024} * kMiB + 12345, 128 * kMiB) == 896 * kMiB);  // whole MiB
    CHECK(fit_stream_buffer(2032 * kMiB, uint64_t{1024} * kMiB, 896 * kMiB) == 896 * kMiB);  // exactly the margin
    CHECK(fit_stream_buffer(2032 * kMiB, uint64_t{1024} * kMiB, 897 * kMiB) == 0);           // below it: skipped
    CHECK(fit_stream_buffer(64 * kMiB, uint64_t{1} * kMiB, 0) == 0);  // nothing of a MiB left
  }

  TEST_CASE("a short context skips gen-mixed, switch and ll with a warning; the other tests are still reported") {
    ScratchDir d("bench_limits");
    const std::string ctx8 = tiny_model(d, 8), ctx1 = tiny_model(d, 1), ctx33 = tiny_model(d, 33);
    // a context of 8: tg is measured and reported, gen-mixed skipped with a warning (not an error)
    Run r = run_kveval(d, "bench -m " + quote(ctx8) + " --tests tg,gen-mixed -n 2 --tg-prompt 1 -r 1 -t 1 -o csv");
    INFO(r.err);
    CHECK(r.code == 0);
    CHECK(r.out.find("\ntg,tg2,1,1,1,2,") != std::string::npos);
    CHECK(count(r.err, "kveval bench: warning: gen-mixed skipped: its prompts of up to 32 tokens and at least 1 "
                       "generated token need a context length of at least 33, but the model's is 8\n") == 1);
    CHECK(r.err.find("error") == std::string::npos);
    // 33 positions are enough: every prompt has room for one token
    Run ok = run_kveval(d, "bench -m " + quote(ctx33) +
                               " --tests gen-mixed --gen-mixed-prompts 3 --gen-mixed-max-gen 4 --gen-mixed-rows 2 -r 1 -t 1 -o csv");
    INFO(ok.err);
    CHECK(ok.code == 0);
    CHECK(count(ok.out, "\ngen-mixed,") == 3);  // static, dynamic, speedup

    // a context of 1: switch alone is skipped with a warning and bench fails as having measured nothing
    Run sw = run_kveval(d, "bench -m " + quote(ctx1) + " --tests switch -r 1 -t 1");
    CHECK(sw.code == 2);
    CHECK(sw.out.empty());
    CHECK(sw.err.find("kveval bench: warning: switch skipped: a round needs 2 positions (a 1-token prompt and 1 "
                      "generated token) but the model's context length is 1\n") != std::string::npos);
    CHECK(sw.err.find("kveval: error: bench measured nothing (every selected test was skipped; the warnings above say "
                      "why)") != std::string::npos);
    CHECK(sw.err.find("synthetic_prompts") == std::string::npos);
    // ll needs one scored token: skipped with a warning rather than reporting requests with 0 tokens scored
    Run mix = run_kveval(d, "bench -m " + quote(ctx1) + " --tests switch,ll,cache --cache-shapes 2x4 -r 1 -t 1 -o csv");
    INFO(mix.err);
    CHECK(mix.code == 0);
    CHECK(mix.out.find("\ncache,setup_caches,1,2,0,0,1,") != std::string::npos);
    CHECK(mix.out.find("\nll,") == std::string::npos);
    CHECK(mix.out.find("\nswitch,") == std::string::npos);
    CHECK(mix.err.find("kveval bench: warning: ll skipped: a request needs at least 2 tokens (one scored) but the "
                       "model's context length is 1\n") != std::string::npos);
    CHECK(mix.err.find("kveval bench: warning: switch skipped:") != std::string::npos);
  }

  TEST_CASE("--dtype q8_0 on an F32 file says on stderr that every matrix was widened; capped cache shapes run once") {
    ScratchDir d("bench_limits");
    const std::string tiny = tiny_model(d, 128);
    Run r = run_kveval(d, "bench -m " + quote(tiny) +
                              " --dtype f32,q8_0 --tests cache --cache-shapes 2x200,2x128,1x300 -r 1 -t 1 -o json");
    INFO(r.err);
    REQUIRE(r.code == 0);
    // a dtype given is named alone (no auto's reasons), with what it could not keep
    CHECK(count(r.err, "kveval: compute dtype f32; KV cache f32\n") == 1);
    CHECK(count(r.err, "kveval: compute dtype q8_0; no Q8_0 matrix in the file: every matrix widened to F32; KV cache f32\n") == 1);
    CHECK(r.err.find("->") == std::string::npos);
    CHECK(r.err.find("kveval bench: warning: cache: 200 positions capped at the model's context length 128\n") !=
          std::string::npos);
    // 2x200 capped to 2x128 is 2x128: two shapes per dtype, not three
    std::map<std::string, std::vector<std::pair<int, int>>> shapes;  // dtype -> (batch, positions) of setup_caches
    const json j = json::parse(r.out);
    for (const auto& row : j["results"])
      if (row["name"] == "setup_caches")
        shapes[row["dtype"].get<std::string>()].emplace_back(row["batch"].get<int>(), row["positions"].get<int>());
    const std::vector<std::pair<int, int>> want = {{2, 128}, {1, 128}};
    CHECK(shapes["f32"] == want);
    CHECK(shapes["q8_0"] == want);
    CHECK(shapes.size() == 2);
  }

  TEST_CASE("fidelity: a spec that compares nothing is refused in one line; failed requests are a warning") {
    ScratchDir d("bench_limits");
    const std::string tiny = tiny_model(d, 128);
    // q8_0 rather than bf16: available on every CPU (the suite also runs with oneDNN capped at AVX2)
    const std::string bench = "bench -m " + quote(tiny) + " --tests fidelity --dtype q8_0 -t 1 --spec ";
    const json docs = {{{"c", "the cat sat on the"}, {"x", "mat"}},
                       {{"c", "a b"}, {"x", "zebra quilt jumps over lazy dogs"}}};  // too long for 4 tokens

    // limit 0: refused by the spec, as by `kveval run`
    const std::string none = d.file("limit0.json");
    write(none, ll_spec(docs, 64, 0));
    Run r0 = run_kveval(d, bench + quote(none));
    CHECK(r0.code == 2);
    CHECK(r0.out.empty());
    CHECK(r0.err == "kveval: error: " + none + ": limit: 0 leaves no document to evaluate (lm-eval fails on it too); give "
                    "N >= 1, or no limit for every document\n");

    // every request fails: refused, naming the spec (no row of 0 tokens), before either model loads: with
    // 1 byte of memory allowed, loading would be refused (exit 1) before the spec's error could show
    const std::string all = d.file("all_fail.json");
    write(all, ll_spec(json::array({docs[1]}), 4));
    for (const char* limit : {"", "KVEVAL_MEMORY_LIMIT_BYTES=1 "}) {
      CAPTURE(limit);
      Run ra = run_kveval(d, bench + quote(all), limit);
      INFO(ra.err);
      CHECK(ra.code == 2);
      CHECK(ra.out.empty());
      CHECK(count_lines(ra.err) == 1);
      CHECK(ra.err.find("kveval: error: --spec " + all + ": fidelity would compare nothing: every request fails before "
                        "scoring (1 request; first: ") == 0);
      CHECK(ra.err.find("continuation of ") != std::string::npos);
    }
    // a max_length beyond the file's context length (128): refused before loading too
    const std::string wide = d.file("wide.json");
    write(wide, ll_spec(docs, 4096));
    Run rw = run_kveval(d, bench + quote(wide), "KVEVAL_MEMORY_LIMIT_BYTES=1 ");
    CHECK(rw.code == 2);
    CHECK(rw.err == "kveval: error: " + wide + ": max_length: 4096 exceeds the model's context_length 128\n");

    // one of two fails: measured, with a warning giving the count
    const std::string part = d.file("part_fail.json");
    write(part, ll_spec(docs, 4));
    Run rp = run_kveval(d, bench + quote(part) + " -o json");
    INFO(rp.err);
    REQUIRE(rp.code == 0);
    const std::string warning = "fidelity: 1 of the 2 requests failed (f32 run: 1, q8_0 run: 1; first: ";
    CHECK(rp.err.find("kveval bench: warning: " + warning) != std::string::npos);
    CHECK(rp.err.find("tasks[0].docs[1]: continuation of ") != std::string::npos);
    const json j = json::parse(rp.out);
    REQUIRE(j["results"].size() == 3);  // max and mean dlogprob, acc flips
    for (int i = 0; i < 2; ++i) {
      const json& row = j["results"][static_cast<size_t>(i)];
      CHECK(row["name"] == (i == 0 ? "max abs dlogprob" : "mean abs dlogprob"));
      CHECK(row["failed_requests"] == 1);
      CHECK(row["requests"] == 1);
      CHECK(row["tokens"].get<int>() >= 1);
    }
    CHECK(j["results"][2]["name"] == "flips ll acc");
    CHECK(j["results"][2]["docs"] == 1);  // the document that ran
    bool noted = false;
    for (const auto& n : j["notes"]) noted = noted || n.get<std::string>().rfind(warning, 0) == 0;
    CHECK(noted);
  }
}
