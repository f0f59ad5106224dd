// One-line errors a first run of the README's commands meets: a value set by a
// command-line option is named by that option, a value from the spec by its key;
// --apply-chat-template's optional value taking the spec; missing input files;
// the compute-dtype line of a dtype given; --quiet with --baseline; --limit 0,
// --tasks with a spec, a data file given as the spec; a spec with nothing to score; bench -o with a file name.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli_run.hpp"

namespace {

/// A spec of the demo model with `task` and the top-level keys `extra` (", \"max_length\": 64" or "").
std::string spec_of(const std::string& task, const std::string& extra = "") {
  return "{\"model\": " + json(std::filesystem::absolute(kveval::test::model_path()).string()).dump() + extra + ", \"tasks\": [" + task + "]}";
}

/// A loglikelihood_rolling task "ppl" over one document; `extra` adds keys (", \"num_fewshot\": 3").
std::string rolling_task(const std::string& extra = "") {
  return R"({"name": "ppl", "output_type": "loglikelihood_rolling", "docs": [{"t": "Once upon a time"}], "doc_to_target": "t")" +
         extra + "}";
}

/// kLL with `extra` keys added before its closing brace.
std::string ll_task(const std::string& extra) {
  const std::string ll = kLL;
  return ll.substr(0, ll.size() - 1) + extra + "}";
}

}  // namespace

