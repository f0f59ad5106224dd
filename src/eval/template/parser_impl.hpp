#pragma once
// Internal: the parser of the Jinja2 subset (recursive descent with the
// grammar and precedence of jinja2/parser.py, Jinja 3.1): condexpr < or < and
// < not < compare (in, not in, chained) < + - < ~ < * / // % < ** (left-assoc)
// < unary -/+ < postfix (.a, [i], [a:b:c], calls) < filters / tests.
// Expressions are parsed here, statements in parser.cpp. Not part of the eval API.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "eval/template/ast.hpp"
#include "eval/template/template.hpp"

namespace kveval::eval::tmpl::parse_detail {


inline const char* kSupportedTags = "if, elif, else, endif, for, endfor, set, endset, raw";
inline const char* kSupportedHfTags = "if, elif, else, endif, for, endfor, break, continue, set, endset, raw, generation";

// Names checked when the template is parsed (Jinja refuses unknown filters and
// tests at compile time; a method outside the subset could only fail later).
inline const std::vector<std::string> kFilters = {"join", "int", "float", "length", "count", "trim", "lower", "upper",
                                           "capitalize", "replace", "first", "last", "default", "d", "string", "list",
                                           "regex_replace"};
inline const std::vector<std::string> kTests = {"defined", "undefined", "none", "string", "number", "integer", "float",
                                         "boolean", "sequence", "mapping"};
inline const std::vector<std::string> kMethods = {"strip", "lstrip", "rstrip", "split", "lower", "upper", "capitalize", "replace",
                                           "index", "find", "count", "startswith", "endswith", "join"};
// What Hugging Face's chat environment adds (transformers' _compile_jinja_template:
// jinja2's filters and tests, its own tojson, globals raise_exception and strftime_now).
inline const std::vector<std::string> kHfFilters = {"tojson", "items", "selectattr", "rejectattr", "map", "dictsort",
                                                    "indent", "title", "safe", "reverse", "unique", "sort", "abs",
                                                    "round", "sum", "min", "max", "wordcount", "center", "truncate"};
inline const std::vector<std::string> kHfTests = {"equalto", "eq", "==", "ne", "!=", "in", "iterable", "true", "false",
                                                  "odd", "even", "divisibleby", "lower", "upper", "callable"};
inline const std::vector<std::string> kHfMethods = {"items", "keys", "values", "get", "title"};
inline const std::vector<std::string> kHfGlobals = {"range", "namespace", "raise_exception", "strftime_now"};

inline std::string join_names(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}
inline std::vector<std::string> concat_names(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
inline bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

/// Parentheses, brackets, braces, call arguments, unary operators and blocks
/// open at once; and levels of one expression tree (operator chains such as
/// `1 + 1 + ...` add a level per operator). Parsing, evaluating and freeing
/// recurse once per level, so a hostile template is refused here instead of
/// overflowing the stack. Jinja itself stops at Python's recursion limit.
inline constexpr int kMaxNesting = 100;
inline constexpr int kMaxHeight = 1000;

struct Parser {
  const std::vector<Token>& t;
  bool hf = false;    ///< Hugging Face's chat environment (parse_tokens)
  size_t i = 0;
  int nesting = 0;    ///< open levels (kMaxNesting)
  int loop_depth = 0; ///< for bodies open (break/continue are allowed inside one)
  int arg_depth = 0;  ///< call argument lists open (a parenthesized tuple is allowed there)

  bool filter_known(const std::string& n) const { return has(kFilters, n) || (hf && has(kHfFilters, n)); }
  bool test_known(const std::string& n) const { return has(kTests, n) || (hf && has(kHfTests, n)); }
  bool method_known(const std::string& n) const { return has(kMethods, n) || (hf && has(kHfMethods, n)); }

  /// One more open level for the life of the object; throws TemplateError at `at` past kMaxNesting.
  struct Nest {
    Parser& p;
    Nest(Parser& parser, const Token& at) : p(parser) {
      if (p.nesting >= kMaxNesting)
        p.fail(at, fmt::format("nested deeper than {} levels (kveval's limit for templates)", kMaxNesting));
      ++p.nesting;
    }
    ~Nest() { --p.nesting; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
  };

  /// Sets e's height from its kids; throws TemplateError past kMaxHeight.
  static ExprPtr seal(std::shared_ptr<Expr> e) {
    int h = 0;
    for (const auto& k : e->kids)
      if (k) h = std::max(h, k->height);
    e->height = h + 1;
    if (e->height > kMaxHeight)
      throw TemplateError(e->line, e->col,
                          fmt::format("expression nested deeper than {} levels (kveval's limit for templates)", kMaxHeight));
    return e;
  }

  const Token& cur() const { return t[i]; }
  const Token& peek(size_t k = 1) const { return t[std::min(i + k, t.size() - 1)]; }
  [[noreturn]] void fail(const Token& at, const std::string& msg) const { throw TemplateError(at.line, at.col, msg); }

  bool is_op(const char* op) const { return cur().kind == TokKind::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == TokKind::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++i;
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    ++i;
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(cur(), fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  std::string expect_name() {
    if (cur().kind != TokKind::Name) fail(cur(), fmt::format("expected a name, got {}", describe(cur())));
    return t[i++].text;
  }
  void expect_block_end() {
    if (cur().kind != TokKind::BlockEnd) fail(cur(), fmt::format("expected '%}}', got {}", describe(cur())));
    ++i;
  }

  static std::shared_ptr<Expr> node(ExprKind k, const Token& at) {
    auto e = std::make_shared<Expr>();
    e->kind = k;
    e->line = at.line, e->col = at.col;
    return e;
  }

  Program program();
  Body subparse(const std::vector<std::string>& ends, std::string* end);
  StmtPtr statement();
  StmtPtr if_stmt();
  StmtPtr for_stmt();
  StmtPtr set_stmt();

  // ---- expressions ----
  /// An expression where Jinja would accept a tuple: a top-level comma is refused.
  ExprPtr tuple_free_expression() { return no_tuple(&Parser::condexpr); }
  ExprPtr no_tuple(ExprPtr (Parser::*f)()) {
    if (cur().kind == TokKind::VarEnd || cur().kind == TokKind::BlockEnd)
      fail(cur(), fmt::format("expected an expression, got {}", describe(cur())));
    ExprPtr e = (this->*f)();
    if (is_op(",")) fail(cur(), "tuples are not supported");
    return e;
  }

  ExprPtr condexpr() {
    Nest nest(*this, cur());
    ExprPtr e = or_expr();
    while (is_name("if")) {
      auto c = node(ExprKind::CondExpr, cur());
      ++i;
      ExprPtr test = or_expr();
      ExprPtr other;
      if (skip_name("else")) other = condexpr();
      c->kids = {test, e, other};
      e = seal(c);
    }
    return e;
  }
  ExprPtr or_expr() {
    ExprPtr l = and_expr();
    while (is_name("or")) {
      auto n = node(ExprKind::Or, cur());
      ++i;
      n->kids = {l, and_expr()};
      l = seal(n);
    }
    return l;
  }
  ExprPtr and_expr() {
    ExprPtr l = not_expr();
    while (is_name("and")) {
      auto n = node(ExprKind::And, cur());
      ++i;
      n->kids = {l, not_expr()};
      l = seal(n);
    }
    return l;
  }
  ExprPtr not_expr() {
    if (is_name("not")) {
      Nest nest(*this, cur());
      auto n = node(ExprKind::Not, cur());
      ++i;
      n->kids = {not_expr()};
      return seal(n);
    }
    return compare();
  }
  ExprPtr compare() {
    const Token& start = cur();
    ExprPtr e = math1();
    std::shared_ptr<Expr> c;
    while (true) {
      std::string op;
      if (cur().kind == TokKind::Op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        ++i;
      } else if (is_name("in")) {
        op = "in";
        ++i;
      } else if (is_name("not") && peek().kind == TokKind::Name && peek().text == "in") {
        op = "not in";
        i += 2;
      } else {
        break;
      }
      if (!c) {
        c = node(ExprKind::Compare, start);
        c->kids.push_back(e);
      }
      c->ops.push_back(op);
      c->kids.push_back(math1());
    }
    return c ? seal(c) : e;
  }
  ExprPtr binary_chain(ExprPtr (Parser::*next)(), std::initializer_list<const char*> ops) {
    ExprPtr l = (this->*next)();
    while (true) {
      const char* hit = nullptr;
      for (const char* o : ops)
        if (is_op(o)) hit = o;
      if (!hit) return l;
      auto n = node(ExprKind::Binary, cur());
      n->name = hit;
      ++i;
      n->kids = {l, (this->*next)()};
      l = seal(n);
    }
  }
  ExprPtr math1() { return binary_chain(&Parser::concat, {"+", "-"}); }
  ExprPtr concat() {
    const Token& start = cur();
    ExprPtr e = math2();
    if (!is_op("~")) return e;
    auto c = node(ExprKind::Concat, start);
    c->kids.push_back(e);
    while (skip_op("~")) c->kids.push_back(math2());
    return seal(c);
  }
  ExprPtr math2() { return binary_chain(&Parser::pow_expr, {"*", "/", "//", "%"}); }
  ExprPtr pow_expr() { return binary_chain(&Parser::unary_filtered, {"**"}); }
  ExprPtr unary_filtered() { return unary(true); }
  ExprPtr unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      Nest nest(*this, cur());
      auto n = node(is_op("-") ? ExprKind::Neg : ExprKind::Pos, cur());
      ++i;
      n->kids = {unary(false)};
      e = seal(n);
    } else {
      e = primary();
    }
    e = postfix(e);
    if (with_filter) e = filter_expr(e);
    return e;
  }

  ExprPtr primary() {
    const Token& k = cur();
    if (k.kind == TokKind::Name) {
      ++i;
      auto n = node(ExprKind::Const, k);
      if (k.text == "true" || k.text == "True") n->value = true;
      else if (k.text == "false" || k.text == "False") n->value = false;
      else if (k.text == "none" || k.text == "None") n->value = nullptr;
      else n->kind = ExprKind::Name, n->name = k.text;
      return n;
    }
    if (k.kind == TokKind::String) {
      auto n = node(ExprKind::Const, k);
      std::string s;
      while (cur().kind == TokKind::String) s += t[i++].text;
      n->value = s;
      return n;
    }
    if (k.kind == TokKind::Integer || k.kind == TokKind::Float) {
      ++i;
      auto n = node(ExprKind::Const, k);
      if (k.kind == TokKind::Integer) n->value = k.ival;
      else n->value = k.fval;
      return n;
    }
    if (k.kind == TokKind::Op && k.text == "(") {
      ++i;
      if (is_op(")")) fail(k, "the empty tuple '()' is not supported");
      ExprPtr e = condexpr();
      if (is_op(",") && hf && arg_depth > 0) return tuple_arg(k, e);
      if (is_op(",")) fail(cur(), "tuples are not supported");
      expect_op(")");
      return e;
    }
    if (k.kind == TokKind::Op && k.text == "[") {
      ++i;
      auto n = node(ExprKind::List, k);
      while (!is_op("]")) {
        if (!n->kids.empty()) {
          expect_op(",");
          if (is_op("]")) break;
        }
        n->kids.push_back(condexpr());
      }
      ++i;
      return seal(n);
    }
    if (k.kind == TokKind::Op && k.text == "{") {
      ++i;
      auto n = node(ExprKind::Dict, k);
      while (!is_op("}")) {
        if (!n->kids.empty()) {
          expect_op(",");
          if (is_op("}")) break;
        }
        n->kids.push_back(condexpr());
        expect_op(":");
        n->kids.push_back(condexpr());
      }
      ++i;
      return seal(n);
    }
    fail(k, fmt::format("unexpected {}", describe(k)));
  }

  ExprPtr postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const Token& dot = cur();
        ++i;
        const Token& a = cur();
        if (a.kind == TokKind::Name) {
          auto n = node(ExprKind::Getattr, dot);
          n->name = a.text;
          n->kids = {e};
          ++i;
          e = seal(n);
        } else if (a.kind == TokKind::Integer) {
          auto n = node(ExprKind::Getitem, dot);
          auto idx = node(ExprKind::Const, a);
          idx->value = a.ival;
          n->kids = {e, idx};
          ++i;
          e = seal(n);
        } else {
          fail(a, fmt::format("expected a name or number after '.', got {}", describe(a)));
        }
      } else if (is_op("[")) {
        const Token& br = cur();
        ++i;
        e = subscript(e, br);
      } else if (is_op("(")) {
        e = call(e);
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr obj, const Token& br) {
    ExprPtr parts[3];
    bool slice = false;
    int part = 0;
    if (is_op("]")) fail(cur(), "expected a subscript expression");
    while (true) {
      if (is_op(":")) {
        slice = true;
        if (++part > 2) fail(cur(), "invalid slice");
        ++i;
        continue;
      }
      if (is_op("]")) break;
      if (is_op(",")) fail(cur(), "subscripts with a tuple ('a[i, j]') are not supported");
      if (parts[part]) fail(cur(), fmt::format("expected ']' or ':', got {}", describe(cur())));
      parts[part] = condexpr();
    }
    ++i;  // ]
    if (!slice) {
      auto n = node(ExprKind::Getitem, br);
      n->kids = {obj, parts[0]};
      return seal(n);
    }
    auto n = node(ExprKind::Slice, br);
    n->kids = {obj, parts[0], parts[1], parts[2]};
    return seal(n);
  }

  /// A tuple literal `(a, b, ...)` as a call argument (Hugging Face's chat
  /// environment: tojson's separators), evaluated as a list; `first` is parsed.
  ExprPtr tuple_arg(const Token& open, ExprPtr first) {
    auto n = node(ExprKind::List, open);
    n->kids.push_back(first);
    while (skip_op(",")) {
      if (is_op(")")) break;
      n->kids.push_back(condexpr());
    }
    expect_op(")");
    return seal(n);
  }

  /// Call arguments: appended to `n->kids` with their keywords in `n->argnames`
  /// (keyword arguments only in Hugging Face's chat environment; *args and
  /// **kwargs are refused).
  void call_args(std::shared_ptr<Expr>& n) {
    expect_op("(");
    n->argnames.resize(n->kids.size());
    size_t first = n->kids.size();
    ++arg_depth;
    while (!is_op(")")) {
      if (n->kids.size() > first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail(cur(), "*args and **kwargs in calls are not supported");
      std::string kw;
      if (cur().kind == TokKind::Name && peek().kind == TokKind::Op && peek().text == "=") {
        if (!hf) fail(cur(), fmt::format("keyword argument '{}=' is not supported (pass arguments by position)", cur().text));
        kw = cur().text;
        i += 2;
      } else if (!n->argnames.empty() && !n->argnames.back().empty()) {
        fail(cur(), "positional argument follows keyword argument");
      }
      n->kids.push_back(condexpr());
      n->argnames.push_back(kw);
    }
    --arg_depth;
    ++i;
  }

  ExprPtr call(ExprPtr callee) {
    if (callee->kind == ExprKind::Getattr && !method_known(callee->name))
      fail(cur(), fmt::format("the method '{}()' is not supported (supported methods: {}; list.index, list.count)", callee->name,
                              join_names(hf ? concat_names(kMethods, kHfMethods) : kMethods)));
    if (callee->kind == ExprKind::Name && hf && !has(kHfGlobals, callee->name))
      fail(cur(), fmt::format("calling '{}()' is not supported (global functions: {})", callee->name, join_names(kHfGlobals)));
    if (callee->kind == ExprKind::Name && !hf && callee->name != "range")
      fail(cur(), fmt::format("calling '{}()' is not supported (the only global function is range())", callee->name));
    if (callee->kind != ExprKind::Getattr && callee->kind != ExprKind::Name)
      fail(cur(), "only method calls (x.method(...)) and range(...) are supported");
    auto n = node(ExprKind::Call, cur());
    n->kids.push_back(callee);
    call_args(n);
    return seal(n);
  }

  ExprPtr filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        ++i;
        const Token& nm = cur();
        auto n = node(ExprKind::Filter, nm);
        n->name = expect_name();
        if (is_op(".")) fail(cur(), "dotted filter names are not supported");
        if (!filter_known(n->name))
          fail(nm, fmt::format("the filter '{}' is not supported (supported filters: {})", n->name,
                               join_names(hf ? concat_names(kFilters, kHfFilters) : kFilters)));
        n->kids.push_back(e);
        if (is_op("(")) call_args(n);
        e = seal(n);
      } else if (is_name("is")) {
        const Token& is = cur();
        ++i;
        bool negated = skip_name("not");
        auto n = node(ExprKind::Test, is);
        const Token& tn = cur();
        n->name = expect_name();
        if (!test_known(n->name))
          fail(tn, fmt::format("the test '{}' is not supported (supported tests: {})", n->name,
                               join_names(hf ? concat_names(kTests, kHfTests) : kTests)));
        n->kids.push_back(e);
        if (is_op("(")) {
          call_args(n);
        } else if ((cur().kind == TokKind::Name || cur().kind == TokKind::String || cur().kind == TokKind::Integer ||
                    cur().kind == TokKind::Float || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail(cur(), "you cannot chain multiple tests with 'is'");
          n->kids.push_back(postfix(primary()));
        }
        if (negated) {
          auto nn = node(ExprKind::Not, is);
          nn->kids = {seal(n)};
          e = seal(nn);
        } else {
          e = seal(n);
        }
      } else if (is_op("(")) {
        e = call(e);
      } else {
        return e;
      }
    }
  }};

}  // namespace kveval::eval::tmpl::parse_detail
