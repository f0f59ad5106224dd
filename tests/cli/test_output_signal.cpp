// Outputs of `kveval run` as one transaction, through the real binary: the
// samples are written first, then the results, which name the samples file and
// the sha256 of its bytes. SIGTERM or SIGINT at each write stage
// (KVEVAL_FAULT_INJECT raises it there) leaves no temporary file, and never
// results newer than the samples they describe.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "cli_run.hpp"

namespace {

/// sha256 of a file by coreutils' sha256sum (independent of kveval's).
std::string sha256sum(const std::string& path) {
  std::FILE* p = ::popen(("sha256sum " + quote(path)).c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[65] = {};
  const size_t n = std::fread(buf, 1, 64, p);
  ::pclose(p);
  REQUIRE(n == 64);
  return std::string(buf, 64);
}

/// Modification time in nanoseconds.
int64_t mtime_ns(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

TEST_SUITE("cli.output_signal") {
  TEST_CASE("the results name the samples file and its sha256; samples are written before the results" * kveval::test::needs_model()) {
    TempDir d;
    const std::string spec = d.write("spec.json", "{\"model\": " + json(kveval::test::model_path()).dump() +
                                                      ", \"max_length\": 64, \"tasks\": [" + kLL + "]}");
    const std::string res = d.file("res.json"), samples = d.file("samples.jsonl");
    Run r = run_kveval(d, "run " + quote(spec) + " -q -o " + quote(res) + " --log-samples " + quote(samples));
    REQUIRE(r.code == 0);
    const json link = json::parse(slurp(res))["kveval"]["samples"];
    CHECK(link == json{{"path", samples}, {"sha256", sha256sum(samples)}});
    CHECK(mtime_ns(res) >= mtime_ns(samples));
    // samples on stdout: the results name "-" and the hash of the bytes printed
    Run out = run_kveval(d, "run " + quote(spec) + " -q -o " + quote(res) + " --log-samples -");
    REQUIRE(out.code == 0);
    CHECK(json::parse(slurp(res))["kveval"]["samples"] == json{{"path", "-"}, {"sha256", sha256sum(d.file("stdout.txt"))}});
    // no samples written: no link
    REQUIRE(run_kveval(d, "run " + quote(spec) + " -q -o " + quote(res)).code == 0);
    CHECK(!json::parse(slurp(res))["kveval"].contains("samples"));
  }

  TEST_CASE("-o /dev/stdout is -o -: stdout holds the results JSON alone, the tables go to stderr" * kveval::test::needs_model()) {
    TempDir d;
    const std::string spec = d.write("spec.json", "{\"model\": " + json(kveval::test::model_path()).dump() +
                                                      ", \"max_length\": 64, \"tasks\": [" + kLL + "]}");
    for (const char* out : {"/dev/stdout", "/proc/self/fd/1"}) {
      CAPTURE(out);
      Run r = run_kveval(d, "run " + quote(spec) + " -q -o " + out);
      REQUIRE(r.code == 0);
      const json j = json::parse(r.out);  // throws on tables mixed in
      CHECK(j.contains("results"));
      CHECK(r.err.find("| task") != std::string::npos);
    }
  }

  TEST_CASE("SIGTERM or SIGINT at each write stage: no temporary file, results never newer than their samples" * kveval::test::needs_model()) {
    TempDir d;
    const std::string spec = d.write("spec.json", "{\"model\": " + json(kveval::test::model_path()).dump() +
                                                      ", \"max_length\": 64, \"tasks\": [" + kLL + "]}");
    const std::string res = d.file("res.json"), samples = d.file("samples.jsonl");
    const std::string args = "run " + quote(spec) + " -q -o " + quote(res) + " --log-samples " + quote(samples);
    struct Stage {
      const char* name;
      bool samples_new;  // the samples of the interrupted run are in place
    };
    for (const Stage st : {Stage{"samples-temp", false}, Stage{"samples-done", true}, Stage{"results-temp", true}}) {
      for (const auto& [sig, code] : {std::pair<const char*, int>{"term", 128 + 15}, {"int", 128 + 2}}) {
        CAPTURE(st.name);
        CAPTURE(sig);
        // an earlier complete pair, then a run of another document (other samples bytes)
        REQUIRE(run_kveval(d, args).code == 0);
        const std::string old_res = slurp(res), old_samples = slurp(samples);
        REQUIRE(json::parse(old_res)["kveval"]["samples"]["sha256"] == sha256sum(samples));
        std::string other = kLL;
        other.replace(other.find("park"), 4, "house");
        const std::string spec2 = d.write("spec2.json", "{\"model\": " + json(kveval::test::model_path()).dump() +
                                                            ", \"max_length\": 64, \"tasks\": [" + other + "]}");
        Run r = run_kveval(d, "run " + quote(spec2) + " -q -o " + quote(res) + " --log-samples " + quote(samples),
                           std::string("KVEVAL_FAULT_INJECT=0:") + st.name + ":" + sig + " ");
        CHECK((r.code == code || r.code == -1));  // ended by the signal (128 + its number when sh reports it)
        CHECK(temp_files(d.path) == 0);
        CHECK(slurp(res) == old_res);  // the results were never replaced
        if (st.samples_new) {
          CHECK(slurp(samples) != old_samples);
          // the old results no longer match the samples beside them, and say so by their hash
          CHECK(json::parse(slurp(res))["kveval"]["samples"]["sha256"] != sha256sum(samples));
          CHECK(mtime_ns(res) <= mtime_ns(samples));
        } else {
          CHECK(slurp(samples) == old_samples);
        }
      }
    }
  }
}
