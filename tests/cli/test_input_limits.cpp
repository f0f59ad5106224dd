// Input files through the real binary ($KVEVAL_BIN): every input (spec,
// baseline, task YAML and its includes, data files, tokenize -f) must be a
// regular file within the input limit (KVEVAL_MAX_INPUT_BYTES); refusals are
// one line naming the file, exit 2, before anything large is read.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <filesystem>
#include <string>

#include "cli_run.hpp"

namespace {

/// Address space for the runs below: reading /dev/zero to its end would pass it at once.
/// AddressSanitizer reserves terabytes of shadow address space and cannot start under
/// ulimit -v: sanitizer builds run unbounded (the Release run of this suite bounds them).
#if defined(__SANITIZE_ADDRESS__)
const char* kBounded = "";
const char* kBounded8G = "";
#else
const char* kBounded = "ulimit -v 2000000; ";
const char* kBounded8G = "ulimit -v 8000000; ";
#endif

void check_refused(const Run& r, const std::string& expected) {
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK(r.err == "kveval: error: " + expected + "\n");
}

std::string limit_msg(const std::string& file, const std::string& human, uint64_t bytes) {
  return file + ": larger than the input file limit of " + human + " (" + std::to_string(bytes) +
         " bytes; set KVEVAL_MAX_INPUT_BYTES to change it)";
}

}  // namespace

