// Evaluation of the Jinja2 subset: expressions over Values and statements
// into text, with Jinja's scoping (a for body is a new scope for every
// iteration; `set` inside it does not leak out; `if` opens no scope) and
// StrictUndefined (lm_eval/utils.py's environment).
#include <map>

#include <fmt/format.h>

#include "eval/template/ast.hpp"
#include "eval/template/runtime.hpp"
#include "eval/template/template.hpp"
#include "eval/template/text.hpp"

namespace kveval::eval::tmpl {

TemplateError::TemplateError(int l, int c, const std::string& msg)
    : SpecError(fmt::format("line {}, column {}: {}", l, c, msg)), line(l), column(c), message(msg) {}

namespace {

struct Frame {
  std::map<std::string, Value> vars;
};

struct Evaluator {
  const json& globals;
  bool hf = false;  ///< Hugging Face's chat environment: Undefined is lenient, its filters, tests and globals
  std::vector<Frame> frames;
  std::string out;
  int depth = 0;
  int64_t iterations = 0;  ///< for-loop bodies run so far in this render (kMaxLoopIterations)
  std::vector<json> namespaces;  ///< namespace() objects (Value::ns indexes them; shared, mutable)
  enum class Flow { Normal, Break, Continue } flow = Flow::Normal;

  /// Loop bodies one render may run: 2^20, like range()'s items (nested loops multiply).
  static constexpr int64_t kMaxLoopIterations = int64_t(1) << 20;

  [[noreturn]] void fail_at(const Expr& e, const std::string& msg) const { throw TemplateError(e.line, e.col, msg); }

  Value lookup(const std::string& name) const {
    for (auto f = frames.rbegin(); f != frames.rend(); ++f) {
      auto it = f->vars.find(name);
      if (it != f->vars.end()) return it->second;
    }
    if (globals.is_object()) {
      auto it = globals.find(name);
      if (it != globals.end()) return *it;
    }
    return Value::undef(fmt::format("'{}' is undefined", name));
  }

  Value eval(const Expr& e) {
    try {
      return eval_inner(e);
    } catch (const EvalFailure& f) {
      fail_at(e, f.message);
    } catch (const ArgumentError& a) {
      fail_at(e, a.what());
    }
  }

  std::optional<int64_t> opt_int(const ExprPtr& p) {
    if (!p) return std::nullopt;
    Value v = eval(*p);
    const json& j = v.get();
    if (j.is_null()) return std::nullopt;
    auto i = as_int(j);
    if (!i) fail_at(*p, fmt::format("slice indices must be integers or None, got {}", py_type(j)));
    return i;
  }

  std::vector<Value> args_of(const Expr& e, size_t from) {
    std::vector<Value> a;
    for (size_t k = from; k < e.kids.size(); ++k)
      if (k >= e.argnames.size() || e.argnames[k].empty()) a.push_back(eval(*e.kids[k]));
    return a;
  }
  KwArgs kwargs_of(const Expr& e) {
    KwArgs kw;
    for (size_t k = 0; k < e.kids.size() && k < e.argnames.size(); ++k)
      if (!e.argnames[k].empty()) kw.emplace_back(e.argnames[k], eval(*e.kids[k]));
    return kw;
  }
  static void no_kwargs(const KwArgs& kw, const std::string& what) {
    if (!kw.empty()) fail(fmt::format("{} takes no keyword arguments (got '{}=')", what, kw[0].first));
  }

  /// Python truth of a value; HF's (lenient) Undefined is false, a namespace true.
  bool truthy(const Value& v) const {
    if (hf && v.undefined) return false;
    if (v.ns >= 0) return true;
    return py_truthy(v.get());
  }

  /// ns.attr / ns['attr'] of a namespace() object.
  Value ns_get(const Value& obj, const json& key) const {
    const json& o = namespaces[static_cast<size_t>(obj.ns)];
    if (key.is_string() && o.contains(key.get<std::string>())) return o[key.get<std::string>()];
    return Value::undef(fmt::format("'Namespace object' has no attribute {}", py_repr(key)));
  }

  Value call_name(const Expr& e, const std::string& name) {
    Value f = lookup(name);
    if (!f.undefined) fail(fmt::format("'{}' is a {} value, not a function", name, py_type(f.v)));
    KwArgs kw = kwargs_of(e);
    if (name == "namespace") {
      json o = json::object();
      if (!args_of(e, 1).empty()) fail("namespace() takes keyword arguments only here");
      for (auto& [k, v] : kw) o[k] = v.get();
      namespaces.push_back(std::move(o));
      Value n(json::object());
      n.ns = static_cast<int>(namespaces.size() - 1);
      return n;
    }
    no_kwargs(kw, name + "()");
    return hf ? call_hf_global(name, args_of(e, 1)) : call_global(name, args_of(e, 1));
  }

