// The task index over tests/data/task_tree/ (written in lm-eval's layout):
// names, tags and groups resolve to the task sets lm-eval's TaskManager
// gives for the same tree, and each bad tree is one SpecError/ArgumentError line.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "eval/spec.hpp"
#include "eval/task_index.hpp"
#include "eval_test_util.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using kveval::test::task_tree;
using kveval::test::TempDir;
using namespace kveval::eval;
using kveval::test::message_of;
using Names = std::vector<std::string>;

namespace {

TaskIndex tree_index() { return TaskIndex::build({{"--include-path", task_tree()}}); }

}  // namespace

TEST_SUITE("eval.task_index") {
  TEST_CASE("every name of the tree with its kind and file; the include base is not a task") {
    const TaskIndex idx = tree_index();
    Names names;
    for (const auto& [n, e] : idx.entries()) names.push_back(n + ":" + to_string(e.kind));
    CHECK(names == Names{"all_of_it:group", "chores:task", "daily:group", "everyday:tag", "last_word:task", "pets:task",
                         "pets_fewshot:task", "tree_all:tag", "words:tag"});
    CHECK(idx.file_of("pets_fewshot") == task_tree() + "/everyday/pets/pets_fewshot.yaml");
    CHECK(idx.find("daily")->file == task_tree() + "/groups/daily.yaml");
    CHECK(idx.find("_choice_base") == nullptr);
    CHECK(idx.include_bases() == std::map<std::string, std::string>{{"_choice_base", task_tree() + "/_choice_base.yaml"}});
  }

  TEST_CASE("tags (inherited through include, a string replacing a list) and nested groups expand as lm-eval's") {
    const TaskIndex idx = tree_index();
    // chores inherits tree_all from the base; pets' `tag: everyday` replaces it (a shallow merge), and pets_fewshot inherits that
    CHECK(idx.expand({"tree_all"}, "t") == Names{"chores", "last_word"});
    CHECK(idx.expand({"everyday"}, "t") == Names{"pets", "pets_fewshot"});
    CHECK(idx.expand({"words"}, "t") == Names{"last_word"});
    CHECK(idx.expand({"daily"}, "t") == Names{"pets", "pets_fewshot", "chores"});
    CHECK(idx.expand({"all_of_it"}, "t") == Names{"pets", "pets_fewshot", "chores", "last_word"});
    CHECK(idx.expand({"chores", "daily"}, "t") == Names{"chores", "pets", "pets_fewshot"});  // each task once
  }

  TEST_CASE("an unknown name suggests the closest names") {
    const TaskIndex idx = tree_index();
    CHECK(message_of([&] { idx.expand({"chore"}, "--tasks"); }) ==
          "--tasks: unknown task, tag or group 'chore'; did you mean 'chores'? (searched " + task_tree() + ")");
    CHECK(message_of([&] { idx.expand({"zzzzzzzzzz"}, "--tasks"); }) ==
          "--tasks: unknown task, tag or group 'zzzzzzzzzz' (searched " + task_tree() + ")");
    // an include base is named as one; another leading '_' gets the hint
    CHECK(message_of([&] { idx.expand({"_choice_base"}, "--tasks"); }) ==
          "--tasks: '_choice_base' is an include base (" + task_tree() +
              "/_choice_base.yaml: no 'task' key; task YAMLs include it), not a task, tag or group");
    CHECK(message_of([&] { idx.expand({"_zzzzzzzzzz"}, "--tasks"); }) ==
          "--tasks: unknown task, tag or group '_zzzzzzzzzz'; a name with a leading '_' is usually an include base, not a "
          "task (searched " + task_tree() + ")");
    const TaskIndex none = TaskIndex::build({});
    CHECK(message_of([&] { none.expand({"x"}, "--tasks"); }).find("no include path") != std::string::npos);
  }

  TEST_CASE("a task name in two files, a missing directory, a group listing itself: one line each") {
    TempDir d;
    for (const char* sub : {"a", "b", "c", "e"}) std::filesystem::create_directories(d.file(sub));
    d.write("a/one.yaml", "task: same\noutput_type: loglikelihood\n");
    d.write("b/two.yaml", "task: same\n");
    CHECK(message_of([&] { TaskIndex::build({{"--include-path", d.file("a")}, {"--include-path", d.file("b")}}); }) ==
          "duplicate task name 'same': " + d.file("a/one.yaml") + " (task) and " + d.file("b/two.yaml") + " (task)");
    CHECK(message_of([&] { TaskIndex::build({{"--include-path", d.file("nope")}}); }) ==
          "--include-path " + d.file("nope") + ": no such directory");
    d.write("c/loop.yaml", "group: loop\ntask:\n  - loop\n");
    const TaskIndex idx = TaskIndex::build({{"--include-path", d.file("c")}});
    CHECK(message_of([&] { idx.expand({"loop"}, "x"); }) == d.file("c/loop.yaml") + ": group 'loop' lists itself (through 'loop')");
    // a dict naming no indexed task is an inline task config, named as lm-eval's TaskFactory names it
    d.write("e/inline.yaml", "group: g\ntask:\n  - task: t\n");
    const TaskIndex inl = TaskIndex::build({{"--include-path", d.file("e")}});
    CHECK(inl.expand({"g"}, "x") == std::vector<std::string>{"g::t"});
  }

  TEST_CASE("glob_match is fnmatch") {
    CHECK(glob_match("pets*", "pets_fewshot"));
    CHECK(glob_match("*", "x"));
    CHECK(glob_match("p?ts", "pets"));
    CHECK_FALSE(glob_match("pets", "pets_fewshot"));
    CHECK(glob_match("[cd]*", "daily"));
  }

  TEST_CASE("a spec lists tasks by name with include_path; num_fewshot overrides every task") {
    TempDir d;
    const std::string spec = d.write(
        "spec.json", "{\"model\": \"m.gguf\", \"include_path\": \"" + task_tree() +
                         "\", \"tasks\": [\"daily\", {\"task\": \"last_word\", \"limit\": 2}]}");
    EvalSpec s = load_spec(spec);
    Names got;
    for (const auto& t : s.tasks) got.push_back(t.name);
    CHECK(got == Names{"pets", "pets_fewshot", "chores", "last_word"});
    CHECK(s.tasks[0].source == task_tree() + "/everyday/pets/pets.yaml");
    CHECK(s.tasks[1].num_fewshot == 1);
    CHECK(s.tasks[3].docs.size() == 2);
    TaskOverrides two;
    two.num_fewshot = 2;
    EvalSpec o = load_spec(spec, "", two);
    CHECK(o.tasks[0].num_fewshot == 2);
    CHECK(o.tasks[1].num_fewshot == 2);
    CHECK(o.tasks[3].num_fewshot == 2);
    const std::string bad = d.write("bad.json", "{\"model\": \"m.gguf\", \"include_path\": \"" + task_tree() + "\", \"tasks\": [\"chores\", \"dayly\"]}");
    CHECK(message_of([&] { load_spec(bad); }) ==
          bad + ": tasks[1]: unknown task, tag or group 'dayly'; did you mean 'daily'? (searched " + task_tree() + ")");
  }

  TEST_CASE("run --tasks: a task named and also in a tag runs once, in its first place") {
    const nlohmann::json j = {{"model", "m.gguf"}, {"tasks", {"pets_fewshot", "everyday", "chores"}}};
    TaskOverrides o;
    o.include_paths = {task_tree()};
    EvalSpec s = parse_spec(j, "--tasks", ".", "m.gguf", o);
    Names got;
    for (const auto& t : s.tasks) got.push_back(t.name);
    CHECK(got == Names{"pets_fewshot", "pets", "chores"});
    // the same list in a spec file names the repeated task
    TempDir d;
    const std::string spec = d.write("spec.json", "{\"model\": \"m.gguf\", \"include_path\": \"" + task_tree() +
                                                      "\", \"tasks\": [\"pets\", \"everyday\"]}");
    CHECK(message_of([&] { load_spec(spec); }) == spec + ": tasks[1].name: duplicate task name \"pets\"");
  }
}
