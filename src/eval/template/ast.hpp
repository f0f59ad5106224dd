#pragma once
// Internal: tokens, expression and statement trees of the Jinja2 subset
// (node kinds follow jinja2/nodes.py). Not part of the eval API.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kveval::eval::tmpl {

enum class TokKind { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Integer, Float, Op, Eof };

struct Token {
  TokKind kind = TokKind::Eof;
  std::string text;  ///< Data: the text; Name; String: the unescaped value; Op: the operator
  int64_t ival = 0;  ///< Integer
  double fval = 0;   ///< Float
  int line = 1, col = 1;
};

/// Tokens of a template source (comments dropped, raw blocks as Data, whitespace
/// control applied to Data). Throws TemplateError. `chars_scanned` (optional)
/// receives how many characters the line/column bookkeeping stepped over: at
/// most source.size(), since tokens are positioned in one forward pass.
/// `hf_chat` lexes as Hugging Face's chat environment does: trim_blocks (the first
/// newline after a block or comment tag is dropped) and lstrip_blocks (spaces and
/// tabs from a line's start to a block or comment tag are dropped).
std::vector<Token> lex(const std::string& source, uint64_t* chars_scanned = nullptr, bool hf_chat = false);

/// A token as parser messages name it: "'{{'", "'name'", "a string",
/// "number 3", "end of template", ...
std::string describe(const Token& k);

enum class ExprKind {
  Const, Name, List, Dict, Getattr, Getitem, Slice, Call, Filter, Test,
  Neg, Pos, Not, And, Or, Binary, Concat, Compare, CondExpr
};

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  ExprKind kind;
  int line = 1, col = 1;
  nlohmann::json value;           ///< Const
  std::string name;               ///< Name; Getattr attribute; Filter/Test name; Binary operator
  std::vector<ExprPtr> kids;      ///< operands, in order; null entries for omitted slice parts / else
  std::vector<std::string> ops;   ///< Compare: operators of kids[1..]
  std::vector<std::string> argnames;  ///< Call/Filter/Test: keyword of each kid ("" for positional and the subject)
  int height = 1;                 ///< levels of the tree under and including this node (the parser's limit)
};

/// SetAttr: `set ns.attr = expr` (Stmt::text the namespace, Stmt::attr the attribute);
/// Break/Continue: loop controls; Scope: a body rendered in its own scope
/// (HF's `{% generation %}` block, a call block of jinja).
enum class StmtKind { Data, Output, If, For, Set, SetBlock, SetAttr, Break, Continue, Scope };

struct Stmt;
using StmtPtr = std::shared_ptr<const Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  StmtKind kind;
  int line = 1, col = 1;
  std::string text;                                 ///< Data; For/Set: target name
  std::vector<std::string> targets;                 ///< For: the names of `for a, b in ...` (empty for one name)
  std::string attr;                                 ///< SetAttr
  ExprPtr expr;                                     ///< Output; For: iterable; Set: value
  ExprPtr cond;                                     ///< For: the `if` filter (may be null)
  std::vector<std::pair<ExprPtr, Body>> branches;   ///< If: (test, body) for if and each elif
  Body body;                                        ///< For, SetBlock
  Body else_body;                                   ///< If, For
};

struct Program {
  Body body;
};

/// Parses tokens into a program. Throws TemplateError. `hf_chat` accepts what
/// Hugging Face's chat environment adds (loop controls, namespace attributes,
/// keyword arguments, generation blocks, its filters, tests and globals).
Program parse_tokens(const std::vector<Token>& toks, bool hf_chat = false);

}  // namespace kveval::eval::tmpl
