// `--mmap` end to end (run, generate, bench and the spec's "mmap"): the same results as a load that copies the
// blocks, the bytes read in place in the load line and the results file, and an --mmap with nothing to map named.
#include <doctest/doctest.h>

#include <string>

#include "cli_run.hpp"

namespace {

/// Bytes of the Q5_0 matrices of make-model's `tiny` preset with stories260K's 512-token vocabulary, by hand:
/// per layer q 64x64, k and v 64x32, o 64x64, gate, up and down 64x96 (30720 elements), 2 layers; token_embd and
/// output 512x64 each: 126976 elements in blocks of 32 (22 bytes each: an f16 scale, 4 bytes of high bits, 16 of
/// nibbles).
constexpr long kTinyQ5_0MatrixBytes = (2 * 30720 + 2 * 512 * 64) / 32 * 22;

/// A Q5_0 `tiny` model with the demo model's tokenizer, written into `d` by make-model.
std::string tiny_q5_0(const TempDir& d) {
  const std::string out = d.file("tiny-q5_0.gguf");
  const Run r = run_kveval(d, "make-model --preset tiny --type q5_0 --vocab " + quote(kveval::test::model_path()) +
                                  " -o " + quote(out));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  return out;
}

}  // namespace

TEST_SUITE("cli.mmap") {
  TEST_CASE("run --mmap: the same results, the bytes read in place in the load line and kveval.model" *
            kveval::test::needs_model()) {
    TempDir d;
    const std::string model = tiny_q5_0(d), spec = kveval::test::source_dir() + "/tasks/demo.json";
    const std::string args = "run " + quote(spec) + " -m " + quote(model) + " --limit 2 --max-length 128 --dtype blocks -t 1";
    const Run copied = run_kveval(d, args + " -o " + quote(d.file("copied.json")));
    const Run mapped = run_kveval(d, args + " --mmap -o " + quote(d.file("mapped.json")));
    INFO(mapped.err);
    REQUIRE(copied.code == 0);
    REQUIRE(mapped.code == 0);
    const json c = json::parse(slurp(d.file("copied.json"))), m = json::parse(slurp(d.file("mapped.json")));
    CHECK(m["results"] == c["results"]);
    CHECK(m["kveval"]["model"]["weight_dtype"] == "Q5_0");
    CHECK(m["kveval"]["model"]["mapped_weight_bytes"] == kTinyQ5_0MatrixBytes);
    CHECK(c["kveval"]["model"]["mapped_weight_bytes"] == 0);
    CHECK(m["kveval"]["model"]["resident_weight_bytes"] == c["kveval"]["model"]["resident_weight_bytes"]);
    CHECK(mapped.err.find("weights Q5_0 in memory, 0.1 MiB resident (0.1 MiB of them read in place from the file's "
                          "mapping); ") != std::string::npos);
    CHECK(copied.err.find("read in place") == std::string::npos);
    // the spec's key does the same; a value that is not a boolean is one line naming it
    const std::string on = d.write("on.json", R"({"model": ")" + model + R"(", "mmap": true, "dtype": "blocks", "tasks": [)" +
                                                  std::string(kLL) + "]}");
    const Run s = run_kveval(d, "run " + quote(on) + " -o " + quote(d.file("on-results.json")));
    REQUIRE(s.code == 0);
    CHECK(json::parse(slurp(d.file("on-results.json")))["kveval"]["model"]["mapped_weight_bytes"] == kTinyQ5_0MatrixBytes);
    const std::string bad = d.write("bad.json", R"({"model": ")" + model + R"(", "mmap": "yes", "tasks": [)" +
                                                    std::string(kLL) + "]}");
    check_one_line(run_kveval(d, "run " + quote(bad)), "kveval: error: " + bad + ": mmap: expected true or false, got \"yes\"");
  }

  TEST_CASE("generate and bench --mmap: the same text; the bytes read in place; nothing to map is named" *
            kveval::test::needs_model()) {
    TempDir d;
    const std::string model = tiny_q5_0(d);
    const std::string gen = "generate -t 1 --ignore-eos --dtype blocks -n 12 -p 'Once upon a time' -m " + quote(model);
    const Run copied = run_kveval(d, gen), mapped = run_kveval(d, gen + " --mmap");
    REQUIRE(copied.code == 0);
    REQUIRE(mapped.code == 0);
    CHECK(mapped.out == copied.out);
    CHECK(mapped.err.find("of them read in place from the file's mapping") != std::string::npos);
    const Run b = run_kveval(d, "bench -t 1 --dtype blocks --tests tg -n 4 --tg-prompt 4 -r 1 -o json --mmap -m " + quote(model));
    REQUIRE_MESSAGE(b.code == 0, b.err);
    const json rep = json::parse(b.out);
    CHECK(rep["meta"]["options"]["mmap"] == true);
    CHECK(rep["meta"]["dtypes"]["blocks"]["mapped_weight_bytes"] == kTinyQ5_0MatrixBytes);
    // an F32 file keeps no blocks: --mmap reads nothing in place, and the load line says so
    const Run f = run_kveval(d, "generate -t 1 -n 2 --mmap -m " + quote(kveval::test::model_path()));
    REQUIRE(f.code == 0);
    CHECK(f.err.find("; --mmap ignored (no matrix kept in Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q2_K..Q6_K blocks); ") != std::string::npos);
    CHECK(f.err.find("read in place") == std::string::npos);
  }
  TEST_CASE("--mmap is a switch: --mmap=false is refused in one line, exit 2" *
            kveval::test::needs_model()) {
    TempDir d;
    const std::string m = quote(kveval::test::model_path());
    for (const std::string& cmd : {std::string("run x.json --mmap=false"), "generate -m " + m + " --mmap=false", "bench -m " + m + " --mmap=false"}) {
      const Run r = run_kveval(d, cmd);
      INFO(cmd, " -> ", r.err);
      CHECK(r.code == 2);
      CHECK(r.err.find("mmap was given a disallowed flag override") != std::string::npos);
    }
  }
}
