// Numbers in the printed tables: scientific notation with 4 significant digits
// for |v| >= 1e6 or 0 < |v| < 1e-4, never more than 12 characters; the results
// JSON keeps the full double.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "eval/lm_eval_format.hpp"
#include "eval/report.hpp"
#include "eval/runner.hpp"
#include "test_support.hpp"
#include "util/number_format.hpp"

using namespace kveval;
using namespace kveval::eval;
using nlohmann::json;

namespace {

/// The cells of the markdown table rows of `table` (header and separator skipped).
std::vector<std::vector<std::string>> cells(const std::string& table) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(table);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '|') continue;
    if (n++ < 2) continue;
    std::vector<std::string> r;
    size_t p = 1;
    while (p < line.size()) {
      size_t q = line.find('|', p);
      if (q == std::string::npos) break;
      std::string c = line.substr(p, q - p);
      c.erase(0, c.find_first_not_of(' '));
      c.erase(c.find_last_not_of(' ') + 1);
      r.push_back(c);
      p = q + 1;
    }
    rows.push_back(r);
  }
  return rows;
}

/// Length in code points (the "±" counts one).
size_t width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

TEST_SUITE("eval.table_format") {
  TEST_CASE("format_table_number: fixed between 1e-4 and 1e6, else 4 significant digits in scientific notation") {
    CHECK(format_table_number(243.48823, 4) == "243.4882");
    CHECK(format_table_number(0.0001, 4) == "0.0001");
    CHECK(format_table_number(0.0, 4) == "0.0000");
    CHECK(format_table_number(999999.0, 4) == "999999.0000");
    CHECK(format_table_number(999999.99999, 4) == "1.000e+06");  // would round to 1000000.0000
    CHECK(format_table_number(1e6, 4) == "1.000e+06");
    CHECK(format_table_number(2267088.8, 1) == "2.267e+06");
    CHECK(format_table_number(2.718281828e170, 4) == "2.718e+170");
    CHECK(format_table_number(3.14159e-7, 4) == "3.142e-07");
    CHECK(format_table_number(-1.5e300, 4) == "-1.500e+300");
    CHECK(format_table_number(0.00009999, 4) == "9.999e-05");
    CHECK(format_table_number(std::numeric_limits<double>::infinity(), 4) == "n/a");
    CHECK(format_table_number(std::nan(""), 4) == "n/a");
    // never more than 12 characters, over the whole double range
    for (double v = 1e-300; v < 1e300; v *= 7.3) {
      CHECK(format_table_number(v, 4).size() <= 12);
      CHECK(format_table_number(-v, 4).size() <= 12);
    }
  }

  TEST_CASE("the perplexity of 127-token continuations: readable in the table, full double in the JSON" * kveval::test::needs_model()) {
    // stories260K, loglikelihood of long continuations: perplexity is
    // exp(-mean summed log-prob per request), about 1e61 here; it used to
    // print as an integer of 62 digits (170 with the demo's continuations).
    std::unique_ptr<Model> model = Model::load(kveval::test::model_path(), ModelOptions{1});
    const std::string story =
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she "
        "saw a big, red ball. She kicked it and laughed. Tom had a small dog named Max. Max liked to run and jump. "
        "One day, Max ran into the garden and found a bone. Tom was happy and gave Max a hug. Sue wanted to bake a "
        "cake for her mom. She got flour, eggs and milk. The cake was big and sweet. Her mom smiled and said thank "
        "you. Ben saw a little bird in a tree. The bird was sad because it could not fly. Ben helped the bird.";
    // cut the story so that the continuation has exactly 127 tokens
    const Tokenizer& tok = model->tokenizer();
    std::string cont;
    for (size_t end = 1; end <= story.size(); ++end) {
      const std::string c = story.substr(0, end);
      if (encode_pair(tok, "Zq", " " + c).continuation.size() == 127) {
        cont = c;
        break;
      }
    }
    REQUIRE(!cont.empty());
    json spec = {{"model", kveval::test::model_path()},
                 {"max_length", 256},
                 {"tasks",
                  {{{"name", "long_continuations"},
                    {"output_type", "loglikelihood"},
                    {"docs", {{{"c", "Zq"}, {"x", cont}}, {{"c", "Xv"}, {"x", cont}}, {{"c", "Kj"}, {"x", cont}}}},
                    {"doc_to_text", "c"},
                    {"doc_to_target", "x"}}}}};
    EvalSpec s = parse_spec(spec, "test.json", ".");
    Context ctx(*model);
    RunResult r = run_eval(s, ctx);
    REQUIRE(r.n_request_errors == 0);
    CHECK(r.requests[0].n_continuation_tokens == 127);

    // the expected value, computed here from the per-request log-probs
    double mean_ll = 0;
    for (const auto& d : r.docs[0]) mean_ll += d.logprob / 3.0;
    const double ppl = std::exp(-mean_ll);
    REQUIRE(ppl > 1e20);

    const std::string table = format_metrics_table(s, r);
    CAPTURE(table);
    bool seen = false;
    for (const auto& row : cells(table)) {
      REQUIRE(row.size() == 6);
      // value, stderr and n columns: no number longer than 12 characters
      std::string se = row[3].rfind("± ", 0) == 0 ? row[3].substr(std::string("± ").size()) : row[3];
      CHECK(width(row[2]) <= 12);
      CHECK(width(se) <= 12);
      CHECK(width(row[4]) <= 12);
      if (row[1] == "perplexity") {
        seen = true;
        CHECK(row[2].find("e+") != std::string::npos);
        CHECK(std::stod(row[2]) == doctest::Approx(ppl).epsilon(5e-4));
        CHECK(se.find("e+") != std::string::npos);
      }
    }
    CHECK(seen);
    // JSON keeps the whole double
    const auto j = results_json(s, r, "sha");
    const double in_json = j["results"]["long_continuations"]["perplexity,none"].get<double>();
    CHECK(in_json == doctest::Approx(ppl).epsilon(1e-12));
    bool same = false;
    for (const auto& m : r.metrics[0])
      if (m.name == "perplexity") same = in_json == m.value.value();
    CHECK(same);
  }
}
