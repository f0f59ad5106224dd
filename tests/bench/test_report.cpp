// Bench printers: every format carries every figure.
#include <doctest/doctest.h>

#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/report.hpp"
#include "util/error.hpp"

using namespace kveval;
using namespace kveval::bench;

namespace {
Report sample() {
  Report rep;
  rep.meta["kveval_version"] = "0.1.0";
  rep.meta["git_hash"] = "abc1234";
  rep.meta["machine"] = {{"threads", 2}};
  rep.meta["model"] = {{"path", "models/s15m.gguf"}, {"weight_bytes", 1048576.0 * 60}, {"n_params", 15e6}};
  Row tg;
  tg.test = "tg";
  tg.name = "tg64";
  tg.threads = 2;
  tg.dtype = "bf16";
  tg.kv_cache_dtype = "f16";
  tg.matmul = "int8";
  tg.batch = 8;
  tg.n_prompt = 16;
  tg.n_gen = 64;
  tg.unit = "tok/s";
  const std::vector<double> v = {100, 110, 90};
  tg.value = summarize(v);
  tg.with("weights_GB_per_s", 12.5).with("frac_of_stream", 0.5);
  Row c;
  c.test = "cache";
  c.name = "reset_caches";
  c.threads = 1;
  c.batch = 4;
  c.positions = 2048;
  c.unit = "us";
  c.value = exact(0.004);
  c.with("cache_MiB", 10);
  rep.rows = {tg, c};
  rep.notes = {"a note, with a comma"};
  return rep;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}
}  // namespace

