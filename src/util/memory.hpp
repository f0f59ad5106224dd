#pragma once
// How much memory the process may still use, and the check that compares a
// plan (weights, KV cache, activations) with it BEFORE anything is allocated,
// so a run that cannot fit is refused with one line instead of being
// OOM-killed. Sources (the smallest wins):
//   - MemAvailable of /proc/meminfo (Linux's estimate of memory available
//     without swapping, Documentation/filesystems/proc.rst);
//   - cgroup v2: for the process's cgroup and each ancestor, memory.max minus
//     its working set (memory.current - inactive_file of memory.stat);
//   - cgroup v1: min(memory.limit_in_bytes, hierarchical_memory_limit) minus
//     (memory.usage_in_bytes - total_inactive_file);
//   - KVEVAL_MEMORY_LIMIT_BYTES (for tests: simulates a limit of that many
//     bytes for the whole process) minus the process's VmRSS.
// The working set (usage less inactive file cache) is the figure the kubelet
// and `docker stats` use: inactive page cache is reclaimed before the OOM killer runs.
// All parsers take the file path so tests can feed fake files.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kveval {

/// What the process may still allocate.
struct MemoryBudget {
  std::optional<uint64_t> available;  ///< bytes; nullopt when no source could be read (no check is made)
  std::string source;                 ///< what set `available`, e.g. "cgroup v1 limit 2.0 GiB less 31.4 MiB in use"
};

/// MemAvailable of a /proc/meminfo-format file, in bytes ("MemAvailable:  123 kB").
/// nullopt when the file or the line is missing or malformed.
std::optional<uint64_t> read_meminfo_available(const std::string& path);

/// A cgroup limit file: v2 memory.max ("max" or a byte count) or v1
/// memory.limit_in_bytes (a byte count; values >= 2^62 mean "no limit", as the
/// kernel writes PAGE_COUNTER_MAX). nullopt for no limit or an unreadable file.
std::optional<uint64_t> read_cgroup_limit(const std::string& path);

/// A file holding one unsigned decimal number (memory.current,
/// memory.usage_in_bytes); nullopt when unreadable or malformed.
std::optional<uint64_t> read_uint_file(const std::string& path);

/// The value of `key` in a "key value" per line file (memory.stat,
/// /proc/self/status with its "kB" unit honoured); nullopt when absent.
std::optional<uint64_t> read_keyed_value(const std::string& path, std::string_view key);

/// The process's cgroups from a /proc/self/cgroup-format file: the v2 path
/// (line "0::/path") and the v1 memory controller's path (line "N:...memory...:/path").
struct CgroupPaths {
  std::optional<std::string> v2;
  std::optional<std::string> v1_memory;
};
CgroupPaths read_proc_cgroup(const std::string& path);

/// Files memory_budget() reads; tests point them at fake trees.
struct MemoryFiles {
  std::string meminfo = "/proc/meminfo";
  std::string proc_cgroup = "/proc/self/cgroup";
  std::string cgroup_root = "/sys/fs/cgroup";  ///< v2 at the root or in unified/; v1 memory in memory/
  std::string proc_status = "/proc/self/status";
  /// The simulated limit (KVEVAL_MEMORY_LIMIT_BYTES); read from the environment when nullopt; "" = none.
  std::optional<std::string> env_limit;
  /// The address-space limit (`ulimit -v`, RLIMIT_AS) in bytes, less the
  /// process's VmSize; read with getrlimit when nullopt; UINT64_MAX = none.
  std::optional<uint64_t> address_space_limit;
};

/// Reads every source above and returns the smallest. Throws ArgumentError
/// when KVEVAL_MEMORY_LIMIT_BYTES is set but is not a decimal byte count.
MemoryBudget memory_budget(const MemoryFiles& files = {});

/// One part of a memory plan.
struct MemoryPart {
  std::string name;       ///< "weights", "KV cache", "activations", ...
  uint64_t bytes = 0;
  bool resident = false;  ///< already allocated: named in messages, not counted against the budget
};

/// Throws MemoryError when the parts not yet resident need more than
/// `budget.available`. The message is one line: `what`, the planned bytes of
/// each part, the total, the bytes available and their source, then `hint`.
/// No check is made when the budget is unknown.
void check_memory_plan(std::string_view what, std::span<const MemoryPart> parts, const MemoryBudget& budget,
                       std::string_view hint = {});

/// This process's peak resident set so far, in bytes (getrusage's ru_maxrss,
/// which Linux counts in KiB); 0 when the kernel does not say.
uint64_t peak_rss_bytes();

/// Bytes for people: "512 B", "1.5 KiB", "10.0 GiB" (binary units, one decimal).
std::string format_bytes(uint64_t bytes);

}  // namespace kveval
