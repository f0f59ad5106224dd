#pragma once
// lm-eval's command-line value forms (lm_eval/__main__.py, lm_eval/utils.py)
// for `kveval run --seed` and `--gen-kwargs`.
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kveval::cli {

/// lm-eval's four seeds: python `random`, numpy, torch, few-shot sampling
/// (std::nullopt = "None": not set).
using Seeds = std::array<std::optional<int64_t>, 4>;

/// lm-eval's --seed (_int_or_none_list_arg_type(3, 4, "0,1234,1234,1234")):
/// one value sets all four; 3 or 4 comma-separated values, each an integer or
/// "None" (any case, spaces around allowed), the missing fourth taken from the
/// default 1234. Throws ArgumentError "--seed: ..." for any other count, a
/// value that is not an integer or None, or a negative seed.
Seeds parse_seed_arg(const std::string& value);

/// lm-eval's simple_parse_args_string + handle_arg_string for --gen-kwargs
/// "k=v,k2=v2": split on ',' (empty items skipped), each at its first '=' (the
/// rest, '=' included, is the value); "true"/"false" (any case) become booleans,
/// all-digit values integers, values Python's float() reads floats, others
/// strings. A later key replaces an earlier one. Throws ArgumentError
/// "--gen-kwargs: ..." for an item without a key.
nlohmann::json parse_gen_kwargs_arg(const std::string& value);

}  // namespace kveval::cli
