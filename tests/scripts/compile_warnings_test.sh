#!/usr/bin/env bash
# ctest "scripts.compile_warnings": each SOURCE compiles without a warning when built as the build
# directory compiles it (its command from compile_commands.json, -Wall -Wextra and the build type's -O),
# with -Werror added and the object written to a temporary file. Guards the sources whose inlined
# std::string code GCC 12's -Wrestrict has misread.
# Usage: compile_warnings_test.sh BUILD_DIR SOURCE...
set -uo pipefail
build=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -f "$build/compile_commands.json" ] || fail "$build/compile_commands.json: not found (CMAKE_EXPORT_COMPILE_COMMANDS)"
for src in "$@"; do
  # the command as a shell line, its -o replaced by the temporary object and -Werror added
  cmd=$(/usr/bin/python3 - "$build/compile_commands.json" "$src" "$tmp/out.o" <<'PY'
import json, shlex, sys
db, src, out = sys.argv[1:]
for e in json.load(open(db)):
    if e["file"] == src:
        args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
        i = args.index("-o")
        args[i + 1] = out
        print(shlex.quote(e["directory"]), shlex.join(args + ["-Werror"]))
        break
PY
  )
  [ -n "$cmd" ] || fail "$src: not in $build/compile_commands.json"
  read -r dir line <<<"$cmd"
  out=$(eval "cd $dir && $line" 2>&1) || fail "$src: compiler output with -Werror:
$out"
  echo "$src: no warning"
done