  Value filter(const Expr& e) {
    Value v = eval(*e.kids[0]);
    if (!hf) return apply_filter(e.name, v, args_of(e, 1));
    KwArgs kw = kwargs_of(e);
    std::vector<Value> args = args_of(e, 1);
    if (v.ns >= 0) fail(fmt::format("the filter '{}' cannot take a namespace() object", e.name));
    if (v.undefined && e.name != "default" && e.name != "d") {  // jinja2.Undefined: empty str, len 0, iterates empty
      if (e.name == "length" || e.name == "count") return 0;
      if (e.name == "list" || e.name == "items") return json::array();
      if (e.name != "tojson") v = Value(json(""));
    }
    if (auto r = apply_hf_filter(e.name, v, args, kw)) return *r;
    no_kwargs(kw, "the filter '" + e.name + "'");
    return apply_filter(e.name, v, args);
  }

  bool equal(const Value& l, const Value& r) const {
    if (hf && (l.undefined || r.undefined)) return l.undefined && r.undefined;
    return py_equal(l.get(), r.get());
  }

  /// `{k: v, ...}`: string keys only.
  Value dict_literal(const Expr& e) {
    json o = json::object();
    for (size_t k = 0; k + 1 < e.kids.size(); k += 2) {
      Value kv = eval(*e.kids[k]);
      const json& key = kv.get();
      if (!key.is_string()) fail_at(*e.kids[k], fmt::format("dict literal keys must be strings here, got {}", py_type(key)));
      o[key.get<std::string>()] = eval(*e.kids[k + 1]).get();
    }
    return o;
  }

  /// `x.m(...)` (a method) or `f(...)` (a global such as range or namespace).
  Value call(const Expr& e) {
    const Expr& callee = *e.kids[0];
    if (callee.kind == ExprKind::Getattr) {
      Value obj = eval(*callee.kids[0]);
      no_kwargs(kwargs_of(e), "the method '" + callee.name + "()'");
      if (obj.ns >= 0) fail(fmt::format("namespace() objects have no method '{}()'", callee.name));
      if (hf)
        if (auto r = call_hf_method(obj, callee.name, args_of(e, 1))) return *r;
      return call_method(obj, callee.name, args_of(e, 1));
    }
    if (callee.kind == ExprKind::Name) return call_name(e, callee.name);
    fail("only method calls (x.m(...)) and range(...) can be called");
  }

  /// `x is name(...)`.
  Value test(const Expr& e) {
    Value v = eval(*e.kids[0]);
    if (!hf) return apply_test(e.name, v, args_of(e, 1));
    no_kwargs(kwargs_of(e), "the test '" + e.name + "'");
    if (v.ns >= 0) return e.name == "defined";
    return apply_hf_test(e.name, v, args_of(e, 1));
  }

  /// `a ~ b ~ ...`: the texts joined, within the output size limit.
  Value concat(const Expr& e) {
    std::string s;
    for (const auto& k : e.kids) {
      s += text_of(eval(*k));
      check_size(s.size(), "the '~' concatenation");
    }
    return s;
  }

  /// A comparison chain `a < b <= c` (Python's: each pair compared, false at the first that fails).
  Value compare(const Expr& e) {
    Value l = eval(*e.kids[0]);
    for (size_t k = 1; k < e.kids.size(); ++k) {
      Value r = eval(*e.kids[k]);
      const std::string& op = e.ops[k - 1];
      bool ok;
      if ((op == "in" || op == "not in") && hf && r.undefined) {
        ok = op == "not in";
      } else if (op == "in" || op == "not in") {
        ok = py_contains(r.get(), l.get()) == (op == "in");
      } else if (op == "==" || op == "!=") {
        check_not_range(l), check_not_range(r);
        ok = equal(l, r) == (op == "==");
      } else {
        check_not_range(l), check_not_range(r);
        int c = py_compare(l.get(), r.get(), op.c_str());
        ok = c != 2 && (op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0);
      }
      if (!ok) return false;
      l = r;
    }
    return true;
  }

