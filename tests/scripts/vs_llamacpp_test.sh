#!/bin/bash
# scripts/vs_llamacpp.py against stand-ins for llama-bench and kveval that print
# fixed JSON: the table's cells and ratios are checked against hand-computed
# values, and a failing run must stop the script with one line and status 1.
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
touch "$tmp/m.gguf"
cat > "$tmp/llama-bench" <<'SH'
#!/bin/bash
[ -n "${FAIL_LLAMA:-}" ] && { echo "error: failed to load model" >&2; exit 1; }
echo '[{"build_commit":"abc1234","n_prompt":512,"n_gen":0,"avg_ts":500.0},{"build_commit":"abc1234","n_prompt":0,"n_gen":128,"avg_ts":50.0}]'
SH
cat > "$tmp/kveval" <<'SH'
#!/bin/bash
case " $* " in
  *" --tests load "*) echo '{"meta":{"model":{"tensor_types":{"F32":13,"Q8_0":84}}},"results":[]}' ;;
  *) cat <<'JSON'
{"meta":{"git_hash":"def5678"},"results":[
 {"test":"pp","name":"pp512","dtype":"f32","median":900.0},
 {"test":"pp","name":"pp512 last","dtype":"f32","median":1000.0},
 {"test":"tg","name":"tg128","dtype":"f32","median":60.0},
 {"test":"pp","name":"pp512 last","dtype":"bf16","median":1600.0},
 {"test":"tg","name":"tg128","dtype":"bf16","median":100.0},
 {"test":"pp","name":"pp512 last","dtype":"q8_0","median":800.0},
 {"test":"tg","name":"tg128","dtype":"q8_0","median":120.0}]}
JSON
  ;;
esac
SH
chmod +x "$tmp/llama-bench" "$tmp/kveval"
out=$(/usr/bin/python3 "$src/scripts/vs_llamacpp.py" --llama-bench "$tmp/llama-bench" --kveval "$tmp/kveval" -t 1 "$tmp/m.gguf" 2>/dev/null)
# pp: best 1600 / 500 = 3.20, bf16/f32 1.60; tg: best 120 / 50 = 2.40, bf16/f32 100 / 60 = 1.67
want='| m.gguf | 1 | 500 | 1000 | 1600 | 800 | 1.60× | **3.20×** | 50 | 60 | 100 | 120 | 1.67× | **2.40×** |'
grep -qxF -- "$want" <<<"$out" || { echo "FAIL: row not found; got:"; echo "$out"; exit 1; }
grep -q 'abc1234 / def5678' <<<"$out" || { echo "FAIL: commits missing"; echo "$out"; exit 1; }
# A failing llama-bench: status 1, one line naming the command and its last error line.
set +e
err=$(FAIL_LLAMA=1 /usr/bin/python3 "$src/scripts/vs_llamacpp.py" --llama-bench "$tmp/llama-bench" --kveval "$tmp/kveval" -t 1 "$tmp/m.gguf" 2>&1 >/dev/null)
rc=$?
set -e
[ "$rc" = 1 ] || { echo "FAIL: status $rc for a failing llama-bench"; exit 1; }
[ "$(wc -l <<<"$err")" = 1 ] && grep -q 'failed: error: failed to load model' <<<"$err" || { echo "FAIL: error line: $err"; exit 1; }
# A missing file is refused before anything runs.
set +e
err=$(/usr/bin/python3 "$src/scripts/vs_llamacpp.py" --llama-bench "$tmp/llama-bench" "$tmp/none.gguf" 2>&1)
rc=$?
set -e
[ "$rc" = 1 ] && grep -q 'none.gguf: no such file' <<<"$err" || { echo "FAIL: missing file: rc $rc, $err"; exit 1; }
echo "vs_llamacpp: OK"
