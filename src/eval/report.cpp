#include "eval/report.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <fmt/format.h>

#include "eval/groups.hpp"
#include "eval/lm_eval_format.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"
#include "util/number_format.hpp"

namespace kveval::eval {

using nlohmann::json;

namespace {

std::string pad(const std::string& s, size_t w, bool right = false) {
  // width in code points, so "±" and non-ASCII task names line up
  size_t cps = 0;
  for (unsigned char c : s) cps += (c & 0xC0) != 0x80;
  if (cps >= w) return s;
  std::string sp(w - cps, ' ');
  return right ? sp + s : s + sp;
}

std::string table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows,
                  const std::vector<bool>& right) {
  std::vector<size_t> w(head.size(), 0);
  auto width = [](const std::string& s) {
    size_t cps = 0;
    for (unsigned char c : s) cps += (c & 0xC0) != 0x80;
    return cps;
  };
  for (size_t c = 0; c < head.size(); ++c) w[c] = width(head[c]);
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size() && c < w.size(); ++c) w[c] = std::max(w[c], width(r[c]));
  std::string out;
  auto line = [&](const std::vector<std::string>& r) {
    std::string l = "|";
    for (size_t c = 0; c < w.size(); ++c) {
      l += ' ';
      l += pad(c < r.size() ? r[c] : "", w[c], right[c]);
      l += " |";
    }
    out += l + "\n";
  };
  line(head);
  std::string sep = "|";
  for (size_t c = 0; c < w.size(); ++c) sep += std::string(w[c] + 2, '-') + "|";
  out += sep + "\n";
  for (const auto& r : rows) line(r);
  return out;
}

/// The table rows of `ms` under the name `name`: metric, value, "± stderr", n, note.
void add_metric_rows(const std::string& name, const std::vector<MetricValue>& ms,
                     std::vector<std::vector<std::string>>& rows) {
  for (const auto& m : ms) {
    std::string val = m.value ? format_table_number(*m.value, 4) : "n/a";
    std::string se = m.stderr_ ? "± " + format_table_number(*m.stderr_, 4) : "";
    rows.push_back({name, metric_key(m.name, m.filter), val, se, std::to_string(m.n), m.note});
  }
}

}  // namespace

std::string format_groups_table(const EvalSpec& spec, const RunResult& res) {
  std::vector<std::vector<std::string>> rows;
  bool aggregates = false;
  for (const ReportRow& row : report_rows(spec)) {
    if (!row.is_group || !spec.groups[row.index].aggregate_metric_list) continue;
    const std::vector<AggregateMetric>& list = *spec.groups[row.index].aggregate_metric_list;
    aggregates |= !list.empty();
    if (list.empty()) rows.push_back({row.alias, "", "", "", "", ""});
    else if (row.index < res.group_metrics.size()) add_metric_rows(row.alias, res.group_metrics[row.index], rows);
  }
  if (!aggregates) return "";
  return table({"group", "metric", "value", "stderr", "n", "note"}, rows, {false, false, true, true, true, false});
}

std::string format_metrics_table(const EvalSpec& spec, const RunResult& res) {
  std::vector<std::vector<std::string>> rows;
  auto add = [&rows](const std::string& name, const std::vector<MetricValue>& ms) { add_metric_rows(name, ms, rows); };
  for (const ReportRow& row : report_rows(spec)) {
    if (!row.is_group) {
      if (row.index < res.metrics.size()) add(row.alias, res.metrics[row.index]);
      continue;
    }
    const GroupSpec& g = spec.groups[row.index];
    if (!g.aggregate_metric_list) rows.push_back({row.alias, "", "", "", "", ""});  // lm-eval: a group row without numbers
    else if (row.index < res.group_metrics.size()) add(row.alias, res.group_metrics[row.index]);
  }
  std::string out = table({"task", "metric", "value", "stderr", "n", "note"}, rows,
                          {false, false, true, true, true, false});
  if (res.n_request_errors > 0) {
    out += fmt::format("{} failed:", count_of(static_cast<uint64_t>(res.n_request_errors), "request"));
    for (size_t t = 0; t < res.task_errors.size(); ++t)
      if (res.task_errors[t]) out += fmt::format(" {}: {};", spec.tasks[t].name, res.task_errors[t]);
    out += "\n";
    int shown = 0;
    for (size_t i = 0; i < res.requests.size(); ++i) {
      const std::string& e = !res.requests[i].error.empty() ? res.requests[i].error
                             : i < res.outcomes.size()       ? res.outcomes[i].error
                                                             : res.requests[i].error;
      if (!e.empty() && shown++ < 5) out += "  " + e + "\n";
    }
    if (shown > 5) out += fmt::format("  ... and {} more (see --log-samples)\n", shown - 5);
  }
  return out;
}