TEST_SUITE("cli.input_limits") {
  TEST_CASE("/dev/zero as the spec, the baseline, a data file or tokenize -f: refused at once, exit 2") {
    TempDir d;
    check_refused(run_kveval(d, "run /dev/zero", kBounded), "/dev/zero: is a character device, not a regular file");
    d.write("data.jsonl", "{\"q\": \"Lily went to the\", \"a\": \"park\"}\n");
    const std::string spec = d.write("spec.json", "{\"model\": \"m.gguf\", \"tasks\": [" + std::string(kTask) + "]}");
    check_refused(run_kveval(d, "run " + quote(spec) + " --baseline /dev/zero", kBounded),
                  "--baseline: /dev/zero: is a character device, not a regular file");
    std::filesystem::create_symlink("/dev/zero", d.file("zero.jsonl"));
    const std::string zspec = d.write("z.json", "{\"model\": \"m.gguf\", \"tasks\": [" +
                                                    std::string(kTask).replace(std::string(kTask).find("data.jsonl"), 10, "zero.jsonl") + "]}");
    Run z = run_kveval(d, "run " + quote(zspec), kBounded);
    CHECK(z.code == 2);
    CHECK(std::count(z.err.begin(), z.err.end(), '\n') == 1);
    CHECK(z.err.find("zero.jsonl") != std::string::npos);
    const std::string model = d.write("m.gguf", "");  // present: the text file is read before the model
    check_refused(run_kveval(d, "tokenize -m " + quote(model) + " -f /dev/zero", kBounded),
                  "--file: /dev/zero: is a character device, not a regular file");
    REQUIRE(::mkfifo(d.file("fifo.json").c_str(), 0600) == 0);  // no writer: opening must not wait
    check_refused(run_kveval(d, "run " + quote(d.file("fifo.json"))), d.file("fifo.json") + ": is a FIFO, not a regular file");
  }

  TEST_CASE("a spec, baseline, data file or task YAML over KVEVAL_MAX_INPUT_BYTES: one line naming the file and the limit") {
    TempDir d;
    const std::string data = d.write("data.jsonl", "{\"q\": \"Lily went to the\", \"a\": \"park\", \"pad\": \"" + std::string(400, 'x') + "\"}\n");
    const std::string spec = d.write("spec.json", "{\"model\": \"m.gguf\", \"tasks\": [" + std::string(kTask) + "]}");
    REQUIRE(std::filesystem::file_size(spec) < 300);
    const std::string big = d.write("big.json", "{\"model\": \"m.gguf\", \"pad\": \"" + std::string(2000, 'x') + "\"}");
    check_refused(run_kveval(d, "run " + quote(big), "KVEVAL_MAX_INPUT_BYTES=1000 "), limit_msg(big, "1000 B", 1000));
    check_refused(run_kveval(d, "run " + quote(spec) + " --baseline " + quote(big), "KVEVAL_MAX_INPUT_BYTES=1000 "),
                  "--baseline: " + limit_msg(big, "1000 B", 1000));
    // the spec fits 300 bytes, its data file (over 400) does not
    Run small = run_kveval(d, "run " + quote(spec), "KVEVAL_MAX_INPUT_BYTES=300 ");
    CHECK(small.code == 2);
    CHECK(std::count(small.err.begin(), small.err.end(), '\n') == 1);
    CHECK(small.err.find(limit_msg(data, "300 B", 300)) != std::string::npos);
    const std::string yaml = d.write("t.yaml", "task: t\noutput_type: loglikelihood\n# " + std::string(100, '-') + "\n");
    check_refused(run_kveval(d, "run " + quote(yaml) + " -m m.gguf", "KVEVAL_MAX_INPUT_BYTES=100 "), limit_msg(yaml, "100 B", 100));
    // the default (64 MiB) refuses a larger spec by its size, before reading it
    d.write("huge.json", "");
    std::filesystem::resize_file(d.file("huge.json"), (uint64_t{64} << 20) + 1);
    check_refused(run_kveval(d, "run " + quote(d.file("huge.json")), kBounded), limit_msg(d.file("huge.json"), "64.0 MiB", 67108864));
    check_refused(run_kveval(d, "run " + quote(spec), "KVEVAL_MAX_INPUT_BYTES=0 "),
                  "KVEVAL_MAX_INPUT_BYTES=0: expected a positive decimal byte count");
  }

  TEST_CASE("lm-eval include: /proc/self/mem is exit 2 naming it; a non-YAML include is never read into a message") {
    TempDir d;
    check_refused(run_kveval(d, "run " + quote(d.write("mem.yaml", "task: t\ninclude: /proc/self/mem\n")) + " -m m.gguf"),
                  d.file("mem.yaml") + ":2: include: \"/proc/self/mem\" is not a YAML file (expected a .yaml or .yml task file)");
    // named as a YAML file: a regular file by stat(2) that cannot be read
    std::filesystem::create_symlink("/proc/self/mem", d.file("procmem.yaml"));
    check_refused(run_kveval(d, "run " + quote(d.write("mem2.yaml", "task: t\ninclude: procmem.yaml\n")) + " -m m.gguf"),
                  d.file("mem2.yaml") + ":2: include: " + d.file("procmem.yaml") +
                      ": read error after 0 bytes: Input/output error");
    d.write("creds.txt", "Authorization: Bearer secret-token-123\n");
    const std::string inc = d.write("inc.yaml", "task: t\ninclude: creds.txt\n");
    check_refused(run_kveval(d, "run " + quote(inc) + " -m m.gguf"),
                  inc + ":2: include: \"creds.txt\" is not a YAML file (expected a .yaml or .yml task file)");
    // a .yaml file whose lines are not key names: the key is not shown, only its place and size
    d.write("env.yaml", "SECRET_KEY=abc: def\n");
    const std::string inc2 = d.write("inc2.yaml", "task: t\ninclude: env.yaml\n");
    Run r = run_kveval(d, "run " + quote(inc2) + " -m m.gguf");
    check_refused(r, d.file("env.yaml") + ":1: a key of 14 bytes that is not a key name (not shown): unknown lm-eval task key");
    CHECK(r.err.find("SECRET") == std::string::npos);
    // a real key name is still shown, with its suggestion
    check_refused(run_kveval(d, "run " + quote(d.write("typo.yaml", "tsk: t\n")) + " -m m.gguf"),
                  d.file("typo.yaml") + ":1: tsk: unknown lm-eval task key (did you mean 'task'?)");
  }

  TEST_CASE("a 200 MB context in one JSONL line is refused by the memory plan with its figures, before tokenizing" * kveval::test::needs_model()) {
    TempDir d;
    {
      std::ofstream f(d.file("big.jsonl"), std::ios::binary);
      f << "{\"c\": \"";
      const std::string words = "Lily went to the park. ";  // 23 bytes
      for (int i = 0; i < 200000000 / 23; ++i) f << words;
      f << "\", \"x\": \"dog\"}\n";
    }
    const std::string spec = d.write("spec.json", "{\"model\": " + json(kveval::test::model_path()).dump() +
                                                      R"(, "max_length": 64, "tasks": [{"name": "big", "output_type": "loglikelihood",
                                                      "dataset_path": "big.jsonl", "doc_to_text": "c", "doc_to_target": "x"}]})");
    // 4 GB for the whole process; the tokenizer alone would need 64 bytes per byte of the 200 MB text
    Run r = run_kveval(d, "run " + quote(spec) + " -q", std::string(kBounded8G) + "KVEVAL_MEMORY_LIMIT_BYTES=4000000000 ");
    INFO(r.err);
    CHECK(r.code == 1);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    const uint64_t text = 200000000 / 23 * 23;  // the context; "c" then " " + "dog" make the longest text
    CHECK(r.err.find("kveval: error: not enough memory for building the requests of " + spec + ": planned ") == 0);
    CHECK(r.err.find("tokenizer (longest text 190.7 MiB) 11.9 GiB (" + std::to_string((text + 4) * 64) + " bytes)") !=
          std::string::npos);
    CHECK(r.err.find("is available (KVEVAL_MEMORY_LIMIT_BYTES 3.7 GiB less") != std::string::npos);
  }
}