  Value eval_inner(const Expr& e) {
    switch (e.kind) {
      case ExprKind::Const: return e.value;
      case ExprKind::Name: return lookup(e.name);
      case ExprKind::List: {
        json a = json::array();
        for (const auto& k : e.kids) a.push_back(eval(*k).get());
        return a;
      }
      case ExprKind::Dict: return dict_literal(e);
      case ExprKind::Getattr: {
        Value obj = eval(*e.kids[0]);
        if (obj.ns >= 0) return ns_get(obj, json(e.name));
        return get_item(obj, json(e.name), true);
      }
      case ExprKind::Getitem: {
        Value obj = eval(*e.kids[0]);
        if (obj.ns >= 0) return ns_get(obj, eval(*e.kids[1]).get());
        return get_item(obj, eval(*e.kids[1]).get(), false);
      }
      case ExprKind::Slice: {
        Value obj = eval(*e.kids[0]);
        obj.get();
        auto a = opt_int(e.kids[1]), b = opt_int(e.kids[2]), c = opt_int(e.kids[3]);
        return get_slice(obj, a, b, c);
      }
      case ExprKind::Call: return call(e);
      case ExprKind::Filter: return filter(e);
      case ExprKind::Test: return test(e);
      case ExprKind::Neg: case ExprKind::Pos: {
        Value v = eval(*e.kids[0]);
        check_not_range(v);
        return py_negate(v.get(), e.kind == ExprKind::Neg);
      }
      case ExprKind::Not: return !truthy(eval(*e.kids[0]));
      case ExprKind::And: {
        Value l = eval(*e.kids[0]);
        if (!truthy(l)) return l;
        return eval(*e.kids[1]);
      }
      case ExprKind::Or: {
        Value l = eval(*e.kids[0]);
        if (truthy(l)) return l;
        return eval(*e.kids[1]);
      }
      case ExprKind::Binary: {
        Value l = eval(*e.kids[0]), r = eval(*e.kids[1]);
        check_not_range(l), check_not_range(r);
        return py_binary(e.name, l.get(), r.get());
      }
      case ExprKind::Concat: return concat(e);
      case ExprKind::Compare: return compare(e);
      case ExprKind::CondExpr: {
        if (truthy(eval(*e.kids[0]))) return eval(*e.kids[1]);
        if (e.kids[2]) return eval(*e.kids[2]);
        return Value::undef("the inline if-expression evaluated to false and has no else section");
      }
    }
    fail("unknown expression");
  }

  static void check_not_range(const Value& v) {
    if (!v.range_repr.empty()) fail("arithmetic and comparisons on range() objects are not supported (apply |list first)");
  }

  std::string text_of(const Value& v) const {
    if (hf && v.undefined) return "";
    if (v.ns >= 0) fail("printing a namespace() object is not supported");
    if (!v.range_repr.empty()) return v.range_repr;
    return py_str(v.get());
  }

  // ---- statements ----
  void run(const Body& body) {
    for (const auto& s : body) {
      stmt(*s);
      if (flow != Flow::Normal) return;
    }
  }

  void assign(const std::string& name, Value v) { frames.back().vars[name] = std::move(v); }

  void stmt(const Stmt& s) {
    switch (s.kind) {
      case StmtKind::Data:
        out += s.text;
        try {
          check_size(out.size(), "the rendered text");
        } catch (const EvalFailure& f) {
          throw TemplateError(s.line, s.col, f.message);
        }
        return;
      case StmtKind::Output: {
        Value v = eval(*s.expr);
        try {
          out += text_of(v);
          check_size(out.size(), "the rendered text");
        } catch (const EvalFailure& f) {
          fail_at(*s.expr, f.message);
        }
        return;
      }
      case StmtKind::If:
        for (const auto& [test, body] : s.branches) {
          Value t = eval(*test);
          bool b;
          try {
            b = truthy(t);
          } catch (const EvalFailure& f) {
            fail_at(*test, f.message);
          }
          if (b) return run(body);
        }
        return run(s.else_body);
      case StmtKind::Set: assign(s.text, eval(*s.expr)); return;
      case StmtKind::SetBlock: {
        std::string saved;
        std::swap(saved, out);
        run(s.body);
        std::swap(saved, out);
        assign(s.text, json(saved));
        return;
      }
      case StmtKind::For: return for_loop(s);
      case StmtKind::SetAttr: return set_attr(s);
      case StmtKind::Break: flow = Flow::Break; return;
      case StmtKind::Continue: flow = Flow::Continue; return;
      case StmtKind::Scope:
        frames.emplace_back();
        run(s.body);
        frames.pop_back();
        return;
    }
  }

