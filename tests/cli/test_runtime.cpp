// Command-line side of the run-time checks: --threads bounded like the spec's
// field in every subcommand, invalid UTF-8 prompts refused, non-finite logits
// failing requests with exit 4, and plans too big for the memory limit refused
// in one line before anything runs (KVEVAL_MEMORY_LIMIT_BYTES simulates a limit).
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "backend/roofline.hpp"
#include "gguf_copy.hpp"
#include "cli_run.hpp"

namespace {

/// The metrics-table row of `task` and `metric` ("" when absent).
std::string table_row(const std::string& out, const std::string& task, const std::string& metric) {
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::istringstream ls(line);
    std::string c;
    while (std::getline(ls, c, '|')) {
      const size_t a = c.find_first_not_of(' '), b = c.find_last_not_of(' ');
      cells.push_back(a == std::string::npos ? "" : c.substr(a, b - a + 1));
    }
    if (cells.size() > 2 && cells[1] == task && cells[2] == metric) return line;
  }
  return "";
}

size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

const std::string& model() {
  static const std::string m = kveval::test::model_path();
  return m;
}

/// Every request kind on a model: multiple choice, loglikelihood, rolling, generation.
std::string four_task_spec(const std::string& model_path) {
  json mc = {{"name", "mc"}, {"output_type", "multiple_choice"},
             {"docs", {{{"q", "Lily went to the park to play with her"}, {"c", {"ball", "car"}}, {"g", 0}},
                       {{"q", "Tom had a red"}, {"c", {"ball", "sky"}}, {"g", 0}}}},
             {"doc_to_text", "q"}, {"doc_to_choice", "c"}, {"doc_to_target", "g"}};
  json ll = {{"name", "ll"}, {"output_type", "loglikelihood"},
             {"docs", {{{"c", "Lily went to the"}, {"x", "park"}}}}, {"doc_to_text", "c"}, {"doc_to_target", "x"}};
  json roll = {{"name", "roll"}, {"output_type", "loglikelihood_rolling"},
               {"docs", {{{"t", "Tom had a dog. The dog liked to run."}}}}, {"doc_to_target", "t"}};
  json gen = {{"name", "gen"}, {"output_type", "generate_until"},
              {"docs", {{{"p", "Tom had a"}, {"a", "dog"}}}}, {"doc_to_text", "p"}, {"doc_to_target", "a"},
              {"generation_kwargs", {{"max_gen_toks", 6}}}};
  return json{{"model", model_path}, {"max_length", 64}, {"tasks", {mc, ll, roll, gen}}}.dump();
}

}  // namespace