TEST_SUITE("cli.option_errors") {
  TEST_CASE("a value an option set is named by the option; the same value in the spec by its key" * kveval::test::needs_model()) {
    TempDir d;
    const std::string rolling = d.write("rolling.json", spec_of(rolling_task()));
    const std::string rolling3 = d.write("rolling3.json", spec_of(rolling_task(", \"num_fewshot\": 3")));
    const std::string ll = d.write("ll.json", spec_of(kLL));
    const std::string ll3 = d.write("ll3.json", spec_of(ll_task(", \"num_fewshot\": 3")));
    const std::string long_spec = d.write("long.json", spec_of(kLL, ", \"max_length\": 100000"));
    // stories260K: context_length 2048; kLL has two documents, so one example at most
    check_one_line(run_kveval(d, "run -q --num-fewshot 3 " + quote(rolling)),
                   "kveval: error: --num-fewshot: task 'ppl': loglikelihood_rolling tasks take no few-shot examples");
    check_one_line(run_kveval(d, "run -q " + quote(rolling3)),
                   "kveval: error: " + rolling3 + ": tasks[0].num_fewshot: loglikelihood_rolling tasks take no few-shot examples");
    check_one_line(run_kveval(d, "run -q " + quote(ll) + " --num-fewshot 3"),
                   "kveval: error: --num-fewshot: task 'll': 3 examples requested but only 1 available (a document is never its own example)");
    check_one_line(run_kveval(d, "run -q " + quote(ll3)),
                   "kveval: error: " + ll3 + ": tasks[0].num_fewshot: 3 examples requested but only 1 available (a document is never its own example)");
    check_one_line(run_kveval(d, "run -q " + quote(ll) + " --max-length 100000"),
                   "kveval: error: --max-length: 100000 exceeds the model's context_length 2048");
    check_one_line(run_kveval(d, "run -q " + quote(long_spec)),
                   "kveval: error: " + long_spec + ": max_length: 100000 exceeds the model's context_length 2048");
    // the option overrides the spec's value: the spec's 100000 is not checked against the model
    CHECK(run_kveval(d, "run -q " + quote(long_spec) + " --max-length 64").code == 0);
    // ranges checked when the command line is read
    for (const auto& [args, line] : std::vector<std::pair<std::string, std::string>>{
             {"--max-length 1", "--max-length: expected an integer in [2, 16777216], got 1"},
             {"--batch-size 0", "--batch-size: expected an integer in [1, 4096], got 0"},
             {"--batch-size 5000", "--batch-size: expected an integer in [1, 4096], got 5000"},
             {"--limit -1", "--limit: expected an integer >= 1 or a fraction in (0, 1), got -1"},
             {"--threads 99999", "--threads: expected an integer in [0, 4096], got 99999"},
             {"--num-fewshot -1", "--num-fewshot: expected an integer in [0, 1048576], got -1"}}) {
      CAPTURE(args);
      check_one_line(run_kveval(d, "run -q " + quote(ll) + " " + args), "kveval: error: " + line + " (see --help)");
    }
  }

  TEST_CASE("--limit 0, --tasks with a spec file: one line saying what to give, exit 2" * kveval::test::needs_model()) {
    TempDir d;
    const std::string ll = d.write("ll.json", spec_of(kLL));
    const std::string zero = ": leaves no document to evaluate (lm-eval fails on it too); give N >= 1, a fraction in (0, 1), "
                             "or no --limit for every document (see --help)";
    for (const char* z : {"0", "0.0"}) {
      CAPTURE(z);
      const Run r = run_kveval(d, "run -q " + quote(ll) + " --limit " + z);
      check_one_line(r, std::string("kveval: error: --limit: ") + z + zero.substr(1));
      CHECK(r.out.empty());  // refused before anything ran
    }
    const std::string both = "kveval: error: --tasks: cannot be combined with a spec file (" + ll +
                             "): give either the spec file or --tasks NAMES with --model (see --help)";
    check_one_line(run_kveval(d, "run " + quote(ll) + " --tasks arc_easy -m x.gguf"), both);
    check_one_line(run_kveval(d, "run --tasks arc_easy " + quote(ll)), both);
  }

  TEST_CASE("a data file or an empty file given as the spec: one line naming the file and what it holds, exit 2" * kveval::test::needs_model()) {
    TempDir d;
    const std::string shape = "; a spec is one JSON object {\"model\": ..., \"tasks\": [...]} (see docs/spec.md)";
    const std::string jsonl = d.write("docs.jsonl", "{\"c\": \"Lily went to the\", \"x\": \"park\"}\n\n{\"c\": \"Tom saw a\", \"x\": \"dog\"}\n");
    check_one_line(run_kveval(d, "run " + quote(jsonl)),
                   "kveval: error: " + jsonl + ": not a kveval spec: it holds JSON lines, one value per line (a .jsonl "
                   "data file?)" + shape);
    // one line of JSONL is a whole JSON object, but none of its keys is a spec's
    const std::string one = d.write("one.jsonl", "{\"context\": \"a\", \"continuation\": \"b\", \"label\": 1, \"id\": 7}\n");
    check_one_line(run_kveval(d, "run " + quote(one)),
                   "kveval: error: " + one + ": not a kveval spec: it holds a JSON object with none of a spec's keys "
                   "('context', 'continuation', 'id', ...: a document of a data file?)" + shape);
    const std::string array = d.write("docs.json", "[{\"c\": \"a\", \"x\": \"b\"}]\n");
    check_one_line(run_kveval(d, "run " + quote(array)),
                   "kveval: error: " + array + ": not a kveval spec: it holds a JSON array, not an object (a data file?)" + shape);
    const std::string yaml = d.write("task.json", "# an lm-eval task\ntask: ll\noutput_type: loglikelihood\n");
    check_one_line(run_kveval(d, "run " + quote(yaml)),
                   "kveval: error: " + yaml + ": not a kveval spec: it looks like YAML (an lm-eval task YAML is read as "
                   "the spec when its name ends in .yaml or .yml)" + shape);
    // an empty file, or one of whitespace only
    const std::string empty = d.write("empty.json", "");
    check_one_line(run_kveval(d, "run " + quote(empty)), "kveval: error: " + empty + ": not a kveval spec: the file is empty" + shape);
    const std::string blank = d.write("blank.json", " \n\t\r\n");
    check_one_line(run_kveval(d, "run " + quote(blank)),
                   "kveval: error: " + blank + ": not a kveval spec: the file is empty (only whitespace)" + shape);
    // a spec with a syntax error keeps the parser's line and column; a misspelt key its hint
    const std::string broken = d.write("broken.json", "{\"model\": \"m.gguf\",\n \"tasks\": [}\n");
    const Run b = run_kveval(d, "run " + quote(broken));
    CHECK(b.code == 2);
    CHECK(b.err.starts_with("kveval: error: " + broken + ":2:"));
    check_one_line(run_kveval(d, "run " + quote(d.write("typo.json", "{\"modle\": \"m.gguf\"}"))),
                   "kveval: error: " + d.file("typo.json") + ": modle: unknown key (did you mean 'model'?)");
  }

  TEST_CASE("a spec of generate_until tasks only: no loglikelihood row, no loglikelihood progress line" *
            kveval::test::needs_model()) {
    TempDir d;
    const std::string gen = d.write(
        "gen.json", spec_of(R"({"name": "g", "output_type": "generate_until", "docs": [{"p": "Once upon a", "a": "time"}], )"
                            R"("doc_to_text": "p", "doc_to_target": "a", "generation_kwargs": {"max_gen_toks": 2}})",
                            ", \"max_length\": 64"));
    const Run r = run_kveval(d, "run " + quote(gen) + " -o " + quote(d.file("r.json")));
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("| loglikelihood") == std::string::npos);
    CHECK(r.out.find("| prefill ") != std::string::npos);
    CHECK(r.out.find("\nloglikelihood phase: 0 forward passes (no loglikelihood, multiple_choice or loglikelihood_rolling "
                     "request: nothing to score)\n") != std::string::npos);
    CHECK(r.err.find("kveval: loglikelihood:") == std::string::npos);
    CHECK(r.err.find("kveval: generation: 1/1 (100%)") != std::string::npos);
    // the results file keeps every phase, the loglikelihood one at 0, as every run has the same keys
    const json res = json::parse(slurp(d.file("r.json")));
    std::vector<std::string> phases;
    for (const auto& p : res["kveval"]["phases"]) phases.push_back(p["name"]);
    CHECK(phases == std::vector<std::string>{"load", "requests", "loglikelihood", "cache setup", "prefill", "decode",
                                             "cache teardown"});
    CHECK(res["kveval"]["phases"][2]["tokens"] == 0);
    CHECK(res["kveval"]["instrumentation"]["loglikelihood_forward_calls"] == 0);
  }

  TEST_CASE("--apply-chat-template before the spec: its optional value took the spec; one line with the two fixes" *
            kveval::test::needs_model()) {
    TempDir d;
    const std::string spec = d.write("spec.json", spec_of(kLL)), other = d.write("other.yaml", "task: x\n");
    const std::string fix =
        ": write --apply-chat-template=NAME for a template, or put the spec before --apply-chat-template for the "
        "model's own (see --help)";
    check_one_line(run_kveval(d, "run --apply-chat-template " + quote(spec)),
                   "kveval: error: --apply-chat-template: took '" + spec + "' as the template, but it is a spec file" + fix);
    check_one_line(run_kveval(d, "run " + quote(spec) + " --apply-chat-template " + quote(other)),
                   "kveval: error: --apply-chat-template: took '" + other + "' as the template, but it is a spec file" + fix);
    check_one_line(run_kveval(d, "run --apply-chat-template nowhere.json"),
                   "kveval: error: --apply-chat-template: took 'nowhere.json' as the template, leaving no spec or --tasks" + fix);
    // after the spec, with no value: the model's own template (stories260K has none: that error, not this one)
    const Run own = run_kveval(d, "run " + quote(spec) + " --apply-chat-template");
    CHECK(own.code == 2);
    CHECK(own.err.find("no chat template (key 'tokenizer.chat_template' is missing)") != std::string::npos);
  }

  TEST_CASE("a missing file given to tokenize or chat-template is one line naming the option, exit 2" * kveval::test::needs_model()) {
    TempDir d;
    const std::string model = kveval::test::model_path(), missing = d.file("missing.txt");
    const std::string messages = d.write("m.json", R"([{"role": "user", "content": "Hi"}])");
    const std::string tpl = kveval::test::source_dir() + "/tests/data/chat_templates/im-think.jinja";
    check_one_line(run_kveval(d, "tokenize -m " + quote(model) + " -f " + quote(missing)),
                   "kveval: error: --file: " + missing + ": not found");
    check_one_line(run_kveval(d, "tokenize -m " + quote(model) + " --file " + quote(d.path.string())),
                   "kveval: error: --file: " + d.path.string() + ": is a directory, not a regular file");
    check_one_line(run_kveval(d, "chat-template --template " + quote(missing) + " --messages " + quote(messages)),
                   "kveval: error: --template: " + missing + ": not found");
    check_one_line(run_kveval(d, "chat-template --template " + quote(tpl) + " --messages " + quote(missing)),
                   "kveval: error: --messages: " + missing + ": not found");
    // the same files present: they are read
    const std::string text = d.write("t.txt", "Hello world");
    CHECK(run_kveval(d, "tokenize -m " + quote(model) + " --ids -f " + quote(text)).code == 0);
    CHECK(run_kveval(d, "chat-template --template " + quote(tpl) + " --messages " + quote(messages)).code == 0);
  }

  TEST_CASE("bench -o takes a format: a file name gets the option that writes one") {
    TempDir d;
    check_one_line(run_kveval(d, "bench -m x.gguf -o results.json"),
                   "kveval: error: --output: 'results.json' is not a format (md, csv, json or jsonl); to write the JSON "
                   "report to a file, use --json-out results.json (see --help)");
    check_one_line(run_kveval(d, "bench -m x.gguf -o out/report"),
                   "kveval: error: --output: 'out/report' is not a format (md, csv, json or jsonl); to write the JSON "
                   "report to a file, use --json-out out/report (see --help)");
    check_one_line(run_kveval(d, "bench -m x.gguf -o xml"),
                   "kveval: error: --output: 'xml' is not a format: expected md, csv, json or jsonl (see --help)");
  }

  TEST_CASE("generate: a dtype given is named alone, auto with its reasons" * kveval::test::needs_model()) {
    TempDir d;
    const std::string model = kveval::test::model_path();
    const Run given = run_kveval(d, "generate -m " + quote(model) + " -p 'Once upon' -n 2 --dtype f32");
    INFO(given.err);
    REQUIRE(given.code == 0);
    CHECK(given.err.find("kveval: compute dtype f32; KV cache f32\n") != std::string::npos);
    const Run chosen = run_kveval(d, "generate -m " + quote(model) + " -p 'Once upon' -n 2");
    REQUIRE(chosen.code == 0);
    CHECK(chosen.err.find("kveval: compute dtype auto -> f32 (file F32, oneDNN ISA ") != std::string::npos);
  }

  TEST_CASE("--quiet with --baseline: nothing on stderr when the gate passes, only the regression when it fails" *
            kveval::test::needs_model()) {
    TempDir d;
    const std::string spec = d.write("spec.json", spec_of(kLL, ", \"max_length\": 64"));
    REQUIRE(run_kveval(d, "run -q " + quote(spec) + " -o " + quote(d.file("base.json"))).code == 0);
    const Run loud = run_kveval(d, "run " + quote(spec) + " --baseline " + quote(d.file("base.json")));
    CHECK(loud.code == 0);
    CHECK(loud.err.find("kveval: baseline: no metric worse by more than 0\n") != std::string::npos);
    const Run same = run_kveval(d, "run -q " + quote(spec) + " --baseline " + quote(d.file("base.json")));
    CHECK(same.code == 0);
    CHECK(same.err == "");
    json base = json::parse(slurp(d.file("base.json")));
    const double ppl = base["results"]["ll"]["perplexity,none"].get<double>();
    base["results"]["ll"]["perplexity,none"] = ppl - 0.5;  // the baseline was better
    std::ofstream(d.file("better.json")) << base.dump();
    const Run worse = run_kveval(d, "run -q " + quote(spec) + " --baseline " + quote(d.file("better.json")));
    CHECK(worse.code == 3);
    CHECK(count_lines(worse.err) == 1);
    CHECK(worse.err.rfind("kveval: regression: ll perplexity: ", 0) == 0);
  }
}