  /// `set ns.attr = expr`: only a namespace() object takes attributes (jinja2's sandbox).
  void set_attr(const Stmt& s) {
    Value target = lookup(s.text);
    Value v = eval(*s.expr);
    if (target.ns < 0)
      throw TemplateError(s.line, s.col, fmt::format("cannot assign attribute '{}' on '{}': not a namespace() object", s.attr, s.text));
    try {
      namespaces[static_cast<size_t>(target.ns)][s.attr] = v.get();
    } catch (const EvalFailure& f) {
      fail_at(*s.expr, f.message);
    }
  }

  /// Binds the loop target(s) to `item` (`for a, b in pairs` unpacks a list).
  void bind_target(const Stmt& s, const json& item) {
    if (s.targets.empty()) return assign(s.text, item);
    if (!item.is_array() || item.size() != s.targets.size())
      throw TemplateError(s.line, s.col, fmt::format("cannot unpack {} into {} names", py_type(item), s.targets.size()));
    for (size_t k = 0; k < s.targets.size(); ++k) assign(s.targets[k], item[k]);
  }

  /// One more loop body (or `if` filter) of `for` statement s; throws past kMaxLoopIterations.
  void count_iteration(const Stmt& s) {
    if (++iterations > kMaxLoopIterations)
      throw TemplateError(s.line, s.col, "more than 2^20 loop iterations in one rendering (kveval's limit; nested loops multiply)");
  }

  void for_loop(const Stmt& s) {
    Value seq = eval(*s.expr);
    std::vector<json> items;
    try {
      if (!(hf && seq.undefined)) items = iterate(seq);
    } catch (const EvalFailure& f) {
      fail_at(*s.expr, f.message);
    }
    if (s.cond) {  // {% for x in xs if cond %}: filter first (loop.length counts what is left)
      std::vector<json> kept;
      for (auto& it : items) {
        count_iteration(s);
        frames.emplace_back();
        bind_target(s, it);
        Value c = eval(*s.cond);
        bool keep;
        try {
          keep = truthy(c);
        } catch (const EvalFailure& f) {
          fail_at(*s.cond, f.message);
        }
        frames.pop_back();
        if (keep) kept.push_back(std::move(it));
      }
      items = std::move(kept);
    }
    if (items.empty()) return run(s.else_body);
    int64_t n = static_cast<int64_t>(items.size());
    ++depth;
    for (int64_t i = 0; i < n; ++i) {
      count_iteration(s);
      frames.emplace_back();
      json loop = {{"index", i + 1}, {"index0", i}, {"revindex", n - i}, {"revindex0", n - i - 1},
                   {"first", i == 0}, {"last", i == n - 1}, {"length", n}, {"depth", depth}, {"depth0", depth - 1}};
      if (i > 0) loop["previtem"] = items[static_cast<size_t>(i - 1)];
      if (i + 1 < n) loop["nextitem"] = items[static_cast<size_t>(i + 1)];
      assign("loop", loop);
      bind_target(s, items[static_cast<size_t>(i)]);
      run(s.body);
      frames.pop_back();
      bool stop = flow == Flow::Break;
      flow = Flow::Normal;
      if (stop) break;
    }
    --depth;
  }
};

}  // namespace

Template Template::parse(std::string_view source, Dialect dialect) {
  // Jinja treats \r\n and \r as \n everywhere in the source
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  try {
    utf8_decode(src);
  } catch (const ArgumentError& e) {
    throw TemplateError(1, 1, fmt::format("template is not valid UTF-8 ({})", e.what()));
  }
  // keep_trailing_newline is on in lm-eval's environment and off (jinja2's default) in Hugging Face's:
  // there one newline at the end of the source is dropped
  if (dialect == Dialect::HfChat && !src.empty() && src.back() == '\n') src.pop_back();
  Template t;
  t.source_ = src;
  t.plain_ = src.find("{{") == std::string::npos && src.find("{%") == std::string::npos && src.find("{#") == std::string::npos;
  t.dialect_ = dialect;
  bool hf = dialect == Dialect::HfChat;
  t.prog_ = std::make_shared<Program>(parse_tokens(lex(src, nullptr, hf), hf));
  return t;
}

std::string Template::render(const json& vars) const {
  Evaluator ev{vars, dialect_ == Dialect::HfChat, {}, {}, 0, 0, {}, Evaluator::Flow::Normal};
  ev.frames.emplace_back();
  try {
    ev.run(prog_->body);
  } catch (const EvalFailure& f) {
    throw TemplateError(1, 1, f.message);
  }
  return std::move(ev.out);
}

std::string python_str(const json& v) {
  try {
    return py_str(v);
  } catch (const EvalFailure& f) {
    throw TemplateError(1, 1, f.message);
  }
}

}  // namespace kveval::eval::tmpl
