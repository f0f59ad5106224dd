// A file truncated under its mapping: reading past the new end raises SIGBUS;
// copy_from_mapping / read_catching_sigbus report it instead of dying, in any thread.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "test_support.hpp"
#include "util/sigbus_guard.hpp"

using namespace kveval;

TEST_SUITE("util.sigbus_guard") {
  TEST_CASE("a copy from a mapping whose file shrank returns false; a good copy returns true") {
    test::ScratchDir d("sigbus");
    const std::string path = (d.path / "f.bin").string();
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t size = 4 * page;
    {
      std::vector<char> bytes(size, 'x');
      FILE* f = std::fopen(path.c_str(), "wb");
      REQUIRE(f);
      REQUIRE(std::fwrite(bytes.data(), 1, size, f) == size);
      std::fclose(f);
    }
    int fd = ::open(path.c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    REQUIRE(map != MAP_FAILED);
    std::vector<char> dst(size);
    struct sigaction before {};
    REQUIRE(sigaction(SIGBUS, nullptr, &before) == 0);
    CHECK(copy_from_mapping(dst.data(), map, size));
    CHECK(dst[size - 1] == 'x');
    // another process truncates the file to one page: pages 1..3 are now past EOF
    REQUIRE(::ftruncate(fd, static_cast<off_t>(page)) == 0);
    CHECK(copy_from_mapping(dst.data(), map, page));  // still inside the file
    CHECK(dst[page - 1] == 'x');
    CHECK_FALSE(copy_from_mapping(dst.data(), map, size));
    CHECK(dst[0] == 'x');
    CHECK(dst[page] == 0);  // the pages past the end were read as zeros
    CHECK(dst[size - 1] == 0);
    // a fault in another thread (loads convert tensors with OpenMP threads) is absorbed too
    std::vector<char> dst2(page, 'y');
    const std::string path2 = (d.path / "g.bin").string();
    {
      std::vector<char> bytes(size, 'z');
      FILE* f = std::fopen(path2.c_str(), "wb");
      REQUIRE(f);
      REQUIRE(std::fwrite(bytes.data(), 1, size, f) == size);
      std::fclose(f);
    }
    int fd2 = ::open(path2.c_str(), O_RDWR);
    REQUIRE(fd2 >= 0);
    void* map2 = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd2, 0);
    REQUIRE(map2 != MAP_FAILED);
    REQUIRE(::ftruncate(fd2, 0) == 0);
    const bool ok = read_catching_sigbus(map2, size, [&] {
      std::thread t([&] { std::memcpy(dst2.data(), static_cast<const char*>(map2) + 3 * page, page); });
      t.join();
    });
    CHECK_FALSE(ok);
    CHECK(dst2[0] == 0);
    // an exception thrown after a fault reports the fault; without a fault it propagates
    REQUIRE(::ftruncate(fd2, 0) == 0);
    CHECK_FALSE(read_catching_sigbus(map2, size, [&] {
      volatile char c = static_cast<const char*>(map2)[page];  // page 1: not replaced yet
      (void)c;
      throw std::runtime_error("garbage in");
    }));
    CHECK_THROWS_AS(read_catching_sigbus(map2, size, [] { throw std::runtime_error("own error"); }), std::runtime_error);
    ::munmap(map2, size);
    ::close(fd2);
    // afterwards the previous SIGBUS disposition is back
    struct sigaction now {};
    REQUIRE(sigaction(SIGBUS, nullptr, &now) == 0);
    CHECK(reinterpret_cast<void*>(now.sa_sigaction) == reinterpret_cast<void*>(before.sa_sigaction));
    CHECK((now.sa_flags & SA_SIGINFO) == (before.sa_flags & SA_SIGINFO));  // glibc adds SA_RESTORER
    ::munmap(map, size);
    ::close(fd);
  }
}
