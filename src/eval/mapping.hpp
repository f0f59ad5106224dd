#pragma once
// doc_to_* mappings: a field name or a `{{field}}` template resolved against one
// JSON document.
#include <string>

#include <nlohmann/json.hpp>

namespace kveval::eval {

/// Resolves a doc_to_* mapping against one document: a string without "{{"
/// is a field name (dotted for nested objects) and yields the field's value;
/// exactly "{{field}}" yields the raw value; any other template yields a string
/// with each `{{field}}` replaced by the field's text. Throws SpecError
/// "origin: key: field 'x' not found ..." naming `key` (e.g. doc_to_text).
nlohmann::json resolve_mapping(const nlohmann::json& doc, const std::string& mapping, const std::string& origin,
                               const std::string& key);

/// The text of a resolved value: strings as they are, numbers and booleans in
/// their JSON spelling. Throws SpecError "origin: key: expected text, got ..."
/// for objects, arrays and null.
std::string value_text(const nlohmann::json& v, const std::string& origin, const std::string& key);

}  // namespace kveval::eval
