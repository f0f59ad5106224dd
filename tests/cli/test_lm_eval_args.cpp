// lm-eval's command-line value forms: --seed (lm_eval/__main__.py
// _int_or_none_list_arg_type) and --gen-kwargs (lm_eval/utils.py
// simple_parse_args_string + handle_arg_string), the values written by hand
// from those rules; and what `kveval run` does with them.
#include <doctest/doctest.h>

#include <functional>
#include <string>

#include "cli_run.hpp"
#include "cli/lm_eval_args.hpp"
#include "eval/spec.hpp"
#include "util/error.hpp"

using kveval::eval::parse_gen_kwargs_arg;
using kveval::cli::parse_seed_arg;
using kveval::cli::Seeds;
using nlohmann::json;
using kveval::test::message_of;


TEST_SUITE("cli.lm_eval_args") {
  TEST_CASE("--seed: one value for all four, four values with None, three filled with the default fewshot seed") {
    CHECK(parse_seed_arg("42") == Seeds{42, 42, 42, 42});
    CHECK(parse_seed_arg("0,None,8,52") == Seeds{0, std::nullopt, 8, 52});
    CHECK(parse_seed_arg(" none ") == Seeds{std::nullopt, std::nullopt, std::nullopt, std::nullopt});
    CHECK(parse_seed_arg("1,2,3") == Seeds{1, 2, 3, 1234});
    CHECK(parse_seed_arg("1_000") == Seeds{1000, 1000, 1000, 1000});  // Python int()
    CHECK(message_of([] { parse_seed_arg("1,2"); }) ==
          "--seed: expected three or four integers or None, separated by ',' (a missing fourth is 1234), or one "
          "integer for all four; got 2 values");
    CHECK(message_of([] { parse_seed_arg("1,2,3,4,5"); }).find("expected three or four integers or None, separated by ','") != std::string::npos);
    CHECK(message_of([] { parse_seed_arg("X"); }) == "--seed: x is not an integer or None");
    CHECK(message_of([] { parse_seed_arg("1.5"); }) == "--seed: 1.5 is not an integer or None");
    CHECK(message_of([] { parse_seed_arg("-3"); }) == "--seed: -3: a seed must be >= 0");
  }

  TEST_CASE("--gen-kwargs: lm-eval's types (bool, all-digit int, float(), else str); '=' in a value; empty items") {
    const json g = parse_gen_kwargs_arg("max_gen_toks=32,temperature=0.0,do_sample=FALSE,until=x=y,,a=1e3,b=-3,c= 7,d=abc");
    CHECK(g == json{{"max_gen_toks", 32}, {"temperature", 0.0}, {"do_sample", false}, {"until", "x=y"},
                    {"a", 1000.0}, {"b", -3.0}, {"c", 7.0}, {"d", "abc"}});
    CHECK(g["max_gen_toks"].is_number_integer());
    CHECK(g["b"].is_number_float());  // "-3".isnumeric() is False: float("-3")
    CHECK(parse_gen_kwargs_arg("  ").empty());
    CHECK(message_of([] { parse_gen_kwargs_arg("until"); }) == "--gen-kwargs: 'until': expected key=value");
  }

  TEST_CASE("kveval run: a bad --seed or --gen-kwargs key is one line, exit 2, before the model") {
    TempDir d;
    const std::string inc = " --include-path " + quote(task_tree()) + " -m " + quote(d.file("none.gguf"));
    check_one_line(run_kveval(d, "run --tasks chores --seed 1,2" + inc),
                   "kveval: error: --seed: expected three or four integers or None, separated by ',' (a missing fourth "
                   "is 1234), or one integer for all four; got 2 values");
    d.write("g.yaml", std::string(kveval::test::kYamlTaskHead) +
                          "dataset_kwargs:\n  data_files:\n    test: d.jsonl\ntest_split: test\n");
    d.write("d.jsonl", "{\"q\": \"x\", \"a\": \"y\"}\n");
    check_one_line(run_kveval(d, "run " + quote(d.file("g.yaml")) + " -m " + quote(d.file("none.gguf")) +
                                     " --gen-kwargs temprature=0"),
                   "kveval: error: --gen-kwargs: temprature: unknown key (did you mean 'temperature'?)");
    check_one_line(run_kveval(d, "run " + quote(d.file("g.yaml")) + " -m " + quote(d.file("none.gguf")) +
                                     " --gen-kwargs do_sample=true,top_p=2"),
                   "kveval: error: --gen-kwargs: top_p: 2 is outside (0, 1]");
    // JSON that does not parse: the byte and nlohmann's reason, without its exception id
    check_one_line(run_kveval(d, "run " + quote(d.file("g.yaml")) + " -m " + quote(d.file("none.gguf")) +
                                     " --gen-kwargs '{bad'"),
                   "kveval: error: --gen-kwargs: not valid JSON at byte 2: syntax error while parsing object key - "
                   "invalid literal; last read: '{b'; expected string literal");
  }

  TEST_CASE("a name that is a task and a tag: resolved as lm-eval and said once") {
    TempDir d;
    std::filesystem::create_directories(d.file("tree"));
    const std::string body = "output_type: loglikelihood\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: d.jsonl\n"
                             "test_split: test\ndoc_to_text: q\ndoc_to_target: a\n";
    d.write("tree/d.jsonl", "{\"q\": \"x\", \"a\": \" y\"}\n");
    d.write("tree/a.yaml", "task: a\ntag: b\n" + body);
    d.write("tree/b.yaml", "task: b\n" + body);
    d.write("tree/c.yaml", "task: c\ntag: a\n" + body);
    d.write("tree/g.yaml", "group: g\ntask: [b, a, b]\n");
    // b is met first as a tag (a.yaml): lm-eval skips the task b; c's tag a clashes with the task a, which stays
    Run r = run_kveval(d, "run --tasks g --include-path " + quote(d.file("tree")) + " -m " + quote(d.file("none.gguf")));
    CHECK(r.code == 2);
    CHECK(r.err.find("kveval: note: 'b' is a tag (first in " + d.file("tree/a.yaml") + "); the task of that name in " +
                     d.file("tree/b.yaml") + " is not registered, as in lm-eval\n") != std::string::npos);
    CHECK(r.err.find("kveval: note: 'a' is a task (" + d.file("tree/a.yaml") + "); the tag of that name (" +
                     d.file("tree/c.yaml") + ") is not registered, as in lm-eval\n") != std::string::npos);
    CHECK(kveval::test::count_lines(r.err) == 3);  // two notes, each once, and the error
  }
}
