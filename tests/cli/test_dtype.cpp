// `--dtype` end to end: the results file records the compute
// dtype (config.model_dtype, model_args, kveval.model.weight_dtype and the
// resident bytes of bf16 matrices), bench reports one row set per dtype, and a
// bad dtype is one line naming the option or the spec key.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "cli_run.hpp"
#include "gguf_copy.hpp"

TEST_SUITE("cli.dtype") {
  TEST_CASE("run --dtype bf16 records bfloat16 and the bf16 resident bytes; f32 records float32" * kveval::test::needs_model()) {
    if (!kveval::backend::bf16_matmul_available()) {
      MESSAGE("SKIPPED: oneDNN has no bf16 matmul on this CPU (" << std::string(kveval::backend::cpu_isa_name()) << ")");
      return;
    }
    TempDir d;
    const std::string spec = kveval::test::source_dir() + "/tasks/demo.json", model = kveval::test::model_path();
    Run r = run_kveval(d, "run " + spec + " --model " + model + " --limit 2 --dtype bf16 -o " + d.file("bf16.json"));
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.err.find("weights BF16 in memory") != std::string::npos);
    // a dtype given is named alone, without auto's reasons
    CHECK(r.err.find("kveval: compute dtype bf16; KV cache bf16\n") != std::string::npos);
    CHECK(r.err.find("oneDNN ISA") == std::string::npos);
    json b = json::parse(slurp(d.file("bf16.json")));
    CHECK(b["config"]["model_dtype"] == "bfloat16");
    CHECK(b["config"]["model_args"].get<std::string>().find("dtype=bfloat16") != std::string::npos);
    CHECK(b["kveval"]["model"]["weight_dtype"] == "BF16");
    CHECK(b["kveval"]["model"]["compute_dtype"] == "bf16");
    // stories260K: n_embd 64, 5 layers, kv dim 32, n_ff 172, 512 tokens, separate output.weight.
    // F32 in memory: token_embd 512*64 + norms 64 + 5*2*64 = 33472 elements * 4 = 133888 bytes;
    // bf16 matrices: output 512*64 + 5*(2*64*64 + 2*32*64 + 3*64*172) = 259328 elements * 2 = 518656.
    CHECK(b["kveval"]["model"]["resident_weight_bytes"] == 133888 + 518656);
    Run f = run_kveval(d, "run " + spec + " --model " + model + " --limit 2 --dtype f32 -o " + d.file("f32.json"));
    REQUIRE(f.code == 0);
    json j = json::parse(slurp(d.file("f32.json")));
    CHECK(j["config"]["model_dtype"] == "float32");
    CHECK(j["kveval"]["model"]["weight_dtype"] == "F32");
    CHECK(j["kveval"]["model"]["compute_dtype"] == "f32");
    CHECK(j["kveval"]["model"]["resident_weight_bytes"] == 292800 * 4);
    // the KV cache follows the compute dtype under auto; --kv-cache-dtype overrides it
    CHECK(r.err.find("; KV cache bf16\n") != std::string::npos);
    CHECK(r.err.find("bytes (K+V, bf16)") != std::string::npos);
    CHECK(b["kveval"]["cache"]["dtype"] == "bf16");
    CHECK(f.err.find("; KV cache f32\n") != std::string::npos);
    CHECK(j["kveval"]["cache"]["dtype"] == "f32");
    Run k = run_kveval(d, "run " + spec + " --model " + model + " --limit 2 --dtype f32 --kv-cache-dtype bf16 -o " + d.file("kv.json"));
    REQUIRE(k.code == 0);
    json kj = json::parse(slurp(d.file("kv.json")));
    CHECK(kj["kveval"]["cache"]["dtype"] == "bf16");
    CHECK(k.err.find("bytes (K+V, bf16)") != std::string::npos);
    // same rows and positions, 2 bytes per element instead of 4
    CHECK(kj["kveval"]["cache"]["rows"] == j["kveval"]["cache"]["rows"]);
    CHECK(2 * kj["kveval"]["cache"]["bytes_at_setup"].get<long>() == j["kveval"]["cache"]["bytes_at_setup"].get<long>());
    CHECK(kj["results"] == j["results"]);  // scoring never uses the cache; these generations agree too
    Run h = run_kveval(d, "run " + spec + " --model " + model + " --limit 2 --dtype f32 --kv-cache-dtype f16 -o " + d.file("kv16.json"));
    REQUIRE(h.code == 0);
    json hj = json::parse(slurp(d.file("kv16.json")));
    CHECK(hj["kveval"]["cache"]["dtype"] == "f16");
    CHECK(hj["config"]["model_args"].get<std::string>().find(",kv_cache_dtype=float16,") != std::string::npos);
    CHECK(h.err.find("; KV cache f16\n") != std::string::npos);
    CHECK(h.err.find("bytes (K+V, f16)") != std::string::npos);
    CHECK(hj["kveval"]["cache"]["bytes_at_setup"] == kj["kveval"]["cache"]["bytes_at_setup"]);
    CHECK(hj["results"] == j["results"]);
    Run g = run_kveval(d, "generate -m " + model + " -p hi -n 3 --no-cache --kv-cache-dtype bf16");
    REQUIRE(g.code == 0);
    CHECK(g.err.find("; no KV cache (--no-cache; --kv-cache-dtype bf16 ignored)\n") != std::string::npos);
    Run n = run_kveval(d, "generate -m " + model + " -p hi -n 3 --no-cache");
    REQUIRE(n.code == 0);
    CHECK(n.err.find("; no KV cache (--no-cache)\n") != std::string::npos);
    CHECK(n.out == g.out);
  }

  TEST_CASE("an f16 KV cache that overflows says so: generate's error line and run's failed requests" * kveval::test::needs_model()) {
    // stories260K with layer 0's V projection scaled by 1e6: V beyond ±65504.
    TempDir d;
    const std::string loud = d.file("loud.gguf");
    kveval::test::copy_gguf(kveval::test::model_path(), loud, {}, {}, {{"blk.0.attn_v.weight", 1e6f}});
    Run g = run_kveval(d, "generate -m " + loud + " -p hi -n 3 --kv-cache-dtype f16");
    CHECK(g.code != 0);
    CHECK(g.err.find("error: non-finite logits (NaN or Inf) at token position 3 (after 0 generated tokens): generation "
                     "stopped; ") != std::string::npos);
    CHECK(g.err.find(" K/V values of its cache row exceeded the f16 KV cache's range of ±65504; use --kv-cache-dtype "
                     "bf16 or f32\n") != std::string::npos);
    Run b = run_kveval(d, "generate -m " + loud + " -p hi -n 3 --kv-cache-dtype bf16");
    CHECK(b.code == 0);
    const std::string spec = kveval::test::source_dir() + "/tasks/demo.json";
    Run r = run_kveval(d, "run " + spec + " --model " + loud + " --limit 2 --kv-cache-dtype f16 -o " + d.file("r.json"));
    CHECK(r.code == 4);  // requests failed
    CHECK(r.out.find("2 requests failed: story_generation: 2;") != std::string::npos);
    CHECK(r.out.find("K/V values of its cache row exceeded the f16 KV cache's range of ±65504; use --kv-cache-dtype bf16 or "
                     "f32)") != std::string::npos);
    // bench: the overflowing type's measurements are skipped with the reason, never a rate of tokens not made;
    // the other type's rows stay.
    Run b2 = run_kveval(d, "bench -m " + loud +
                               " -t 1 --kv-cache-dtype f32,f16 --tests tg,tg-nocache,switch,gen-mixed -n 4 -r 1 "
                               "--switch-rounds 1 --gen-mixed-prompts 4 -o json");
    INFO(b2.err);
    REQUIRE(b2.code == 0);
    const json j = json::parse(b2.out);
    std::map<std::string, std::vector<std::string>> kv_of;  // test -> the cache types of its rows
    for (const auto& row : j["results"]) kv_of[row["test"]].push_back(row["kv_cache_dtype"]);
    for (const char* t : {"tg", "switch", "gen-mixed"}) {
      CAPTURE(std::string(t));
      CHECK(!kv_of[t].empty());
      CHECK(std::count(kv_of[t].begin(), kv_of[t].end(), "f16") == 0);
      CHECK(std::count(kv_of[t].begin(), kv_of[t].end(), "f32") == static_cast<long>(kv_of[t].size()));
    }
    CHECK(!kv_of["tg-nocache"].empty());  // with the first type, f32: its speedup's cached run is whole
    std::string notes;
    for (const auto& n : j["notes"]) notes += n.get<std::string>() + "\n";
    CHECK(notes.find("tg4 after p16 batch 1 with KV cache f16 skipped: cached generation stopped after 0 of 4 tokens in "
                     "row 0: non-finite logits (NaN or Inf) (") != std::string::npos);
    CHECK(notes.find("switch with --dtype f32 and KV cache f16 skipped: switch's generation stopped after 0 of 32 tokens "
                     "in row 0: non-finite logits") != std::string::npos);
    CHECK(notes.find("gen-mixed with --dtype f32 and KV cache f16 skipped: gen-mixed's static generation stopped") !=
          std::string::npos);
    CHECK(notes.find("exceeded the f16 KV cache's range of ±65504; use --kv-cache-dtype bf16 or f32)") !=
          std::string::npos);
    // f16 first: tg-nocache keeps its uncached row and skips only its comparison with the cached run;
    // the row left in tg still names its cache type.
    Run b3 = run_kveval(d, "bench -m " + loud + " -t 1 --kv-cache-dtype f16,f32 --tests tg,tg-nocache -n 4 -r 1");
    REQUIRE(b3.code == 0);
    CHECK(b3.out.find("| 1 | 1 | tg4 KV f32 (p16) |") != std::string::npos);
    CHECK(b3.out.find("### tg-nocache") != std::string::npos);
    CHECK(b3.out.find("### speedup") == std::string::npos);
    CHECK(b3.out.find("- tg-nocache: the speedup of tg4 after p16 batch 1 with KV cache f16 skipped: cached generation "
                      "stopped after 0 of 4 tokens in row 0") != std::string::npos);
  }

  TEST_CASE("bench --dtype f32,bf16: rows of both dtypes, a load line each" * kveval::test::needs_model()) {
    if (!kveval::backend::bf16_matmul_available()) {
      MESSAGE("SKIPPED: oneDNN has no bf16 matmul on this CPU (" << std::string(kveval::backend::cpu_isa_name()) << ")");
      return;
    }
    TempDir d;
    Run r = run_kveval(d, "bench -m " + kveval::test::model_path() + " -t 1 --dtype f32,bf16 --tests pp -p 16 -r 1 -o json");
    INFO(r.err);
    REQUIRE(r.code == 0);
    json j = json::parse(r.out);
    int f32 = 0, bf16 = 0;
    for (const auto& row : j["results"]) {
      (row["dtype"] == "bf16" ? bf16 : f32) += row["dtype"] == "f32" || row["dtype"] == "bf16";
      CHECK(row["kv_cache_dtype"] == row["dtype"]);  // auto: the compute dtype's cache type, on every row
    }
    CHECK(f32 >= 1);
    CHECK(bf16 >= 1);
    CHECK(j["meta"]["dtypes"]["bf16"]["weight_dtype"] == "BF16");
    CHECK(j["meta"]["dtypes"]["f32"]["weight_dtype"] == "F32");
    CHECK(j["meta"]["dtypes"]["bf16"]["resident_weight_bytes"] == 652544);
    CHECK(r.err.find("weights F32 in memory") != std::string::npos);
    CHECK(r.err.find("weights BF16 in memory") != std::string::npos);
  }

  TEST_CASE("bench --dtype f32,bf16 --tests tg: dtypes interleaved with both loads resident, one at a time when they "
            "do not fit" * kveval::test::needs_model()) {
    if (!kveval::backend::bf16_matmul_available()) {
      MESSAGE("SKIPPED: oneDNN has no bf16 matmul on this CPU (" << std::string(kveval::backend::cpu_isa_name()) << ")");
      return;
    }
    TempDir d;
    const std::string tg = " -t 1 -b 1,2 --dtype f32,bf16 --tests tg -n 4 --tg-prompt 4 -r 1 -o json";
    // Resident together: each shape runs every (dtype, KV type) in turn, so rows
    // alternate dtypes within a batch size; one paired stream read serves all four.
    Run r = run_kveval(d, "bench -m " + kveval::test::model_path() + tg +
                              " --kv-cache-dtype auto,f16 --tests roofline,tg --stream-mib 16");
    INFO(r.err);
    REQUIRE(r.code == 0);
    json j = json::parse(r.out);
    std::vector<std::string> order;
    std::map<int, std::set<double>> paired;  // by batch
    for (const auto& row : j["results"]) {
      if (row["test"] != "tg") continue;
      order.push_back(fmt::format("{} {} b{}", row["dtype"].get<std::string>(), row["kv_cache_dtype"].get<std::string>(),
                                  row["batch"].get<int>()));
      paired[row["batch"].get<int>()].insert(row["paired_stream_GB_per_s"].get<double>());
      CHECK(row["frac_of_stream"].get<double>() ==
            doctest::Approx(row["weights_GB_per_s"].get<double>() / row["paired_stream_GB_per_s"].get<double>()).epsilon(1e-9));
    }
    CHECK(order == std::vector<std::string>{"f32 f32 b1", "f32 f16 b1", "bf16 bf16 b1", "bf16 f16 b1", "f32 f32 b2",
                                            "f32 f16 b2", "bf16 bf16 b2", "bf16 f16 b2"});
    CHECK(paired[1].size() == 1);
    CHECK(paired[2].size() == 1);
    bool together = false;
    for (const auto& n : j["notes"])
      together |= n.get<std::string>().find("compute dtypes (models loaded together)") != std::string::npos;
    CHECK(together);

    // s15m: 93 MiB of F32 weights, 64 MiB as bf16 (freed memory goes back at once, also under ASan).
    const std::string big = d.file("s15m.gguf");
    REQUIRE(run_kveval(d, "make-model --preset s15m --seed 1 -o " + big).code == 0);
    const std::string asan = "ASAN_OPTIONS=\"$ASAN_OPTIONS:quarantine_size_mb=0\" ";
    Run probe = run_kveval(d, "bench -m " + big + tg, asan + "KVEVAL_MEMORY_LIMIT_BYTES=1 ");
    REQUIRE(probe.code == 2);  // neither load fits: each skipped with a warning, nothing measured
    const size_t at = probe.err.find(" less ");
    REQUIRE(at != std::string::npos);
    const long resident = static_cast<long>(std::stod(probe.err.substr(at + 6)));
    auto limited = [&](long mib, const std::string& args) {
      Run r = run_kveval(d, "bench -m " + big + args,
                         asan + "KVEVAL_MEMORY_LIMIT_BYTES=" + std::to_string((resident + mib) * 1048576) + " ");
      INFO(probe.err << r.err);
      REQUIRE(r.code == 0);
      const json out = json::parse(r.out);
      std::vector<std::string> rows;
      for (const auto& row : out["results"])
        if (row["test"] == "tg") rows.push_back(fmt::format("{} b{}", row["dtype"].get<std::string>(), row["batch"].get<int>()));
      std::vector<std::string> notes;
      for (const auto& n : out["notes"]) notes.push_back(n.get<std::string>());
      return std::make_pair(rows, notes);
    };
    auto count_prefix = [](const std::vector<std::string>& notes, const std::string& prefix) {
      return std::count_if(notes.begin(), notes.end(), [&](const std::string& n) { return n.rfind(prefix, 0) == 0; });
    };
    // Room for the F32 load and 25 MiB more: the bf16 load does not fit beside it, so
    // F32's tg runs first (b1, b2), then bf16's, with one warning.
    auto [rows, notes] = limited(93 + 25, tg);
    CHECK(rows == std::vector<std::string>{"f32 b1", "f32 b2", "bf16 b1", "bf16 b2"});
    CHECK(count_prefix(notes, "tg with -t 1: --dtype f32,bf16 not interleaved as one group: loading bf16 beside the "
                              "weights of f32 does not fit (not enough memory for the model ") == 1);
    // Both loads and 60 MiB more: the loads fit together, but 8 rows' caches and
    // activations of both dtypes at once (93 MiB) do not; each dtype is loaded again
    // on its own and measured whole.
    std::tie(rows, notes) = limited(93 + 64 + 60, " -t 1 -b 1,8 --dtype f32,bf16 --tests tg -n 50 --tg-prompt 200 -r 1 -o json");
    CHECK(rows == std::vector<std::string>{"f32 b1", "f32 b8", "bf16 b1", "bf16 b8"});
    CHECK(count_prefix(notes, "tg with -t 1: --dtype f32,bf16 measured one dtype at a time, not interleaved: not "
                              "enough memory for tg50 after p200 batch 8 with every dtype's cache at once: ") == 1);
    CHECK(count_prefix(notes, "skipped") == 0);
    // Three dtypes (q8_0 of an F32 file widens every matrix: 93 MiB): f32 and bf16 fit
    // together, q8_0 not beside them. f32 and bf16 stay interleaved, q8_0 runs after.
    std::tie(rows, notes) = limited(93 + 64 + 40, " -t 1 -b 1,2 --dtype f32,bf16,q8_0 --tests tg -n 4 --tg-prompt 4 -r 1 -o json");
    CHECK(rows == std::vector<std::string>{"f32 b1", "bf16 b1", "f32 b2", "bf16 b2", "q8_0 b1", "q8_0 b2"});
    CHECK(count_prefix(notes, "tg with -t 1: --dtype f32,bf16,q8_0 not interleaved as one group: loading q8_0 beside "
                              "the weights of f32, bf16 does not fit (") == 1);
    // Room for the bf16 load (64 MiB) and 21 MiB more, not for F32's 93: bf16's tg runs,
    // and F32, loaded after bf16's release, is skipped with a warning; the report stays.
    // (Measured: this holds from 74 to 96 MiB; 85 is the middle.)
    std::tie(rows, notes) = limited(85, " -t 1 -b 1,2 --dtype bf16,f32 --tests tg -n 4 --tg-prompt 4 -r 1 -o json");
    CHECK(rows == std::vector<std::string>{"bf16 b1", "bf16 b2"});
    CHECK(count_prefix(notes, "--dtype f32 with -t 1 skipped: loading it does not fit beside the weights of bf16, "
                              "nor after their release (not enough memory for the model ") == 1);
    CHECK(count_prefix(notes, "tg with -t 1: --dtype bf16,f32 not interleaved") == 0);  // f32's tg never ran
    // Every row as "dtype name", and stderr, of a bench run under resident + mib MiB.
    auto named_rows = [&](long mib, const std::string& args) {
      Run r = run_kveval(d, "bench -m " + big + args,
                         asan + "KVEVAL_MEMORY_LIMIT_BYTES=" + std::to_string((resident + mib) * 1048576) + " ");
      INFO(r.err);
      REQUIRE(r.code == 0);
      const json out = json::parse(r.out);  // kept: a range over a temporary's member would dangle
      std::vector<std::string> names;
      for (const auto& row : out["results"])
        names.push_back(row["dtype"].get<std::string>() + " " + row["name"].get<std::string>());
      return std::make_pair(names, r.err);
    };
    // Without tg the loads come one after the other: F32's is skipped alone, bf16's pp rows stay.
    auto [pp_rows, pp_err] = named_rows(85, " -t 1 --dtype bf16,f32 --tests pp -p 8 -r 1 -o json");
    CHECK(pp_rows == std::vector<std::string>{"bf16 pp8", "bf16 pp8 last"});
    CHECK(pp_err.find("--dtype f32 with -t 1 skipped: loading it does not fit (not enough memory for the model ") !=
          std::string::npos);
    // auto resolves to F32 for this file before anything loads: one load planned, so its
    // memory error ends the run (before: two skip warnings for the same load, exit 2).
    Run one = run_kveval(d, "bench -m " + big + " -t 1 --dtype auto,f32 --tests pp -p 8 -r 1",
                         asan + "KVEVAL_MEMORY_LIMIT_BYTES=" + std::to_string((resident + 60) * 1048576) + " ");
    CHECK(one.code == 1);
    CHECK(one.err.find("kveval: error: not enough memory for the model ") != std::string::npos);
    CHECK(one.err.find("skipped") == std::string::npos);
    // The load test loads a second copy beside the dtype's own model: once loaded, bf16 keeps
    // about 102 MiB resident (weights and the file's mapped pages) and needs 64 more, F32 114
    // and 93. With 199 MiB only F32's load test is skipped: its pp rows and bf16's load rows
    // stay. (Measured: this holds from 172 to 224 MiB.)
    auto [lt_rows, lt_err] = named_rows(199, " -t 1 --dtype bf16,f32 --tests pp,load -p 8 -r 1 -o json");
    CHECK(lt_rows == std::vector<std::string>{"bf16 pp8", "bf16 pp8 last", "bf16 load", "bf16 load (no finite scan)",
                                              "bf16 finite scan", "f32 pp8", "f32 pp8 last"});
    CHECK(lt_err.find("skipped, load test with --dtype f32 and -t 1: not enough memory for the model ") != std::string::npos);
    // 64 rows after 200 tokens: 213 MiB of activations and a 203 MiB f32 or 101 MiB bf16
    // cache. With 365 MiB beside the load only the bf16 cache's variant fits: it alone is measured.
    Run kv = run_kveval(d, "bench -m " + big + " -t 1 -b 64 --dtype f32 --kv-cache-dtype f32,bf16 --tests tg -n 40 "
                           "--tg-prompt 200 -r 1 -o json",
                        asan + "KVEVAL_MEMORY_LIMIT_BYTES=" + std::to_string((resident + 93 + 365) * 1048576) + " ");
    INFO(kv.err);
    REQUIRE(kv.code == 0);
    j = json::parse(kv.out);
    std::vector<std::string> kv_rows;
    for (const auto& row : j["results"])
      if (row["test"] == "tg") kv_rows.push_back(row["kv_cache_dtype"].get<std::string>());
    CHECK(kv_rows == std::vector<std::string>{"bf16"});
    CHECK(kv.err.find("skipped, not enough memory for tg40 after p200 batch 64 with KV cache f32: ") != std::string::npos);
  }

  TEST_CASE("bench --kv-cache-dtype f32,f16,auto,bf16: the cache tests once per type, the others once" *
            kveval::test::needs_model()) {
    TempDir d;
    const std::string args = "bench -m " + kveval::test::model_path() +
                             " -t 1 --dtype f32 --kv-cache-dtype f32,f16,auto,bf16 --tests pp,tg,cache -p 16 -n 4 -r 1 "
                             "--cache-shapes 1x64";
    Run r = run_kveval(d, args + " -o json");
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.err.find("; KV cache f32, f16, bf16\n") != std::string::npos);
    const json j = json::parse(r.out);
    std::vector<std::string> tg, pp;
    std::map<std::string, double> setup_mib;
    for (const auto& row : j["results"]) {
      const std::string kv = row["kv_cache_dtype"];
      if (row["test"] == "tg") tg.push_back(kv);
      if (row["test"] == "pp") pp.push_back(kv);
      if (row["test"] == "cache" && row["name"] == "setup_caches") setup_mib[kv] = row["cache_MiB"].get<double>();
    }
    CHECK(tg == std::vector<std::string>{"f32", "f16", "bf16"});  // auto is f32 with --dtype f32: measured once
    CHECK(pp == std::vector<std::string>{"f32", "f32"});          // pp16 and pp16 last, cache-free: once
    // stories260K: 5 layers, K and V of 4 kv heads x 8 per position; 64 positions, one row
    const double elems = 2.0 * 5 * 64 * 4 * 8;
    CHECK(setup_mib["f32"] == doctest::Approx(elems * 4 / 1048576.0).epsilon(1e-3));
    CHECK(setup_mib["f16"] == doctest::Approx(elems * 2 / 1048576.0).epsilon(1e-3));
    CHECK(setup_mib["bf16"] == doctest::Approx(elems * 2 / 1048576.0).epsilon(1e-3));
    CHECK(j["meta"]["dtypes"]["f32"]["kv_cache_dtypes"] == json::array({"f32", "f16", "bf16"}));
    CHECK(j["meta"]["options"]["kv_cache_dtypes"] == json::array({"f32", "f16", "auto", "bf16"}));
    bool warned = false, interleaved = false;
    for (const auto& n : j["notes"]) {
      warned |= n == "--kv-cache-dtype f32 and auto both resolve to f32 with --dtype f32: measured once";
      interleaved |= n.get<std::string>().find("tg interleaves them") != std::string::npos;
    }
    CHECK(warned);
    CHECK(interleaved);
    Run md = run_kveval(d, args);
    REQUIRE(md.code == 0);
    CHECK(md.out.find("(1.1 MiB of F32 weights, KV cache f32, f16, bf16; 0.29 M parameters)") != std::string::npos);
    CHECK(md.out.find("| tg4 KV f16 (p16) |") != std::string::npos);
    CHECK(md.out.find("| setup_caches KV bf16 @64 |") != std::string::npos);
    CHECK(md.out.find("| pp16 |") != std::string::npos);  // the type is named only where it varies
  }

  TEST_CASE("a bad dtype is one line naming --dtype or the spec key, exit non-zero") {
    TempDir d;
    const std::string junk = d.write("junk.gguf", "not a model");  // the dtype is refused before the file is read
    Run r = run_kveval(d, "generate -m " + junk + " -p hi --dtype fp16");
    CHECK(r.code != 0);
    CHECK(count_lines(r.err) == 1);
    CHECK(r.err.find("--dtype") != std::string::npos);
    CHECK(r.err.find("fp16") != std::string::npos);
    {
      std::ofstream s(d.file("spec.json"));
      s << R"({"model": "/nonexistent.gguf", "dtype": "fp16", "tasks": []})";
    }
    Run s = run_kveval(d, "run " + d.file("spec.json"));
    CHECK(s.code != 0);
    CHECK(count_lines(s.err) == 1);
    CHECK(s.err.find("dtype") != std::string::npos);
    CHECK(s.err.find("fp16") != std::string::npos);
    // --kv-cache-dtype: one line naming the option and the value, before the model is read
    {
      std::ofstream k(d.file("kv.json"));
      k << R"({"model": "/nonexistent.gguf", "tasks": [{"name": "a", "output_type": "loglikelihood",
              "docs": [{"x": "a", "y": "b"}], "doc_to_text": "x", "doc_to_target": "y"}]})";
    }
    for (const std::string& cmd : {"generate -m " + junk + " -p hi --kv-cache-dtype fp8",
                                  "run " + d.file("kv.json") + " --kv-cache-dtype fp8",
                                  "bench -m " + junk + " --kv-cache-dtype fp8"}) {
      CAPTURE(cmd);
      Run k = run_kveval(d, cmd);
      CHECK(k.code != 0);
      CHECK(count_lines(k.err) == 1);
      CHECK(k.err.find("--kv-cache-dtype 'fp8': expected 'f32', 'bf16', 'f16' or 'auto'") != std::string::npos);
    }
    Run list = run_kveval(d, "bench -m " + junk + " --kv-cache-dtype f16,fp8");  // a list, each value checked
    CHECK(list.code != 0);
    CHECK(count_lines(list.err) == 1);
    CHECK(list.err.find("--kv-cache-dtype 'fp8': expected") != std::string::npos);
    Run fid = run_kveval(d, "bench -m " + junk + " --kv-cache-dtype f16,bf16 --tests fidelity --spec " + d.file("kv.json"));
    CHECK(fid.code != 0);
    CHECK(count_lines(fid.err) == 1);
    CHECK(fid.err.find("--kv-cache-dtype f16,bf16: --tests fidelity takes one KV-cache type") != std::string::npos);
  }

  TEST_CASE("without bf16 (oneDNN limited to AVX2): auto falls back to f32 with a note, bf16 is refused in one line" *
            kveval::test::needs_model()) {
    TempDir d;
    const std::string model = kveval::test::model_path(), env = "DNNL_MAX_CPU_ISA=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 ";
    const std::string spec = kveval::test::source_dir() + "/tasks/demo.json";
    auto sh = [&](const std::string& args) { return run_kveval(d, args, env); };
    // An F16 file (the shared fixture, same tokenizer as the demo) is where auto would pick bf16 on a bf16 CPU.
    const std::string f16 = kveval::test::shared_dir() + "/quant/model-F16.gguf";
    const bool have_f16 = !kveval::test::shared_dir().empty() && std::ifstream(f16).good();
    Run a = sh("run " + spec + " --model " + (have_f16 ? f16 : model) + " --limit 1 --dtype auto -o " + d.file("r.json"));
    INFO(a.err);
    REQUIRE(a.code == 0);
    CHECK(a.err.find("compute dtype auto -> f32") != std::string::npos);
    CHECK(a.err.find("oneDNN ISA avx2, no bf16") != std::string::npos);
    if (have_f16) CHECK(a.err.find("file not F32") != std::string::npos);
    CHECK(json::parse(slurp(d.file("r.json")))["config"]["model_dtype"] == "float32");
    Run b = sh("generate -m " + model + " -p hi -n 2 --dtype bf16");
    CHECK(b.code != 0);
    CHECK(count_lines(b.err) == 1);
    CHECK(b.err.find("oneDNN has no bf16 matmul on this CPU (ISA avx2)") != std::string::npos);
  }

  TEST_CASE("bench --tests fidelity --spec: per-token deltas and flips of the spec's tasks" * kveval::test::needs_model()) {
    if (!kveval::backend::bf16_matmul_available()) {
      MESSAGE("SKIPPED: oneDNN has no bf16 matmul on this CPU");
      return;
    }
    TempDir d;
    const std::string spec = d.write("spec.json", R"({"model": "unused.gguf", "batch_size": 2, "tasks": [
      {"name": "mc", "output_type": "multiple_choice", "docs": [
         {"q": "Lily went to the park to play with her", "c": ["ball", "car"], "g": 0},
         {"q": "The little dog wagged its", "c": ["book", "tail"], "g": 1}],
       "doc_to_text": "q", "doc_to_choice": "c", "doc_to_target": "g"},
      {"name": "gen", "output_type": "generate_until", "docs": [{"p": "Once upon a time", "a": ", there"}],
       "doc_to_text": "p", "doc_to_target": "a", "generation_kwargs": {"until": ["."], "max_gen_toks": 8}}]})");
    Run r = run_kveval(d, "bench -m " + kveval::test::model_path() + " -t 1 --tests fidelity --spec " + spec + " -o json");
    INFO(r.err);
    REQUIRE(r.code == 0);
    json j = json::parse(r.out);
    std::map<std::string, json> rows;
    for (const auto& row : j["results"]) rows[row["name"].get<std::string>()] = row;
    REQUIRE(rows.count("max abs dlogprob"));
    REQUIRE(rows.count("mean abs dlogprob"));
    const double mx = rows["max abs dlogprob"]["median"], mean = rows["mean abs dlogprob"]["median"];
    CHECK(mx >= mean);
    CHECK(mean > 0);   // bf16 weights really differ from f32
    CHECK(mx < 1.0);   // and stay close on this model
    CHECK(rows["max abs dlogprob"]["requests"] == 4);  // 2 documents x 2 choices
    // the note names each run's KV cache (auto: bf16 for the bf16 run)
    CHECK(j["notes"].dump().find("--dtype f32 (KV cache f32) and bf16 (KV cache bf16; one load each)") != std::string::npos);
    for (const char* k : {"flips mc acc", "flips mc acc_norm"}) {
      REQUIRE(rows.count(k));
      CHECK(rows[k]["docs"] == 2);
    }
    REQUIRE(rows.count("flips gen greedy_text"));
    CHECK(rows["flips gen greedy_text"]["docs"] == 1);
    CHECK(rows["flips gen exact_match"]["docs"] == 1);
    // without --spec: one line naming the option
    Run e = run_kveval(d, "bench -m " + kveval::test::model_path() + " -t 1 --tests fidelity");
    CHECK(e.code != 0);
    CHECK(e.err.find("needs --spec") != std::string::npos);
  }
  TEST_CASE("--matmul int8: the load line names it; bench fidelity compares exact with int8; a bad value is refused") {
    const std::string shared = kveval::test::shared_dir();
    const std::string model = shared + "/quant/model-Q4_K_M.gguf";
    if (shared.empty() || !std::ifstream(model)) {
      MESSAGE("SKIPPED: no " << model);
      return;
    }
    TempDir d;
    for (const char* cmd : {"generate -m MODEL -p x -n 1 --matmul fp8", "bench -m MODEL --tests tg --matmul fp8"}) {
      std::string c = cmd;
      c.replace(c.find("MODEL"), 5, model);
      Run b = run_kveval(d, c);
      CHECK(b.code != 0);
      CHECK(b.err.find("--matmul 'fp8': expected 'exact' or 'int8'") != std::string::npos);
    }
    Run g = run_kveval(d, "generate -m " + model + " -p Once -n 4 -t 1 --matmul int8");
    INFO(g.err);
    REQUIRE(g.code == 0);
    CHECK(g.err.find("; matmul int8 (decode steps on Q8_0/Q4_0/Q4_K/Q5_K/Q6_K blocks with int8 activations)") != std::string::npos);
    const std::string spec = d.write("spec.json", R"({"model": "unused.gguf", "tasks": [
      {"name": "mc", "output_type": "multiple_choice", "docs": [
         {"q": "Lily went to the park to play with her", "c": ["ball", "car"], "g": 0}],
       "doc_to_text": "q", "doc_to_choice": "c", "doc_to_target": "g"},
      {"name": "gen", "output_type": "generate_until", "docs": [{"p": "Once upon a time", "a": ", there"}],
       "doc_to_text": "p", "doc_to_target": "a", "generation_kwargs": {"until": ["."], "max_gen_toks": 8}}]})");
    Run r = run_kveval(d, "bench -m " + model + " -t 1 --tests fidelity --matmul int8 --spec " + spec + " -o json");
    INFO(r.err);
    REQUIRE(r.code == 0);
    json j = json::parse(r.out);
    std::map<std::string, json> rows;
    for (const auto& row : j["results"]) rows[row["name"].get<std::string>()] = row;
    REQUIRE(rows.count("max abs dlogprob int8"));
    REQUIRE(rows.count("mean abs dlogprob int8"));
    const double mx = rows["max abs dlogprob int8"]["median"], mean = rows["mean abs dlogprob int8"]["median"];
    CHECK(mx >= mean);
    CHECK(mean > 0);    // the int8 kernels ran in the teacher-forced decode steps
    CHECK(mx < 0.05);   // and stay near exact on this fixture
    CHECK(rows["max abs dlogprob int8"]["requests"] == 2);
    CHECK(j["notes"].dump().find("--matmul exact and --matmul int8") != std::string::npos);
    CHECK(j["meta"]["options"]["matmul"] == json::array({"int8"}));
  }
}
