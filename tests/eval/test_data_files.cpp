// Local data files as lm-eval names them (dataset_path json, csv, parquet with
// dataset_kwargs.data_files): the readers (data_files.hpp) on files written
// here, with the values Python's csv module and pandas.read_csv's typing give
// (worked out by hand), and the YAML side: where a relative file is looked
// for, and one line for each bad path.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "eval/data_files.hpp"
#include "eval/spec.hpp"
#include "eval_test_util.hpp"
#include "util/error.hpp"

using kveval::SpecError;
using kveval::test::message_of;
using kveval::test::TempDir;
using namespace kveval::eval;
using nlohmann::json;

namespace {

/// The task YAML `t` reading `data_files` with builder `builder` (the caller's split keys follow).
std::string yaml(const std::string& builder, const std::string& data_files, const std::string& splits) {
  return "task: t\noutput_type: loglikelihood\ndataset_path: " + builder + "\ndataset_kwargs:\n  data_files: " + data_files +
         "\n" + splits + "doc_to_text: q\ndoc_to_target: x\n";
}

EvalSpec load(const std::string& yaml_path) {
  return parse_spec({{"model", "m.gguf"}, {"tasks", {{{"lm_eval_yaml", yaml_path}}}}}, "spec.json", ".");
}

/// Changes the working directory for its lifetime.
struct InDir {
  std::filesystem::path old = std::filesystem::current_path();
  explicit InDir(const std::string& d) { std::filesystem::current_path(d); }
  ~InDir() { std::filesystem::current_path(old); }
};

}  // namespace

