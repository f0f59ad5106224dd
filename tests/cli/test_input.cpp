// Hostile input and failing output through the real binary ($KVEVAL_BIN):
// every input error is exit 2 with one line naming the file
// and line or JSON path (never "internal error"), every output file is
// written all or nothing and a write failure is exit 1 naming the path and
// the system's reason.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <sys/wait.h>

#include "test_skip.hpp"
#include "cli_run.hpp"

namespace {

/// The model as a spec's JSON string (only for cases that run the model).
std::string model_json() { return json(kveval::test::model_path()).dump(); }

/// An input error: exit 2, exactly one line `kveval: error: <expected>...`, no "internal error".
void check_input_error(const Run& r, const std::string& expected_start) {
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK(r.err.rfind("kveval: error: " + expected_start, 0) == 0);
  CHECK(r.err.find("internal error") == std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

}  // namespace

TEST_SUITE("cli.input") {
  TEST_CASE("numbers out of range: spec, JSONL line, baseline; a huge template index: exit 2 with the place") {
    TempDir d;
    d.write("data.jsonl", "{\"q\": \"Lily went to the\", \"a\": \"park\"}\n");
    std::string spec = d.write("s1.json", "{\"model\": " + std::string("\"m.gguf\"") + ",\n \"seed\": 1e400, \"tasks\": [" + kTask + "]}");
    check_input_error(run_kveval(d, "run " + quote(spec)), spec + ":2:10: number 1e400 is out of range");

    d.write("data.jsonl", "{\"q\": \"Lily went to the\", \"a\": \"park\", \"n\": -1e400}\n");
    spec = d.write("s2.json", "{\"model\": " + std::string("\"m.gguf\"") + ", \"tasks\": [" + kTask + "]}");
    check_input_error(run_kveval(d, "run " + quote(spec)), d.file("data.jsonl") + ":1:45: number -1e400 is out of range");

    d.write("data.jsonl", "{\"q\": \"Lily went to the\", \"a\": \"park\", \"choices\": [\"x\"]}\n");
    spec = d.write("s3.json", "{\"model\": " + std::string("\"m.gguf\"") +
                                  R"(, "tasks": [{"name": "t", "output_type": "loglikelihood", "dataset_path": "data.jsonl",
                                  "doc_to_text": "{{choices.99999999999999999999999}}", "doc_to_target": "a"}]})");
    check_input_error(run_kveval(d, "run " + quote(spec)),
                      spec + ": tasks[0].doc_to_text: template line 1, column 11: integer literal 99999999999999999999999 is out of range");

