// End-to-end runs of `kveval run` ($KVEVAL_BIN): the demo spec, output files,
// exit codes, one-line errors for bad input, baseline gating.
#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <sys/wait.h>

#include "cli_run.hpp"

namespace {

std::string spec_with(const std::string& tasks) {
  return "{\"model\": " + json(kveval::test::model_path()).dump() + ", \"max_length\": 64, \"tasks\": [" + tasks + "]}";
}

}  // namespace

TEST_SUITE("cli.run") {
  TEST_CASE("the demo spec runs end to end: log-likelihood phase before generation, files written, exit 0" * kveval::test::needs_model()) {
    TempDir d;
    std::string spec = kveval::test::source_dir() + "/tasks/demo.json";
    Run r = run_kveval(d, "run " + quote(spec) + " --model " + quote(kveval::test::model_path()) +
                          " --limit 5 --output " + quote(d.file("results.json")) + " --log-samples " +
                          quote(d.file("samples.jsonl")));
    INFO(r.err);
    REQUIRE(r.code == 0);
    // the spec lists generation first; the phase table shows log-likelihood first
    size_t ll = r.out.find("| loglikelihood "), pre = r.out.find("| prefill "), dec = r.out.find("| decode ");
    REQUIRE(ll != std::string::npos);
    REQUIRE(pre != std::string::npos);
    CHECK(ll < pre);
    CHECK(pre < dec);
    CHECK(r.out.find("after teardown") != std::string::npos);
    CHECK(r.out.find(", 0 after teardown") != std::string::npos);
    CHECK(r.out.find("0 with caches set up") != std::string::npos);
    CHECK(r.out.find("story_cloze") != std::string::npos);
    CHECK(r.out.find("acc_norm") != std::string::npos);
    CHECK(r.out.find("nan") == std::string::npos);
    CHECK(r.err.find("generation cache:") != std::string::npos);
    json res = json::parse(slurp(d.file("results.json")));
    CHECK(res["kveval"]["model"]["sha256"] == "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d");
    // The load summary: 292800 F32 parameters, 4 bytes each in memory.
    CHECK(res["kveval"]["model"]["resident_weight_bytes"] == 1171200);
    CHECK(res["kveval"]["model"]["tensor_types"] == nlohmann::json{{"F32", 48}});
    CHECK(res["kveval"]["model"]["weight_dtype"] == "F32");
    CHECK(res["kveval"]["version"].is_string());
    CHECK(res["kveval"]["git_hash"].is_string());
    CHECK(res["kveval"]["threads"].get<int>() >= 1);
    CHECK(res["config"]["batch_size"] == 8);
    CHECK(res["configs"]["story_generation"]["output_type"] == "generate_until");
    CHECK(res["results"]["story_cloze"]["acc,none"].is_number());
    CHECK(res["results"]["story_cloze"]["acc_stderr,none"].is_number());
    CHECK(res["n-samples"]["story_cloze"]["original"] == 44);
    CHECK(res["n-samples"]["story_cloze"]["effective"] == 5);
    CHECK(res["kveval"]["cache"]["bytes_after_teardown"] == 0);
    CHECK(res["kveval"]["cache"]["bytes_at_setup"].get<long>() > 0);
    CHECK(res["kveval"]["cache"]["dtype"] == "f32");  // auto with the f32 compute dtype of an F32 file
    // The plan checked before the first pass is the cache the generation scope then set up, and the
    // process held at least the weights and that cache at its peak.
    const auto& mem = res["kveval"]["memory"];
    CHECK(mem["resident_weight_bytes"] == 1171200);
    CHECK(mem["planned_kv_cache_bytes"] == res["kveval"]["cache"]["bytes_at_setup"]);
    CHECK(mem["planned_activation_bytes"].get<long>() > 0);
    CHECK(mem["peak_rss_bytes"].get<long>() > 1171200 + res["kveval"]["cache"]["bytes_at_setup"].get<long>());
    CHECK(r.err.find("memory: peak RSS ") != std::string::npos);
    CHECK(r.err.find(" measured; planned ") != std::string::npos);
    CHECK(res["kveval"]["instrumentation"]["loglikelihood_forward_with_cache_setup"] == 0);
    std::vector<std::string> phases;
    for (const auto& p : res["kveval"]["phases"]) phases.push_back(p["name"]);
    CHECK(phases == std::vector<std::string>{"load", "requests", "loglikelihood", "cache setup", "prefill", "decode",
                                             "cache teardown"});
    // lm-eval's shape: one sample line per document and task (4 tasks x 5 documents)
    std::string samples = slurp(d.file("samples.jsonl"));
    CHECK(count_lines(samples) == 20);
    std::istringstream in(samples);
    std::string line;
    std::getline(in, line);
    json first = json::parse(line);
    CHECK(first["task"] == "story_generation");
    CHECK(first["doc_id"] == 0);
    CHECK(first["filter"] == "none");
    CHECK(first["resps"][0][0].is_string());
    CHECK(first["filtered_resps"][0] == first["resps"][0][0]);
    CHECK(first["arguments"]["gen_args_0"]["arg_1"]["max_gen_toks"].is_number());
    CHECK(first["kveval"]["requests"][0]["stop_reason"].is_string());
    CHECK(first["kveval"]["requests"][0]["tokens"].is_number());
    CHECK(first["doc_hash"].get<std::string>().size() == 64);
    // decode counts each sequence's generated tokens but its first, whose logits the prefill gave (as generate's)
    long generated = 0, sequences = 0;
    for (std::istringstream all(samples); std::getline(all, line);) {
      const json s = json::parse(line);
      if (s["task"] != "story_generation") continue;
      for (const auto& q : s["kveval"]["requests"]) generated += q["tokens"].get<long>(), sequences += q["tokens"].get<long>() > 0;
    }
    REQUIRE(sequences > 0);
    CHECK(res["kveval"]["phases"][5]["name"] == "decode");
    CHECK(res["kveval"]["phases"][5]["tokens"] == generated - sequences);
  }

  TEST_CASE("bad input: one-line error naming the place, non-zero exit" * kveval::test::needs_model()) {
    TempDir d;
    struct Case {
      std::string name, spec, data, expect;
    };
    std::vector<Case> cases = {
        {"trailing comma", "{\n  \"model\": \"m.gguf\",\n  \"tasks\": [],\n}\n", "", "spec.json:4:1: "},
        {"missing output_type", spec_with(R"({"name": "t", "docs": []})"), "",
         "spec.json: tasks[0]: missing required key 'output_type'"},
        {"unknown key", spec_with(R"({"name": "t", "output_type": "generate_until", "docs": [], "doc_to_txt": "x"})"), "",
         "spec.json: tasks[0].doc_to_txt: unknown key (did you mean 'doc_to_text'?)"},
        {"broken JSONL line",
         spec_with(R"({"name": "t", "output_type": "loglikelihood", "dataset_path": "data.jsonl", "doc_to_text": "c", "doc_to_target": "x"})"),
         "{\"c\": \"a\", \"x\": \"b\"}\n{\"c\": \"a\", \"x\": }\n", "data.jsonl:2:"},
        {"MC target out of range",
         spec_with(R"({"name": "t", "output_type": "multiple_choice", "dataset_path": "data.jsonl", "doc_to_text": "c", "doc_to_choice": "ch", "doc_to_target": "g"})"),
         "{\"c\": \"a\", \"ch\": [\"x\", \"y\"], \"g\": 2}\n", "data.jsonl:1: doc_to_target: gold index 2 out of range [0, 2)"},
        // the unknown name comes before its options' checks (true contradicts an unknown name's default)
        {"misspelt metric with options",
         spec_with(R"({"name": "t", "output_type": "multiple_choice", "docs": [], "doc_to_text": "c", "doc_to_choice": "ch", "doc_to_target": "g", "metric_list": [{"metric": "acc_nrom", "higher_is_better": true}]})"),
         "", "spec.json: tasks[0].metric_list[0].metric: metric \"acc_nrom\" is not available for multiple_choice (did you "
         "mean 'acc_norm'?); available: acc, acc_norm, acc_bytes\n"},
    };
    for (const auto& c : cases) {
      CAPTURE(c.name);
      std::string spec = d.write("spec.json", c.spec);
      if (!c.data.empty()) d.write("data.jsonl", c.data);
      Run r = run_kveval(d, "run " + quote(spec));
      CHECK(r.code == 2);
      CHECK(r.out.empty());
      CHECK(count_lines(r.err) == 1);
      CHECK(r.err.find(c.expect) != std::string::npos);
      CHECK(r.err.rfind("kveval: error: ", 0) == 0);
    }
    // a missing model file: usage error, named
    std::string spec = d.write("spec.json", R"({"model": "nowhere.gguf", "tasks": [)" + std::string(kLL) + "]}");
    Run r = run_kveval(d, "run " + quote(spec));
    CHECK(r.code == 2);
    CHECK(r.err.find("nowhere.gguf: model file not found") != std::string::npos);
    // a path relative to the spec's folder: the file tried, the value as written and the absolute path it resolved to
    std::filesystem::create_directories(d.file("sub"));
    const std::string sub = d.write("sub/spec.json", R"({"model": "models/nowhere.gguf", "tasks": [)" + std::string(kLL) + "]}");
    const std::string abs = std::filesystem::weakly_canonical(d.file("sub")).string() + "/models/nowhere.gguf";
    check_one_line(run_kveval(d, "run " + quote(sub)),
                   "kveval: error: " + d.file("sub") + "/models/nowhere.gguf: model file not found (spec 'model' "
                   "\"models/nowhere.gguf\", resolved against the spec's folder: " + abs + ")");
    // the spec given by a relative path from its own folder: the absolute path is the only one that says where
    check_one_line(run_kveval(d, "run spec.json", "cd " + quote(d.file("sub")) + " && "),
                   "kveval: error: models/nowhere.gguf: model file not found (spec 'model' \"models/nowhere.gguf\", "
                   "resolved against the spec's folder: " + abs + ")");
    // the same line and exit code from every command that takes -m
    for (const std::string cmd : {"generate -m nowhere.gguf -n 1", "bench -m nowhere.gguf --tests tg -n 2 -r 1",
                                  "tokenize -m nowhere.gguf hello"}) {
      CAPTURE(cmd);
      Run c = run_kveval(d, cmd);
      CHECK(c.code == 2);
      CHECK(count_lines(c.err) == 1);
      CHECK(c.err.find("kveval: error: nowhere.gguf: model file not found (--model)") != std::string::npos);
    }
  }

  TEST_CASE("chat options: one-line errors before the model loads, exit 2" * kveval::test::needs_model()) {
    TempDir d;
    const std::string spec = d.write("spec.json", spec_with(kLL)), model = kveval::test::model_path();
    const std::string raises = kveval::test::source_dir() + "/tests/data/chat_task/raises.jinja";
    struct Case {
      std::string name, args, expect;
    };
    const std::vector<Case> cases = {
        {"multiturn alone", "--fewshot-as-multiturn",
         "kveval: error: --fewshot-as-multiturn needs --apply-chat-template (or the spec's apply_chat_template), as lm-eval's"},
        {"no template in the model", "--apply-chat-template",
         "kveval: error: " + model + ": no chat template (key 'tokenizer.chat_template' is missing); name a template "
         "file with --apply-chat-template FILE or the spec's apply_chat_template"},
        {"unknown name", "--apply_chat_template=chatml",
         "kveval: error: --apply-chat-template chatml: no chat template of that name in " + model +
             " (its templates: none) and no file of that path"},
        {"template raises", "--apply-chat-template=" + quote(raises),
         "kveval: error: task 'll' document 0 (" + spec + ": tasks[0].docs[0]): chat template: " + raises},
    };
    for (const auto& c : cases) {
      CAPTURE(c.name);
      const Run r = run_kveval(d, "run " + quote(spec) + " " + c.args);
      CHECK(r.code == 2);
      CHECK(count_lines(r.err) == 1);
      CHECK(r.err.rfind(c.expect, 0) == 0);
    }
    CHECK(run_kveval(d, "run " + quote(spec) + " --apply-chat-template=" + quote(raises)).err.find("this template renders no chat") !=
          std::string::npos);
  }

  TEST_CASE("per-request errors (empty continuation, empty rolling document) are counted: exit 4, no NaN" * kveval::test::needs_model()) {
    TempDir d;
    std::string spec = d.write("spec.json", spec_with(std::string(kLL) + R"(,
      {"name": "empty", "output_type": "loglikelihood", "target_delimiter": "", "docs": [{"c": "Lily", "x": ""}], "doc_to_text": "c", "doc_to_target": "x"},
      {"name": "roll", "output_type": "loglikelihood_rolling", "docs": [{"t": ""}, {"t": "Once upon a time"}], "doc_to_target": "t"})"));
    Run r = run_kveval(d, "run " + quote(spec) + " --output " + quote(d.file("r.json")));
    INFO(r.out << r.err);
    CHECK(r.code == 4);
    CHECK(r.out.find("2 requests failed") != std::string::npos);
    CHECK(r.out.find("n/a") != std::string::npos);
    CHECK(r.out.find("nan") == std::string::npos);
    CHECK(r.out.find("inf") == std::string::npos);
    json res = json::parse(slurp(d.file("r.json")));
    CHECK(res["kveval"]["request_errors"]["total"] == 2);
    CHECK(res["results"]["empty"]["acc,none"].is_null());
    CHECK(res["results"]["roll"]["word_perplexity,none"].is_number());
  }

  TEST_CASE("--max-length overrides the spec's max_length as that key does; out of range, one line" * kveval::test::needs_model()) {
    TempDir d;
    const std::string roll =
        R"({"name": "roll", "output_type": "loglikelihood_rolling", "docs": [{"t": "Once upon a time there was a little girl named Lily. She loved to play outside in the park with her dog."}], "doc_to_target": "t"})";
    std::string s64 = spec_with(roll), s8 = s64;
    const std::string key64 = "\"max_length\": 64";
    s8.replace(s8.find(key64), key64.size(), "\"max_length\": 8");
    const std::string spec64 = d.write("s64.json", s64), spec8 = d.write("s8.json", s8);
    auto ppl = [&](const std::string& args) {
      Run r = run_kveval(d, "run " + args + " -q -o -");
      INFO(r.err);
      REQUIRE(r.code == 0);
      return json::parse(r.out)["results"]["roll"]["word_perplexity,none"].get<double>();
    };
    const double by_key = ppl(quote(spec8)), by_option = ppl(quote(spec64) + " --max-length 8"), wide = ppl(quote(spec64));
    CHECK(by_option == by_key);
    CHECK(by_option != wide);  // 8-token windows see less context than 64-token ones
    check_one_line(run_kveval(d, "run " + quote(spec64) + " --max-length 1"),
                   "kveval: error: --max-length: expected an integer in [2, 16777216], got 1 (see --help)");
  }

  TEST_CASE("-o - and --log-samples - write to stdout (tables go to stderr); both at once is a usage error" * kveval::test::needs_model()) {
    TempDir d;
    std::string spec = d.write("spec.json", spec_with(kLL));
    Run r = run_kveval(d, "run " + quote(spec) + " -q -o -");
    REQUIRE(r.code == 0);
    json res = json::parse(r.out);  // stdout is the results document alone
    CHECK(res["results"]["ll"]["perplexity,none"].is_number());
    CHECK(res["versions"].contains("ll"));
    CHECK(r.err.find("| ll") != std::string::npos);
    Run s = run_kveval(d, "run " + quote(spec) + " -q --log-samples -");
    REQUIRE(s.code == 0);
    CHECK(count_lines(s.out) == 2);  // one line per document
    std::istringstream in(s.out);
    std::string line;
    std::getline(in, line);
    json first = json::parse(line);
    CHECK(first["doc_id"] == 0);
    CHECK(first["arguments"]["gen_args_0"]["arg_0"] == "Lily went to the");
    CHECK(first["arguments"]["gen_args_0"]["arg_1"] == " park");
    CHECK(first["metrics"] == json::array({"perplexity", "acc"}));
    CHECK(first["perplexity"] == first["filtered_resps"][0][0]);
    Run both = run_kveval(d, "run " + quote(spec) + " -q -o - --log-samples -");
    CHECK(both.code == 2);
    CHECK(both.out.empty());
  }

  TEST_CASE("--baseline: exit 3 when a metric got worse by more than --tolerance" * kveval::test::needs_model()) {
    TempDir d;
    std::string spec = d.write("spec.json", spec_with(kLL));
    Run a = run_kveval(d, "run " + quote(spec) + " -o " + quote(d.file("base.json")));
    REQUIRE(a.code == 0);
    Run same = run_kveval(d, "run " + quote(spec) + " --baseline " + quote(d.file("base.json")));
    CHECK(same.code == 0);
    json base = json::parse(slurp(d.file("base.json")));
    base["results"]["ll"]["perplexity,none"] = base["results"]["ll"]["perplexity,none"].get<double>() - 0.5;  // baseline was better
    std::ofstream(d.file("better.json")) << base.dump();
    Run worse = run_kveval(d, "run " + quote(spec) + " --baseline " + quote(d.file("better.json")) + " --tolerance 0.1");
    CHECK(worse.code == 3);
    CHECK(worse.err.find("regression: ll perplexity") != std::string::npos);
    Run tolerated = run_kveval(d, "run " + quote(spec) + " --baseline " + quote(d.file("better.json")) + " --tolerance 1");
    CHECK(tolerated.code == 0);
    std::ofstream(d.file("junk.json")) << "{\"x\": 1,}";
    Run junk = run_kveval(d, "run " + quote(spec) + " --baseline " + quote(d.file("junk.json")));
    CHECK(junk.code == 2);
    CHECK(junk.err.find("junk.json:1:") != std::string::npos);
  }

  TEST_CASE("--baseline is an input: -o or --log-samples naming it is refused however spelt; a failing gate keeps its bytes" * kveval::test::needs_model()) {
    TempDir d;
    std::string spec = d.write("spec.json", spec_with(kLL));
    Run a = run_kveval(d, "run " + quote(spec) + " -q -o " + quote(d.file("base.json")));
    REQUIRE(a.code == 0);
    json base = json::parse(slurp(d.file("base.json")));
    const double ppl = base["results"]["ll"]["perplexity,none"].get<double>();
    base["results"]["ll"]["perplexity,none"] = ppl - 0.5;
    const std::string better = d.write("better.json", base.dump(2));
    const std::string better_text = slurp(better);
    std::filesystem::create_symlink("better.json", d.file("link.json"));
    std::filesystem::create_hard_link(better, d.file("hard.json"));
    for (const auto& out : {"-o " + quote(better), "-o " + quote(d.path.string() + "/./better.json"),
                            "--log-samples " + quote(d.file("link.json")), "-o " + quote(d.file("hard.json"))}) {
      CAPTURE(out);
      Run r = run_kveval(d, "run " + quote(spec) + " -q --baseline " + quote(better) + " " + out);
      CHECK(r.code == 2);
      CHECK(r.out.empty());  // refused before anything ran
      CHECK(count_lines(r.err) == 1);
      CHECK(r.err.find("is the --baseline file") != std::string::npos);
      CHECK(r.err.find(": refusing to overwrite an input\n") != std::string::npos);
    }
    // spelt relative to the working directory
    Run rel = run_kveval(d, "run " + quote(spec) + " -q --baseline better.json -o " + quote(better), "cd " + quote(d.path.string()) + " && ");
    CHECK(rel.code == 2);
    CHECK(rel.err == "kveval: error: --output " + better + " is the --baseline file (better.json): refusing to overwrite an input\n");
    // the gate fails (exit 3) and writes its results elsewhere: the baseline keeps every byte
    Run worse = run_kveval(d, "run " + quote(spec) + " -q --baseline " + quote(better) + " -o " + quote(d.file("new.json")));
    CHECK(worse.code == 3);
    CHECK(worse.err.find("regression: ll perplexity") != std::string::npos);
    CHECK(slurp(better) == better_text);
    CHECK(json::parse(slurp(d.file("new.json")))["results"]["ll"]["perplexity,none"].get<double>() == ppl);
  }

  TEST_CASE("--baseline is strict: nothing compared fails (exit 3, one line per problem); --tolerance needs --baseline" * kveval::test::needs_model()) {
    TempDir d;
    std::string spec = d.write("spec.json", spec_with(kLL));
    Run a = run_kveval(d, "run " + quote(spec) + " -q -o " + quote(d.file("base.json")));
    REQUIRE(a.code == 0);
    // a baseline whose metrics are n/a (null, as a task without documents records them) and whose n-samples
    // differ (warning): nothing is compared
    json na = json::parse(slurp(d.file("base.json")));
    na["results"]["ll"]["acc,none"] = nullptr;
    na["results"]["ll"]["perplexity,none"] = nullptr;
    na["n-samples"]["ll"]["effective"] = 1;
    std::ofstream(d.file("na.json")) << na.dump();
    Run none = run_kveval(d, "run " + quote(spec) + " -q --baseline " + quote(d.file("na.json")));
    CHECK(none.code == 3);
    CHECK(none.err.find("not compared: ll acc: baseline value is n/a") != std::string::npos);
    CHECK(none.err.find("not compared: ll perplexity: baseline value is n/a") != std::string::npos);
    CHECK(none.err.find("warning: ll: n-samples differ") != std::string::npos);
    // the spec's tasks are not in the baseline
    std::string other = d.write("other.json", spec_with(std::string(kLL).replace(10, 2, "zz")));
    Run missing = run_kveval(d, "run " + quote(other) + " -q --baseline " + quote(d.file("base.json")));
    CHECK(missing.code == 3);
    CHECK(missing.err.find("ll: task in the baseline but not in this run") != std::string::npos);
    CHECK(missing.err.find("zz: task in this run but not in the baseline") != std::string::npos);
    // a baseline value that is not a number
    json base = json::parse(slurp(d.file("base.json")));
    base["results"]["ll"]["acc,none"] = "1";
    std::ofstream(d.file("str.json")) << base.dump();
    Run str = run_kveval(d, "run " + quote(spec) + " -q --baseline " + quote(d.file("str.json")));
    CHECK(str.code == 3);
    CHECK(str.err.find("ll acc: baseline value is not a number") != std::string::npos);
    // --tolerance alone: usage error before anything runs
    Run tol = run_kveval(d, "run " + quote(spec) + " --tolerance 0.5");
    CHECK(tol.code == 2);
    CHECK(tol.out.empty());
    CHECK(tol.err == "kveval: error: --tolerance needs --baseline\n");
  }

  TEST_CASE("output paths are checked before the model loads: same file, missing directory, a directory" * kveval::test::needs_model()) {
    TempDir d;
    std::string spec = d.write("spec.json", spec_with(kLL));
    struct Case {
      std::string args, expect;
    };
    std::vector<Case> cases = {
        {"-o " + quote(d.file("o.json")) + " --log-samples " + quote(d.path.string() + "/./o.json"),
         "--output and --log-samples name the same file"},
        {"-o " + quote(d.file("nodir/o.json")), "--output " + d.file("nodir/o.json") + ": directory " +
                                                     d.file("nodir") + " does not exist"},
        {"--log-samples " + quote(d.path.string()), "--log-samples " + d.path.string() + ": is a directory"},
    };
    for (const auto& c : cases) {
      CAPTURE(c.args);
      Run r = run_kveval(d, "run " + quote(spec) + " " + c.args);
      CHECK(r.code == 2);
      CHECK(r.out.empty());  // no metrics table: nothing ran
      CHECK(count_lines(r.err) == 1);
      CHECK(r.err.find(c.expect) != std::string::npos);
    }
    CHECK(!std::ifstream(d.file("o.json")).good());
    // a symbolic link to a file that does not exist yet names that file: refused too (it replaced the results with
    // the samples before); alone, the link is followed and kept
    std::filesystem::create_symlink("res.json", d.file("samples.jsonl"));
    Run same = run_kveval(d, "run " + quote(spec) + " -q -o " + quote(d.file("res.json")) + " --log-samples " +
                                 quote(d.file("samples.jsonl")));
    CHECK(same.code == 2);
    CHECK(same.err.find("--output and --log-samples name the same file") != std::string::npos);
    Run link = run_kveval(d, "run " + quote(spec) + " -q --log-samples " + quote(d.file("samples.jsonl")));
    CHECK(link.code == 0);
    CHECK(std::filesystem::is_symlink(d.file("samples.jsonl")));
    CHECK(std::filesystem::is_regular_file(d.file("res.json")));  // the samples, written through the link
    CHECK(slurp(d.file("res.json")).rfind("{\"doc_id\":0,", 0) == 0);
    // an output that names an input (however it is spelt) is refused before anything runs, the input kept whole
    const std::string data = d.write("data.jsonl", "{\"q\": \"a\", \"a\": \"b\"}\n");
    const std::string ds = d.write("ds.json", "{\"model\": " + nlohmann::json(kveval::test::model_file()).dump() +
                                                  ", \"tasks\": [{\"name\": \"t\", \"output_type\": \"loglikelihood\", "
                                                  "\"dataset_path\": \"data.jsonl\", \"doc_to_text\": \"{{q}}\", "
                                                  "\"doc_to_target\": \"{{a}}\"}]}");
    std::filesystem::create_hard_link(data, d.file("hard.jsonl"));
    const std::string ds_text = slurp(ds), data_text = slurp(data);
    const std::string model_abs = std::filesystem::absolute(kveval::test::model_file()).string();
    for (const auto& [args, expect] : std::vector<std::pair<std::string, std::string>>{
             {"-o " + quote(ds), "--output " + ds + " is the spec file: refusing to overwrite an input"},
             {"-o " + quote(model_abs), "is the model file"},
             {"--log-samples " + quote(d.path.string() + "/./data.jsonl"), "is dataset_path of task 't'"},
             {"-o " + quote(d.file("hard.jsonl")), "is dataset_path of task 't'"},
             {"-o - --log-samples /dev/stdout", "--output and --log-samples both go to stdout: only one of them can"}}) {
      CAPTURE(args);
      Run r = run_kveval(d, "run " + quote(ds) + " -q " + args);
      CHECK(r.code == 2);
      CHECK(count_lines(r.err) == 1);
      CHECK(r.err.find(expect) != std::string::npos);
    }
    CHECK(slurp(ds) == ds_text);
    CHECK(slurp(data) == data_text);
    // an empty path is refused, not read as "no output"
    for (const char* opt : {"-o ''", "--log-samples ''", "--baseline ''"}) {
      Run e = run_kveval(d, "run " + quote(spec) + " " + opt);
      CHECK(e.code == 2);
      CHECK(e.err.find(": empty path") != std::string::npos);
    }
  }

  TEST_CASE("command-line messages: numeric ranges, unknown or missing subcommand, spec is a directory or missing" * kveval::test::needs_model()) {
    TempDir d;
    std::string spec = d.write("spec.json", spec_with(kLL));
    Run bs = run_kveval(d, "run " + quote(spec) + " --batch-size 0");
    CHECK(bs.code == 2);
    CHECK(bs.err.find("--batch-size: expected an integer in [1, 4096], got 0") != std::string::npos);
    CHECK(bs.err.find("1797693") == std::string::npos);
    Run lim = run_kveval(d, "run " + quote(spec) + " --limit -3");
    CHECK(lim.code == 2);
    CHECK(lim.err.find("--limit: expected an integer >= 1 or a fraction in (0, 1), got -3") != std::string::npos);
    Run bi = run_kveval(d, "run " + quote(spec) + " --bootstrap-iters 1000000000");  // the spec's range: 10^8 at most
    CHECK(bi.code == 2);
    CHECK(bi.err.find("--bootstrap-iters: expected an integer in [0, 100000000], got 1000000000") != std::string::npos);
    Run tol = run_kveval(d, "run " + quote(spec) + " --baseline x.json --tolerance abc");
    CHECK(tol.code == 2);
    CHECK(tol.err.find("--tolerance: expected a number, got 'abc'") != std::string::npos);
    Run seed = run_kveval(d, "make-model --preset tiny --seed -1 -o " + quote(d.file("m.gguf")));
    CHECK(seed.code == 2);
    CHECK(seed.err.find("--seed: must be >= 0, got -1") != std::string::npos);
    CHECK(!std::ifstream(d.file("m.gguf")).good());
    Run outdir = run_kveval(d, "make-model --preset tiny -o " + quote(d.path.string()));
    CHECK(outdir.code == 2);
    CHECK(outdir.err.find(": is a directory") != std::string::npos);
    CHECK(outdir.err.find(".part") == std::string::npos);
    Run nodir = run_kveval(d, "make-model --preset tiny -o " + quote(d.file("missing/m.gguf")));
    CHECK(nodir.code == 2);
    CHECK(nodir.err.find("--output " + d.file("missing/m.gguf") + ": directory") != std::string::npos);
    Run bogus = run_kveval(d, "bogus");
    CHECK(bogus.code == 2);
    CHECK(bogus.err.find("unknown subcommand 'bogus'") != std::string::npos);
    CHECK(count_lines(bogus.err) == 1);
    Run bare = run_kveval(d, "");  // no subcommand: the help with its subcommand list, then the error line
    CHECK(bare.code == 2);
    CHECK(bare.out.empty());
    CHECK(bare.err.find("Subcommands:\n") != std::string::npos);
    for (const char* sub : {"run", "generate", "bench", "make-model", "tokenize", "chat-template", "tasks"})
      CHECK_MESSAGE(bare.err.find("\n  " + std::string(sub) + " ") != std::string::npos, sub);
    CHECK(bare.err.ends_with("\nkveval: error: a subcommand is required (one of the subcommands above)\n"));
    Run typo = run_kveval(d, "run " + quote(spec) + " --dtpye bf16");
    CHECK(typo.code == 2);
    CHECK(typo.err == "kveval: error: unknown option '--dtpye' for 'run' (did you mean '--dtype'?) (see --help)\n");
    const std::string bad_json = d.write("m.json", "[{\"role\": \"user\", \"content\": \"hi\"},]");
    const std::string tpl = kveval::test::source_dir() + "/tests/data/chat_templates/im-think.jinja";
    Run chat = run_kveval(d, "chat-template --template " + quote(tpl) + " --messages " + quote(bad_json));
    CHECK(chat.code == 2);
    CHECK(chat.err.starts_with("kveval: error: " + bad_json + ":1:"));  // file:line:column, as the spec's JSON
    CHECK(chat.err.find("json.exception") == std::string::npos);
    CHECK(count_lines(chat.err) == 1);
    Run far = run_kveval(d, "bench -m x.gguf --tests pp --frobnicate=3 -t 1");
    CHECK(far.code == 2);
    CHECK(far.err == "kveval: error: unknown option '--frobnicate' for 'bench' (see --help)\n");
    Run dir = run_kveval(d, "run " + quote(d.path.string()));
    CHECK(dir.code == 2);
    CHECK(dir.err == "kveval: error: " + d.path.string() + ": is a directory (expected a JSON spec file)\n");
    Run gone = run_kveval(d, "run " + quote(d.file("gone.json")));
    CHECK(gone.code == 2);
    CHECK(gone.err == "kveval: error: " + d.file("gone.json") + ": not found\n");
    // an empty value is refused for every option that takes one (CLI11 read '' as 0 or as "not given");
    // an empty prompt stays a prompt
    const std::string m = quote(std::filesystem::absolute(kveval::test::model_file()).string());
    for (const auto& [args, opt] : std::vector<std::pair<std::string, std::string>>{
             {"run " + quote(spec) + " -m ''", "--model"},
             {"run " + quote(spec) + " --dtype ''", "--dtype"},
             {"generate -m " + m + " -n ''", "--max-gen-toks"},
             {"generate -m " + m + " --max-length ''", "--max-length"},
             {"bench -m " + m + " -n ''", "--n-gen"}}) {
      CAPTURE(args);
      Run e = run_kveval(d, args);
      CHECK(e.code == 2);
      CHECK(e.err.find(opt + ": empty value") != std::string::npos);
      CHECK(count_lines(e.err) == 1);
    }
    CHECK(run_kveval(d, "generate -m " + m + " -p '' -n 1").code == 0);
    // bench --json-out naming its model (a copy here) is refused before anything is measured, the model kept
    std::filesystem::copy_file(kveval::test::model_file(), d.file("copy.gguf"));
    const std::string model_bytes = slurp(d.file("copy.gguf"));
    Run jo = run_kveval(d, "bench -m " + quote(d.file("copy.gguf")) + " --tests tg -n 2 -r 1 --json-out " +
                               quote(d.file("copy.gguf")));
    CHECK(jo.code == 2);
    CHECK(jo.err.find("--json-out " + d.file("copy.gguf") + " is the model file: refusing to overwrite an input") !=
          std::string::npos);
    CHECK(slurp(d.file("copy.gguf")) == model_bytes);
    // bench: a negative or too large seed is refused, not wrapped; counts have upper bounds
    for (const auto& [args, msg] : std::vector<std::pair<std::string, std::string>>{
             {"--seed=-1", "--seed: must be >= 0, got -1"},
             {"--seed 18446744073709551616", "--seed: expected an integer in [0, 18446744073709551615]"},
             {"-r 1000000000", "--repetitions: must be in [1, 100000], got 1000000000"},
             {"--ll-requests 2000000000", "--ll-requests: must be in [1, 1000000], got 2000000000"},
             {"--gen-mixed-prompts 2000000000", "--gen-mixed-prompts: must be in [1, 1000000], got 2000000000"},
             {"--tests mc --mc-docs 1000000 --mc-choices 4096",
              "--mc-docs 1000000 x --mc-choices 4096: 4096000000 requests of"},
             {"--tests mc --mc-docs 10000 --mc-prefix 10000",
              "--mc-docs 10000 x --mc-choices 4: 40000 requests of 402640000 tokens in all; at most 1000000 requests "
              "and 67108864 tokens"}}) {
      CAPTURE(args);
      Run e = run_kveval(d, "bench -m " + m + " " + args);
      CHECK(e.code == 2);
      CHECK(e.err.find(msg) != std::string::npos);
    }
  }
}
