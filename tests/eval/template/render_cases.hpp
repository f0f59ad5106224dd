#pragma once
// Template rendering cases: (template, document, expected output). Expected
// outputs are written by hand from Jinja 3.1's documentation and Python's
// str()/repr() rules (each one was also checked against jinja2 3.1 with
// lm-eval's environment: StrictUndefined, keep_trailing_newline=True).
#include <string>
#include <vector>

struct RenderCase {
  const char* tmpl;
  const char* doc;  // JSON object
  const char* expected;
};

inline const std::vector<RenderCase>& render_cases() {
  static const std::vector<RenderCase> cases = {
      // text, output, comments, trailing newline kept
      {"plain text", "{}", "plain text"},
      {"Q: {{question}}\nA:", R"({"question": "Why?"})", "Q: Why?\nA:"},
      {"a{# comment #}b\n", "{}", "ab\n"},
      {"line1\r\nline2\r", "{}", "line1\nline2\n"},
      {"{ not a tag } {x}", "{}", "{ not a tag } {x}"},
      // attribute, item, slices, negative indices
      {"{{choices.text}}", R"({"choices": {"text": ["a", "b"], "label": ["A", "B"]}})", "['a', 'b']"},
      {"{{choices.label.index(answerKey)}}", R"({"choices": {"label": ["A", "B", "C"]}, "answerKey": "C"})", "2"},
      {"{{choices['text'][1]}}|{{choices.text.0}}", R"({"choices": {"text": ["x", "y"]}})", "y|x"},
      {"{{text.split(' ')[:-1]|join(' ')}}", R"({"text": "the cat sat on the mat"})", "the cat sat on the"},
      {"{{' '+text.split(' ')[-1]}}", R"({"text": "the cat sat on the mat"})", " mat"},
      {"{{s[1:3]}}{{s[::-1]}}{{s[-2:]}}{{xs[::2]}}", R"({"s": "héllo", "xs": [1, 2, 3, 4, 5]})", "élolléhlo[1, 3, 5]"},
      {"{{xs[10:]}}{{xs[-100:1]}}{{s[5:1]}}|{{s[3:0:-1]}}", R"({"xs": [1, 2], "s": "abcdef"})", "[][1]|dcb"},
      // list literals and Python printing
      {"{{[sol1, sol2]}}", R"({"sol1": "It's wet", "sol2": "say \"hi\""})", R"(["It's wet", 'say "hi"'])"},
      {"{{[1, 2.5, true, none, 'a\\'b', [\"c\"]]}}", "{}", R"([1, 2.5, True, None, "a'b", ['c']])"},
      {"{{x}} {{y}} {{z}} {{w}}", R"({"x": true, "y": null, "z": 3.0, "w": 1e16})", "True None 3.0 1e+16"},
      {"{{0.1 + 0.2}} {{1/3}} {{1e-5}} {{0.0001}} {{ -0.0 }} {{2**0.5}}", "{}",
       "0.30000000000000004 0.3333333333333333 1e-05 0.0001 -0.0 1.4142135623730951"},
      {"{{['tab\\there', 'new\\nline', 'back\\\\slash', '\\x01', 'é']}}", "{}",
       R"(['tab\there', 'new\nline', 'back\\slash', '\x01', 'é'])"},
      {"{{[a]}}", R"({"a": "nbsp\u00a0zwsp\u200b"})", R"(['nbsp\xa0zwsp\u200b'])"},
      // string methods
      {"[{{q.strip()}}]", R"({"q": " \u00a0 hi there \n"})", "[hi there]"},
      {"{{q.lstrip('xy')}}|{{q.rstrip('yx')}}", R"({"q": "xyaxy"})", "axy|xya"},
      {"{{s.split()}}", R"({"s": "  a\u00a0b\u2003c\n\n d  "})", "['a', 'b', 'c', 'd']"},
      {"{{s.split(',')}}{{s.split(',', 1)}}", R"({"s": "a,,b,c"})", "['a', '', 'b', 'c']['a', ',b,c']"},
      {"{{s.split()}}{{e.split()}}{{e.split('-')}}", R"({"s": "a b c", "e": ""})", "['a', 'b', 'c'][]['']"},
      {"{{s.lower()}} {{s.upper()}} {{t.upper()}} {{u.lower()}}", R"({"s": "MiXeD Ünï", "t": "straße", "u": "ΟΔΟΣ"})",
       "mixed ünï MIXED ÜNÏ STRASSE οδος"},
      {"{{p.capitalize()}} {{q|capitalize}}", R"({"p": "hello World", "q": "élan VITAL"})", "Hello world Élan vital"},
      {"{{s.replace('a', 'o')}} {{s.replace('a', 'o', 1)}} {{'ab'.replace('', '-')}}", R"({"s": "banana"})",
       "bonono bonana -a-b-"},
      {"{{s.index('l')}} {{s.find('z')}} {{s.count('l')}} {{s.startswith('hé')}} {{s.endswith('lo')}}",
       R"({"s": "héllo"})", "2 -1 2 True True"},
      {"{{', '.join(xs)}}", R"({"xs": ["a", "b", "c"]})", "a, b, c"},
      // filters
      {"{{xs|join}}|{{xs|join(', ')}}|{{'abc'|join('-')}}|{{[1, none, 2.0]|join(' ')}}", R"({"xs": ["x", "y"]})",
       "xy|x, y|a-b-c|1 None 2.0"},
      {"{{'42'|int}} {{'4.7'|int}} {{' -3 '|int}} {{'x'|int}} {{'x'|int(7)}} {{3.99|int}} {{true|int}} {{'1_000'|int}}", "{}",
       "42 4 -3 0 7 3 1 1000"},
      {"{{'2.5'|float}} {{'abc'|float}} {{3|float}} {{'1e3'|float}}", "{}", "2.5 0.0 3.0 1000.0"},
      {"{{xs|length}} {{s|length}} {{d|length}} {{xs|count}}", R"({"xs": [1, 2, 3], "s": "héllo", "d": {"a": 1}})", "3 5 1 3"},
      {"[{{s|trim}}] [{{'--a--'|trim('-')}}]", R"({"s": "\t x y \n"})", "[x y] [a]"},
      {"{{s|lower}} {{s|upper}} {{s|replace('l', 'L')}} {{5|string}}{{[1]|string}}", R"({"s": "Hello"})",
       "hello HELLO HeLLo 5[1]"},
      {"{{xs|first}} {{xs|last}} {{'abc'|first}}", R"({"xs": [3, 4, 5]})", "3 5 a"},
      {"{{missing|default('none given')}} {{present|default('x')}} {{''|default('e', true)}} {{d.k|default(1)}}",
       R"({"present": "here", "d": {}})", "none given here e 1"},
      {"{{'ab'|list}} {{xs|list}}", R"({"xs": [1]})", "['a', 'b'] [1]"},
      // operators
      {"{{1 + 2 * 3}} {{(1 + 2) * 3}} {{7 // 2}} {{ -7 // 2 }} {{7 % 3}} {{ -7 % 3 }} {{7 / 2}} {{2 ** 3 ** 2}}", "{}",
       "7 9 3 -4 1 2 3.5 64"},
      {"{{ -7.5 // 2 }} {{7.5 % -2}} {{2 ** -1}} {{'ab' * 3}} {{[0] * 2}} {{ -x }}", R"({"x": 4})", "-4.0 -0.5 0.5 ababab [0, 0] -4"},
      {"{{'a' ~ 1 ~ none ~ [2]}} {{'x' + 'y'}} {{[1] + [2]}}", "{}", "a1None[2] xy [1, 2]"},
      {"{{1 < 2 < 3}} {{1 < 3 < 2}} {{'a' < 'b'}} {{[1, 2] < [1, 3]}} {{1 == 1.0}} {{true == 1}} {{'1' == 1}} {{2 != 3}}", "{}",
       "True False True True True True False True"},
      {"{{'ell' in s}} {{'z' not in s}} {{2 in xs}} {{'k' in d}} {{'z' in d}}", R"({"s": "hello", "xs": [1, 2], "d": {"k": 0}})",
       "True True True True False"},
      {"{{x and y}} {{x or y}} {{0 or ''}} {{not x}} {{not 0}} {{none or 'd'}}", R"({"x": "X", "y": "Y"})", "Y X  False True d"},
      {"{{'yes' if flag else 'no'}} {{'a' if 0 else 'b' if 1 else 'c'}}", R"({"flag": false})", "no b"},
      {"{{x is defined}} {{y is defined}} {{y is not defined}} {{x is none}} {{n is none}} {{x is string}} {{1 is number}} "
       "{{1.5 is integer}} {{d.k is defined}}",
       R"({"x": "v", "n": null, "d": {}})", "True False True False True True True False False"},
      // statements
      {"{% if a %}A{% elif b %}B{% else %}C{% endif %}", R"({"a": 0, "b": "x"})", "B"},
      {"{% if a %}A{% elif b %}B{% else %}C{% endif %}", R"({"a": [], "b": ""})", "C"},
      {"{% for x in xs %}{{loop.index}}:{{x}}{% if not loop.last %}, {% endif %}{% endfor %}", R"({"xs": ["a", "b", "c"]})",
       "1:a, 2:b, 3:c"},
      {"{% for x in xs %}{{loop.index0}}{{loop.first}}{{loop.revindex}}{{loop.length}} {% endfor %}", R"({"xs": [5, 6]})",
       "0True22 1False12 "},
      {"{% for x in xs %}[{{x}}]{% else %}empty{% endfor %}", R"({"xs": []})", "empty"},
      {"{% for x in xs if x > 1 %}{{x}}/{{loop.length}} {% endfor %}", R"({"xs": [1, 2, 3]})", "2/2 3/2 "},
      {"{% for i in range(3) %}{{i}}{% endfor %}|{% for i in range(1, 7, 2) %}{{i}}{% endfor %}|{{range(3)}}", "{}",
       "012|135|range(0, 3)"},
      {"{% for i in range(choices['text']|length) %}\t{{ 'ABCD'[i] }}: {{ choices['text'][i] }}\n{% endfor %}",
       R"({"choices": {"text": ["red", "blue"]}})", "\tA: red\n\tB: blue\n"},
      {"{% for a in xs %}{% for b in ys %}{{a}}{{b}}{{loop.index}} {% endfor %}{{loop.index}}|{% endfor %}",
       R"({"xs": [1, 2], "ys": ["x", "y"]})", "1x1 1y2 1|2x1 2y2 2|"},
      {"{% set x = 'outer' %}{% for i in [1, 2] %}{{x}}{% set x = i %}{{x}} {% endfor %}{{x}}", "{}", "outer1 outer2 outer"},
      {"{% if true %}{% set y = 5 %}{% endif %}{{y}}", "{}", "5"},
      {"{% set prompt_qa = 'Q: a?\nA: b.' %}{{prompt_qa + '\n\nQ: ' + question + '\nA:'}}", R"({"question": "c?"})",
       "Q: a?\nA: b.\n\nQ: c?\nA:"},
      {"{% set block %}X{{1+1}}Y{% endset %}[{{block}}]", "{}", "[X2Y]"},
      {"{% raw %}{{ not rendered }}{% endraw %}", "{}", "{{ not rendered }}"},
      // whitespace control
      {"a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}  \n  c", "{}", "abc"},
      {"a \n {{- x -}} \n b", R"({"x": "X"})", "aXb"},
      {"a \n {#- c -#} \n b", "{}", "ab"},
      {"a\n{% if true %}\nb\n{% endif %}\nc", "{}", "a\n\nb\n\nc"},
      {"a\n{%+ if true +%}b{% endif %}", "{}", "a\nb"},
      {"{{question_stem.strip()}}\n{% for i in range(choices['label'] | length) -%}\n{{choices['label'][i]}}. "
       "{{choices['text'][i]}}\n{% endfor -%}\nAnswer:",
       R"({"question_stem": " What? ", "choices": {"label": ["A", "B"], "text": ["x", "y"]}})", "What?\nA. x\nB. y\nAnswer:"},
      // literals
      {"{{0x1F}} {{0o17}} {{0b101}} {{1_000}} {{1.5e3}} {{'a' 'b'}} {{\"q\\u00e9\"}}", "{}", "31 15 5 1000 1500.0 ab qé"},
      {"{{ {'a': 1}['a'] }}", "{}", "1"},
  };
  return cases;
}
