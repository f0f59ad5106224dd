// InputFile: input files are regular files read up to a byte limit; every
// refusal is one SpecError line naming the file (and the limit).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "util/error.hpp"
#include "util/input_file.hpp"

using namespace kveval;
using kveval::test::ScratchDir;

namespace {

std::string write(const ScratchDir& d, const std::string& name, const std::string& text) {
  std::ofstream(d.file(name), std::ios::binary) << text;
  return d.file(name);
}

/// Sets KVEVAL_MAX_INPUT_BYTES for one scope.
struct LimitEnv {
  explicit LimitEnv(const char* v) { ::setenv("KVEVAL_MAX_INPUT_BYTES", v, 1); }
  ~LimitEnv() { ::unsetenv("KVEVAL_MAX_INPUT_BYTES"); }
};

std::string error_of(const std::string& path, util::InputKind kind = util::InputKind::Text) {
  try {
    util::read_input_file(path, kind);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("util.input_file") {
  TEST_CASE("default limits: 64 MiB for text files, 4 GiB for data files; KVEVAL_MAX_INPUT_BYTES replaces both") {
    ::unsetenv("KVEVAL_MAX_INPUT_BYTES");
    CHECK(util::input_limit(util::InputKind::Text) == 67108864u);
    CHECK(util::input_limit(util::InputKind::Data) == 4294967296u);
    {
      LimitEnv env("1000");
      CHECK(util::input_limit(util::InputKind::Text) == 1000u);
      CHECK(util::input_limit(util::InputKind::Data) == 1000u);
    }
    for (const char* bad : {"0", "-1", "1k", "12 ", "99999999999999999999999"}) {
      LimitEnv env(bad);
      CHECK_THROWS_AS(util::input_limit(util::InputKind::Text), ArgumentError);
    }
  }

  TEST_CASE("a file of exactly the limit is read; one byte more is refused naming the file and the limit") {
    ScratchDir d("input_file");
    LimitEnv env("10");
    const std::string ten = write(d, "ten.txt", "0123456789");
    CHECK(util::read_input_file(ten, util::InputKind::Text) == "0123456789");
    const std::string eleven = write(d, "eleven.txt", "0123456789A");
    CHECK(error_of(eleven) == eleven + ": larger than the input file limit of 10 B (10 bytes; set KVEVAL_MAX_INPUT_BYTES to change it)");
    const std::string empty = write(d, "empty.txt", "");
    CHECK(util::read_input_file(empty, util::InputKind::Data).empty());
  }

  TEST_CASE("a file that reports a small size but reads longer (/proc) is refused when the count passes the limit") {
    struct stat st {};
    REQUIRE(::stat("/proc/self/status", &st) == 0);
    REQUIRE(st.st_size == 0);  // procfs reports 0; the text is hundreds of bytes
    LimitEnv env("64");
    CHECK(error_of("/proc/self/status").find("/proc/self/status: larger than the input file limit of 64 B") == 0);
  }

  TEST_CASE("devices, FIFOs, directories and unreadable files are refused before a byte is read") {
    ScratchDir d("input_file");
    CHECK(error_of("/dev/zero") == "/dev/zero: is a character device, not a regular file");
    CHECK(error_of("/dev/null") == "/dev/null: is a character device, not a regular file");
    REQUIRE(::mkfifo(d.file("fifo").c_str(), 0600) == 0);
    CHECK(error_of(d.file("fifo")) == d.file("fifo") + ": is a FIFO, not a regular file");  // opening does not wait for a writer
    CHECK(error_of(d.path.string()) == d.path.string() + ": is a directory, not a regular file");
    CHECK(error_of(d.file("missing")) == d.file("missing") + ": not found");
    // a symbolic link to a regular file is read, one to a device refused
    std::filesystem::create_symlink("/dev/zero", d.file("zero_link"));
    CHECK(error_of(d.file("zero_link")) == d.file("zero_link") + ": is a character device, not a regular file");
    // /proc/self/mem is a regular file that cannot be read at offset 0
    CHECK(error_of("/proc/self/mem") == "/proc/self/mem: read error after 0 bytes: Input/output error");
  }

  TEST_CASE("getline: lines without '\\n', a last line without one, lines longer than the read buffer") {
    ScratchDir d("input_file");
    const std::string longline(3 * 1024 * 1024 + 17, 'x');
    const std::string p = write(d, "lines.jsonl", "a\r\n\nbc\n" + longline + "\nlast");
    util::InputFile f(p, util::InputKind::Data);
    std::vector<std::string> lines;
    std::string line;
    while (f.getline(line)) lines.push_back(line);
    REQUIRE(lines.size() == 5);
    CHECK(lines[0] == "a\r");
    CHECK(lines[1].empty());
    CHECK(lines[2] == "bc");
    CHECK(lines[3] == longline);
    CHECK(lines[4] == "last");
    CHECK(!f.getline(line));
    // over the limit by its size: refused on opening; by what it reads: on the line that passes it
    LimitEnv env("64");
    CHECK_THROWS_AS(util::InputFile(p, util::InputKind::Data), SpecError);
    util::InputFile proc("/proc/self/status", util::InputKind::Data);
    CHECK_THROWS_WITH_AS(
        [&] {
          while (proc.getline(line)) {
          }
        }(),
        "/proc/self/status: larger than the input file limit of 64 B (64 bytes; set KVEVAL_MAX_INPUT_BYTES to change it)",
        SpecError);
  }

  TEST_CASE("read_all: files around the read sizes, and a file that grows after it was opened, are read whole") {
    ScratchDir d("input_file");
    for (size_t n : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{(1 << 20) + 1}}) {
      std::string text(n, 'a');
      for (size_t i = 0; i < n; ++i) text[i] = static_cast<char>('a' + i % 26);
      CHECK(util::read_input_file(write(d, "n.txt", text), util::InputKind::Text) == text);
    }
    const std::string p = write(d, "grows.txt", "first\n");
    util::InputFile f(p, util::InputKind::Text);
    std::ofstream(p, std::ios::app) << std::string(10000, 'z');
    CHECK(f.read_all() == "first\n" + std::string(10000, 'z'));
  }
}
