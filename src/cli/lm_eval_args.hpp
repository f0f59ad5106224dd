#pragma once
// lm-eval's command-line value forms (lm_eval/__main__.py, lm_eval/utils.py)
// for `kveval run --seed` (--gen-kwargs: eval/gen_kwargs.hpp).
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

}  // namespace kveval::cli
