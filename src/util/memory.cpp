#include "util/memory.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "util/error.hpp"

namespace kveval {

namespace {

namespace fs = std::filesystem;

/// Whole text of a small file; nullopt when it cannot be read.
std::optional<std::string> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return std::nullopt;
  return ss.str();
}

std::string_view trim(std::string_view s) {
  const char* ws = " \t\r\n";
  const size_t a = s.find_first_not_of(ws);
  if (a == std::string_view::npos) return {};
  return s.substr(a, s.find_last_not_of(ws) - a + 1);
}

/// A whole string as an unsigned decimal number; nullopt on anything else or overflow.
std::optional<uint64_t> parse_u64(std::string_view s) {
  uint64_t v = 0;
  if (s.empty()) return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

uint64_t sub_sat(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

/// Limits at or above this mean "unlimited" (v1 writes PAGE_COUNTER_MAX * page size ~ 2^63).
constexpr uint64_t kUnlimited = uint64_t{1} << 62;

struct Candidate {
  uint64_t available;
  std::string source;
};

void consider(std::optional<Candidate>& best, uint64_t available, std::string source) {
  if (!best || available < best->available) best = Candidate{available, std::move(source)};
}

/// `base` + cgroup `path` ("/a/b"); `base` itself for "/" or "".
fs::path join_cgroup(const fs::path& base, const std::string& path) {
  std::string rel = path;
  while (!rel.empty() && rel.front() == '/') rel.erase(rel.begin());
  return rel.empty() ? base : base / rel;
}

void cgroup_v2(const MemoryFiles& files, const std::string& path, std::optional<Candidate>& best) {
  std::error_code ec;
  fs::path base = files.cgroup_root;
  if (!fs::exists(base / "cgroup.controllers", ec)) base = base / "unified";
  if (!fs::exists(base / "cgroup.controllers", ec)) return;
  fs::path dir = join_cgroup(base, path);
  if (!fs::is_directory(dir, ec)) dir = base;  // a cgroup namespace shows its own cgroup at the root
  // The process's cgroup and every ancestor up to the root: each limit applies.
  for (fs::path d = dir;; d = d.parent_path()) {
    if (auto max = read_cgroup_limit((d / "memory.max").string())) {
      const uint64_t current = read_uint_file((d / "memory.current").string()).value_or(0);
      const uint64_t inactive = read_keyed_value((d / "memory.stat").string(), "inactive_file").value_or(0);
      const uint64_t used = sub_sat(current, inactive);
      consider(best, sub_sat(*max, used),
               fmt::format("cgroup memory.max {} less {} in use, {}", format_bytes(*max), format_bytes(used),
                           (d / "memory.max").string()));
    }
    if (d == base || d.parent_path() == d || d.string().size() <= base.string().size()) break;
  }
}

void cgroup_v1(const MemoryFiles& files, const std::string& path, std::optional<Candidate>& best) {
  std::error_code ec;
  const fs::path base = fs::path(files.cgroup_root) / "memory";
  fs::path dir = join_cgroup(base, path);
  if (!fs::exists(dir / "memory.limit_in_bytes", ec)) dir = base;
  auto limit = read_cgroup_limit((dir / "memory.limit_in_bytes").string());
  const std::string stat = (dir / "memory.stat").string();
  if (auto h = read_keyed_value(stat, "hierarchical_memory_limit"); h && *h < kUnlimited)
    limit = limit ? std::min(*limit, *h) : *h;
  if (!limit) return;
  const uint64_t usage = read_uint_file((dir / "memory.usage_in_bytes").string()).value_or(0);
  const uint64_t inactive = read_keyed_value(stat, "total_inactive_file").value_or(0);
  const uint64_t used = sub_sat(usage, inactive);
  consider(best, sub_sat(*limit, used),
           fmt::format("cgroup v1 memory limit {} less {} in use, {}", format_bytes(*limit), format_bytes(used),
                       (dir / "memory.limit_in_bytes").string()));
}

}  // namespace

std::optional<uint64_t> read_uint_file(const std::string& path) {
  auto text = slurp(path);
  if (!text) return std::nullopt;
  return parse_u64(trim(*text));
}

std::optional<uint64_t> read_cgroup_limit(const std::string& path) {
  auto text = slurp(path);
  if (!text) return std::nullopt;
  const std::string_view t = trim(*text);
  if (t == "max") return std::nullopt;
  auto v = parse_u64(t);
  if (!v || *v >= kUnlimited) return std::nullopt;
  return v;
}

std::optional<uint64_t> read_keyed_value(const std::string& path, std::string_view key) {
  auto text = slurp(path);
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string k, v, unit;
    if (!(ls >> k >> v)) continue;
    if (!k.empty() && k.back() == ':') k.pop_back();
    if (k != key) continue;
    auto n = parse_u64(v);
    if (!n) return std::nullopt;
    if (ls >> unit) {
      if (unit != "kB") return std::nullopt;
      if (*n > UINT64_MAX / 1024) return std::nullopt;
      *n *= 1024;
    }
    return n;
  }
  return std::nullopt;
}

std::optional<uint64_t> read_meminfo_available(const std::string& path) {
  return read_keyed_value(path, "MemAvailable");
}

CgroupPaths read_proc_cgroup(const std::string& path) {
  CgroupPaths out;
  auto text = slurp(path);
  if (!text) return out;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    // hierarchy-ID:controller-list:cgroup-path (cgroups(7)); the path may contain ':'.
    const size_t a = line.find(':');
    if (a == std::string::npos) continue;
    const size_t b = line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1), cg = line.substr(b + 1);
    if (id == "0" && controllers.empty()) {
      out.v2 = cg;
      continue;
    }
    std::istringstream cs(controllers);
    std::string c;
    while (std::getline(cs, c, ','))
      if (c == "memory") out.v1_memory = cg;
  }
  return out;
}