TEST_SUITE("eval.data_files") {
  TEST_CASE("CSV: quoted fields, doubled quotes and line breaks; columns typed as pandas.read_csv types them") {
    TempDir d;
    const std::string p = d.write("d.csv",
                                  "q,x,n,f,b,gap\n"
                                  "\"a, \"\"b\"\"\nc\",yes,1,2.5,True,\n"
                                  "plain,no,2,NaN,false,7\n"
                                  "last,maybe,3,,TRUE,NA\n");
    const auto rows = read_data_file(p);
    REQUIRE(rows.size() == 3);
    CHECK(rows[0].origin == p + ":2");
    CHECK(rows[1].origin == p + ":4");  // the first record spans lines 2 and 3
    CHECK(rows[0].doc == json{{"q", "a, \"b\"\nc"}, {"x", "yes"}, {"n", 1}, {"f", 2.5}, {"b", true}, {"gap", nullptr}});
    CHECK(rows[1].doc == json{{"q", "plain"}, {"x", "no"}, {"n", 2}, {"f", nullptr}, {"b", false}, {"gap", 7.0}});
    CHECK(rows[2].doc["f"].is_null());
    CHECK(rows[2].doc["gap"].is_null());
    CHECK(rows[0].doc["n"].is_number_integer());
    CHECK(rows[1].doc["gap"].is_number_float());  // ints with a missing cell are floats, as in pandas
    CHECK(rows[0].text.rfind("{\"q\":", 0) == 0);  // the header's column order
    CHECK(message_of([&] { read_data_file(d.write("bad.csv", "a,b\n1,\"x\"y\n")); }) ==
          d.file("bad.csv") + ": line 2: ',' expected after '\"'");
    CHECK(message_of([&] { read_data_file(d.write("long.csv", "a,b\n1,2,3\n")); }) ==
          d.file("long.csv") + ": line 2: 3 fields, the header has 2");
  }

  TEST_CASE("JSON: Lines, or one array of objects; Parquet without pyarrow is one line") {
    TempDir d;
    const auto rows = read_data_file(d.write("a.json", "[{\"q\": \"a\", \"x\": 1},\n {\"x\": 2, \"q\": \"b\"}]\n"));
    REQUIRE(rows.size() == 2);
    CHECK(rows[1].doc == json{{"q", "b"}, {"x", 2}});
    CHECK(rows[1].text == "{\"x\":2,\"q\":\"b\"}");  // its key order
    CHECK(rows[1].origin == d.file("a.json") + ": [1]");
    CHECK(read_data_file(d.write("l.jsonl", "{\"q\": \"a\"}\n\n{\"q\": \"b\"}\n"))[1].origin == d.file("l.jsonl") + ":3");
    CHECK(message_of([&] { read_data_file(d.write("p.parquet", "PAR1")); }) ==
          d.file("p.parquet") + ": reading Parquet needs the pyarrow package, which this Python cannot import (Debian 12 has "
                                "no python3-pyarrow; pip install pyarrow, or convert the file to JSON Lines or CSV)");
  }

  TEST_CASE("dataset_path csv: a split's file next to the YAML, else in the working directory") {
    TempDir d, cwd;
    std::filesystem::create_directories(d.file("tasks"));
    d.write("tasks/here.csv", "q,x\nin the folder,1\n");
    cwd.write("there.csv", "q,x\nin the working directory,2\n");
    const std::string y = d.write("tasks/t.yaml", yaml("csv", "\n    test: here.csv\n    train: [there.csv]",
                                                     "test_split: test\ntraining_split: train\n"));
    InDir in(cwd.path.string());
    const EvalSpec s = load(y);
    CHECK(s.tasks[0].docs[0].context == "in the folder");
    CHECK(s.tasks[0].docs[0].target == "1");
    // the working directory's, as `datasets` would find it, made absolute
    CHECK(std::filesystem::path(s.tasks[0].fewshot_split).is_absolute());
    CHECK(std::filesystem::equivalent(s.tasks[0].fewshot_split, cwd.file("there.csv")));
  }

  TEST_CASE("several files per split, glob patterns (sorted matches) and data_dir, as datasets resolves them") {
    TempDir d;
    std::filesystem::create_directories(d.file("data/sub"));
    auto doc = [](const char* q) { return std::string("{\"q\": \"") + q + "\", \"x\": \"y\"}\n"; };
    d.write("data/test-1.jsonl", doc("one"));
    d.write("data/test-10.jsonl", doc("ten"));
    d.write("data/test-2.jsonl", doc("two"));
    d.write("data/sub/test-3.jsonl", doc("three"));
    d.write("data/.test-4.jsonl", doc("hidden"));
    d.write("data/README.md", doc("readme"));
    auto contexts = [&](const std::string& files, const std::string& splits = "test_split: test\n") {
      const EvalSpec s = load(d.write("t.yaml", yaml("json", files, splits)));
      std::vector<std::string> out;
      for (const auto& doc : s.tasks[0].docs) out.push_back(doc.context);
      return out;
    };
    using V = std::vector<std::string>;
    // '*' stays in its folder; byte order of the paths ("test-1." < "test-10" < "test-2")
    CHECK(contexts("{test: \"data/test-*.jsonl\"}") == V{"one", "ten", "two"});
    // '**' crosses folders, zero included; hidden files and README.md are left out
    CHECK(contexts("{test: \"data/**\"}") == V{"three", "one", "ten", "two"});
    CHECK(contexts("{test: \"data/.*.jsonl\"}") == V{"hidden"});  // unless the pattern names them
    CHECK(contexts("{test: \"data/README.md\"}") == V{"readme"});
    // a list: each entry's matches in turn; a pattern without matches adds none
    CHECK(contexts("{test: [data/test-2.jsonl, \"data/test-1?.jsonl\", \"data/x*\", \"data/test-[!2].jsonl\"]}") ==
          V{"two", "ten", "one"});
    // data_dir: data_files are resolved against it; several few-shot files read in order
    const std::string splits = "test_split: test\ntraining_split: train\nnum_fewshot: 2\nfewshot_config: {sampler: first_n}\n";
    const V c = contexts("{test: sub/test-3.jsonl, train: [test-2.jsonl, test-1.jsonl]}\n  data_dir: data", splits);
    CHECK(c == V{"two y\n\none y\n\nthree"});
    const EvalSpec s = load(d.file("t.yaml"));
    REQUIRE(s.tasks[0].dataset_files.size() == 1);
    CHECK(std::filesystem::equivalent(s.tasks[0].dataset_files[0], d.file("data/sub/test-3.jsonl")));
    REQUIRE(s.tasks[0].fewshot_files.size() == 2);
    CHECK(std::filesystem::equivalent(s.tasks[0].fewshot_files[0], d.file("data/test-2.jsonl")));
    CHECK(std::filesystem::equivalent(s.tasks[0].fewshot_files[1], d.file("data/test-1.jsonl")));
  }

  TEST_CASE("bad data_files: one line naming the YAML and the key") {
    TempDir d;
    d.write("a.jsonl", "{\"q\": \"a\", \"x\": \"b\"}\n");
    d.write("b.jsonl", "{\"q\": \"a\", \"x\": \"b\"}\n");
    auto err = [&](const std::string& builder, const std::string& files) {
      return message_of([&] { load(d.write("t.yaml", yaml(builder, files, "test_split: test\n"))); });
    };
    const std::string at = d.file("t.yaml") + ":4: dataset_kwargs: ";
    CHECK(err("csv", "{test: a.jsonl}") == at + "data_files.test: \"a.jsonl\" is read as json (kveval picks the reader by the "
                                               "extension: .csv, .parquet, anything else JSON), but dataset_path is csv");
    CHECK(err("json", "{test: nope.jsonl}") == at + "data_files.test: file \"nope.jsonl\" not found (looked for next to the "
                                                    "YAML, then in the working directory)");
    CHECK(err("json", "{test: \"none*.jsonl\"}") == at + "data_files.test: no file matches \"none*.jsonl\" (looked for next "
                                                         "to the YAML, then in the working directory)");
    CHECK(err("json", "{test: [a.jsonl, \"none*.jsonl\", nope.jsonl]}") ==  // a missing file among patterns
          at + "data_files.test: file \"nope.jsonl\" not found (looked for next to the YAML, then in the working directory)");
    CHECK(err("json", "{test: a.jsonl}\n  data_dir: nodir") ==
          at + "data_dir: folder \"nodir\" not found (looked for next to the YAML, then in the working directory)");
    CHECK(err("json", "{test: a.jsonl}\n  split: test") == at + "'split' is not supported (only data_files and data_dir)");
    CHECK(err("json", "{test: \"hf://datasets/x/y/test.jsonl\"}") ==
          at + "data_files.test: \"hf://datasets/x/y/test.jsonl\" is not a local file; kveval reads local files only (give "
               "the path of a local copy)");
    CHECK(err("json", "a.jsonl") ==  // a bare file is the "train" split, as in `datasets`
          d.file("t.yaml") + ":6: test_split: split 'test' has no file in dataset_kwargs.data_files (splits: train)");
  }
}
