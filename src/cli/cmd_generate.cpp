// Placeholder: replaced by the real subcommand.
#include "cli/commands.hpp"
namespace kveval::cli {
void add_generate_command(CLI::App& app, Action& action) { (void)app; (void)action; }
}  // namespace kveval::cli
