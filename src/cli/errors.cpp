#include "cli/errors.hpp"

#include <new>
#include <stdexcept>

#include "cli/commands.hpp"
#include "util/error.hpp"
#include "util/input_file.hpp"

namespace kveval::cli {

int exit_code_of(std::exception_ptr ep) {
  if (!ep) return kOk;
  try {
    std::rethrow_exception(ep);
  } catch (const SpecError&) {
    return kUsage;
  } catch (const ArgumentError&) {
    return kUsage;
  } catch (...) {
    return kFailure;
  }
}

std::string read_option_file(const std::string& option, const std::string& path) {
  try {
    return util::read_input_file(path, util::InputKind::Text);
  } catch (const SpecError& e) {
    throw SpecError(option + ": " + e.what());
  }
}

std::string message_of(std::exception_ptr ep) {
  if (!ep) return "";
  try {
    std::rethrow_exception(ep);
  } catch (const Error& e) {
    return std::string("error: ") + e.what();
  } catch (const std::bad_alloc&) {
    return "error: out of memory (an allocation failed beyond what the memory plan counted; docs/engine.md, Memory plan)";
  } catch (const std::exception& e) {
    return std::string("internal error: ") + e.what();
  } catch (...) {
    return "internal error: unknown exception";
  }
}

}  // namespace kveval::cli