TEST_SUITE("bench.report") {
  TEST_CASE("json has meta, every row with its statistics and fields, and the notes") {
    const auto j = nlohmann::json::parse(format_report(sample(), "json"));
    CHECK(j["meta"]["kveval_version"] == "0.1.0");
    CHECK(j["meta"]["git_hash"] == "abc1234");
    CHECK(j["meta"]["machine"]["threads"] == 2);
    REQUIRE(j["results"].size() == 2);
    const auto& r = j["results"][0];
    CHECK(r["test"] == "tg");
    CHECK(r["dtype"] == "bf16");
    CHECK_FALSE(j["results"][1].contains("dtype"));
    CHECK(r["kv_cache_dtype"] == "f16");
    CHECK_FALSE(j["results"][1].contains("kv_cache_dtype"));
    CHECK(r["matmul"] == "int8");
    CHECK_FALSE(j["results"][1].contains("matmul"));
    CHECK(r["batch"] == 8);
    CHECK(r["n_gen"] == 64);
    CHECK(r["median"].get<double>() == 100.0);
    CHECK(r["stddev"].get<double>() == doctest::Approx(10.0));
    CHECK(r["min"].get<double>() == 90.0);
    CHECK(r["n"] == 3);
    CHECK(r["frac_of_stream"].get<double>() == 0.5);
    CHECK(j["results"][1]["positions"] == 2048);
    CHECK(j["notes"][0] == "a note, with a comma");
  }

  TEST_CASE("csv has a header with the union of fields and one line per row") {
    const auto ls = lines(format_report(sample(), "csv"));
    REQUIRE(ls.size() == 3);
    CHECK(ls[0] ==
          "test,name,threads,batch,n_prompt,n_gen,positions,unit,median,stddev,mean,min,max,n,dtype,kv_cache_dtype,"
          "matmul,weights_GB_per_s,frac_of_stream,cache_MiB");
    CHECK(ls[1] == "tg,tg64,2,8,16,64,0,tok/s,100,10,100,90,110,3,bf16,f16,int8,12.5,0.5,");
    CHECK(ls[2] == "cache,reset_caches,1,4,0,0,2048,us,0.004,0,0.004,0.004,0.004,1,,,,,,10");
  }

  TEST_CASE("add_note keeps the first of equal notes, in order") {
    Report rep = sample();
    rep.add_note("b");
    rep.add_note("a note, with a comma");
    rep.add_note("b");
    rep.add_note("c");
    CHECK(rep.notes == std::vector<std::string>{"a note, with a comma", "b", "c"});
  }

  TEST_CASE("jsonl is one parseable object per row with the version") {
    const auto ls = lines(format_report(sample(), "jsonl"));
    REQUIRE(ls.size() == 2);
    for (const auto& l : ls) {
      const auto j = nlohmann::json::parse(l);
      CHECK(j["kveval_version"] == "0.1.0");
      CHECK(j["model"] == "models/s15m.gguf");
      CHECK(j["machine_threads"] == 2);
    }
    CHECK(nlohmann::json::parse(ls[1])["name"] == "reset_caches");
  }

  TEST_CASE("markdown has one table per test with value and fields") {
    const std::string md = format_report(sample(), "md");
    CHECK(md.find("kveval 0.1.0 (abc1234)") != std::string::npos);
    CHECK(md.find("### tg") != std::string::npos);
    CHECK(md.find("### cache") != std::string::npos);
    CHECK(md.find("| 2 | 8 | tg64 (p16) | 100 ± 10 tok/s | 12.50 | 0.5 |") != std::string::npos);
    CHECK(md.find("| 1 | 4 | reset_caches @2048 | 0.004 us | 10 |") != std::string::npos);
    CHECK(md.find("- a note, with a comma") != std::string::npos);
    // One dtype measured, after rows without one (as dequant's): the names carry no dtype.
    Report rev = sample();
    std::swap(rev.rows[0], rev.rows[1]);
    CHECK(format_report(rev, "md").find("| 2 | 8 | tg64 (p16) | 100 ± 10 tok/s |") != std::string::npos);
  }

  TEST_CASE("markdown has a matmul column when several --matmul modes are listed or the rows differ in it") {
    Report one = sample();  // one mode asked, rows without a mode beside one with: no column
    one.meta["options"]["matmul"] = {"int8"};
    CHECK(format_report(one, "md").find("| threads | batch | test | value |") != std::string::npos);
    CHECK(format_report(one, "md").find("matmul") == std::string::npos);
    Report two = sample();  // two modes asked: a column, even where the rows' modes agree
    two.meta["options"]["matmul"] = {"exact", "int8"};
    two.rows[1].matmul = "int8";
    const std::string md = format_report(two, "md");
    CHECK(md.find("| threads | batch | matmul | test | value | weights_GB_per_s | frac_of_stream |\n"
                  "|---:|---:|:---|:---|---:|---:|---:|\n") != std::string::npos);
    CHECK(md.find("| 2 | 8 | int8 | tg64 (p16) | 100 ± 10 tok/s | 12.50 | 0.5 |") != std::string::npos);
    CHECK(md.find("| 1 | 4 | int8 | reset_caches @2048 | 0.004 us | 10 |") != std::string::npos);
    Report differ = sample();  // no options recorded, rows of two modes: a column
    differ.rows.push_back(differ.rows[0]);
    differ.rows[2].matmul = "exact";
    CHECK(format_report(differ, "md").find("| 2 | 8 | exact | tg64 (p16) |") != std::string::npos);
  }

  TEST_CASE("the markdown header names the weights of each compute dtype compared") {
    Report one = sample();
    CHECK(format_report(one, "md").find("model models/s15m.gguf (60.0 MiB of F32 weights, 15.00 M parameters)") !=
          std::string::npos);
    one.meta["dtypes"]["f32"] = {{"weight_bytes", 1048576.0 * 60}, {"weight_dtype", "F32"}};
    one.meta["dtypes"]["q4_0"] = {{"weight_bytes", 1048576.0 * 9.5}, {"weight_dtype", "Q4_0"}};
    CHECK(format_report(one, "md").find("(f32: 60.0 MiB of F32 weights; q4_0: 9.5 MiB of Q4_0 weights; 15.00 M "
                                        "parameters)") != std::string::npos);
    one.meta["dtypes"]["f32"]["kv_cache_dtype"] = "f32";
    one.meta["dtypes"]["f32"]["kv_cache_dtypes"] = {"f32", "f16"};
    CHECK(format_report(one, "md").find("(f32: 60.0 MiB of F32 weights, KV cache f32, f16; q4_0: 9.5 MiB of Q4_0 "
                                        "weights; 15.00 M parameters)") != std::string::npos);
    // --dtype q4_0,f32: the order measured (meta.dtype_order), not the JSON object's sorted keys
    one.meta["dtype_order"] = {"q4_0", "f32"};
    CHECK(format_report(one, "md").find("(q4_0: 9.5 MiB of Q4_0 weights; f32: 60.0 MiB of F32 weights, KV cache f32, "
                                        "f16; 15.00 M parameters)") != std::string::npos);
    // Rows of one dtype left (the other's skipped): the header names two, so each row names its own.
    for (auto& r : one.rows) r.dtype = "f32";
    const std::string md = format_report(one, "md");
    CHECK(md.find("| tg64 f32 ") != std::string::npos);
    CHECK(md.find("| reset_caches f32 ") != std::string::npos);
  }

  TEST_CASE("unknown format and missing field are errors") {
    CHECK_THROWS_AS(format_report(sample(), "xml"), ArgumentError);
    CHECK_THROWS_AS(sample().rows[0].field("nope"), ArgumentError);
  }
}
