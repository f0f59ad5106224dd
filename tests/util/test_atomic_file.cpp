// AtomicFile: outputs are written all or nothing; write failures are errors
// naming the path and the reason (never silent, never a half-written target).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <string>

#include "test_support.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"

namespace fs = std::filesystem;
using namespace kveval;
using kveval::test::ScratchDir;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

size_t n_entries(const fs::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

std::string io_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("util.atomic_file") {
  TEST_CASE("writes the bytes, replaces an old file, leaves no temporary file, mode as open() would") {
    ScratchDir d("atomic_ok");
    const fs::path p = d.path / "out.json";
    util::write_file_atomic(p.string(), "first\n");
    CHECK(slurp(p) == "first\n");
    {
      util::AtomicFile f(p.string());
      for (int i = 0; i < 3000; ++i) f.write(std::string(1000, static_cast<char>('a' + i % 26)));  // > 1 MiB buffer
      CHECK(f.bytes() == 3000000u);
      CHECK(slurp(p) == "first\n");  // the target is untouched until commit
      f.commit();
    }
    const std::string s = slurp(p);
    CHECK(s.size() == 3000000u);
    CHECK(s.substr(1000, 3) == "bbb");
    CHECK(n_entries(d.path) == 1);
    mode_t mask = ::umask(0);
    ::umask(mask);
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == (0666 & ~mask));
  }

  TEST_CASE("not committed: the old target stays and the temporary file is removed") {
    ScratchDir d("atomic_abort");
    const fs::path p = d.path / "out.json";
    util::write_file_atomic(p.string(), "old");
    {
      util::AtomicFile f(p.string());
      f.write("new and partial");
    }
    CHECK(slurp(p) == "old");
    CHECK(n_entries(d.path) == 1);
  }

  TEST_CASE("a symbolic link is followed: the file is replaced, the link kept") {
    ScratchDir d("atomic_link");
    util::write_file_atomic((d.path / "real.json").string(), "old");
    fs::create_symlink("real.json", d.path / "link.json");
    util::write_file_atomic((d.path / "link.json").string(), "new");
    CHECK(fs::is_symlink(d.path / "link.json"));
    CHECK(slurp(d.path / "real.json") == "new");
    CHECK(n_entries(d.path) == 2);
  }

  TEST_CASE("a missing directory and a directory target are IoErrors naming the path") {
    ScratchDir d("atomic_bad");
    const std::string missing = (d.path / "nope" / "x.json").string();
    std::string e = io_error([&] { util::write_file_atomic(missing, "x"); });
    CHECK(e.find(missing + ": cannot create a temporary file in") != std::string::npos);
    CHECK(e.find("No such file or directory") != std::string::npos);
    e = io_error([&] { util::write_file_atomic(d.path.string(), "x"); });
    CHECK(e == d.path.string() + ": is a directory");
  }

  TEST_CASE("/dev/full: the write error is reported with its reason") {
    if (!fs::is_character_file("/dev/full")) {
      MESSAGE("skipped: /dev/full is not the full device on this system");
      return;
    }
    const std::string e = io_error([] {
      util::AtomicFile f("/dev/full");
      f.write("{\"x\": 1}\n");
      f.commit();
    });
    CHECK(e == "/dev/full: write failed after 0 bytes: No space left on device");
  }

  TEST_CASE("a file-size limit hit mid-write (as a full disk): error, old target intact, no temporary file") {
    ScratchDir d("atomic_full");
    const fs::path p = d.path / "samples.jsonl";
    util::write_file_atomic(p.string(), "old contents\n");
    // In a child process: RLIMIT_FSIZE makes write(2) fail with EFBIG past 64 KiB.
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::signal(SIGXFSZ, SIG_IGN);
      struct rlimit rl {65536, 65536};
      ::setrlimit(RLIMIT_FSIZE, &rl);
      int code = 1;
      try {
        util::AtomicFile f(p.string());
        for (int i = 0; i < 4000; ++i) f.write(std::string(999, 'x') + "\n");  // 4 MB
        f.commit();
      } catch (const IoError& e) {
        const std::string m = e.what();
        code = m.find(p.string() + ": write failed after 65536 bytes: File too large") == 0 ? 0 : 2;
      } catch (...) {
        code = 3;
      }
      ::_exit(code);
    }
    int st = 0;
    REQUIRE(::waitpid(pid, &st, 0) == pid);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
    CHECK(slurp(p) == "old contents\n");
    CHECK(n_entries(d.path) == 1);
  }

  TEST_CASE("SIGTERM, SIGINT or SIGHUP while temporary files exist: they are removed, the targets kept, the process ends by the signal") {
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
      CAPTURE(sig);
      ScratchDir d("atomic_signal");
      const fs::path a = d.path / "results.json", b = d.path / "samples.jsonl";
      util::write_file_atomic(a.string(), "old results\n");
      pid_t pid = ::fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        std::signal(sig, SIG_DFL);  // not the test runner's crash handler: the default, as from a terminal
        util::AtomicFile fa(a.string()), fb(b.string());
        fa.write("new results\n");
        fb.write(std::string(3 << 20, 'x'));  // past the buffer: bytes in the temporary file
        {
          util::AtomicFile done((d.path / "done.txt").string());  // committed: its slot is free again
          done.write("x");
          done.commit();
        }
        ::raise(sig);
        ::_exit(0);  // not reached: the handler raises the signal again with its previous disposition
      }
      int st = 0;
      REQUIRE(::waitpid(pid, &st, 0) == pid);
      REQUIRE(WIFSIGNALED(st));
      CHECK(WTERMSIG(st) == sig);
      CHECK(slurp(a) == "old results\n");
      CHECK(!fs::exists(b));
      CHECK(slurp(d.path / "done.txt") == "x");
      CHECK(n_entries(d.path) == 2);  // results.json and done.txt: no .tmp file left
    }
  }

  TEST_CASE("a signal the process ignores stays ignored: the write goes on and commits") {
    ScratchDir d("atomic_signal");
    const fs::path a = d.path / "out.txt";
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::signal(SIGHUP, SIG_IGN);  // nohup; a shell's background job ignores SIGINT the same way
      util::AtomicFile f(a.string());
      f.write("kept\n");
      ::raise(SIGHUP);
      f.commit();
      ::_exit(0);
    }
    int st = 0;
    REQUIRE(::waitpid(pid, &st, 0) == pid);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
    CHECK(slurp(a) == "kept\n");
    CHECK(n_entries(d.path) == 1);
  }

  TEST_CASE("same_output_file: one file however it is named; different files are not") {
    ScratchDir d("same_output");
    util::write_file_atomic(d.file("a.json"), "{}\n");
    util::write_file_atomic(d.file("b.json"), "{}\n");
    fs::create_symlink("a.json", d.file("link.json"));
    fs::create_symlink("new.json", d.file("dangling.json"));
    fs::create_hard_link(d.file("a.json"), d.file("hard.json"));
    CHECK(util::same_output_file(d.file("a.json"), d.file("a.json")));
    CHECK(util::same_output_file(d.file("./a.json"), d.path.string() + "/../" + d.path.filename().string() + "/a.json"));
    CHECK(util::same_output_file(d.file("link.json"), d.file("a.json")));
    CHECK(util::same_output_file(d.file("hard.json"), d.file("a.json")));
    CHECK(util::same_output_file(d.file("dangling.json"), d.file("new.json")));  // the file the link would create
    CHECK(util::same_output_file("-", "/dev/stdout"));
    CHECK(!util::same_output_file(d.file("a.json"), d.file("b.json")));
    CHECK(!util::same_output_file(d.file("new.json"), d.file("other.json")));  // neither exists
    CHECK(!util::same_output_file("-", d.file("a.json")));
  }

  TEST_CASE("names_stdout: the names of fd 1, and a file only while fd 1 is open on it") {
    for (const char* p : {"-", "/dev/stdout", "/proc/self/fd/1", "/dev/fd/1"}) CHECK(util::names_stdout(p));
    ScratchDir d("names_stdout");
    util::write_file_atomic(d.file("a.json"), "{}\n");
    CHECK(!util::names_stdout(d.file("a.json")));
    CHECK(!util::names_stdout(d.file("missing.json")));
    std::fflush(stdout);
    const int saved = ::dup(STDOUT_FILENO);
    REQUIRE(saved >= 0);
    const int fd = ::open(d.file("a.json").c_str(), O_WRONLY | O_APPEND);
    REQUIRE(fd >= 0);
    ::dup2(fd, STDOUT_FILENO);
    const bool same = util::names_stdout(d.file("a.json"));
    ::dup2(saved, STDOUT_FILENO);
    ::close(fd);
    ::close(saved);
    CHECK(same);
  }
}