TEST_SUITE("cli.runtime") {
  TEST_CASE("--threads is bounded like the spec's field, with the same message, in run, generate and bench" * kveval::test::needs_model()) {
    TempDir d;
    const std::string want = "expected an integer in [0, 4096], got 65536";
    const std::string spec = d.write("spec.json", four_task_spec(model()));
    json over = json::parse(four_task_spec(model()));
    over["threads"] = 65536;
    const std::string spec_over = d.write("over.json", over.dump());
    Run s = run_kveval(d, "run " + quote(spec_over));
    CHECK(s.code == 2);
    CHECK(s.err.find("threads: " + want) != std::string::npos);
    for (const std::string& args : {"run " + quote(spec) + " --threads 65536",
                                    "generate -m " + quote(model()) + " -p Hi -n 1 -t 65536",
                                    "bench -m " + quote(model()) + " --tests ll -t 1,65536", "run " + quote(spec) + " --threads -1"}) {
      CAPTURE(args);
      Run r = run_kveval(d, args);
      CHECK(r.code == 2);
      CHECK(lines(r.err) == 1);
      CHECK(r.err.rfind("kveval: error: --threads: expected an integer in [0, 4096], got ", 0) == 0);
      CHECK(r.out.empty());
    }
    CHECK(run_kveval(d, "run " + quote(spec) + " --threads 65536").err.find("--threads: " + want) != std::string::npos);
  }

  TEST_CASE("generate -p with invalid UTF-8 is refused in one line (exit 2); valid UTF-8 runs" * kveval::test::needs_model()) {
    TempDir d;
    Run bad = run_kveval(d, "generate -m " + quote(model()) + " -n 2 -p \"$(printf 'abc\\377def')\"");
    CHECK(bad.code == 2);
    CHECK(lines(bad.err) == 1);
    CHECK(bad.err.find("kveval: error: --prompt: invalid UTF-8 at byte 3 (0xff)") == 0);
    CHECK(bad.out.empty());
    Run sur = run_kveval(d, "generate -m " + quote(model()) + " -n 2 -p \"$(printf 'x\\355\\240\\200')\"");  // a surrogate
    CHECK(sur.code == 2);
    CHECK(sur.err.find("invalid UTF-8 at byte 1 (0xed)") != std::string::npos);
    Run ok = run_kveval(d, "generate -m " + quote(model()) + " -n 2 -p 'caf\xC3\xA9'");
    CHECK(ok.code == 0);
    CHECK(ok.out.rfind("caf\xC3\xA9", 0) == 0);
  }

  TEST_CASE("a model whose activations overflow: exit 4, every request fails naming task, doc and position, no metric" * kveval::test::needs_model()) {
    TempDir d;
    const std::string path = d.file("overflow.gguf");
    kveval::test::GgufEdit e;
    e.tensor = [](const std::string& name, std::vector<float>& w) {
      if (name == "blk.0.attn_norm.weight") std::fill(w.begin(), w.end(), 1e30f);  // finite
    };
    kveval::test::write_variant(model(), path, e);
    const std::string spec = d.write("spec.json", four_task_spec(path));
    Run r = run_kveval(d, "run " + quote(spec) + " --log-samples " + quote(d.file("s.jsonl")) + " -o " + quote(d.file("r.json")));
    INFO(r.err);
    CHECK(r.code == 4);
    CHECK(table_row(r.out, "mc", "acc").find(" n/a ") != std::string::npos);
    CHECK(table_row(r.out, "mc", "acc").find("all 4 requests failed") != std::string::npos);
    CHECK(r.out.find("1.0000") == std::string::npos);
    CHECK(r.out.find("overflow") == std::string::npos);
    // --log-samples: one line per document (lm-eval's shape), each request's error under kveval.requests
    std::istringstream samples(slurp(d.file("s.jsonl")));
    std::string line;
    int docs = 0, requests = 0;
    while (std::getline(samples, line)) {
      json s = json::parse(line);
      ++docs;
      CAPTURE(line);
      REQUIRE(s["error"].is_string());
      const std::string prefix = "task '" + s["task"].get<std::string>() + "' doc " + std::to_string(s["doc_id"].get<int>());
      CHECK(s["error"].get<std::string>().find(prefix) == 0);
      for (const auto& q : s["kveval"]["requests"]) {
        ++requests;
        REQUIRE(q["error"].is_string());
        const std::string err = q["error"];
        CHECK(err.find(prefix) == 0);
        CHECK(err.find("non-finite logits (NaN or Inf)") != std::string::npos);
        CHECK(err.find("token position") != std::string::npos);
        CHECK(q["tokens"].is_null());
      }
      for (const auto& resp : s["resps"]) CHECK(resp == json::array({nullptr}));  // nothing scored, no text
    }
    CHECK(docs == 5);
    CHECK(requests == 7);  // 2 x 2 choices, 1 continuation, 1 window, 1 generation
    json res = json::parse(slurp(d.file("r.json")));
    CHECK(res["kveval"]["request_errors"]["total"] == 7);
    for (const auto& [task, ms] : res["results"].items())
      for (const auto& [name, v] : ms.items())
        if (name != "alias") CHECK_MESSAGE((v.is_null() || v == "N/A"), task << " " << name << " = " << v.dump());
  }

  TEST_CASE("an all-NaN model never reports acc 1.0: it is refused at load (the run-time path is the overflow case above)" * kveval::test::needs_model()) {
    TempDir d;
    const std::string path = d.file("nan.gguf");
    kveval::test::GgufEdit e;
    e.tensor = [](const std::string& name, std::vector<float>& w) {
      if (name == "token_embd.weight") std::fill(w.begin(), w.end(), std::numeric_limits<float>::quiet_NaN());
    };
    kveval::test::write_variant(model(), path, e);
    Run r = run_kveval(d, "run " + quote(d.write("spec.json", four_task_spec(path))));
    INFO(r.out << r.err);
    CHECK(r.code == 1);  // refused at load by the finite-weight scan, naming the tensor
    CHECK(r.out.find("1.0000") == std::string::npos);
    CHECK(r.err.find("token_embd.weight") != std::string::npos);
  }

  TEST_CASE("memory: --batch-size 4096 plans only the rows it fills; a 10 GiB KV cache is refused in one line before anything runs" * kveval::test::needs_model()) {
    TempDir d;
    const std::string demo = kveval::test::source_dir() + "/tasks/demo.json";
    const std::string m = " --model " + quote(model()) + " -q";
    // What this build has resident before loading (sanitizer builds hold more): a limit of 1 byte
    // is refused at load with "... less X MiB resident"; the limit is then X + 31 MiB (rounded down).
    Run probe = run_kveval(d, "run " + quote(demo) + m, "KVEVAL_MEMORY_LIMIT_BYTES=1 ");
    REQUIRE(probe.code == 1);
    const size_t at = probe.err.find(" less ");
    REQUIRE(at != std::string::npos);
    const double resident_mib = std::stod(probe.err.substr(at + 6));
    REQUIRE(probe.err.find(" MiB resident", at) != std::string::npos);
    const long limit_mib = static_cast<long>(resident_mib) + 31;
    const std::string limit = "KVEVAL_MEMORY_LIMIT_BYTES=" + std::to_string(limit_mib * 1048576) + " ";
    // a batch larger than the requests costs no more than the requests: the plan counts the rows
    // score() and the KV cache really fill (8 generation prompts, the packed scoring rows)
    Run big = run_kveval(d, "run " + quote(demo) + m + " --batch-size 4096", limit);
    Run small = run_kveval(d, "run " + quote(demo) + m + " --batch-size 1", limit);
    INFO(probe.err << big.err << small.err);
    CHECK(big.code == 0);
    CHECK(small.code == 0);
    CHECK(big.out.find("| story_continuations | perplexity") != std::string::npos);
    CHECK(small.out.find("| story_continuations | perplexity") != std::string::npos);

    // 4096 prompts x (prompt + 2040) positions: K+V = 2 x 5 layers x 4096 x 4 heads x 2048 x 8 x 4 bytes = 10.0 GiB
    json docs = json::array();
    for (int i = 0; i < 4096; ++i) docs.push_back({{"p", "Once upon a time " + std::to_string(i)}});
    json spec = {{"model", model()}, {"batch_size", 4096}, {"max_length", 2048},
                 {"tasks", {{{"name", "g"}, {"output_type", "generate_until"}, {"docs", docs}, {"doc_to_text", "p"},
                             {"generation_kwargs", {{"max_gen_toks", 2040}}}}}}};
    Run cache = run_kveval(d, "run -q " + quote(d.write("cache.json", spec.dump())), "KVEVAL_MEMORY_LIMIT_BYTES=2147483648 ");
    CHECK(cache.code == 1);
    CHECK(lines(cache.err) == 1);
    CHECK(cache.err.find("KV cache (4096 rows x 2048 positions) 10.0 GiB (10737418240 bytes)") != std::string::npos);
    CHECK(cache.err.find("is available (KVEVAL_MEMORY_LIMIT_BYTES 2.0 GiB less") != std::string::npos);
    CHECK(cache.out.empty());
    // an f32 cache: the hint offers the 2-byte cache types; with one of them it does not
    CHECK(cache.err.find("; lower batch_size, max_length or max_gen_toks, or set kv_cache_dtype (--kv-cache-dtype) bf16 or "
                         "f16 (half the KV cache)\n") != std::string::npos);
    Run half = run_kveval(d, "run -q " + quote(d.file("cache.json")) + " --kv-cache-dtype f16",
                          "KVEVAL_MEMORY_LIMIT_BYTES=2147483648 ");
    CHECK(half.code == 1);
    CHECK(half.err.find("KV cache (4096 rows x 2048 positions) 5.0 GiB (5368709120 bytes)") != std::string::npos);
    CHECK(half.err.find("; lower batch_size, max_length or max_gen_toks\n") != std::string::npos);

    // bench: a size that does not fit is skipped with the planned bytes (a 10 GiB cache, 256 MiB of pp logits),
    // the others are measured; nothing fits: exit 2 (the 10 GiB cache is never allocated)
    Run bench = run_kveval(d, "bench -m " + quote(model()) + " --tests cache,pp --cache-shapes 4096x2048,1x64 -p 2048,8 -b 4 -r 1 -t 1 -o csv",
                           "KVEVAL_MEMORY_LIMIT_BYTES=2147483648 ");
    INFO(bench.err);
    CHECK(bench.code == 0);
    CHECK(bench.err.find("kveval bench: warning: skipped, not enough memory for cache 4096x2048: planned 10.0 GiB") !=
          std::string::npos);
    CHECK(bench.out.find("cache,") != std::string::npos);  // 1x64 measured
    CHECK(bench.out.find("pp8") != std::string::npos);
    Run none = run_kveval(d, "bench -m " + quote(model()) + " --tests cache --cache-shapes 4096x2048 -r 1 -t 1",
                          "KVEVAL_MEMORY_LIMIT_BYTES=2147483648 ");
    CHECK(none.code == 2);
    CHECK(none.out.empty());
    CHECK(none.err.find("bench measured nothing") != std::string::npos);

    // generate: the weights are checked at load
    Run gen = run_kveval(d, "generate -m " + quote(model()) + " -p Hi -n 4", "KVEVAL_MEMORY_LIMIT_BYTES=1000 ");
    CHECK(gen.code == 1);
    CHECK(gen.err.find("kveval: error: not enough memory for the model ") == 0);
    CHECK(gen.err.find("weights 1.1 MiB (1171200 bytes)") != std::string::npos);
    Run garbage = run_kveval(d, "generate -m " + quote(model()) + " -p Hi -n 4", "KVEVAL_MEMORY_LIMIT_BYTES=2G ");
    CHECK(garbage.code == 2);
    CHECK(garbage.err.find("KVEVAL_MEMORY_LIMIT_BYTES: expected a number of bytes, got '2G'") != std::string::npos);
  }

  TEST_CASE("memory: bench roofline, switch, ll and dequant plan their bytes and are skipped with a warning" * kveval::test::needs_model()) {
    TempDir d;
    // As above: what this build has resident at load; the limit leaves 40 MiB beyond it.
    Run probe = run_kveval(d, "bench -m " + quote(model()) + " --tests ll -r 1", "KVEVAL_MEMORY_LIMIT_BYTES=1 ");
    REQUIRE(probe.code == 1);
    const size_t at = probe.err.find(" less ");
    REQUIRE(at != std::string::npos);
    const long limit_mib = static_cast<long>(std::stod(probe.err.substr(at + 6))) + 40;
    const std::string limit = "KVEVAL_MEMORY_LIMIT_BYTES=" + std::to_string(limit_mib * 1048576) + " ";
    // under the limit, switch (1024 rows), the roofline (a 1024 MiB stream buffer) and dequant are each capped or
    // skipped before they allocate more than the limit allows
    Run r = run_kveval(d, "bench -m " + quote(model()) +
                              " --tests roofline,switch,ll,dequant --stream-mib 1024 --switch-batch 1024 --switch-rounds 1"
                              " --switch-gen 2 --ll-requests 1000 -b 1000 -r 1 -t 1 -o csv",
                       limit);
    INFO(r.err);
    CHECK(r.code == 0);  // the roofline's sgemm at M = 1 fits
    CHECK(r.out.find("\nroofline,sgemm m=1,") != std::string::npos);
    for (const char* test : {"\nswitch,", "\nll,", "\ndequant,"}) CHECK(r.out.find(test) == std::string::npos);
    const std::string skipped = "kveval bench: warning: skipped, not enough memory for ";
    // 1024 rows x 18 positions: K+V = 2 x 5 layers x 1024 x 4 kv heads x 18 x 8 x 4 bytes; the scoring's
    // activations with logits at 17 positions of each row
    CHECK(r.err.find(skipped + "switch batch 1024 x 18 positions: planned 82.9 MiB (86927624 bytes) = KV cache 22.5 "
                               "MiB (23592960 bytes) + activations 60.4 MiB (63334664 bytes), but ") != std::string::npos);
    CHECK(r.err.find(skipped + "dequant: planned 192.0 MiB (201326592 bytes) = float32 weights and output 128.0 MiB "
                               "(134217728 bytes) + quantized blocks 64.0 MiB (67108864 bytes), but ") != std::string::npos);
    CHECK(r.err.find(skipped + "ll batch 1000: planned ") != std::string::npos);
    CHECK(r.err.find("is available (KVEVAL_MEMORY_LIMIT_BYTES " + std::to_string(limit_mib) + ".0 MiB less ") !=
          std::string::npos);
    // The stream buffer shrinks to 7/8 of what is available (< 40 MiB) only if that is still 4 x the last-level cache.
    const size_t llc = kveval::backend::last_level_cache_bytes();
    if (llc == 0 || 4 * llc > (size_t{35} << 20)) {
      CHECK(r.err.find(skipped + "roofline stream read: planned 1.0 GiB (1073741824 bytes) = stream buffer 1.0 GiB "
                                 "(1073741824 bytes), but ") != std::string::npos);
      CHECK(r.err.find("; a buffer that fits would be below ") != std::string::npos);
      CHECK(r.out.find("stream read") == std::string::npos);
    } else {
      CHECK(r.err.find("kveval bench: warning: roofline: stream buffer shrunk from 1024 MiB to ") != std::string::npos);
      CHECK(r.out.find("\nroofline,stream read,") != std::string::npos);
    }
    // The same limit fits 4 rows of switch.
    Run fits = run_kveval(d, "bench -m " + quote(model()) + " --tests switch --switch-batch 4 --switch-rounds 1 -r 1 -t 1 -o csv",
                          limit);
    INFO(fits.err);
    CHECK(fits.code == 0);
    CHECK(fits.out.find("\nswitch,release,1,4,16,32,") != std::string::npos);
    CHECK(fits.err.find("warning") == std::string::npos);
  }
}