    spec = d.write("s4.json", "{\"model\": " + std::string("\"m.gguf\"") + ", \"tasks\": [" + kTask + "]}");
    std::string base = d.write("base.json", "{\"results\": {\"t\": {\"acc\": 1e400}}}");
    check_input_error(run_kveval(d, "run " + quote(spec) + " -q --baseline " + quote(base)),
                      base + ":1:27: number 1e400 is out of range");
  }

  TEST_CASE("100 000 levels of nesting in a spec or a JSONL line: exit 2 naming the file, line and limit") {
    TempDir d;
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    std::string spec = d.write("deep.json", "{\"model\": " + std::string("\"m.gguf\"") + ",\n\"tasks\": " + deep + "}");
    check_input_error(run_kveval(d, "run " + quote(spec)),
                      spec + ":2:521: nested deeper than 512 levels (kveval's limit for JSON input)");
    d.write("data.jsonl", "{\"q\": \"Lily went to the\", \"a\": \"park\"}\n{\"q\": " + deep + "}\n");
    spec = d.write("s.json", "{\"model\": " + std::string("\"m.gguf\"") + ", \"tasks\": [" + kTask + "]}");
    check_input_error(run_kveval(d, "run " + quote(spec)),
                      d.file("data.jsonl") + ":2:518: nested deeper than 512 levels (kveval's limit for JSON input)");
  }

  TEST_CASE("a JSONL line with a repeated key is refused like the spec's") {
    TempDir d;
    d.write("data.jsonl", "{\"q\": \"Lily went to the\", \"a\": \"park\", \"a\": \"zoo\"}\n");
    std::string spec = d.write("s.json", "{\"model\": " + std::string("\"m.gguf\"") + ", \"tasks\": [" + kTask + "]}");
    check_input_error(run_kveval(d, "run " + quote(spec)), d.file("data.jsonl") + ":1: duplicate key 'a'");
  }

  TEST_CASE("--log-samples/--output /dev/full, make-model and bench --json-out to /dev/full: exit 1 with the reason" * kveval::test::needs_model()) {
    if (!std::filesystem::is_character_file("/dev/full")) {
      MESSAGE("skipped: /dev/full is not the full device on this system");
      return;
    }
    TempDir d;
    d.write("data.jsonl", "{\"q\": \"Lily went to the\", \"a\": \"park\"}\n");
    std::string spec = d.write("s.json", "{\"model\": " + model_json() + ", \"tasks\": [" + kTask + "]}");
    const std::string full = "kveval: error: /dev/full: write failed after 0 bytes: No space left on device\n";
    Run r = run_kveval(d, "run " + quote(spec) + " -q --log-samples /dev/full");
    CHECK(r.code == 1);
    CHECK(r.err == full);
    r = run_kveval(d, "run " + quote(spec) + " -q --output /dev/full");
    CHECK(r.code == 1);
    CHECK(r.err == full);
    // `-o -` and `--log-samples -`: stdout is the output file, every write checked the same way
    for (const char* opt : {"-o -", "--log-samples -"}) {
      const std::string cmd = quote(std::getenv("KVEVAL_BIN")) + " run " + quote(spec) + " -q " + opt +
                              " >/dev/full 2>" + quote(d.file("err.txt"));
      const int st = std::system(cmd.c_str());
      CHECK(WIFEXITED(st));
      CHECK(WEXITSTATUS(st) == 1);
      CHECK(slurp(d.file("err.txt")).find("kveval: error: stdout: write failed after 0 bytes: No space left on device\n") !=
            std::string::npos);
    }
    // stdout itself full: the tables of run, the ids of tokenize, the report of bench are lost, so exit 1
    for (const std::string& args : {"run " + quote(spec) + " -q", "tokenize -m " + quote(kveval::test::model_path()) + " --ids hello",
                                   "bench -m " + quote(kveval::test::model_path()) + " --tests cache --cache-shapes 1x8 -r 1 -t 1 -o json"}) {
      CAPTURE(args);
      const std::string cmd = quote(std::getenv("KVEVAL_BIN")) + " " + args + " >/dev/full 2>" + quote(d.file("err.txt"));
      const int st = std::system(cmd.c_str());
      CHECK(WIFEXITED(st));
      CHECK(WEXITSTATUS(st) == 1);
      const std::string err = slurp(d.file("err.txt"));
      CHECK(err.find("kveval: error: stdout: write failed: No space left on device\n") != std::string::npos);
    }
    r = run_kveval(d, "make-model --preset tiny -o /dev/full");
    CHECK(r.code == 1);
    CHECK(r.err == full);
    r = run_kveval(d, "bench -m " + quote(kveval::test::model_path()) +
                          " --tests cache --cache-shapes 1x8 -r 1 -t 1 --json-out /dev/full");
    CHECK(r.code == 1);
    CHECK(r.err.size() >= full.size());
    CHECK(r.err.substr(r.err.size() - std::min(r.err.size(), full.size())) == full);  // after the load line
  }

  TEST_CASE("a write that fails mid-file (file-size limit, as a full disk) leaves the old file whole, no temp file" * kveval::test::needs_model()) {
    TempDir d;
    std::string docs;
    for (int i = 0; i < 300; ++i) docs += "{\"q\": \"Lily went to the park number " + std::to_string(i) + "\", \"a\": \"again\"}\n";
    d.write("data.jsonl", docs);
    std::string spec = d.write("s.json", "{\"model\": " + model_json() + ", \"batch_size\": 16, \"tasks\": [" + kTask + "]}");
    const std::string old_samples = d.write("samples.jsonl", "old samples\n");
    // /bin/sh: SIGXFSZ ignored (inherited), files limited to 16 blocks (8 or 16 KiB); the samples are ~70 KB
    Run r = run_kveval(d, "run " + quote(spec) + " -q --log-samples " + quote(old_samples),
                       "trap '' XFSZ; ulimit -f 16; ");
    INFO(r.err);
    CHECK(r.code == 1);
    CHECK(r.err.rfind("kveval: error: " + old_samples + ": write failed after ", 0) == 0);
    CHECK(r.err.find("File too large") != std::string::npos);
    CHECK(slurp(old_samples) == "old samples\n");
    CHECK(temp_files(d.path) == 0);
    // without the limit the same run writes every line
    r = run_kveval(d, "run " + quote(spec) + " -q --log-samples " + quote(old_samples));
    CHECK(r.code == 0);
    const std::string s = slurp(old_samples);
    CHECK(std::count(s.begin(), s.end(), '\n') == 300);
    CHECK(temp_files(d.path) == 0);
  }
}