MemoryBudget memory_budget(const MemoryFiles& files) {
  std::optional<Candidate> best;
  if (auto a = read_meminfo_available(files.meminfo))
    consider(best, *a, fmt::format("MemAvailable of {}", files.meminfo));
  const CgroupPaths cg = read_proc_cgroup(files.proc_cgroup);
  if (cg.v2) cgroup_v2(files, *cg.v2, best);
  if (cg.v1_memory) cgroup_v1(files, *cg.v1_memory, best);
  std::optional<std::string> env = files.env_limit;
  if (!env)
    if (const char* e = std::getenv("KVEVAL_MEMORY_LIMIT_BYTES"); e && *e) env = e;
  if (env && !trim(*env).empty()) {
    auto limit = parse_u64(trim(*env));
    if (!limit)
      throw ArgumentError(fmt::format("KVEVAL_MEMORY_LIMIT_BYTES: expected a number of bytes, got '{}'", *env));
    const uint64_t rss = read_keyed_value(files.proc_status, "VmRSS").value_or(0);
    consider(best, sub_sat(*limit, rss),
             fmt::format("KVEVAL_MEMORY_LIMIT_BYTES {} less {} resident", format_bytes(*limit), format_bytes(rss)));
  }
  uint64_t as_limit = UINT64_MAX;
  if (files.address_space_limit) {
    as_limit = *files.address_space_limit;
  } else if (rlimit rl{}; ::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    as_limit = static_cast<uint64_t>(rl.rlim_cur);
  }
  if (as_limit != UINT64_MAX) {  // every mapping counts against it, so the mapped size is what is used
    const uint64_t mapped = read_keyed_value(files.proc_status, "VmSize").value_or(0);
    consider(best, sub_sat(as_limit, mapped),
             fmt::format("ulimit -v (RLIMIT_AS) {} less {} mapped", format_bytes(as_limit), format_bytes(mapped)));
  }
  MemoryBudget b;
  if (best) {
    b.available = best->available;
    b.source = std::move(best->source);
  }
  return b;
}

std::string format_bytes(uint64_t bytes) {
  static const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, units[u]);
}

void check_memory_plan(std::string_view what, std::span<const MemoryPart> parts, const MemoryBudget& budget,
                       std::string_view hint) {
  if (!budget.available) return;
  uint64_t need = 0;
  std::vector<std::string> planned, resident;
  for (const MemoryPart& p : parts) {
    if (p.resident) {
      resident.push_back(fmt::format("{} {} already loaded", p.name, format_bytes(p.bytes)));
      continue;
    }
    need = p.bytes > UINT64_MAX - need ? UINT64_MAX : need + p.bytes;
    planned.push_back(fmt::format("{} {} ({} bytes)", p.name, format_bytes(p.bytes), p.bytes));
  }
  if (need <= *budget.available) return;
  std::string msg = fmt::format("not enough memory for {}: planned {} ({} bytes) = {}", what, format_bytes(need), need,
                                fmt::join(planned, " + "));
  if (!resident.empty()) msg += fmt::format(" (besides {})", fmt::join(resident, ", "));
  msg += fmt::format(", but {} ({} bytes) is available ({})", format_bytes(*budget.available), *budget.available,
                     budget.source);
  if (!hint.empty()) msg += fmt::format("; {}", hint);
  throw MemoryError(msg);
}

uint64_t peak_rss_bytes() {
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) != 0 || u.ru_maxrss <= 0) return 0;
  return static_cast<uint64_t>(u.ru_maxrss) * 1024;
}

}  // namespace kveval
