// A file truncated under its mapping: reading past the new end raises SIGBUS;
// copy_from_mapping reports it instead of dying.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <vector>

#include "test_support.hpp"
#include "util/sigbus_guard.hpp"

using namespace kveval;

TEST_SUITE("util.sigbus") {
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
    CHECK_FALSE(copy_from_mapping(dst.data(), map, size));
    // twice in a row: the handler was restored and re-installed correctly
    CHECK_FALSE(copy_from_mapping(dst.data(), static_cast<const char*>(map) + 2 * page, page));
    // afterwards the previous SIGBUS disposition is back
    struct sigaction now {};
    REQUIRE(sigaction(SIGBUS, nullptr, &now) == 0);
    CHECK(reinterpret_cast<void*>(now.sa_sigaction) == reinterpret_cast<void*>(before.sa_sigaction));
    CHECK((now.sa_flags & SA_SIGINFO) == (before.sa_flags & SA_SIGINFO));  // glibc adds SA_RESTORER
    ::munmap(map, size);
    ::close(fd);
  }
}
