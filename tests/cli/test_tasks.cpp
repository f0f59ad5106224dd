// `kveval tasks` and `kveval run --tasks` on tests/data/task_tree/ (an lm-eval
// style tree): the listing, results equal to the same tasks run through a
// spec, lm-eval's --limit fraction, and one line with exit 2 for each bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_run.hpp"

namespace {

/// One row of the listing: the name padded to the widest ("pets_fewshot"), the kind to 5.
std::string row(std::string name, std::string kind, const std::string& file) {
  name.resize(12, ' ');
  kind.resize(5, ' ');
  return name + "  " + kind + "  " + file + "\n";
}

}  // namespace

TEST_SUITE("cli.tasks") {
  TEST_CASE("kveval tasks lists every task, tag and group with its kind and file; PATTERN is a glob") {
    TempDir d;
    const std::string t = task_tree();
    Run r = run_kveval(d, "tasks --include-path " + quote(t));
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.out == row("name", "kind", "file") + row("all_of_it", "group", t + "/groups/all_of_it.yaml") +
                       row("chores", "task", t + "/everyday/chores.yaml") + row("daily", "group", t + "/groups/daily.yaml") +
                       row("everyday", "tag", "pets,pets_fewshot") + row("last_word", "task", t + "/words/last_word.yaml") +
                       row("pets", "task", t + "/everyday/pets/pets.yaml") +
                       row("pets_fewshot", "task", t + "/everyday/pets/pets_fewshot.yaml") +
                       row("tree_all", "tag", "chores,last_word") + row("words", "tag", "last_word"));
    // the environment variable, a glob, and lm-eval's underscore spelling
    Run g = run_kveval(d, "tasks 'pets*'", "KVEVAL_INCLUDE_PATH=" + quote(t) + " ");
    CHECK(g.code == 0);
    CHECK(g.out == row("name", "kind", "file") + row("pets", "task", t + "/everyday/pets/pets.yaml") +
                       row("pets_fewshot", "task", t + "/everyday/pets/pets_fewshot.yaml"));
    Run u = run_kveval(d, "tasks --include_path " + quote(t) + " 'w*'");
    CHECK(u.out == "name   kind   file\nwords  tag    last_word\n");  // the name column as wide as the longest name shown
    // a pattern that matches only an include base: nothing listed, and a note saying what the base is
    Run base = run_kveval(d, "tasks --include-path " + quote(t) + " '_choice*'");
    CHECK(base.code == 0);
    CHECK(base.out.empty());
    CHECK(base.err == "kveval: no task, tag or group matches '_choice*'\nkveval: note: '_choice_base' is an include base (" +
                          t + "/_choice_base.yaml: no 'task' key; task YAMLs include it), not a task, tag or group\n");
    Run none = run_kveval(d, "tasks", "KVEVAL_INCLUDE_PATH= ");
    check_one_line(none, "kveval: error: no include path: give --include-path DIR or set KVEVAL_INCLUDE_PATH (directories of lm-eval task YAMLs)");
  }

  TEST_CASE("run --tasks: unknown name, duplicate name, missing include path, bad --limit: one line, exit 2, before the model") {
    TempDir d;
    const std::string t = task_tree(), inc = " --include-path " + quote(t);
    const std::string model = " -m " + quote(d.file("absent.gguf"));
    check_one_line(run_kveval(d, "run --tasks chores,dayly" + model + inc),
                   "kveval: error: --tasks: unknown task, tag or group 'dayly'; did you mean 'daily'? (searched " + t + ")");
    std::filesystem::create_directories(d.file("dup"));
    d.write("dup/chores.yaml", "task: chores\noutput_type: loglikelihood\n");
    check_one_line(run_kveval(d, "run --tasks chores" + model + inc + " --include-path " + quote(d.file("dup"))),
                   "kveval: error: duplicate task name 'chores': " + t + "/everyday/chores.yaml (task) and " + d.file("dup/chores.yaml") +
                       " (task)");
    check_one_line(run_kveval(d, "run --tasks chores" + model + " --include-path " + quote(d.file("nope"))),
                   "kveval: error: --include-path " + d.file("nope") + ": no such directory");
    for (const char* bad : {"1.5", "abc"})
      check_one_line(run_kveval(d, "run --tasks chores" + model + inc + " --limit " + bad),
                     std::string("kveval: error: --limit: expected an integer >= 1 or a fraction in (0, 1), got ") + bad +
                         " (see --help)");
    check_one_line(run_kveval(d, "run --tasks chores" + inc),
                   "kveval: error: --tasks: needs --model (-m) (see --help)");
    // the model is the last thing checked: good names reach it
    Run ok = run_kveval(d, "run --tasks all_of_it" + model + inc);
    CHECK(ok.code == 2);
    CHECK(ok.err.find("model file not found") != std::string::npos);
  }

  TEST_CASE("run --tasks gives the results of the same tasks run through a spec" * kveval::test::needs_model()) {
    TempDir d;
    const std::string t = task_tree(), model = quote(kveval::test::model_path());
    Run a = run_kveval(d, "run --tasks all_of_it -m " + model + " --include-path " + quote(t) + " -q -o " + quote(d.file("a.json")));
    INFO(a.err);
    REQUIRE(a.code == 0);
    json spec = {{"model", kveval::test::model_path()}, {"tasks", json::array()}};
    for (const char* f : {"everyday/pets/pets.yaml", "everyday/pets/pets_fewshot.yaml", "everyday/chores.yaml", "words/last_word.yaml"})
      spec["tasks"].push_back({{"lm_eval_yaml", t + "/" + f}});
    d.write("spec.json", spec.dump());
    Run b = run_kveval(d, "run " + quote(d.file("spec.json")) + " -q -o " + quote(d.file("b.json")));
    REQUIRE(b.code == 0);
    json ra = json::parse(slurp(d.file("a.json"))), rb = json::parse(slurp(d.file("b.json")));
    // the same task values; under the groups the aliases are indented (lm-eval's prepare_print_tasks)
    for (auto it = rb["results"].begin(); it != rb["results"].end(); ++it) {
      json a = ra["results"][it.key()], b = it.value();
      a.erase("alias");
      b.erase("alias");
      CHECK(a == b);
    }
    CHECK(ra["results"]["chores"]["alias"] == "  - chores");
    CHECK(ra["results"]["last_word"]["alias"] == " - last_word");
    CHECK(ra["n-samples"] == rb["n-samples"]);
    CHECK(ra["results"].size() == 6);  // 4 tasks, 2 groups
    // the group rows as lm-eval writes them: all_of_it has no aggregate_metric_list
    CHECK(ra["results"]["all_of_it"] == json{{" ", " "}, {"alias", "all_of_it"}});
    CHECK(ra["group_subtasks"] == json{{"all_of_it", {"daily", "last_word"}}, {"daily", {"pets", "pets_fewshot", "chores"}}});
    CHECK(ra["groups"].size() == 1);
    CHECK(ra["versions"]["daily"] == 1.0);
    CHECK_FALSE(ra["versions"].contains("all_of_it"));
    CHECK_FALSE(ra["n-shot"].contains("daily"));
    CHECK(ra["higher_is_better"]["daily"] == json{{"acc", true}, {"perplexity", false}});
    // daily = acc of pets, pets_fewshot, chores weighted by their documents, stderr pooled
    double num = 0, var = 0, total = 0;
    for (const char* t : {"pets", "pets_fewshot", "chores"}) {
      const double n = ra["n-samples"][t]["effective"].get<double>(), v = ra["results"][t]["acc,none"].get<double>(),
                   se = ra["results"][t]["acc_stderr,none"].get<double>();
      num += v * n, var += (n - 1) * se * se * n, total += n;
    }
    CHECK(ra["results"]["daily"]["acc,none"].get<double>() == doctest::Approx(num / total).epsilon(1e-12));
    CHECK(ra["results"]["daily"]["acc_stderr,none"].get<double>() == doctest::Approx(std::sqrt(var / (total - 3) / total)).epsilon(1e-12));
    CHECK(ra["groups"]["daily"] == ra["results"]["daily"]);
    CHECK(ra["results"]["daily"]["alias"] == " - daily");
    CHECK(ra["n-samples"]["pets_fewshot"]["effective"] == 3);

    // --num_fewshot and a --limit fraction (lm-eval: ceil(0.5 * 4) = 2 documents of chores)
    Run c = run_kveval(d, "run --tasks chores -m " + model + " --include-path " + quote(t) +
                              " --num_fewshot 1 --limit 0.5 -q -o " + quote(d.file("c.json")));
    REQUIRE(c.code == 0);
    json one = {{"model", kveval::test::model_path()},
                {"tasks", json::array({{{"lm_eval_yaml", t + "/everyday/chores.yaml"}, {"num_fewshot", 1}, {"limit", 2}}})}};
    d.write("one.json", one.dump());
    Run e = run_kveval(d, "run " + quote(d.file("one.json")) + " -q -o " + quote(d.file("e.json")));
    REQUIRE(e.code == 0);
    json rc = json::parse(slurp(d.file("c.json"))), re = json::parse(slurp(d.file("e.json")));
    CHECK(rc["results"] == re["results"]);
    CHECK(rc["n-samples"]["chores"]["effective"] == 2);
    CHECK(rc["config"]["limit"] == 0.5);  // as lm-eval records a fractional limit
    CHECK(rc["n-samples"] == re["n-samples"]);
  }
}
