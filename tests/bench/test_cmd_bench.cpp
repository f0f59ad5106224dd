// The `kveval bench` command end to end: every output format, the fields,
// versions and counters of each test, the pass schedule of gen-mixed, and
// one-line usage errors (nothing here is timed: only fields and counters are
// asserted).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "bench/gen.hpp"
#include "bench/run.hpp"
#include "model/gguf.hpp"
#include "model/model.hpp"
#include "context_support.hpp"
#include "model/random_model.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;
using namespace kveval::bench;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir() {
  static const test::ScratchDir dir("bench");  // removed at exit
  return dir.path;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Runs `cmd` through the shell; stdout and stderr go to files in temp_dir().
int run(const std::string& cmd, std::string& out, std::string& err) {
  const fs::path o = temp_dir() / "stdout.txt", e = temp_dir() / "stderr.txt";
  const int rc = std::system((cmd + " > " + o.string() + " 2> " + e.string()).c_str());
  out = read_text(o);
  err = read_text(e);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string kveval_bin() {
  const char* b = std::getenv("KVEVAL_BIN");
  return b ? b : "kveval";
}

/// Forward passes of generating `gen[i]` tokens for prompt i over `rows` cache
/// rows, each pass giving every busy row one token (a prompt's first pass is its
/// prefill): static runs groups of `rows` prompts in order until the group's
/// longest ends; dynamic gives a free row the next prompt at once (lowest row
/// first), so the count is when the busiest row ends.
int64_t scheduled_passes(const std::vector<int>& gen, int rows, bool dynamic) {
  int64_t passes = 0;
  if (!dynamic) {
    for (size_t g = 0; g < gen.size(); g += static_cast<size_t>(rows))
      passes += *std::max_element(gen.begin() + static_cast<std::ptrdiff_t>(g),
                                  gen.begin() + static_cast<std::ptrdiff_t>(std::min(gen.size(), g + static_cast<size_t>(rows))));
    return passes;
  }
  std::vector<int64_t> free_at(static_cast<size_t>(rows), 0);
  for (int g : gen) {
    auto row = std::min_element(free_at.begin(), free_at.end());  // first of the earliest free
    *row += g;
  }
  return *std::max_element(free_at.begin(), free_at.end());
}

}  // namespace

TEST_SUITE("bench.cmd_bench") {
  TEST_CASE("kveval bench --output json has every test, figure, version and counter" * kveval::test::needs_model()) {
    std::string out, err;
    const std::string cmd = kveval_bin() + " bench -m " + test::model_path() +
                            " -t 1 -b 1,2 -p 8,32 -n 4,8 --tg-prompt 4 -r 2 --stream-mib 16 --cache-shapes 1x64,2x128"
                            " --switch-rounds 3 --switch-batch 2 --switch-gen 4 --ll-requests 6 --output json";
    REQUIRE(run(cmd, out, err) == 0);
    const auto j = nlohmann::json::parse(out);
    CHECK(j["meta"]["kveval_version"].is_string());
    CHECK(j["meta"]["git_hash"].is_string());
    CHECK(j["meta"]["machine"]["threads"].get<int>() >= 1);
    CHECK(j["meta"]["model"]["n_layer"] == 5);
    std::set<std::string> tests;
    for (const auto& r : j["results"]) {
      tests.insert(r["test"].get<std::string>());
      for (const char* k : {"name", "unit"}) CHECK(r[k].is_string());
      for (const char* k : {"threads", "batch", "median", "stddev", "mean", "min", "max", "n"}) CHECK(r[k].is_number());
      const std::string t = r["test"];
      const bool last = r["name"].get<std::string>().ends_with(" last");
      if (t == "pp" && !last) CHECK(r["frac_of_sgemm"].is_number());
      if (t == "pp") {
        CHECK(r["GFLOP_per_s"].is_number());
        CHECK(r["n"] == 2);
      }
      if (t == "tg") {
        CHECK(r["frac_of_stream"].is_number());
        CHECK(r["weights_GB_per_s"].is_number());
        CHECK(r["weights_MB"].get<double>() > 0);
      }
      if (t == "speedup") {
        CHECK(r["ideal_ratio"].get<double>() > 1.0);
        CHECK(r["cached_tok_s"].is_number());
        CHECK(r["uncached_tok_s"].is_number());
      }
      if (t == "switch") {
        // After warm-up, scopes create no oneDNN primitives and no activation buffers;
        // release allocates the cache once per round by design, reuse never.
        CHECK(r["new_primitives"] == 0);
        CHECK(r["buffer_allocations"] == 0);
        CHECK(r["cache_allocations"] == (r["name"] == "release" ? 3 : 0));
      }
      if (t == "cache") {
        CHECK(r["cache_MiB"].get<double>() > 0);
        if (r["name"] == "reset_caches") CHECK(r["positions"].get<int>() <= 128);
      }
    }
    CHECK(tests == std::set<std::string>{"roofline", "pp", "tg", "tg-nocache", "speedup", "cache", "switch", "ll"});
    // pp 8 and 32 at batch 1 and 2, each with all logits and last-position logits
    // ("pp8 last"); tg/tg-nocache/speedup at G = 4, 8 and batch 1, 2.
    int pp = 0, pp_last = 0, speedup = 0;
    for (const auto& r : j["results"]) {
      pp += r["test"] == "pp";
      pp_last += r["test"] == "pp" && r["name"].get<std::string>().ends_with(" last");
      speedup += r["test"] == "speedup";
    }
    CHECK(pp == 8);
    CHECK(pp_last == 4);
    CHECK(speedup == 4);

    // The plot script turns this JSON into an SVG. scripts/setup.sh installs
    // python3-matplotlib, so its absence is a failure, not a skip.
    const fs::path json = temp_dir() / "bench.json", svg = temp_dir() / "bench.svg";
    std::ofstream(json) << out;
    std::string pout, perr;
    REQUIRE_MESSAGE(run("/usr/bin/python3 -c 'import matplotlib'", pout, perr) == 0,
                    "/usr/bin/python3 cannot import matplotlib (scripts/setup.sh installs python3-matplotlib): " << perr);
    const std::string plot = "/usr/bin/python3 " + test::source_dir() + "/scripts/plot_bench.py " + json.string() + " -o " + svg.string();
    CHECK(run(plot, pout, perr) == 0);
    CHECK(read_text(svg).find("<svg") != std::string::npos);
  }

  TEST_CASE("kveval bench csv and markdown outputs" * kveval::test::needs_model()) {
    std::string out, err;
    const std::string base = kveval_bin() + " bench -m " + test::model_path() + " -t 1 -p 8 -n 4 --tg-prompt 4 -r 1 --tests pp,tg";
    REQUIRE(run(base + " --output csv", out, err) == 0);
    CHECK(out.rfind("test,name,threads,batch,n_prompt,n_gen,positions,unit,median,stddev,mean,min,max,n,dtype,kv_cache_dtype,", 0) == 0);
    CHECK(out.find("\npp,pp8,1,1,8,0,0,tok/s,") != std::string::npos);
    CHECK(out.find(",1,f32,") != std::string::npos);  // n = 1 repetition, then the compute dtype
    REQUIRE(run(base, out, err) == 0);
    CHECK(out.find("### pp") != std::string::npos);
    CHECK(out.find("| 1 | 1 | tg4 (p4) |") != std::string::npos);
  }

  TEST_CASE("pp's notes explain frac_of_sgemm only when a row has it (the roofline ran)" * kveval::test::needs_model()) {
    std::string out, err;
    const std::string base = kveval_bin() + " bench -m " + test::model_path() +
                             " -t 1 -b 1 -p 8 -r 1 --stream-mib 16 --output json --tests ";
    for (const bool roofline : {true, false}) {
      CAPTURE(roofline);
      REQUIRE(run(base + (roofline ? "roofline,pp" : "pp"), out, err) == 0);
      const auto j = nlohmann::json::parse(out);
      bool column = false, explained = false;
      for (const auto& r : j["results"]) column = column || r.contains("frac_of_sgemm");
      for (const auto& n : j["notes"])
        if (n.get<std::string>().starts_with("pp: "))
          explained = n.get<std::string>().find("frac_of_sgemm") != std::string::npos;
      CHECK(column == roofline);
      CHECK(explained == roofline);
    }
  }

  TEST_CASE("tg pairs each repetition with a stream read when the roofline runs, and has no frac_of_stream without it" *
            kveval::test::needs_model()) {
    std::string out, err;
    const std::string base = kveval_bin() + " bench -m " + test::model_path() +
                             " -t 1 -b 1,2 -n 4 --tg-prompt 4 --stream-mib 16 --output json";
    // One repetition: the median of one paired ratio is weights_GB_per_s over the
    // one paired stream read, so the columns must agree to rounding.
    REQUIRE(run(base + " -r 1 --tests roofline,tg", out, err) == 0);
    auto j = nlohmann::json::parse(out);
    int tg = 0;
    for (const auto& r : j["results"]) {
      if (r["test"] != "tg") continue;
      ++tg;
      const double paired = r["paired_stream_GB_per_s"].get<double>(), gbps = r["weights_GB_per_s"].get<double>();
      CHECK(paired > 0);
      CHECK(r["frac_of_stream"].get<double>() == doctest::Approx(gbps / paired).epsilon(1e-9));
    }
    CHECK(tg == 2);
    bool noted = false;
    for (const auto& n : j["notes"]) noted = noted || n.get<std::string>().find("taken just before it") != std::string::npos;
    CHECK(noted);
    // Without the roofline there is no yardstick: neither column.
    REQUIRE(run(base + " -r 2 --tests tg", out, err) == 0);
    j = nlohmann::json::parse(out);
    tg = 0;
    for (const auto& r : j["results"]) {
      if (r["test"] != "tg") continue;
      ++tg;
      CHECK_FALSE(r.contains("frac_of_stream"));
      CHECK_FALSE(r.contains("paired_stream_GB_per_s"));
    }
    CHECK(tg == 2);
  }

  TEST_CASE("gen-mixed, load and dequant with two dtypes: rows carry their dtype, passes follow the schedule, each note once" *
            kveval::test::needs_model()) {
    // The second dtype: bf16 where oneDNN has a bf16 matmul, else q8_0 (also
    // available on AVX2-only CPUs).
    const std::string other = kveval::backend::bf16_matmul_available() ? "bf16" : "q8_0";
    std::string out, err;
    const std::string cmd = kveval_bin() + " bench -m " + test::model_path() + " -t 1 --dtype f32," + other +
                            " --tests gen-mixed,load,dequant --gen-mixed-prompts 7"
                            " --gen-mixed-max-gen 9 --gen-mixed-rows 3 --seed 5 -r 1 --output json";
    REQUIRE_MESSAGE(run(cmd, out, err) == 0, err);
    const auto j = nlohmann::json::parse(out);
    const auto model = test::load_context(test::model_path(), {.threads = 1, .hash = false});
    const GenMixedWorkload w = gen_mixed_workload(model.model(), 7, 9, 5);
    const int64_t want_static = scheduled_passes(w.max_gen_toks, 3, false);
    const int64_t want_dynamic = scheduled_passes(w.max_gen_toks, 3, true);
    REQUIRE(want_dynamic < want_static);  // the workload separates the two schedules
    std::map<std::string, int> rows_of;   // "test dtype" -> rows
    for (const auto& r : j["results"]) {
      const std::string t = r["test"], dtype = r.value("dtype", "");
      rows_of[t + " " + dtype] += 1;
      if (t == "gen-mixed" && r["name"] != "speedup") {
        INFO(dtype << " " << r["name"]);
        CHECK(r["forward_passes"].get<int64_t>() == (r["name"] == "static" ? want_static : want_dynamic));
        CHECK(r["prompts"] == 7);
      }
      if (t == "gen-mixed" && r["name"] == "speedup") CHECK(r["prompts_with_different_ids"] == 0);
      if (t == "load" && r["name"] == "load") CHECK(r["resident_MiB"].get<double>() > 0);
      if (t == "load" && r["name"] == "finite scan") CHECK(r["median"].get<double>() >= 0);  // never a negative time
    }
    // Three gen-mixed and three load rows per dtype; dequant (independent of
    // the dtype) once, untagged, one row per supported type.
    CHECK(rows_of["gen-mixed f32"] == 3);
    CHECK(rows_of["gen-mixed " + other] == 3);
    CHECK(rows_of["load f32"] == 3);
    CHECK(rows_of["load " + other] == 3);
    CHECK(rows_of["dequant "] == static_cast<int>(gguf::supported_types().size()));
    CHECK(rows_of.size() == 5);
    const auto notes = j["notes"].get<std::vector<std::string>>();
    CHECK(std::set<std::string>(notes.begin(), notes.end()).size() == notes.size());
    CHECK(notes.size() == 3);  // gen-mixed, load, dequant
    // Markdown names the dtype when the report compares dtypes.
    REQUIRE(run(kveval_bin() + " bench -m " + test::model_path() +
                    " -t 1 --dtype f32," + other + " --tests gen-mixed --gen-mixed-prompts 4 --gen-mixed-max-gen 3 -r 1",
                out, err) == 0);
    CHECK(out.find("| static " + other + " @") != std::string::npos);
    CHECK(out.find("| dynamic f32 @") != std::string::npos);
  }

  TEST_CASE("bad bench arguments are one-line usage errors" * kveval::test::needs_model()) {
    std::string out, err;
    CHECK(run(kveval_bin() + " bench -m " + test::model_path() + " --tests pp,warp", out, err) == 2);
    CHECK(err.find("--tests: unknown test 'warp'") != std::string::npos);
    CHECK(run(kveval_bin() + " bench -m " + test::model_path() + " --cache-shapes 8by4096", out, err) == 2);
    CHECK(err.find("--cache-shapes") != std::string::npos);
    CHECK(run(kveval_bin() + " bench -m /nonexistent.gguf --tests pp", out, err) == 2);  // as run, generate, tokenize
    CHECK(err.find("/nonexistent.gguf: model file not found (--model)") != std::string::npos);
    // An unwritable --json-out is refused before anything is measured.
    CHECK(run(kveval_bin() + " bench -m " + test::model_path() + " --tests pp -p 8 -r 1 --json-out /nonexistent/dir/x.json",
              out, err) == 2);
    CHECK(err.find("--json-out /nonexistent/dir/x.json: directory /nonexistent/dir does not exist") != std::string::npos);
    CHECK(out.empty());
    CHECK(err.find("kveval: load:") == std::string::npos);  // refused before the model was loaded
    // fidelity's spec is read before the other tests run, and named.
    CHECK(run(kveval_bin() + " bench -m " + test::model_path() + " --tests pp,fidelity --spec /nonexistent.json", out,
              err) == 2);
    CHECK(err.find("--spec /nonexistent.json: not found or not readable") != std::string::npos);
    CHECK(err.find("kveval: load:") == std::string::npos);
    // An empty item in a list is refused in every form (CLI11 alone would drop it, or take
    // the next option as the value of a lone ","); a whole list still parses.
    const std::string m = kveval_bin() + " bench -m " + test::model_path();
    const std::vector<std::pair<std::string, std::string>> lists = {
        {" --dtype f16,,bf16 --tests pp", "--dtype: empty item in 'f16,,bf16'"},
        {" --dtype , --tests pp", "--dtype: empty item in ','"},
        {" --kv-cache-dtype=,f16", "--kv-cache-dtype: empty item in ',f16'"},
        {" -t 1,", "--threads: empty item in '1,'"},
        {" -b1,,2", "--batch-size: empty item in '1,,2'"},
        {" --cache-shapes 1x64,", "--cache-shapes: empty item in '1x64,'"},
        {" --matmul exact, --tests tg", "--matmul: empty item in 'exact,'"},
        {" -t 1 ,2", "--threads: empty item in ',2'"},  // CLI11 also takes the tokens up to the next option
        {" --dtype f32 bf16, --tests pp", "--dtype: empty item in 'bf16,'"}};
    for (const auto& [args, want] : lists) {
      INFO(args);
      CHECK(run(m + args, out, err) == 2);
      CHECK(err == "kveval: error: " + want + " (comma-separated values, none empty) (see --help)\n");
      CHECK(out.empty());
    }
    CHECK(run(m + " -t 1 -b1,2 -p 8 -r 1 --tests pp -o csv", out, err) == 0);
    CHECK(out.find("\npp,pp8,1,2,8,") != std::string::npos);
  }

  TEST_CASE("skipped and capped sizes are warnings on stderr; nothing measured writes nothing" *
            kveval::test::needs_model()) {
    std::string out, err;
    // stories260K's context is 2048: a 5000-token prompt leaves no room for tg.
    const fs::path json = temp_dir() / "nothing.json";
    CHECK(run(kveval_bin() + " bench -m " + test::model_path() + " --tests tg,tg-nocache -n 4 --tg-prompt 5000 -r 1 -o csv" +
                  " --json-out " + json.string(),
              out, err) == 2);
    CHECK(out.empty());
    CHECK_FALSE(fs::exists(json));
    CHECK(err.find("warning: tg: -n 4 after a 5000-token prompt (--tg-prompt) leaves fewer than 2") != std::string::npos);
    CHECK(err.find("warning: tg-nocache: -n 4 after a 5000-token prompt") != std::string::npos);
    CHECK(err.find("bench measured nothing (every selected test was skipped; the warnings above say why)") !=
          std::string::npos);
    CHECK(run(kveval_bin() + " bench -m " + test::model_path() + " --tests tg -n 1 -r 1", out, err) == 2);
    CHECK(err.find("warning: tg: -n 1 skipped") != std::string::npos);
    // A cap in csv: the rows are there and the cap is on stderr.
    REQUIRE(run(kveval_bin() + " bench -m " + test::model_path() + " --tests pp,tg -p 5000,8 -n 3000 -r 1 -o csv", out,
                err) == 0);
    CHECK(out.find("\ntg,tg2032,") != std::string::npos);
    CHECK(err.find("warning: pp5000 skipped: longer than the context length 2048") != std::string::npos);
    CHECK(err.find("warning: tg: -n 3000 after a 16-token prompt exceeds the context length 2048; capped to 2032") !=
          std::string::npos);
  }

  TEST_CASE("--matmul exact,int8: one row per mode in every format, the mode a load used, repeats once") {
    std::string out, err;
    const fs::path q8 = temp_dir() / "tiny-q8_0.gguf", f32 = temp_dir() / "tiny-f32.gguf";
    REQUIRE(run(kveval_bin() + " make-model --preset tiny --type q8_0 -o " + q8.string(), out, err) == 0);
    REQUIRE(run(kveval_bin() + " make-model --preset tiny --type f32 -o " + f32.string(), out, err) == 0);
    const std::string tg = " -t 1 --tests tg -n 4 --tg-prompt 4 -r 1";
    // Q8_0 blocks: int8 applies; the list's order is the run order, a repeat measures once.
    REQUIRE(run(kveval_bin() + " bench -m " + q8.string() + tg + " --matmul int8,exact,int8 -o json", out, err) == 0);
    auto j = nlohmann::json::parse(out);
    REQUIRE(j["results"].size() == 2);
    CHECK(j["results"][0]["name"] == "tg4");
    CHECK(j["results"][0]["matmul"] == "int8");
    CHECK(j["results"][1]["name"] == "tg4");
    CHECK(j["results"][1]["matmul"] == "exact");
    CHECK(j["meta"]["options"]["matmul"] == nlohmann::json::array({"int8", "exact"}));
    CHECK(err.find("; matmul int8 (decode steps on") != std::string::npos);
    REQUIRE(run(kveval_bin() + " bench -m " + q8.string() + tg + " --matmul exact,int8 -o csv", out, err) == 0);
    CHECK(out.find(",n,dtype,kv_cache_dtype,matmul,") != std::string::npos);
    CHECK(out.find("\ntg,tg4,1,1,4,4,0,tok/s,") < out.find(",f32,exact,"));
    CHECK(out.find(",f32,exact,") < out.find(",f32,int8,"));
    REQUIRE(run(kveval_bin() + " bench -m " + q8.string() + tg + " --matmul exact,int8", out, err) == 0);
    CHECK(out.find("| threads | batch | matmul | test | value |") != std::string::npos);
    CHECK(out.find("| 1 | 1 | exact | tg4 (p4) |") < out.find("| 1 | 1 | int8 | tg4 (p4) |"));
    CHECK(out.find("| 1 | 1 | int8 | tg4 (p4) |") != std::string::npos);
    // F32 weights: int8 does not apply; said once on stderr, and both rows record exact.
    REQUIRE(run(kveval_bin() + " bench -m " + f32.string() + tg + " --matmul exact,int8 -o jsonl", out, err) == 0);
    std::vector<std::string> modes;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);) modes.push_back(nlohmann::json::parse(l)["matmul"]);
    CHECK(modes == std::vector<std::string>{"exact", "exact"});
    const auto ignored = err.find("--matmul int8 ignored (no matrix kept in");
    CHECK(ignored != std::string::npos);
    CHECK(err.find("--matmul int8 ignored", ignored + 1) == std::string::npos);
    // A bad value: one line naming --matmul and what it takes, before any load.
    CHECK(run(kveval_bin() + " bench -m " + q8.string() + tg + " --matmul exact,fp8", out, err) == 2);
    CHECK(err == "kveval: error: --matmul 'fp8': expected 'exact' or 'int8'\n");
    CHECK(out.empty());
  }

  TEST_CASE("repeated list values and an auto that resolves to a listed dtype are measured once" *
            kveval::test::needs_model()) {
    std::string out, err;
    REQUIRE(run(kveval_bin() + " bench -m " + test::model_path() + " -t 1,1 --dtype f32,auto,f32 -p 8,8 -b 1,1" +
                    " --tests pp,pp -r 1 -o json",
                out, err) == 0);
    const auto j = nlohmann::json::parse(out);
    CHECK(j["results"].size() == 2);  // pp8 and pp8 last, f32, one thread, batch 1
    CHECK(j["meta"]["options"]["dtypes"] == nlohmann::json::array({"f32", "auto"}));
    CHECK(err.find("warning: --dtype f32 and auto both resolve to f32 for this model: measured once") !=
          std::string::npos);
  }
}