std::vector<DistributedPhase> distributed_phases(const RunResult& res) {
  std::vector<DistributedPhase> out;
  for (size_t p = 0; p < res.phases.size(); ++p) {
    DistributedPhase d;
    d.name = res.phases[p].name;
    d.wall_seconds = res.phases[p].seconds;
    d.tokens = res.phases[p].tokens;
    double mx = 0;
    for (const auto& rp : res.rank_phases) {
      double s = p < rp.size() ? rp[p].seconds : 0.0;
      d.rank_seconds.push_back(s);
      d.cpu_seconds += s;
      mx = std::max(mx, s);
    }
    if (!d.rank_seconds.empty() && d.cpu_seconds > 0)
      d.imbalance = mx / (d.cpu_seconds / static_cast<double>(d.rank_seconds.size()));
    out.push_back(std::move(d));
  }
  return out;
}

namespace {

/// The phases that exist only around the generation KV cache.
bool is_cache_phase(const std::string& name) {
  return name == "cache setup" || name == "prefill" || name == "decode" || name == "cache teardown";
}

/// True when some request of the run has a kind for which `pred(kind)` holds.
template <class Pred>
bool has_request_kind(const RunResult& res, Pred pred) {
  return std::any_of(res.requests.begin(), res.requests.end(), [&pred](const Request& r) { return pred(r.kind); });
}

}  // namespace

bool has_generation(const RunResult& res) {
  return has_request_kind(res, [](RequestKind k) { return k == RequestKind::Generate; });
}

bool has_scoring(const RunResult& res) {
  return has_request_kind(res, [](RequestKind k) { return k != RequestKind::Generate; });
}

std::string format_phase_table(const RunResult& res) {
  const bool gen = has_generation(res), scoring = has_scoring(res);
  const auto shown = [gen, scoring](const std::string& phase) {
    return (gen || !is_cache_phase(phase)) && (scoring || phase != "loglikelihood");
  };
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : res.phases) {
    if (!shown(p.name)) continue;
    std::string tok = p.tokens > 0 ? std::to_string(p.tokens) : "-";
    // one fixed format per column, whatever the magnitude: seconds to the microsecond, tokens/s to a tenth
    std::string tps = p.tokens > 0 && p.seconds > 0 ? fmt::format("{:.1f}", static_cast<double>(p.tokens) / p.seconds) : "-";
    rows.push_back({p.name, fmt::format("{:.6f}", p.seconds), tok, tps});
  }
  std::string out = table({"phase", "seconds", "tokens", "tokens/s"}, rows, {false, true, true, true});
  if (gen)
    out += fmt::format("cache bytes: {} before generation, {} at setup ({} x {}), {} after teardown\n",
                       res.cache_bytes_before, res.cache_bytes_setup, count_of(res.cache_rows, "row"),
                       count_of(res.cache_positions, "position"), res.cache_bytes_after);
  else
    out += fmt::format("cache bytes: {} before the run, {} after (no generate_until request: no generation cache, no "
                       "cache phases)\n",
                       res.cache_bytes_before, res.cache_bytes_after);
  if (scoring)
    out += fmt::format("loglikelihood phase: {}, {} with caches set up, {} cached; {} requested, {} computed{}, {}\n",
                       count_of(res.ll_forward_calls, "forward pass", "forward passes"), res.ll_forward_with_cache_setup,
                       res.ll_forward_cached, count_of(res.ll_tokens_requested, "token"), res.ll_tokens_computed,
                       res.ll_tokens_computed < res.ll_tokens_requested ? " (prefix packing)" : "",
                       count_of(res.ll_logit_rows, "logit row"));
  else
    out += fmt::format("loglikelihood phase: {} (no loglikelihood, multiple_choice or loglikelihood_rolling request: "
                       "nothing to score)\n",
                       count_of(res.ll_forward_calls, "forward pass", "forward passes"));
  if (res.n_ranks > 1 && !res.rank_phases.empty()) {
    out += fmt::format("{} ranks: phase seconds above are the slowest rank's (wall), tokens all ranks'; CPU seconds (sum) "
                       "and load imbalance (max/mean) per phase:",
                       res.n_ranks);
    for (const auto& d : distributed_phases(res))
      if (shown(d.name))
        out += fmt::format(" {} {:.4f} s{}", d.name, d.cpu_seconds,
                           d.imbalance ? fmt::format(" ({:.2f}x)", *d.imbalance) : std::string());
    out += "\n";
  }
  return out;
}

