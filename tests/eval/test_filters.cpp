// lm-eval's filters and exact_match options: each option has a case whose
// expected value changes when the option is read differently (hand-computed
// from lm_eval/filters/extraction.py RegexFilter, selection.py,
// transformation.py and lm_eval/api/metrics.py exact_match_hf_evaluate).
#include <doctest/doctest.h>

#include "eval/filters.hpp"
#include "eval/metrics.hpp"

using namespace kveval::eval;

namespace {

FilterPipeline regex(const std::string& pattern, int group_select = 0, const std::string& fallback = "[invalid]") {
  FilterStep s;
  s.function = "regex";
  s.regex_pattern = pattern;
  s.group_select = group_select;
  s.fallback = fallback;
  return {"p", {s}};
}

FilterPipeline steps(std::vector<std::string> fns) {
  FilterPipeline p{"p", {}};
  for (auto& f : fns) {
    FilterStep s;
    s.function = f;
    p.steps.push_back(s);
  }
  return p;
}

}  // namespace

TEST_SUITE("eval.filters") {
  TEST_CASE("regex_pattern: the pattern given, else lm-eval's default '#### (\\-?[0-9\\.\\,]+)'") {
    CHECK(apply_filter_pipeline(regex("answer is (\\d+)"), "so the answer is 42. #### 7") == "42");
    FilterStep d;
    d.function = "regex";  // default pattern and fallback
    CHECK(apply_filter_pipeline({"p", {d}}, "so the answer is 42. #### -1,234.5") == "-1,234.5");
    CHECK(apply_filter_pipeline({"p", {d}}, "so the answer is 42.") == "[invalid]");
  }

  TEST_CASE("group_select: Python indexing into findall, negative from the end") {
    const std::string out = "1 then 22 then 333";
    CHECK(apply_filter_pipeline(regex("(\\d+)", 0), out) == "1");
    CHECK(apply_filter_pipeline(regex("(\\d+)", 1), out) == "22");
    CHECK(apply_filter_pipeline(regex("(\\d+)", 2), out) == "333");
    CHECK(apply_filter_pipeline(regex("(\\d+)", -1), out) == "333");  // gsm8k flexible-extract
    CHECK(apply_filter_pipeline(regex("(\\d+)", -2), out) == "22");
    CHECK(apply_filter_pipeline(regex("(\\d+)", -3), out) == "1");
  }

  TEST_CASE("group_select past the matches gives the fallback, either direction") {
    CHECK(apply_filter_pipeline(regex("(\\d+)", 3, "none"), "1 22 333") == "none");
    CHECK(apply_filter_pipeline(regex("(\\d+)", -4, "none"), "1 22 333") == "none");
    CHECK(apply_filter_pipeline(regex("(\\d+)", 1, "none"), "only 5") == "none");
    CHECK(apply_filter_pipeline(regex("(\\d+)", -1, "none"), "only 5") == "5");
  }

  TEST_CASE("fallback: the given text when nothing matches") {
    CHECK(apply_filter_pipeline(regex("(\\d+)", 0, "no number"), "none here") == "no number");
    CHECK(apply_filter_pipeline(regex("(\\d+)", -1, ""), "none here").empty());
  }

  TEST_CASE("matches: whole match without groups, group 1 with one, the first non-empty of several; stripped") {
    CHECK(apply_filter_pipeline(regex("b+ "), "a bb c") == "bb");
    CHECK(apply_filter_pipeline(regex("x( y )"), "x y z") == "y");
    CHECK(apply_filter_pipeline(regex("(a)|(b)"), "b") == "b");
    CHECK(apply_filter_pipeline(regex("(a)?(c)?d", 0, "fb"), "d") == "fb");  // every group empty
  }

  TEST_CASE("pipelines run their steps in order") {
    CHECK(apply_filter_pipeline(steps({"lowercase"}), "ÄB c") == "äb c");
    CHECK(apply_filter_pipeline(steps({"uppercase"}), "äb C") == "ÄB C");
    CHECK(apply_filter_pipeline(steps({"remove_whitespace"}), "  x y \n") == "x y");
    CHECK(apply_filter_pipeline(steps({"take_first"}), " X ") == " X ");
    FilterPipeline p = regex("answer: (\\w+)");
    p.steps.push_back(steps({"uppercase"}).steps[0]);
    CHECK(apply_filter_pipeline(p, "answer: yes") == "YES");
  }

  TEST_CASE("exact_match options: regexes_to_ignore first, then ignore_case, then ASCII punctuation") {
    ExactMatchOptions o;
    CHECK(exact_match_normalize(o, "A, b!") == "A, b!");
    o.regexes_to_ignore = {"A"};
    CHECK(exact_match_normalize(o, "Aa") == "a");
    o.ignore_case = true;  // the regex ran before lower-casing: "a" stays
    CHECK(exact_match_normalize(o, "Aa") == "a");
    o.regexes_to_ignore = {};
    CHECK(exact_match_normalize(o, "Aa") == "aa");
    o.ignore_case = false;
    o.ignore_punctuation = true;
    CHECK(exact_match_normalize(o, "A, b! «c»") == "A b «c»");
    o.regexes_to_ignore = {",", "\\$"};
    CHECK(exact_match_normalize(o, "$1,000") == "1000");
  }

  TEST_CASE("a regex finding too few matches scores its fallback: the document stays in exact_match") {
    TaskSpec t;
    t.name = "t";
    t.output_type = OutputType::GenerateUntil;
    t.metric_list = {"exact_match"};
    t.filter_list = {regex("(\\d+)", 1, "7")};
    Doc a, b;
    a.target = "7", b.target = "2";
    a.has_target = b.has_target = true;
    t.docs = {a, b};
    std::vector<DocOutcome> o(2);
    o[0].ok = o[1].ok = true;
    o[0].output = "only 5";  // one match, group_select 1: fallback "7" == target
    o[1].output = "1 2 3";   // "2" == target
    auto ms = compute_metrics(t, o);
    REQUIRE(ms.size() == 1);
    CHECK(ms[0].filter == "p");
    CHECK(ms[0].n == 2);
    CHECK(*ms[0].value == doctest::Approx(1.0));
    CHECK(ms[0].note.empty());
    o[0].output = "no digits";  // fallback again
    o[1].output = "1 3";        // "3" != "2"
    ms = compute_metrics(t, o);
    CHECK(ms[0].n == 2);
    CHECK(*ms[0].value == doctest::Approx(0.5));
  }
}
