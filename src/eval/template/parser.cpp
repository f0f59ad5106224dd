// Statements of the Jinja2 subset (if, for, set, raw blocks are lexed as
// data) and the parser's entry point; expressions are in parser_impl.hpp.
#include "eval/template/parser_impl.hpp"

namespace kveval::eval::tmpl {

namespace parse_detail {

Program Parser::program() {
  Program p;
  std::string end;
  p.body = subparse({}, &end);
  return p;
}

/// Parses until `{% name %}` with name in `ends` (returned in *end, the tag
/// name consumed, the block not), or the end of the template when `ends` is empty.
Body Parser::subparse(const std::vector<std::string>& ends, std::string* end) {
  Nest nest(*this, cur());
  Body body;
  while (true) {
    const Token& k = cur();
    if (k.kind == TokKind::Eof) {
      if (!ends.empty()) {
        std::string list;
        for (const auto& e : ends) list += (list.empty() ? "'" : " or '") + e + "'";
        fail(k, fmt::format("unexpected end of template: expected {}", list));
      }
      return body;
    }
    if (k.kind == TokKind::Data) {
      auto s = std::make_shared<Stmt>();
      s->kind = StmtKind::Data;
      s->line = k.line, s->col = k.col;
      s->text = k.text;
      body.push_back(s);
      ++i;
    } else if (k.kind == TokKind::VarBegin) {
      ++i;
      auto s = std::make_shared<Stmt>();
      s->kind = StmtKind::Output;
      s->line = k.line, s->col = k.col;
      s->expr = tuple_free_expression();
      if (cur().kind != TokKind::VarEnd) fail(cur(), fmt::format("expected '}}}}', got {}", describe(cur())));
      ++i;
      body.push_back(s);
    } else if (k.kind == TokKind::BlockBegin) {
      ++i;
      const Token& tag = cur();
      if (tag.kind != TokKind::Name) fail(tag, fmt::format("expected a tag name after '{{%', got {}", describe(tag)));
      for (const auto& e : ends)
        if (tag.text == e) {
          ++i;
          *end = e;
          return body;
        }
      body.push_back(statement());
    } else {
      fail(k, fmt::format("unexpected {}", describe(k)));
    }
  }
}

StmtPtr Parser::statement() {
  const Token& tag = cur();
  const std::string& n = tag.text;
  if (n == "if") return if_stmt();
  if (n == "for") return for_stmt();
  if (n == "set") return set_stmt();
  if (hf && (n == "break" || n == "continue")) {
    if (loop_depth == 0) fail(tag, fmt::format("'{{% {} %}}' outside a for loop", n));
    auto s = std::make_shared<Stmt>();
    s->kind = n == "break" ? StmtKind::Break : StmtKind::Continue;
    s->line = tag.line, s->col = tag.col;
    ++i;
    expect_block_end();
    return s;
  }
  if (hf && n == "generation") {  // transformers' AssistantTracker: the body as a call block
    auto s = std::make_shared<Stmt>();
    s->kind = StmtKind::Scope;
    s->line = tag.line, s->col = tag.col;
    ++i;
    expect_block_end();
    std::string end;
    s->body = subparse({"endgeneration"}, &end);
    expect_block_end();
    return s;
  }
  static const std::vector<std::string> known_jinja = {
      "macro", "call", "filter", "include", "import", "from", "extends", "block", "with", "autoescape",
      "do", "break", "continue", "trans", "pluralize", "endtrans", "namespace"};
  for (const auto& k : known_jinja)
    if (n == k && !(hf && (n == "break" || n == "continue")))
      fail(tag, fmt::format("the Jinja tag '{{% {} %}}' is not supported (supported tags: {})", n,
                            hf ? kSupportedHfTags : kSupportedTags));
  if (n.rfind("end", 0) == 0 || n == "elif" || n == "else")
    fail(tag, fmt::format("unexpected '{{% {} %}}': no open block takes it here", n));
  fail(tag, fmt::format("unknown tag '{}' (supported tags: {})", n, hf ? kSupportedHfTags : kSupportedTags));
}

StmtPtr Parser::if_stmt() {
  auto s = std::make_shared<Stmt>();
  s->kind = StmtKind::If;
  s->line = cur().line, s->col = cur().col;
  ++i;  // if
  while (true) {
    ExprPtr test = no_tuple(&Parser::or_expr);
    expect_block_end();
    std::string end;
    Body b = subparse({"elif", "else", "endif"}, &end);
    s->branches.emplace_back(test, std::move(b));
    if (end == "elif") continue;
    if (end == "else") {
      expect_block_end();
      std::string e2;
      s->else_body = subparse({"endif"}, &e2);
    }
    expect_block_end();
    return s;
  }
}

StmtPtr Parser::for_stmt() {
  auto s = std::make_shared<Stmt>();
  s->kind = StmtKind::For;
  s->line = cur().line, s->col = cur().col;
  ++i;  // for
  const Token& tgt = cur();
  s->text = expect_name();
  if (is_op(",") && !hf) fail(cur(), "unpacking in a for loop ('for a, b in ...') is not supported");
  if (is_op(",")) {
    s->targets.push_back(s->text);
    while (skip_op(",")) s->targets.push_back(expect_name());
  }
  if (s->text == "loop") fail(tgt, "cannot assign to 'loop' (it is the loop variable of Jinja)");
  if (!skip_name("in")) fail(cur(), fmt::format("expected 'in', got {}", describe(cur())));
  s->expr = no_tuple(&Parser::or_expr);
  if (skip_name("if")) s->cond = no_tuple(&Parser::condexpr);
  if (is_name("recursive")) fail(cur(), "recursive for loops are not supported");
  expect_block_end();
  std::string end;
  ++loop_depth;
  s->body = subparse({"endfor", "else"}, &end);
  --loop_depth;
  if (end == "else") {
    expect_block_end();
    std::string e2;
    s->else_body = subparse({"endfor"}, &e2);
  }
  expect_block_end();
  return s;
}

StmtPtr Parser::set_stmt() {
  auto s = std::make_shared<Stmt>();
  s->line = cur().line, s->col = cur().col;
  ++i;  // set
  const Token& tgt = cur();
  s->text = expect_name();
  if (is_op(".") && hf) {
    ++i;
    s->kind = StmtKind::SetAttr;
    s->attr = expect_name();
    if (!skip_op("=")) fail(cur(), fmt::format("expected '=', got {}", describe(cur())));
    s->expr = tuple_free_expression();
    expect_block_end();
    return s;
  }
  if (is_op(".")) fail(tgt, "namespace attribute assignment ('set ns.x = ...') is not supported");
  if (is_op(",")) fail(cur(), "unpacking assignment ('set a, b = ...') is not supported");
  if (s->text == "loop") fail(tgt, "cannot assign to 'loop'");
  if (skip_op("=")) {
    s->kind = StmtKind::Set;
    s->expr = tuple_free_expression();
    expect_block_end();
    return s;
  }
  if (is_op("|")) fail(cur(), "filters on a block set ('{% set x | f %}') are not supported");
  s->kind = StmtKind::SetBlock;
  expect_block_end();
  std::string end;
  s->body = subparse({"endset"}, &end);
  expect_block_end();
  return s;
}

}  // namespace parse_detail

Program parse_tokens(const std::vector<Token>& toks, bool hf_chat) {
  parse_detail::Parser p{toks, hf_chat};
  return p.program();
}

}  // namespace kveval::eval::tmpl
