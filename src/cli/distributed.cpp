#include "cli/distributed.hpp"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "cli/errors.hpp"
#include "util/error.hpp"

#ifdef KVEVAL_HAVE_MPI
#include <mpi.h>
#endif

namespace kveval::cli {

namespace {

/// Ranks the launcher says it started (0 when no MPI launcher started us).
int launcher_world_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"}) {
    const char* v = std::getenv(var);
    if (v && *v) return std::max(1, std::atoi(v));
  }
  return std::getenv("PMIX_RANK") ? 1 : 0;
}

Distributed* instance = nullptr;

#ifdef KVEVAL_HAVE_MPI
void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw Error(fmt::format("MPI: {}: {}", what, std::string(msg, static_cast<size_t>(len))));
  }
}
#endif

}  // namespace

bool Distributed::built_with_mpi() {
#ifdef KVEVAL_HAVE_MPI
  return true;
#else
  return false;
#endif
}

Distributed& Distributed::get() {
  if (!instance) {
    instance = new Distributed();
    char h[256] = {};
    if (gethostname(h, sizeof h - 1) == 0) instance->host_ = h;
  }
  return *instance;
}

Distributed& Distributed::init(int& argc, char**& argv) {
  Distributed& d = get();
  const int launched = launcher_world_size();
#ifdef KVEVAL_HAVE_MPI
  if (launched > 0 && !d.mpi_) {
    int provided = 0;
    check(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    d.mpi_ = true;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check(MPI_Comm_rank(MPI_COMM_WORLD, &d.rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &d.size_), "MPI_Comm_size");
    MPI_Comm local;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d.rank_, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
    MPI_Comm_size(local, &d.local_size_);
    MPI_Comm_free(&local);
  }
#else
  (void)argc;
  (void)argv;
  if (launched > 1)
    throw ArgumentError(fmt::format("started by an MPI launcher with {} ranks, but this kveval was built without MPI "
                                    "(install libopenmpi-dev and rebuild); refusing to run the whole evaluation {} times",
                                    launched, launched));
#endif
  return d;
}

std::string Distributed::where() const { return fmt::format("rank {} ({})", rank_, host_.empty() ? "?" : host_); }

void Distributed::agree(std::exception_ptr failed) {
  if (size_ == 1) {
    if (failed) std::rethrow_exception(failed);
    return;
  }
#ifdef KVEVAL_HAVE_MPI
  int mine = failed ? 1 : 0, n_failed = 0;
  check(MPI_Allreduce(&mine, &n_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  if (n_failed == 0) return;
  int cand = failed ? rank_ : size_, first = 0;
  check(MPI_Allreduce(&cand, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  int code = rank_ == first ? exit_code_of(failed) : 0;
  check(MPI_Bcast(&code, 1, MPI_INT, first, MPI_COMM_WORLD), "MPI_Bcast");
  if (rank_ == first) throw CollectiveFailure{failed, code, n_failed < size_};
  throw CollectiveExit{code};
#else
  if (failed) std::rethrow_exception(failed);
#endif
}

#ifdef KVEVAL_HAVE_MPI
namespace {

/// "what\tpath\tsize\tsha256\n" per input, rank 0's host first: the bytes rank 0 broadcasts.
std::string encode_inputs(const std::string& host, const std::vector<eval::InputFingerprint>& v) {
  std::string s = host + "\n";
  auto one_line = [](std::string x) {
    std::replace(x.begin(), x.end(), '\n', ' ');
    return x;
  };
  for (const auto& f : v) s += fmt::format("{}\t{}\t{}\t{}\n", one_line(f.what), one_line(f.path), f.size, f.sha256);
  return s;
}

/// The first difference between this rank's inputs and rank 0's (encoded), as an error; nullptr when none.
std::exception_ptr differ_from_rank0(const std::string& rank0, const std::vector<eval::InputFingerprint>& mine) {
  std::vector<std::string> lines;
  for (size_t at = 0; at < rank0.size();) {
    const size_t nl = rank0.find('\n', at);
    lines.push_back(rank0.substr(at, nl - at));
    at = nl == std::string::npos ? rank0.size() : nl + 1;
  }
  const std::string host0 = lines.empty() ? "?" : lines[0];
  for (size_t i = 0; i < mine.size() || i + 1 < lines.size(); ++i) {
    if (i >= mine.size() || i + 1 >= lines.size())
      return std::make_exception_ptr(SpecError(fmt::format(
          "this rank has {} input files, rank 0 ({}) has {}; every rank must read the same spec, data and model",
          mine.size(), host0, lines.size() - 1)));
    const std::string& l = lines[i + 1];
    const size_t t3 = l.rfind('\t'), t2 = l.rfind('\t', t3 - 1);
    const std::string size0 = l.substr(t2 + 1, t3 - t2 - 1), sha0 = l.substr(t3 + 1);
    const auto& f = mine[i];
    if (std::to_string(f.size) != size0 || f.sha256 != sha0)
      return std::make_exception_ptr(SpecError(fmt::format(
          "{} {} differs between ranks: sha256 {} ({} bytes) here, sha256 {} ({} bytes) on rank 0 ({}); every rank "
          "must read the same spec, data and model",
          f.what, f.path, f.sha256, f.size, sha0, size0, host0)));
  }
  return nullptr;
}

}  // namespace
#endif

void Distributed::same_inputs(const std::vector<eval::InputFingerprint>& mine) {
  if (size_ == 1) return;
#ifdef KVEVAL_HAVE_MPI
  std::string bytes = rank_ == 0 ? encode_inputs(host_, mine) : std::string();
  unsigned long long n = bytes.size();
  check(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD), "MPI_Bcast");
  if (n > static_cast<unsigned long long>(INT_MAX)) throw Error("MPI: the input fingerprints exceed 2 GiB");
  bytes.resize(static_cast<size_t>(n));
  check(MPI_Bcast(bytes.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
  agree(rank_ == 0 ? nullptr : differ_from_rank0(bytes, mine));
#else
  (void)mine;
#endif
}

int Distributed::broadcast_exit_code(int code) {
#ifdef KVEVAL_HAVE_MPI
  if (size_ > 1) check(MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
#endif
  return code;
}

eval::Shard Distributed::shard() {
  eval::Shard s;
  s.rank = rank_;
  s.size = size_;
  if (size_ == 1) {
    s.hosts = {host_};
    return s;
  }
#ifdef KVEVAL_HAVE_MPI
  // host names of every rank, gathered once (fixed-size records)
  std::vector<char> mine(256, '\0'), all(rank_ == 0 ? 256 * static_cast<size_t>(size_) : 0);
  host_.copy(mine.data(), 255);
  check(MPI_Gather(mine.data(), 256, MPI_CHAR, all.data(), 256, MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Gather");
  for (int r = 0; rank_ == 0 && r < size_; ++r) s.hosts.emplace_back(all.data() + 256 * static_cast<size_t>(r));
  const int size = size_, rank = rank_;
  s.gather = [size, rank](const std::string& bytes) {
    if (bytes.size() > static_cast<size_t>(INT_MAX))
      throw Error(fmt::format("MPI: a rank report of {} bytes exceeds what one MPI_Gatherv can carry", bytes.size()));
    int n = static_cast<int>(bytes.size());
    std::vector<int> counts(rank == 0 ? static_cast<size_t>(size) : 0), displs;
    check(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
    std::vector<std::string> out;
    std::string buf;
    if (rank == 0) {
      long long total = 0;
      for (int c : counts) displs.push_back(static_cast<int>(total)), total += c;
      if (total > INT_MAX) throw Error(fmt::format("MPI: gathered reports of {} bytes exceed 2 GiB", total));
      buf.resize(static_cast<size_t>(total));
    }
    check(MPI_Gatherv(bytes.data(), n, MPI_CHAR, buf.data(), counts.data(), displs.data(), MPI_CHAR, 0,
                      MPI_COMM_WORLD),
          "MPI_Gatherv");
    for (int r = 0; rank == 0 && r < size; ++r)
      out.push_back(buf.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                               static_cast<size_t>(counts[static_cast<size_t>(r)])));
    return out;
  };
  s.agree = [this](std::exception_ptr ep) { agree(ep); };
  s.same_inputs = [this](const std::vector<eval::InputFingerprint>& v) { same_inputs(v); };
#endif
  return s;
}

void Distributed::abort(int code) {
#ifdef KVEVAL_HAVE_MPI
  if (mpi_ && !finalized_ && size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
#else
  (void)code;
#endif
}

void Distributed::finalize() {
#ifdef KVEVAL_HAVE_MPI
  if (mpi_ && !finalized_) {
    finalized_ = true;
    MPI_Finalize();
  }
#endif
}

}  // namespace kveval::cli
