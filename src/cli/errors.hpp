#pragma once
// The CLI's one mapping from exceptions to messages and exit codes (used by
// main's catch ladder and by the distributed checkpoints, so that every rank
// agrees on the exit code of an error another rank saw).
#include <exception>
#include <string>

namespace kveval::cli {

/// Exit code of an exception (see Exit in commands.hpp): SpecError and
/// ArgumentError -> kUsage; other kveval::Error, std::bad_alloc and anything
/// else -> kFailure. A nullptr gives kOk.
int exit_code_of(std::exception_ptr ep);

/// The one-line message for an exception: "error: <what>", "error: out of
/// memory" or "internal error: <what>" (library exceptions that escaped).
std::string message_of(std::exception_ptr ep);

}  // namespace kveval::cli
