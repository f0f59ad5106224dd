// Printers for `kveval bench` results (see report.hpp).
#include "bench/report.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "util/number_format.hpp"
#include "util/error.hpp"

namespace kveval::bench {

void Report::add_note(const std::string& note) {
  if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
}

void Report::add_warning(const std::string& note) {
  add_note(note);
  if (std::find(warnings.begin(), warnings.end(), note) == warnings.end()) warnings.push_back(note);
}

bool fits_budget(Report& rep, const std::string& what, std::span<const MemoryPart> parts, const std::string& hint,
                 const std::optional<MemoryBudget>& budget) {
  try {
    check_memory_plan(what, parts, budget ? *budget : memory_budget(), hint);
    return true;
  } catch (const MemoryError& e) {
    rep.add_warning(fmt::format("skipped, {}", e.what()));
    return false;
  }
}

Row& Row::with(std::string key, double v) {
  fields.emplace_back(std::move(key), v);
  return *this;
}

bool Row::has_field(const std::string& key) const {
  return std::any_of(fields.begin(), fields.end(), [&](const auto& f) { return f.first == key; });
}

double Row::field(const std::string& key) const {
  for (const auto& f : fields)
    if (f.first == key) return f.second;
  throw ArgumentError("bench row " + test + "/" + name + ": no field '" + key + "'");
}

namespace {

/// JSON has no NaN/inf: such values (never expected) become null.
nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

/// Compact human formatting: integers without decimals, else 3 significant
/// decimals for small numbers and 2 for large ones; |v| >= 1e6 or < 1e-4 in
/// scientific notation with 4 significant digits (format_table_number).
std::string fmt_num(double v) {
  if (!std::isfinite(v)) return "n/a";
  const double a = std::abs(v);
  if (a >= 1e6 || (a > 0 && a < 1e-4)) return format_table_number(v, 4);
  if (v == std::floor(v) && a >= 1) return fmt::format("{:.0f}", v);
  if (a >= 100) return fmt::format("{:.1f}", v);
  if (a >= 1) return fmt::format("{:.2f}", v);
  if (a == 0) return "0";
  return fmt::format("{:.3g}", v);
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::vector<std::string> field_union(const std::vector<const Row*>& rows) {
  std::vector<std::string> keys;
  for (const Row* r : rows)
    for (const auto& f : r->fields)
      if (std::find(keys.begin(), keys.end(), f.first) == keys.end()) keys.push_back(f.first);
  return keys;
}

}  // namespace

nlohmann::json row_to_json(const Row& r) {
  nlohmann::json j = {
      {"test", r.test},         {"name", r.name},          {"threads", r.threads},
      {"batch", r.batch},       {"n_prompt", r.n_prompt},  {"n_gen", r.n_gen},
      {"positions", r.positions}, {"unit", r.unit},        {"median", number(r.value.median)},
      {"stddev", number(r.value.stddev)}, {"mean", number(r.value.mean)}, {"min", number(r.value.min)},
      {"max", number(r.value.max)}, {"n", r.value.n},
  };
  if (!r.dtype.empty()) j["dtype"] = r.dtype;
  if (!r.kv_cache_dtype.empty()) j["kv_cache_dtype"] = r.kv_cache_dtype;
  if (!r.matmul.empty()) j["matmul"] = r.matmul;
  for (const auto& f : r.fields) j[f.first] = number(f.second);
  return j;
}

nlohmann::json to_json(const Report& rep) {
  nlohmann::json j;
  j["meta"] = rep.meta;
  j["results"] = nlohmann::json::array();
  for (const auto& r : rep.rows) j["results"].push_back(row_to_json(r));
  j["notes"] = rep.notes;
  return j;
}

namespace {

/// ", KV cache bf16" where the report recorded the cache type (meta.dtypes), or the list of several.
std::string kv_suffix(const nlohmann::json& d) {
  if (d.contains("kv_cache_dtypes") && d["kv_cache_dtypes"].is_array()) {  // several, swept in one load
    std::vector<std::string> names;
    for (const auto& n : d["kv_cache_dtypes"]) names.push_back(n.get<std::string>());
    return fmt::format(", KV cache {}", fmt::join(names, ", "));
  }
  return d.contains("kv_cache_dtype") ? ", KV cache " + d["kv_cache_dtype"].get<std::string>() : std::string();
}

/// The markdown header's model part: ", model PATH (weights, N M parameters)".
std::string markdown_model(const nlohmann::json& m) {
  const auto& mo = m["model"];
  std::string weights = fmt::format("{:.1f} MiB of {} weights", mo.value("weight_bytes", 0.0) / 1048576.0,
                                    mo.value("weight_dtype", "F32"));
  if (m.contains("dtypes") && m["dtypes"].size() == 1) weights += kv_suffix(m["dtypes"].begin().value());
  const bool several = m.contains("dtypes") && m["dtypes"].size() > 1;
  if (several) {  // one figure per compute dtype compared, "; " apart (a KV-cache list has commas)
    weights.clear();
    // in the order measured (meta.dtype_order) when recorded; meta.dtypes itself is sorted by name
    std::vector<std::string> order;
    if (m.contains("dtype_order"))
      for (const auto& n : m["dtype_order"])
        if (m["dtypes"].contains(n.get<std::string>())) order.push_back(n.get<std::string>());
    for (const auto& [name, d] : m["dtypes"].items())
      if (std::find(order.begin(), order.end(), name) == order.end()) order.push_back(name);
    for (const auto& name : order) {
      const auto& d = m["dtypes"][name];
      weights += fmt::format("{}{}: {:.1f} MiB of {} weights{}", weights.empty() ? "" : "; ", name,
                             d.value("weight_bytes", 0.0) / 1048576.0, d.value("weight_dtype", "F32"), kv_suffix(d));
    }
  }
  // "; " before the parameter count when the weights part is a list of its own
  return fmt::format(", model {} ({}{} {:.2f} M parameters)", mo.value("path", ""), weights,
                     weights.find(',') != std::string::npos || several ? ";" : ",", mo.value("n_params", 0.0) / 1e6);
}

/// The markdown header line: version, model, machine (empty when the meta has none).
std::string markdown_header(const nlohmann::json& m) {
  std::string out;
  if (m.contains("kveval_version"))
    out += fmt::format("kveval {} ({})", m.value("kveval_version", ""), m.value("git_hash", ""));
  if (m.contains("model")) out += markdown_model(m);
  if (m.contains("machine")) {
    out += fmt::format(", machine threads {}", m["machine"].value("threads", 0));
    const auto& mach = m["machine"];
    if (mach.contains("loadavg_start") && mach["loadavg_start"].size() == 3)
      out += fmt::format(", load average {:.2f} at start", mach["loadavg_start"][0].get<double>());
    if (mach.contains("loadavg_end") && mach["loadavg_end"].size() == 3)
      out += fmt::format(", {:.2f} at end", mach["loadavg_end"][0].get<double>());
  }
  if (!out.empty()) out += "\n";
  return out;
}

/// One test's markdown table. `several_dtypes`: the names show the dtype; `matmul_column`: a matmul
/// column after batch.
std::string markdown_table(const Report& rep, const std::string& t, bool several_dtypes, bool matmul_column) {
  const auto& m = rep.meta;
  std::vector<const Row*> rows;
  for (const auto& r : rep.rows)
    if (r.test == t) rows.push_back(&r);
  const auto keys = field_union(rows);
  // The name shows the KV-cache type when rows of this test and one dtype differ in it, or when a test
  // that uses a cache ran with a list of types (one may have been skipped, leaving a single row).
  bool several_kv = false;
  const bool cache_test = t == "tg" || t == "cache" || t == "switch" || t == "gen-mixed";
  for (const Row* r : rows) {
    for (const Row* q : rows)
      if (r->dtype == q->dtype && r->kv_cache_dtype != q->kv_cache_dtype) several_kv = true;
    if (cache_test && m.contains("dtypes") && m["dtypes"].contains(r->dtype) &&
        m["dtypes"][r->dtype].contains("kv_cache_dtypes"))
      several_kv = true;
  }
  std::string out = fmt::format("\n### {}\n\n| threads | batch |{} test | value |", t, matmul_column ? " matmul |" : "");
  for (const auto& k : keys) out += " " + k + " |";
  out += matmul_column ? "\n|---:|---:|:---|:---|---:|" : "\n|---:|---:|:---|---:|";
  for (size_t i = 0; i < keys.size(); ++i) out += "---:|";
  out += "\n";
  for (const Row* r : rows) {
    std::string name = r->name;
    if (several_dtypes && !r->dtype.empty()) name += " " + r->dtype;
    if (several_kv && !r->kv_cache_dtype.empty()) name += " KV " + r->kv_cache_dtype;
    if (r->positions > 0 && r->test != "pp" && r->test != "tg") name += fmt::format(" @{}", r->positions);
    if (r->n_prompt > 0 && (r->test == "tg" || r->test == "tg-nocache" || r->test == "speedup" || r->test == "switch"))
      name += fmt::format(" (p{})", r->n_prompt);
    std::string value = fmt_num(r->value.median) + " " + r->unit;
    if (r->value.n > 1) value = fmt_num(r->value.median) + " ± " + fmt_num(r->value.stddev) + " " + r->unit;
    out += fmt::format("| {} | {} |", r->threads, r->batch > 0 ? std::to_string(r->batch) : "");
    if (matmul_column) out += fmt::format(" {} |", r->matmul);
    out += fmt::format(" {} | {} |", name, value);
    for (const auto& k : keys) {
      out += ' ';
      if (r->has_field(k)) out += fmt_num(r->field(k));
      out += " |";
    }
    out += "\n";
  }
  return out;
}

}  // namespace

std::string to_markdown(const Report& rep) {
  std::string out = markdown_header(rep.meta);
  std::vector<std::string> tests;
  for (const auto& r : rep.rows)
    if (std::find(tests.begin(), tests.end(), r.test) == tests.end()) tests.push_back(r.test);
  // The name shows the dtype when the report compares dtypes (the header names several,
  // even if the rows of only one remain).
  // Rows without a dtype (dequant) do not count.
  bool several_dtypes = rep.meta.contains("dtypes") && rep.meta["dtypes"].size() > 1;
  std::string first_dtype;
  for (const auto& r : rep.rows) {
    if (r.dtype.empty()) continue;
    if (first_dtype.empty()) first_dtype = r.dtype;
    if (r.dtype != first_dtype) several_dtypes = true;
  }
  // A matmul column when the options list several --matmul modes or the rows differ in it.
  bool matmul_column = false;
  if (rep.meta.contains("options") && rep.meta["options"].contains("matmul")) {
    const auto& m = rep.meta["options"]["matmul"];
    matmul_column = m.is_array() && m.size() > 1;
  }
  std::string first_matmul;  // rows without a mode (load, dequant, fidelity) do not count
  for (const auto& r : rep.rows) {
    if (r.matmul.empty()) continue;
    if (first_matmul.empty()) first_matmul = r.matmul;
    if (r.matmul != first_matmul) matmul_column = true;
  }
  for (const auto& t : tests) out += markdown_table(rep, t, several_dtypes, matmul_column);
  if (!rep.notes.empty()) {
    out += "\nNotes:\n";
    for (const auto& n : rep.notes) out += "- " + n + "\n";
  }
  return out;
}

std::string to_csv(const Report& rep) {
  std::vector<const Row*> rows;
  for (const auto& r : rep.rows) rows.push_back(&r);
  const auto keys = field_union(rows);
  std::string out = "test,name,threads,batch,n_prompt,n_gen,positions,unit,median,stddev,mean,min,max,n,dtype,kv_cache_dtype,matmul";
  for (const auto& k : keys) {
    out += ',';
    out += csv_escape(k);
  }
  out += "\n";
  auto num = [](double v) { return std::isfinite(v) ? fmt::format("{}", v) : std::string(); };
  for (const Row* r : rows) {
    out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}", csv_escape(r->test), csv_escape(r->name),
                       r->threads, r->batch, r->n_prompt, r->n_gen, r->positions, csv_escape(r->unit),
                       num(r->value.median), num(r->value.stddev), num(r->value.mean), num(r->value.min),
                       num(r->value.max), r->value.n, csv_escape(r->dtype), csv_escape(r->kv_cache_dtype),
                       csv_escape(r->matmul));
    for (const auto& k : keys) {
      out += ',';
      if (r->has_field(k)) out += num(r->field(k));
    }
    out += "\n";
  }
  return out;
}

std::string to_jsonl(const Report& rep) {
  std::string out;
  for (const auto& r : rep.rows) {
    nlohmann::json j = row_to_json(r);
    j["kveval_version"] = rep.meta.value("kveval_version", "");
    j["git_hash"] = rep.meta.value("git_hash", "");
    if (rep.meta.contains("model")) j["model"] = rep.meta["model"].value("path", "");
    if (rep.meta.contains("machine")) j["machine_threads"] = rep.meta["machine"].value("threads", 0);
    out += j.dump() + "\n";
  }
  return out;
}

std::string format_report(const Report& rep, const std::string& format) {
  if (format == "md") return to_markdown(rep);
  if (format == "csv") return to_csv(rep);
  if (format == "json") return to_json(rep).dump(2) + "\n";
  if (format == "jsonl") return to_jsonl(rep);
  throw ArgumentError("--output: unknown format '" + format + "' (expected md, csv, json or jsonl)");
}

}  // namespace kveval::bench
