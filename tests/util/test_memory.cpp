// The memory budget: parsers of /proc/meminfo, /proc/self/cgroup and the
// cgroup v1/v2 files on fake files, the smallest source winning, and the
// one-line refusal of a plan that does not fit.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_support.hpp"
#include "util/error.hpp"
#include "util/memory.hpp"

using namespace kveval;
namespace fs = std::filesystem;

namespace {

void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

const char* kMeminfo =
    "MemTotal:       24684000 kB\nMemFree:        20000000 kB\nMemAvailable:   22016000 kB\nBuffers:  1 kB\n";

/// Files of a machine with 22016000 kB available and no cgroup limit, no simulated limit.
MemoryFiles fake(const test::ScratchDir& d) {
  MemoryFiles f;
  f.meminfo = (d.path / "meminfo").string();
  f.proc_cgroup = (d.path / "cgroup").string();
  f.cgroup_root = (d.path / "sys").string();
  f.proc_status = (d.path / "status").string();
  f.env_limit = "";  // not the environment's
  f.address_space_limit = UINT64_MAX;  // not the process's ulimit -v
  put(f.meminfo, kMeminfo);
  put(f.proc_status, "Name:\tkveval\nVmRSS:\t   10240 kB\n");
  return f;
}

}  // namespace

TEST_SUITE("util.memory") {
  TEST_CASE("MemAvailable in bytes; missing or malformed gives nothing") {
    test::ScratchDir d("mem_meminfo");
    put(d.path / "a", kMeminfo);
    CHECK(read_meminfo_available((d.path / "a").string()) == uint64_t{22016000} * 1024);
    put(d.path / "b", "MemTotal: 5 kB\n");
    CHECK_FALSE(read_meminfo_available((d.path / "b").string()));
    put(d.path / "c", "MemAvailable: lots kB\n");
    CHECK_FALSE(read_meminfo_available((d.path / "c").string()));
    CHECK_FALSE(read_meminfo_available((d.path / "nowhere").string()));
  }

  TEST_CASE("cgroup limits: v2 'max' and v1's huge value mean no limit") {
    test::ScratchDir d("mem_limits");
    put(d.path / "v2max", "max\n");
    put(d.path / "v2", "2147483648\n");
    put(d.path / "v1", "9223372036854771712\n");
    put(d.path / "bad", "12abc\n");
    CHECK_FALSE(read_cgroup_limit((d.path / "v2max").string()));
    CHECK(read_cgroup_limit((d.path / "v2").string()) == uint64_t{2147483648});
    CHECK_FALSE(read_cgroup_limit((d.path / "v1").string()));
    CHECK_FALSE(read_cgroup_limit((d.path / "bad").string()));
    put(d.path / "stat", "anon 5\ninactive_file 4096\nactive_file 1\n");
    CHECK(read_keyed_value((d.path / "stat").string(), "inactive_file") == uint64_t{4096});
    CHECK_FALSE(read_keyed_value((d.path / "stat").string(), "file"));
  }

  TEST_CASE("/proc/self/cgroup: the v2 path and the v1 memory controller's path") {
    test::ScratchDir d("mem_proc_cgroup");
    put(d.path / "hybrid", "9:name=systemd:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/x\n0::/\n");
    CgroupPaths h = read_proc_cgroup((d.path / "hybrid").string());
    CHECK(h.v1_memory == std::string("/process_api/abc"));
    CHECK(h.v2 == std::string("/"));
    put(d.path / "v2", "0::/user.slice/run:42.scope\n");
    CgroupPaths v = read_proc_cgroup((d.path / "v2").string());
    CHECK(v.v2 == std::string("/user.slice/run:42.scope"));
    CHECK_FALSE(v.v1_memory);
    put(d.path / "multi", "5:cpuset,memory,blkio:/job\n");
    CHECK(read_proc_cgroup((d.path / "multi").string()).v1_memory == std::string("/job"));
  }

  TEST_CASE("no cgroup limit: MemAvailable is the budget") {
    test::ScratchDir d("mem_none");
    MemoryFiles f = fake(d);
    put(f.proc_cgroup, "0::/\n");
    MemoryBudget b = memory_budget(f);
    REQUIRE(b.available);
    CHECK(*b.available == uint64_t{22016000} * 1024);
    CHECK(b.source.find("MemAvailable") != std::string::npos);
  }

  TEST_CASE("cgroup v2: memory.max less the working set; the tightest ancestor wins") {
    test::ScratchDir d("mem_v2");
    MemoryFiles f = fake(d);
    put(f.proc_cgroup, "0::/job/step\n");
    const fs::path root = d.path / "sys";
    put(root / "cgroup.controllers", "cpu memory\n");
    // the job: 2 GiB, 1 GiB charged of which 256 MiB is inactive page cache
    put(root / "job/memory.max", "2147483648\n");
    put(root / "job/memory.current", "1073741824\n");
    put(root / "job/memory.stat", "anon 1\ninactive_file 268435456\n");
    // the step itself: no limit
    put(root / "job/step/memory.max", "max\n");
    put(root / "job/step/memory.current", "1000\n");
    MemoryBudget b = memory_budget(f);
    REQUIRE(b.available);
    CHECK(*b.available == uint64_t{2147483648} - (uint64_t{1073741824} - 268435456));
    CHECK(b.source.find("memory.max") != std::string::npos);
    CHECK(b.source.find("job/memory.max") != std::string::npos);
    // a step limit tighter than its parent's wins
    put(root / "job/step/memory.max", "104857600\n");
    CHECK(*memory_budget(f).available == 104857600 - 1000);
  }

  TEST_CASE("cgroup v2 mounted at unified/ (hybrid hierarchy)") {
    test::ScratchDir d("mem_v2_hybrid");
    MemoryFiles f = fake(d);
    put(f.proc_cgroup, "4:memory:/\n0::/a\n");
    const fs::path u = d.path / "sys" / "unified";
    put(u / "cgroup.controllers", "memory\n");
    put(u / "a/memory.max", "536870912\n");
    put(u / "a/memory.current", "0\n");
    CHECK(*memory_budget(f).available == 536870912);
  }

  TEST_CASE("cgroup v1: the smaller of limit_in_bytes and hierarchical_memory_limit, less usage") {
    test::ScratchDir d("mem_v1");
    MemoryFiles f = fake(d);
    put(f.proc_cgroup, "4:memory:/process_api/abc\n0::/\n");
    const fs::path m = d.path / "sys" / "memory" / "process_api" / "abc";
    put(m / "memory.limit_in_bytes", "9223372036854771712\n");
    put(m / "memory.usage_in_bytes", "300000000\n");
    put(m / "memory.stat", "cache 1\nhierarchical_memory_limit 2147483648\ntotal_inactive_file 100000000\n");
    MemoryBudget b = memory_budget(f);
    REQUIRE(b.available);
    CHECK(*b.available == uint64_t{2147483648} - 200000000);
    CHECK(b.source.find("cgroup v1") != std::string::npos);
    // no limit anywhere: MemAvailable
    put(m / "memory.stat", "hierarchical_memory_limit 9223372036854771712\n");
    CHECK(*memory_budget(f).available == uint64_t{22016000} * 1024);
  }

  TEST_CASE("KVEVAL_MEMORY_LIMIT_BYTES simulates a limit less the resident set; garbage is refused") {
    test::ScratchDir d("mem_env");
    MemoryFiles f = fake(d);
    put(f.proc_cgroup, "0::/\n");
    f.env_limit = "104857600";
    MemoryBudget b = memory_budget(f);
    CHECK(*b.available == 104857600 - 10240 * 1024);
    CHECK(b.source.find("KVEVAL_MEMORY_LIMIT_BYTES") != std::string::npos);
    f.env_limit = "2G";
    CHECK_THROWS_WITH_AS(memory_budget(f), doctest::Contains("KVEVAL_MEMORY_LIMIT_BYTES: expected a number of bytes, got '2G'"),
                         ArgumentError);
  }

  TEST_CASE("ulimit -v (RLIMIT_AS) less the mapped size, when it is the tightest") {
    test::ScratchDir d("mem_as");
    MemoryFiles f = fake(d);
    put(f.proc_cgroup, "0::/\n");
    put(f.proc_status, "Name:\tkveval\nVmSize:\t  204800 kB\nVmRSS:\t   10240 kB\n");
    f.address_space_limit = uint64_t{256} << 20;  // 256 MiB, 200 MiB of it mapped
    MemoryBudget b = memory_budget(f);
    CHECK(*b.available == (uint64_t{256} << 20) - uint64_t{204800} * 1024);
    CHECK(b.source == "ulimit -v (RLIMIT_AS) 256.0 MiB less 200.0 MiB mapped");
    f.address_space_limit = uint64_t{1} << 50;  // looser than MemAvailable: MemAvailable wins
    CHECK(*memory_budget(f).available == uint64_t{22016000} * 1024);
    f.address_space_limit = uint64_t{100} << 20;  // less than mapped: nothing left
    CHECK(*memory_budget(f).available == 0);
  }

  TEST_CASE("nothing readable: no budget and no check") {
    test::ScratchDir d("mem_nothing");
    MemoryFiles f;
    f.meminfo = (d.path / "x").string();
    f.proc_cgroup = (d.path / "y").string();
    f.cgroup_root = (d.path / "z").string();
    f.env_limit = "";
    f.address_space_limit = UINT64_MAX;
    MemoryBudget b = memory_budget(f);
    CHECK_FALSE(b.available);
    MemoryPart p{"weights", uint64_t{1} << 60};
    CHECK_NOTHROW(check_memory_plan("x", std::span(&p, 1), b));
  }

  TEST_CASE("a plan that does not fit: one line with every part, the total and what is available") {
    MemoryBudget b{uint64_t{2} << 30, "cgroup memory.max 2.0 GiB less 0 B in use"};
    std::vector<MemoryPart> parts = {{"weights", 1134592, true},
                                     {"KV cache", uint64_t{10737418240}},
                                     {"activations", 134217728}};
    try {
      check_memory_plan("the run", parts, b, "lower batch_size");
      FAIL("no MemoryError");
    } catch (const MemoryError& e) {
      const std::string m = e.what();
      CHECK(m.find('\n') == std::string::npos);
      CHECK(m.find("not enough memory for the run: planned 10.1 GiB (10871635968 bytes)") != std::string::npos);
      CHECK(m.find("KV cache 10.0 GiB (10737418240 bytes)") != std::string::npos);
      CHECK(m.find("activations 128.0 MiB (134217728 bytes)") != std::string::npos);
      CHECK(m.find("weights 1.1 MiB already loaded") != std::string::npos);
      CHECK(m.find("but 2.0 GiB (2147483648 bytes) is available (cgroup memory.max") != std::string::npos);
      CHECK(m.find("; lower batch_size") != std::string::npos);
    }
    // exactly the budget fits; resident parts do not count
    std::vector<MemoryPart> fits = {{"weights", uint64_t{1} << 40, true}, {"KV cache", uint64_t{2} << 30}};
    CHECK_NOTHROW(check_memory_plan("the run", fits, b));
  }

  TEST_CASE("format_bytes") {
    CHECK(format_bytes(0) == "0 B");
    CHECK(format_bytes(1023) == "1023 B");
    CHECK(format_bytes(1536) == "1.5 KiB");
    CHECK(format_bytes(uint64_t{10} << 30) == "10.0 GiB");
  }

  TEST_CASE("this machine: a budget is found and is below the physical memory") {
    MemoryFiles f;
    f.env_limit = "";
    MemoryBudget b = memory_budget(f);
    REQUIRE(b.available);
    auto total = read_keyed_value("/proc/meminfo", "MemTotal");
    REQUIRE(total);
    CHECK(*b.available <= *total);
    CHECK(*b.available > 0);
  }
}
