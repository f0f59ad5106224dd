// lm-eval's --output-path layout: the model name sanitised and the date id
// as lm-eval makes them, and `kveval run --output-path DIR` writing
// DIR/<model>/results_<date>.json and samples_<task>_<date>.jsonl.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "cli/output_path.hpp"
#include "cli_run.hpp"

TEST_SUITE("cli.output_path") {
  TEST_CASE("lm-eval's model name sanitising and date id") {
    CHECK(kveval::cli::sanitize_model_name("models/m.gguf") == "models__m.gguf");
    CHECK(kveval::cli::sanitize_model_name("/a//b:c?d[e]") == "__a__b__c__d__e__");  // each run of the characters is one "__"
    CHECK(kveval::cli::sanitize_model_name("org/name-1.5B") == "org__name-1.5B");
    ::setenv("TZ", "UTC", 1);
    ::tzset();
    // 2026-12-06T08:41:07.123456 UTC; Python: datetime(...).isoformat().replace(":", "-")
    const auto t = std::chrono::system_clock::time_point(std::chrono::microseconds(1796546467123456LL));
    CHECK(kveval::cli::lm_eval_date_id(t) == "2026-12-06T08-41-07.123456");
    CHECK(kveval::cli::lm_eval_date_id(std::chrono::system_clock::time_point(std::chrono::seconds(1796546467))) ==
          "2026-12-06T08-41-07");  // isoformat leaves out zero microseconds
  }

  TEST_CASE("--output-path DIR writes DIR/<model>/results_<date>.json and, with --log-samples, samples per task" *
            kveval::test::needs_model()) {
    TempDir d;
    const std::string model = kveval::test::model_path();
    Run r = run_kveval(d, "run --tasks daily -m " + quote(model) + " --include-path " + quote(task_tree()) + " -q -o " +
                              quote(d.file("one.json")) + " --output-path " + quote(d.file("out")) + " --log-samples");
    INFO(r.err);
    REQUIRE(r.code == 0);
    const std::string sub = std::regex_replace(model, std::regex(R"([\"<>:/|\\?*\[\]]+)"), "__");
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(d.file("out/" + sub))) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    REQUIRE(names.size() == 4);
    std::smatch m;
    REQUIRE(std::regex_match(names[0], m, std::regex(R"(results_(\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d(\.\d{6})?)\.json)")));
    const std::string id = m[1];
    CHECK(names[1] == "samples_chores_" + id + ".jsonl");
    CHECK(names[2] == "samples_pets_" + id + ".jsonl");
    CHECK(names[3] == "samples_pets_fewshot_" + id + ".jsonl");
    json res = json::parse(slurp(d.file("out/" + sub + "/" + names[0]))), one = json::parse(slurp(d.file("one.json")));
    CHECK(res["results"] == one["results"]);
    const std::string chores = slurp(d.file("out/" + sub + "/" + names[1]));
    CHECK(std::count(chores.begin(), chores.end(), '\n') == 4);
    CHECK(json::parse(chores.substr(0, chores.find('\n')))["task"] == "chores");
    // --log-samples with no value needs the folder; the folder must not be a file
    check_one_line(run_kveval(d, "run --tasks daily -m " + quote(model) + " --include-path " + quote(task_tree()) + " --log-samples"),
                   "kveval: error: --log-samples: needs a file, or --output-path DIR to write into (see --help)");
    check_one_line(run_kveval(d, "run --tasks daily -m " + quote(model) + " --include-path " + quote(task_tree()) + " --output-path " +
                                     quote(d.file("one.json"))),
                   "kveval: error: --output-path " + d.file("one.json") + ": not a directory");
  }
}
