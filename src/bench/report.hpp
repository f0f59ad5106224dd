#pragma once
// Results of `kveval bench` and their printers: a markdown table per test
// (default, like llama-bench), CSV, one JSON document, or JSON lines.
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/stats.hpp"
#include "util/memory.hpp"

namespace kveval::bench {

/// One measured figure: `value` summarises the repetitions in `unit`;
/// `fields` are derived figures (name -> value, names carry their unit, e.g.
/// "weights_GB_per_s", "frac_of_stream"), printed in insertion order.
struct Row {
  std::string test;   ///< pp, tg, tg-nocache, speedup, cache, scope, switch, ll, roofline
  std::string name;   ///< e.g. "pp512", "tg64", "setup_caches", "stream"
  int threads = 0;    ///< compute threads
  std::string dtype;  ///< compute dtype of the model ("f32", "bf16"), "" when not applicable
  /// KV-cache element type of the model load ("f32", "bf16", "f16"), "" when
  /// not applicable (fidelity rows compare two loads).
  std::string kv_cache_dtype;
  /// How the load's decode steps on kept blocks multiplied ("exact", or "int8" when --matmul int8
  /// applied: LoadSummary::matmul); "" when not applicable (load, dequant, fidelity).
  std::string matmul;
  int batch = 0;      ///< rows per forward pass (0 when not applicable)
  int n_prompt = 0;   ///< prompt tokens per row
  int n_gen = 0;      ///< generated tokens per row
  int positions = 0;  ///< cache positions per row (cache/scope tests)
  std::string unit;   ///< "tok/s", "us", "GB/s", "GFLOP/s", "req/s", "%", "x"
  Summary value;
  std::vector<std::pair<std::string, double>> fields;

  /// Adds a derived figure; returns *this.
  Row& with(std::string key, double v);
  /// The derived figure `key`; throws ArgumentError if absent.
  double field(const std::string& key) const;
  bool has_field(const std::string& key) const;
};

/// Everything one `kveval bench` run measured.
struct Report {
  /// kveval_version, git_hash, machine {threads, llc_bytes}, model {...}, options {...}.
  nlohmann::json meta = nlohmann::json::object();
  std::vector<Row> rows;
  /// Free-text notes printed under the tables (how FLOPs and bytes are counted, caps applied).
  std::vector<std::string> notes;

  /// The notes that say a requested figure was skipped or changed (a size
  /// capped at the context length): also printed on stderr, whatever the format.
  std::vector<std::string> warnings;

  /// Appends `note` unless the report already has it (a test run once per
  /// thread count and dtype explains itself once).
  void add_note(const std::string& note);
  /// add_note, and records `note` in `warnings` (once).
  void add_warning(const std::string& note);
};

/// Whether a measurement needing `parts` fits in what the process may still
/// allocate (check_memory_plan with `budget`, default memory_budget()). When
/// not: rep.add_warning("skipped, not enough memory for <what>: ..." with the
/// planned and available bytes, then `hint` if any) and false, never an OOM kill.
bool fits_budget(Report& rep, const std::string& what, std::span<const MemoryPart> parts, const std::string& hint = {},
                 const std::optional<MemoryBudget>& budget = {});

/// One JSON object per row: test, name, threads, batch, n_prompt, n_gen,
/// positions, unit, median, stddev, mean, min, max, n, dtype,
/// kv_cache_dtype and matmul (where set), then the fields.
nlohmann::json row_to_json(const Row& r);
/// {"meta": ..., "results": [row...], "notes": [...]}.
nlohmann::json to_json(const Report& rep);
/// Markdown: a header line, one table per test in order of first appearance
/// (columns: threads, batch, test, value ± stddev, then the test's fields; a matmul column
/// after batch when the options list several --matmul modes or the rows differ in it), the notes.
std::string to_markdown(const Report& rep);
/// CSV with a header; fixed columns (test, name, threads, batch, n_prompt,
/// n_gen, positions, unit, median, stddev, mean, min, max, n, dtype,
/// kv_cache_dtype, matmul; the last three empty for rows without one) then the union of
/// all field names; strings
/// quoted when they contain a comma or quote.
std::string to_csv(const Report& rep);
/// One line per row: the row's JSON merged with kveval_version, git_hash, model path, machine threads.
std::string to_jsonl(const Report& rep);
/// Dispatches on "md", "csv", "json", "jsonl"; throws ArgumentError otherwise.
std::string format_report(const Report& rep, const std::string& format);

}  // namespace kveval::bench
