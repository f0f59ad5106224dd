// kveval: evaluation of language models on the CPU (oneDNN).
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"

int main(int argc, char** argv) {
  using namespace kveval;
  CLI::App app{"kveval: evaluate language models on the CPU with a managed KV cache"};
  app.set_version_flag("--version", fmt::format("kveval {} ({})", version(), git_hash()));
  app.require_subcommand(1);
  cli::Action action;
  cli::add_run_command(app, action);
  cli::add_generate_command(app, action);
  cli::add_bench_command(app, action);
  cli::add_make_model_command(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 reports a misspelt subcommand as "A subcommand is required": name it instead
    if (argc > 1 && argv[1][0] != '-' && app.get_subcommands([&](CLI::App* s) { return s->check_name(argv[1]); }).empty()) {
      fmt::print(stderr, "kveval: error: unknown subcommand '{}' (run, generate, bench, make-model; see --help)\n", argv[1]);
      return cli::kUsage;
    }
    return app.exit(e) == 0 ? cli::kOk : cli::kUsage;
  }
  // The one catch ladder: every error is one line on stderr and a non-zero exit.
  try {
    return action ? action() : cli::kUsage;
  } catch (const SpecError& e) {
    fmt::print(stderr, "kveval: error: {}\n", e.what());
    return cli::kUsage;
  } catch (const ArgumentError& e) {
    fmt::print(stderr, "kveval: error: {}\n", e.what());
    return cli::kUsage;
  } catch (const FormatError& e) {
    fmt::print(stderr, "kveval: error: {}\n", e.what());
    return cli::kFailure;
  } catch (const Error& e) {
    fmt::print(stderr, "kveval: error: {}\n", e.what());
    return cli::kFailure;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "kveval: error: out of memory\n");
    return cli::kFailure;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kveval: internal error: {}\n", e.what());
    return cli::kFailure;
  }
}