void write_jsonl(const std::string& path, const std::vector<nlohmann::ordered_json>& lines) {
  util::AtomicFile f(path);
  for (const auto& l : lines) {
    f.write(l.dump(-1, ' ', false, json::error_handler_t::replace));
    f.write("\n");
  }
  f.commit();
}

void write_json(const std::string& path, const nlohmann::ordered_json& j) {
  util::write_file_atomic(path, j.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
}

BaselineCheck compare_baseline(const json& baseline, const json& current, double tolerance) {
  BaselineCheck out;
  const json base = baseline_metrics(baseline);
  const json cur = baseline_metrics(current);
  auto is_metric = [](const std::string& name) {
    auto ends = [&](std::string_view suf) {
      return name.size() >= suf.size() && name.compare(name.size() - suf.size(), suf.size(), suf) == 0;
    };
    return name != "alias" && !ends("_stderr") && !ends("_note");
  };
  auto what = [](const json& v) { return v.is_null() ? std::string("n/a") : "not a number (" + v.dump() + ")"; };
  for (auto t = base.begin(); t != base.end(); ++t)
    if (!cur.contains(t.key())) out.failures.push_back(fmt::format("{}: task in the baseline but not in this run", t.key()));
  for (auto t = cur.begin(); t != cur.end(); ++t) {
    if (!base.contains(t.key())) {
      out.failures.push_back(fmt::format("{}: task in this run but not in the baseline", t.key()));
      continue;
    }
    const json& bt = base[t.key()];
    const json& ct = t.value();
    if (!bt.is_object()) {
      out.failures.push_back(fmt::format("{}: baseline entry is not an object", t.key()));
      continue;
    }
    for (auto m = bt.begin(); m != bt.end(); ++m)
      if (is_metric(m.key()) && !ct.contains(m.key()))
        out.failures.push_back(fmt::format("{} {}: in the baseline but not in this run", t.key(), m.key()));
    for (auto m = ct.begin(); m != ct.end(); ++m) {
      const std::string& name = m.key();
      if (!is_metric(name)) continue;
      if (!bt.contains(name)) {
        out.failures.push_back(fmt::format("{} {}: in this run but not in the baseline", t.key(), name));
        continue;
      }
      const json& was_j = bt[name];
      const json& now_j = m.value();
      if (!was_j.is_number()) {
        out.failures.push_back(fmt::format("{} {}: baseline value is {}", t.key(), name, what(was_j)));
        continue;
      }
      if (!now_j.is_number()) {
        out.failures.push_back(fmt::format("{} {}: value of this run is {}", t.key(), name, what(now_j)));
        continue;
      }
      double now = now_j.get<double>(), was = was_j.get<double>();
      double worse = higher_is_better(name) ? was - now : now - was;
      if (worse > tolerance) out.regressions.push_back({t.key(), name, was, now});
    }
    const json* bn = baseline.contains("n-samples") && baseline["n-samples"].contains(t.key())
                         ? &baseline["n-samples"][t.key()] : nullptr;
    const json* cn = current.contains("n-samples") && current["n-samples"].contains(t.key())
                         ? &current["n-samples"][t.key()] : nullptr;
    if (bn && cn && *bn != *cn)
      out.warnings.push_back(fmt::format("{}: n-samples differ: baseline {}, this run {}", t.key(), bn->dump(), cn->dump()));
  }
  return out;
}

}  // namespace kveval::eval
