// lm-eval's `!function` hooks through the embedded CPython: the task folder
// tests/data/lm_eval_hooks/ (utils.py next to the YAMLs, as lm-eval's tasks).
// Expected prompts are written by hand from utils.py; metric values are
// hand-computed and also computed by running the same utils.py with
// /usr/bin/python3.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/metrics.hpp"
#include "eval/python_hooks.hpp"
#include "eval/report.hpp"
#include "eval/runner.hpp"
#include "eval/spec.hpp"
#include "eval_test_util.hpp"
#include "util/error.hpp"

using kveval::SpecError;
using kveval::eval::DocOutcome;
using kveval::eval::EvalSpec;
using kveval::eval::MetricValue;
using kveval::eval::TaskSpec;
using nlohmann::json;

namespace {

std::string hooks_dir() { return kveval::test::source_dir() + "/tests/data/lm_eval_hooks"; }

EvalSpec load_yaml(const std::string& name) {
  json j = {{"model", "m.gguf"}, {"tasks", json::array({{{"lm_eval_yaml", hooks_dir() + "/" + name}}})}};
  return kveval::eval::parse_spec(j, "spec.json", hooks_dir());
}

/// The SpecError of loading `name` ("" when it loads).
std::string load_error(const std::string& name) {
  try {
    load_yaml(name);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "";
}

/// stdout of /usr/bin/python3 running `code` (hooks_dir() on sys.path).
std::string python(const std::string& code) {
  kveval::test::TempDir d;
  const std::string script = d.write("ref.py", "import sys\nsys.path.insert(0, " + json(hooks_dir()).dump() + ")\n" + code);
  FILE* p = popen(("/usr/bin/python3 " + script).c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  REQUIRE(pclose(p) == 0);
  return out;
}

/// Outcomes of the three multiple_choice documents of hooks_mc.yaml.
std::vector<DocOutcome> mc_outcomes() {
  std::vector<DocOutcome> o(3);
  const std::vector<std::vector<double>> lls = {{-3.0, -1.0, -2.0}, {-0.5, -0.25}, {-4.0, -5.0}};
  for (size_t i = 0; i < 3; ++i) o[i].ok = true, o[i].choice_logprobs = lls[i];
  return o;
}

const MetricValue& metric(const std::vector<MetricValue>& ms, const std::string& name) {
  for (const auto& m : ms)
    if (m.name == name) return m;
  FAIL("no metric " << name);
  return ms.front();
}

bool datasets_installed() {
  return std::system("/usr/bin/python3 -c 'import datasets' >/dev/null 2>&1") == 0;
}

}  // namespace

TEST_SUITE("eval.python_hooks") {
  TEST_CASE("process_docs filters and maps; doc_to_* get each document as a dict in its key order and types") {
    EvalSpec s = load_yaml("hooks_mc.yaml");
    const TaskSpec& t = s.tasks.at(0);
    REQUIRE(t.docs.size() == 3);  // "skip me" has meta.ok false
    CHECK(t.n_docs_total == 3);
    const std::string keys = " keys=zeta,label,endings,meta,query,choices,gold types=";
    CHECK(t.docs[0].context == "Q: Paris is in?" + keys + "int,bool,float,list");
    CHECK(t.docs[1].context == "Q: Rome is in?" + keys + "int,bool,int,list");
    CHECK(t.docs[2].context == "Q: Lima is in?" + keys + "int,bool,float,list");
    CHECK(t.docs[0].choices == std::vector<std::string>{"ITALY", "FRANCE", "SPAIN"});
    CHECK(t.docs[1].choices == std::vector<std::string>{"ITALY", "PERU"});
    CHECK(t.docs[0].gold == 1);
    CHECK(t.docs[1].gold == 0);
    CHECK(t.docs[2].gold == 1);
    CHECK(t.docs[2].target == "PERU");
    // the processed document keeps lm-eval's key order for the samples file, nested values intact
    CHECK(t.docs[0].raw_text.rfind(R"({"zeta":"Paris is in","label":1,"endings":["Italy","France","Spain"],)", 0) == 0);
    CHECK(t.docs[0].raw["meta"]["tags"] == json::parse("[null, 1.5]"));
    CHECK(t.docs[2].raw["meta"]["tags"] == json::parse(R"([{"k": "v"}])"));
    CHECK(t.metric_list == std::vector<std::string>{"acc", "margin", "ll_gold", "n_choices"});
  }

  TEST_CASE("process_results returns several metrics; mean with stderr and a custom aggregation") {
    EvalSpec s = load_yaml("hooks_mc.yaml");
    const TaskSpec& t = s.tasks.at(0);
    const std::vector<DocOutcome> o = mc_outcomes();
    const auto ms = kveval::eval::compute_metrics(t, o);
    REQUIRE(ms.size() == 4);
    // hand-computed: acc [1, 0, 0]; margin [1, -0.25, -1] (median -0.25); ll_gold [-1, -0.5, -5]; n_choices [3, 2, 2]
    CHECK(*metric(ms, "acc").value == doctest::Approx(1.0 / 3).epsilon(1e-15));
    CHECK(*metric(ms, "acc").stderr_ == doctest::Approx(1.0 / 3).epsilon(1e-12));  // sd sqrt(1/3) / sqrt(3)
    CHECK(*metric(ms, "margin").value == -0.25);
    CHECK(!metric(ms, "margin").stderr_);  // lm-eval: no stderr for a custom aggregation
    CHECK(!metric(ms, "margin").higher_is_better);
    CHECK(*metric(ms, "ll_gold").value == doctest::Approx(-6.5 / 3).epsilon(1e-15));
    CHECK(*metric(ms, "n_choices").value == doctest::Approx(7.0 / 3).epsilon(1e-15));
    CHECK(metric(ms, "acc").n == 3);
    // the same utils.py run by /usr/bin/python3
    const json ref = json::parse(python(R"(import json, utils
docs = [{"gold": 1}, {"gold": 0}, {"gold": 1}]
lls = [[-3.0, -1.0, -2.0], [-0.5, -0.25], [-4.0, -5.0]]
rs = [utils.process_results(d, [(x, False) for x in l]) for d, l in zip(docs, lls)]
print(json.dumps({"acc": sum(r["acc"] for r in rs) / 3, "margin": utils.median_agg([r["margin"] for r in rs]),
                  "ll_gold": sum(r["ll_gold"] for r in rs) / 3}))
)"));
    CHECK(*metric(ms, "acc").value == ref["acc"].get<double>());
    CHECK(*metric(ms, "margin").value == ref["margin"].get<double>());
    CHECK(*metric(ms, "ll_gold").value == ref["ll_gold"].get<double>());
    // per document, for the samples file
    const auto v = kveval::eval::doc_metric_values(t, t.docs[0], o[0]);
    REQUIRE(v.size() == 4);
    CHECK(v[1] == std::pair<std::string, json>{"margin", 1.0});
    CHECK(v[3] == std::pair<std::string, json>{"n_choices", 3});
  }

  TEST_CASE("generate_until: metric !function called with references and predictions, aggregation !function") {
    EvalSpec s = load_yaml("hooks_gen.yaml");
    const TaskSpec& t = s.tasks.at(0);
    REQUIRE(t.docs.size() == 4);
    CHECK(t.metric_list == std::vector<std::string>{"contains_ref"});
    std::vector<DocOutcome> o(4);
    const std::vector<std::string> outputs = {" in France.", "y", "italy!", "Chile"};  // targets France, x, Italy, Peru
    for (size_t i = 0; i < 4; ++i) o[i].ok = true, o[i].output = outputs[i];
    const auto ms = kveval::eval::compute_metrics(t, o);
    REQUIRE(ms.size() == 1);
    CHECK(*ms[0].value == 2.0);  // total of [1, 0, 1, 0]
    CHECK(!ms[0].stderr_);
    o[3].ok = false;  // a failed request: left out as for built-in metrics
    CHECK(kveval::eval::compute_metrics(t, o)[0].n == 3);
  }

  TEST_CASE("a hook that raises, returns the wrong type or imports a missing module: one line naming YAML and function") {
    std::string e = load_error("bad_raise.yaml");
    CHECK(e.find("bad_raise.yaml:3: doc_to_text: utils.raises raised ValueError: no text for Paris is in") != std::string::npos);
    CHECK(e.find("process_docs document 0") != std::string::npos);  // the document
    e = load_error("bad_type.yaml");
    CHECK(e.find("bad_type.yaml:3: doc_to_choice: utils.wrong_type returned set, expected a list of str") != std::string::npos);
    e = load_error("bad_missing.yaml");
    CHECK(e == hooks_dir() + "/bad_missing.yaml:3: process_docs: helpers.py: import kveval_missing_module_for_tests failed: No module named "
               "'kveval_missing_module_for_tests'");
    e = load_error("bad_nofile.yaml");
    CHECK(e == hooks_dir() + "/bad_nofile.yaml:3: process_docs: " + hooks_dir() + "/nofile.py: not found (lm-eval imports 'nofile' from the "
               "YAML's folder)");
    if (!datasets_installed()) {
      e = load_error("bad_shuffle.yaml");
      CHECK(e.find("bad_shuffle.yaml:3: process_docs: utils.shuffles raised AttributeError: kveval's stand-in Dataset has "
                   "no 'shuffle'") != std::string::npos);
    }
    for (const char* f : {"bad_raise.yaml", "bad_type.yaml", "bad_missing.yaml", "bad_nofile.yaml", "bad_shuffle.yaml"})
      CHECK(load_error(f).find('\n') == std::string::npos);
  }

  TEST_CASE("a hook that never returns stops at the time limit") {
    kveval::eval::set_python_hook_timeout(1);
    const std::string e = load_error("bad_loop.yaml");
    kveval::eval::set_python_hook_timeout(300);
    CHECK(e.find("bad_loop.yaml:3: process_docs: utils.forever did not return within 1 s") != std::string::npos);
    CHECK(load_yaml("hooks_mc.yaml").tasks.at(0).docs.size() == 3);  // the interpreter still works
  }

  TEST_CASE("process_results raising at scoring leaves that document out, counted in the note") {
    EvalSpec s = load_yaml("fail_scoring.yaml");
    const auto ms = kveval::eval::compute_metrics(s.tasks.at(0), mc_outcomes());
    REQUIRE(ms.size() == 1);
    CHECK(*ms[0].value == 1.0);
    CHECK(ms[0].n == 2);
    CHECK(ms[0].note.find("1 document left out: ") == 0);
    CHECK(ms[0].note.find("utils.results_fail_on_rome raised KeyError: 'rome'") != std::string::npos);
    // the printed row keeps the note next to the value and its stderr
    kveval::eval::RunResult res;
    res.metrics = {ms};
    const std::string table = kveval::eval::format_metrics_table(s, res);
    const size_t row = table.find("| hooks_scoring");
    REQUIRE(row != std::string::npos);
    const std::string line = table.substr(row, table.find('\n', row) - row);
    CHECK(line.find("| 1.0000 | ± 0.0000 | 2 | 1 document left out: ") != std::string::npos);
    CHECK(line.find("KeyError: 'rome'") != std::string::npos);
  }
}
