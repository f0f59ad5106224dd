// kveval: evaluation of language models on the CPU (oneDNN).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/distributed.hpp"
#include "cli/errors.hpp"
#include "eval/json_input.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"

namespace {

/// Prints the one-line message of `ep` (prefixed with the rank in a
/// distributed run when `name_rank`) and returns its exit code.
int report(std::exception_ptr ep, bool name_rank) {
  auto& d = kveval::cli::Distributed::get();
  fmt::print(stderr, "kveval: {}{}\n", name_rank ? d.where() + ": " : "", kveval::cli::message_of(ep));
  std::fflush(stderr);
  return kveval::cli::exit_code_of(ep);
}

/// The first value given to a comma-separated list option of the subcommand
/// argv[1] that has an empty item (",x", "x,", "x,,y" or ","), as "--dtype:
/// empty item in 'f16,,bf16'"; empty when there is none. CLI11 2.1 drops empty
/// items silently (and a lone "," makes it take the next option as the value),
/// so the raw arguments are checked before parsing. Forms: "--name value ...",
/// "--name=value", "-n value ...", "-nvalue"; nothing after "--".
std::string empty_list_item(CLI::App& app, int argc, char** argv) {
  if (argc < 2) return {};
  auto subs = app.get_subcommands([&](CLI::App* s) { return s->check_name(argv[1]); });
  if (subs.empty()) return {};
  auto bad = [](const std::string& v) {
    return !v.empty() && (v.front() == ',' || v.back() == ',' || v.find(",,") != std::string::npos);
  };
  for (int i = 2; i < argc; ++i) {
    const std::string tok = argv[i];
    if (tok == "--") break;
    if (tok.size() < 2 || tok[0] != '-') continue;
    for (const CLI::Option* o : subs.front()->get_options()) {
      if (o->get_delimiter() != ',') continue;
      std::vector<std::string> values;  // what CLI11 takes: an attached value, or the tokens up to the next option
      bool separate = false;
      for (const auto& l : o->get_lnames()) {
        const std::string flag = "--" + l;
        if (tok == flag) separate = true;
        else if (tok.rfind(flag + "=", 0) == 0) values.push_back(tok.substr(flag.size() + 1));
      }
      for (const auto& sn : o->get_snames()) {
        const std::string flag = "-" + sn;
        if (tok == flag) separate = true;
        else if (tok.size() > flag.size() && tok[1] != '-' && tok.rfind(flag, 0) == 0) values.push_back(tok.substr(flag.size()));
      }
      if (separate)
        for (int j = i + 1; j < argc && (argv[j][0] != '-' || j == i + 1) && std::string(argv[j]) != "--"; ++j)
          values.push_back(argv[j]);
      for (const auto& v : values)
        if (bad(v)) return fmt::format("{}: empty item in '{}' (comma-separated values, none empty)", o->get_name(), v);
    }
  }
  return {};
}

/// For CLI11's "arguments were not expected" error: the first argument after the
/// subcommand that looks like an option ("-x", "--name", "--name=value"; not a
/// negative number) and names none of the subcommand's options, as
/// "unknown option '--dtpye' for 'run' (did you mean '--dtype'?)"; "" when there is none.
std::string unknown_option(CLI::App& app, int argc, char** argv) {
  const auto subs = app.get_subcommands();
  if (subs.empty()) return {};
  CLI::App* sub = subs.front();
  std::vector<std::string> names;
  for (const CLI::Option* o : sub->get_options()) {
    for (const auto& n : o->get_lnames()) names.push_back("--" + n);
    for (const auto& n : o->get_snames()) names.push_back("-" + n);
  }
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") break;
    if (a.size() < 2 || a[0] != '-' || (std::isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.')) continue;
    if (const size_t eq = a.find('='); eq != std::string::npos && a.starts_with("--")) a.resize(eq);
    if (std::find(names.begin(), names.end(), a) != names.end()) continue;
    const std::string hint = kveval::eval::closest(a, names);
    return fmt::format("unknown option '{}' for '{}'{}", a, sub->get_name(),
                       hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint));
  }
  return {};
}

int run_main(int argc, char** argv) {
  using namespace kveval;
  CLI::App app{"kveval: evaluate language models on the CPU with a managed KV cache"};
  app.set_version_flag("--version", fmt::format("kveval {} ({})", version(), git_hash()));
  app.footer(cli::Distributed::built_with_mpi()
                 ? "Built with MPI: `mpirun -np N kveval run SPEC` spreads one evaluation over N ranks (docs/distributed.md)."
                 : "Built without MPI: `kveval run` runs in one process (install libopenmpi-dev and rebuild for mpirun).");
  app.require_subcommand(1);
  cli::Action action;
  cli::add_run_command(app, action);
  cli::add_generate_command(app, action);
  cli::add_bench_command(app, action);
  cli::add_make_model_command(app, action);
  cli::add_tokenize_command(app, action);
  cli::add_chat_template_command(app, action);
  cli::add_tasks_command(app, action);
  cli::refuse_empty_values(app);
  if (argc < 2) {  // `kveval` alone: the help, whose Subcommands list is what to type next, then the error line
    fmt::print(stderr, "{}", app.help());
    fmt::print(stderr, "kveval: error: a subcommand is required (one of the subcommands above)\n");
    return cli::kUsage;
  }
  if (const std::string e = empty_list_item(app, argc, argv); !e.empty()) {
    fmt::print(stderr, "kveval: error: {} (see --help)\n", e);
    return cli::kUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 reports a misspelt subcommand as "A subcommand is required": name it instead
    if (argc > 1 && argv[1][0] != '-' && app.get_subcommands([&](CLI::App* s) { return s->check_name(argv[1]); }).empty()) {
      fmt::print(stderr, "kveval: error: unknown subcommand '{}' (run, generate, bench, make-model, tokenize, chat-template, tasks; see --help)\n", argv[1]);
      return cli::kUsage;
    }
    if (e.get_exit_code() == 0) return app.exit(e) == 0 ? cli::kOk : cli::kUsage;  // --help, --version
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr)
      if (const std::string u = unknown_option(app, argc, argv); !u.empty()) {
        fmt::print(stderr, "kveval: error: {} (see --help)\n", u);
        return cli::kUsage;
      }
    // one line, like every other error ("--threads: expected an integer in [0, 4096], got 65536"), lower-case as
    // they are (CLI11 capitalises a few: "A subcommand is required")
    std::string msg = e.what();
    if (msg.size() > 1 && std::isupper(static_cast<unsigned char>(msg[0])) && !std::isupper(static_cast<unsigned char>(msg[1])))
      msg[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(msg[0])));
    fmt::print(stderr, "kveval: error: {} (see --help)\n", msg);
    return cli::kUsage;
  }
  auto& dist = cli::Distributed::get();
  if (dist.size() > 1 && !app.got_subcommand("run"))
    cli::collectively(dist, [] {
      throw ArgumentError("only `kveval run` runs on several MPI ranks; start the other subcommands without mpirun");
    });
  return action ? action() : cli::kUsage;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kveval::cli;
  // The one catch ladder: every error is one line on stderr and a non-zero exit.
  Distributed* d = nullptr;
  int code = kOk;
  try {
    d = &Distributed::init(argc, argv);
    code = run_main(argc, argv);
  } catch (const CollectiveExit& e) {
    code = e.code;  // another rank reported it
  } catch (const CollectiveFailure& e) {
    report(e.error, e.name_rank);
    code = e.code;
  } catch (...) {
    // One rank failed on its own: the others may be waiting for it, so end them all.
    const bool many = d && d->size() > 1;
    code = report(std::current_exception(), many);
    if (many) d->abort(code);
  }
  // Output lost on the way to stdout (a full disk, `> /dev/full`) is an error,
  // not a success: the tables, the report or the ids are gone.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    const int e = errno;
    if (code == kOk) {
      fmt::print(stderr, "kveval: error: stdout: write failed: {}\n", std::strerror(e != 0 ? e : EIO));
      code = kFailure;
    }
  }
  if (d) d->finalize();
  return code;
}
