#pragma once
// One evaluation on many processes with MPI (`mpirun -np N kveval run ...`,
// SLURM's `srun`): the only place that includes mpi.h. MPI starts only when a
// launcher started this process (its environment says so: OMPI_COMM_WORLD_SIZE,
// PMI_SIZE or PMIX_RANK); otherwise, or when kveval was built without MPI,
// the world is one rank and nothing here talks to anyone.
#include <exception>
#include <string>

#include "eval/shard.hpp"

namespace kveval::cli {

/// Thrown on the ranks that did not fail at a collective checkpoint: another
/// rank has reported the error; exit with `code` and print nothing.
struct CollectiveExit {
  int code;
};

/// Thrown on the one rank that reports an error seen at a collective checkpoint
/// (the lowest failing rank): print `error` (with rank and host when not every
/// rank failed), exit with `code`; every rank exits cleanly, no MPI_Abort.
struct CollectiveFailure {
  std::exception_ptr error;
  int code;
  bool name_rank;  ///< not every rank failed: say which rank and host
};

/// The process's place in the MPI world (a one-rank world without MPI).
class Distributed {
 public:
  /// Starts MPI when launched by an MPI launcher and built with MPI. Throws
  /// ArgumentError when launched with several ranks by a launcher but built
  /// without MPI (every process would run the whole evaluation). Call once.
  static Distributed& init(int& argc, char**& argv);
  /// The instance made by init(); a one-rank world if init was not called.
  static Distributed& get();
  /// True when this binary was built with MPI.
  static bool built_with_mpi();

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Ranks on this host (MPI_COMM_TYPE_SHARED); 1 without MPI.
  int local_size() const { return local_size_; }
  const std::string& host() const { return host_; }
  /// "rank R (host H)" for messages.
  std::string where() const;

  /// The shard of eval::run_eval (gather to rank 0, collective checkpoint, hosts).
  eval::Shard shard();
  /// Collective checkpoint (see eval::Shard::agree): returns when no rank
  /// failed; otherwise throws CollectiveFailure on the lowest failing rank and
  /// CollectiveExit on every other rank, all with that rank's exit code.
  void agree(std::exception_ptr failed);
  /// Collective: compares every rank's `mine` with rank 0's, item by item
  /// (size and sha256). A rank that differs fails with a SpecError naming the
  /// file, its size and hash, and rank 0's host, size and hash (exit 2; the
  /// checkpoint prefixes the rank and host); then agree() stops every rank.
  void same_inputs(const std::vector<eval::InputFingerprint>& mine);
  /// Rank 0's `code` on every rank (collective).
  int broadcast_exit_code(int code);
  /// Ends every rank with `code` (MPI_Abort); returns only without MPI.
  void abort(int code);
  /// MPI_Finalize (idempotent; nothing without MPI).
  void finalize();

 private:
  Distributed() = default;
  int rank_ = 0, size_ = 1, local_size_ = 1;
  bool mpi_ = false, finalized_ = false;
  std::string host_;
};

/// Runs `step` on every rank and then a collective checkpoint: any exception
/// of any rank stops all ranks the same way (Distributed::agree). One rank: just runs it.
template <class F>
void collectively(Distributed& d, F&& step) {
  std::exception_ptr failed;
  try {
    step();
  } catch (...) {
    if (d.size() == 1) throw;
    failed = std::current_exception();
  }
  if (d.size() > 1) d.agree(failed);
}

}  // namespace kveval::cli
