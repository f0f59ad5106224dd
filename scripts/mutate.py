#!/usr/bin/python3
"""Mutation check of the test suite: small deliberate bugs, one at a time.

Copies the working tree (tracked and untracked, not ignored files) to a scratch directory outside the
repository, builds it once (Release; through ccache when installed) and runs every ctest test, then each
fast-path suite alone (below), as a baseline that must pass. Then, for each mutation: patches one exact snippet of one source file (failing loudly, before
anything is built, when the snippet is not found exactly once), decides whether a test catches it, and
restores the file. Two paths decide:
  suite  the fast path: only the test executables of the mutation's doctest suites are rebuilt
         (cmake --build --target test_<layer>) and only those suites run, each as ctest runs its layer
         (same environment, directory and timeout; --test-suite-exclude=*/stories260K, then the suite's
         <suite>/stories260K cases with --model-part). The suites are Mutation.suites when given, else
         those mirroring the file: <layer>.<stem> and the suites of tests/<layer>/test_<stem>.cpp for
         src/<layer>/.../<stem>.cpp or .hpp. A failing suite (non-zero exit, a crash, a timeout) catches it.
  ctest  otherwise (no suite, every suite passed, or their build failed): the full build and every ctest
         test with --stop-on-failure; a failing test catches it, none SURVIVED. When a doctest suite
         catches it here, the line suggests the suites= hint that makes the next run take the fast path.
Prints one line per mutation (status, time, path, what the bug is), the test cases that caught it, the
count per path and the score; exits 1 if a mutation survived or did not build, 2 when a snippet is missing,
a suites= hint names no suite, or the baseline fails. The mutations are listed in scripts/mutations.py.

Usage: scripts/mutate.py [--list] [--keep] [--full] [--jobs N] [NAME ...]
       (--full: no fast path, the full build and ctest for every mutation)
Env:   KVEVAL_MUTATE_DIR (parent of the scratch copy, default the system temp
       dir), KVEVAL_MODEL (model file, default models/stories260K.gguf),
       CCACHE_DIR. Standard library only.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mutations import MUTATIONS  # noqa: E402  (the table, scripts/mutations.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, cwd, log, env=None, timeout=None):
    """Runs `cmd`, appending its output to `log`; returns (exit code, output). Raises
    subprocess.TimeoutExpired after `timeout` seconds (the process is killed)."""
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        with open(log, "a") as f:
            f.write("$ " + " ".join(cmd) + f"\nTIMEOUT after {timeout:.0f} s\n")
        raise
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + p.stdout + "\n")
    return p.returncode, p.stdout


def copy_tree(dst):
    files = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           stdout=subprocess.PIPE).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src):
            continue  # deleted in the work tree
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dst, rel))


def catchers(output):
    """The failing ctest tests, doctest test cases and doctest suites named in ctest or doctest output. doctest
    prints a case's header (TEST SUITE:, TEST CASE:) for a MESSAGE or WARN too: only blocks (between its ====
    lines) that report an ERROR or FATAL ERROR (failed checks, exceptions, crashes) name a failing case."""
    tests = re.findall(r"^\s*\d+ - (\S+) \((?:Failed|Timeout|SEGFAULT|Subprocess aborted|Exception|Child aborted)",
                       output, re.M)
    cases, suites = [], []
    for block in re.split(r"^={20,}$", output, flags=re.M):
        if not re.search(r"^\S.*?: (?:FATAL )?ERROR: ", block, re.M):
            continue
        for found, pattern in ((cases, r"^TEST CASE:\s+(.*)$"), (suites, r"^TEST SUITE:\s+(.*)$")):
            for c in re.findall(pattern, block, re.M):
                if c.strip() not in found:
                    found.append(c.strip())
    return tests, cases, suites


SUITE_DECL = re.compile(r"\bTEST_SUITE(?:_BEGIN)?\(\s*\"([^\"]+)\"")
MODEL_SUFFIX = "/stories260K"  # tests/test_skip.hpp: the suite of a suite's needs_model() cases
MODEL_FILTER = "--test-suite=*" + MODEL_SUFFIX  # the filter of ctest's <layer>.stories260K tests
CTEST_TIMEOUT = 300  # ctest --timeout: the limit of a test without a TIMEOUT property


def declared_suites(layer):
    """{tests/<layer>/... file: the doctest suites it declares, in order} from the test sources."""
    found = {}
    for d, _, names in os.walk(os.path.join(ROOT, "tests", layer)):
        for n in sorted(names):
            if n.endswith(".cpp"):
                text = open(os.path.join(d, n)).read()
                found[os.path.relpath(os.path.join(d, n), ROOT)] = list(dict.fromkeys(SUITE_DECL.findall(text)))
    return found


def fast_suites(m):
    """The doctest suites of m's fast path: m.suites, else those mirroring m.path = src/<layer>/.../<stem>.cpp
    (or .hpp): the suite <layer>.<stem> and every suite of tests/<layer>/test_<stem>.cpp; [] when none."""
    if m.suites:
        return list(m.suites)
    parts = m.path.split("/")
    layer, stem = parts[1], os.path.splitext(parts[-1])[0]
    declared = declared_suites(layer)
    out = list(declared.get(f"tests/{layer}/test_{stem}.cpp", []))
    if f"{layer}.{stem}" not in out and any(f"{layer}.{stem}" in v for v in declared.values()):
        out.insert(0, f"{layer}.{stem}")
    return out


def unknown_hints(chosen):
    """One line per suites= entry that no TEST_SUITE of tests/<layer>/ declares."""
    bad = []
    for m in chosen:
        for s in m.suites:
            layer = s.split(".")[0]
            if not any(s in v for v in declared_suites(layer).values()):
                bad.append(f"{m.name}: suites= names {s}, which no TEST_SUITE in tests/{layer}/ declares")
    return bad


class CtestTest:
    """One test as `ctest --show-only=json-v1` describes it: command, environment, directory, limits."""

    def __init__(self, t, build):
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        self.name, self.command = t["name"], list(t.get("command") or [])
        self.env = dict(e.split("=", 1) for e in props.get("ENVIRONMENT", []))
        self.cwd = props.get("WORKING_DIRECTORY", build)
        self.timeout = float(props.get("TIMEOUT", CTEST_TIMEOUT))
        self.skip_code = props.get("SKIP_RETURN_CODE")
        # pass/fail decided by the exit code alone: the fast path can repeat ctest's verdict
        self.plain = not ({"PASS_REGULAR_EXPRESSION", "FAIL_REGULAR_EXPRESSION", "SKIP_REGULAR_EXPRESSION",
                           "WILL_FAIL"} & props.keys())


def ctest_tests(build, log, env):
    """{name: CtestTest} of every test of the build."""
    rc, out = run(["ctest", "--test-dir", build, "--show-only=json-v1"], build, log, env)
    if rc != 0:
        raise RuntimeError(f"ctest --show-only failed (see {log})")
    return {t["name"]: CtestTest(t, build) for t in json.loads(out[out.index("{"):])["tests"]}


def listed_suites(t, log, env):
    """The doctest suites of the executable of ctest test t (`--list-test-suites`), model suites included."""
    rc, out = run([t.command[0], "--list-test-suites"], t.cwd, log, {**env, **t.env}, timeout=t.timeout)
    return set(re.findall(r"^([A-Za-z0-9_.]+(?:/[A-Za-z0-9_]+)?)$", out, re.M)) if rc == 0 else set()


def fast_runs(m, tests, listings):
    """[(suite, ctest test, command)] of m's fast path: each suite of fast_suites(m) that its layer's executable
    has, run as ctest runs that executable (environment, directory, timeout; `<layer>` excludes */stories260K,
    `<layer>.stories260K` takes --model-part) with --test-suite narrowed to the suite; then its model part."""
    runs = []
    for s in fast_suites(m):
        layer = s.split(".")[0]
        for suite, name in ((s, layer), (s + MODEL_SUFFIX, layer + MODEL_SUFFIX.replace("/", "."))):
            t = tests.get(name)
            if t is None or not t.plain or not t.command or suite not in listings.get(t.command[0], ()):
                continue
            if suite == s:
                runs.append((suite, t, t.command + [f"--test-suite={suite}"]))
            elif MODEL_FILTER in t.command:
                runs.append((suite, t, [f"--test-suite={suite}" if c == MODEL_FILTER else c for c in t.command]))
    return runs


def fast_path(runs, build, jobs, env, log):
    """Builds only the test executables of `runs` (CMake targets test_<layer> and their dependencies) and runs
    the suites in order until one fails (non-zero exit, a crash or the test's timeout; ctest's skip code is a
    pass). Returns (suite, failing test cases) for a failure, else why not: "passed" or "did not build"."""
    targets = sorted({"test_" + suite.split(".")[0] for suite, _, _ in runs})
    rc, _ = run(["cmake", "--build", build, "-j", str(jobs), "--target", *targets], build, log, env)
    if rc != 0:
        return "did not build"  # the full build says why
    for suite, t, cmd in runs:
        try:
            rc, out = run(cmd, t.cwd, log, {**env, **t.env}, timeout=t.timeout)
        except subprocess.TimeoutExpired:
            return suite, [f"timeout after {t.timeout:.0f} s"]
        if rc != 0 and not (t.skip_code is not None and rc == int(t.skip_code)):
            return suite, catchers(out)[1]
    return "passed"


def full_path(build_cmd, test_cmd, scratch, env, log):
    """The whole build and every ctest test up to the first failure: (status, tests, cases, suites)."""
    rc, out = run(build_cmd, scratch, log, env)
    if rc != 0:
        return "BUILD FAILED", [], [], []
    try:
        rc, out = run(test_cmd + ["--stop-on-failure"], scratch, log, env, timeout=1800)
    except subprocess.TimeoutExpired:
        rc, out = 1, "TIMEOUT"
    tests, cases, suites = catchers(out)
    return ("caught" if rc != 0 else "SURVIVED"), tests, cases, suites


def report(m, status, how, seconds, tests, cases, hint):
    print(f"{status:12} {m.name:30} ({seconds:.0f} s, {how}) {m.why}", flush=True)
    if cases:
        shown = cases[:4] + ([f"... {len(cases) - 4} more"] if len(cases) > 4 else [])
        print(f"{'':12} by {', '.join(tests)}: " + "; ".join(shown), flush=True)
    if hint:
        print(f"{'':12} suites= hint for a fast next run: {hint}", flush=True)


def try_mutation(m, ctx):
    """Applies m in the scratch copy, decides caught/SURVIVED/BUILD FAILED, restores the file, prints the
    result; returns (status, path) with path "suite" (its fast path) or "ctest" (the full build and ctest)."""
    t1 = time.time()
    path = os.path.join(ctx.scratch, m.path)
    original = open(path).read()
    with open(path, "w") as f:
        f.write(original.replace(m.old, m.new, 1))
    try:
        runs = [] if ctx.full else fast_runs(m, ctx.tests, ctx.listings)
        fast = fast_path(runs, ctx.build, ctx.jobs, ctx.env, ctx.log) if runs else None
        if isinstance(fast, tuple):
            report(m, "caught", f"suite {fast[0]}", time.time() - t1, [fast[0]], fast[1], None)
            return "caught", "suite"
        status, tests, cases, suites = full_path(ctx.build_cmd, ctx.test_cmd, ctx.scratch, ctx.env, ctx.log)
    finally:
        with open(path, "w") as f:
            f.write(original)
    how = "full ctest"
    if runs:
        how += f"; {', '.join(dict.fromkeys(s for s, _, _ in runs))} {fast}"
    elif not ctx.full:
        how += "; no suite for the fast path"
    bases = list(dict.fromkeys(s.removesuffix(MODEL_SUFFIX) for s in suites))
    hint = "suites=[" + ", ".join(f'"{s}"' for s in bases) + "]" if status == "caught" and bases else None
    report(m, status, how, time.time() - t1, tests, cases, hint)
    return status, "ctest"


def refuse_upfront(chosen):
    """Lines for every snippet not found exactly once and every unknown suites= hint."""
    missing = []
    for m in chosen:
        n = open(os.path.join(ROOT, m.path)).read().count(m.old)
        if n != 1:
            missing.append(f"{m.name}: {m.path}: snippet found {n} times: {m.old!r}")
    return missing + unknown_hints(chosen)


def baseline(ctx, configure):
    """Configures, builds everything, runs every ctest test (all must pass, none skipped) and reads the tests and
    the suites of their executables. Returns an error message or None."""
    for cmd in (configure, ctx.build_cmd):
        rc, out = run(cmd, ctx.scratch, ctx.log, ctx.env)
        if rc != 0:
            return f"mutate: baseline build failed (see {ctx.log})"
    rc, out = run(ctx.test_cmd, ctx.scratch, ctx.log, ctx.env)
    skipped = re.findall(r"\(Skipped\)", out)
    if rc != 0 or skipped:
        return f"mutate: the unmutated tree does not pass every test ({len(skipped)} skipped; see {ctx.log})"
    ctx.tests = ctest_tests(ctx.build, ctx.log, ctx.env)
    ctx.listings = {}
    for t in ctx.tests.values():
        if t.command and os.path.basename(t.command[0]).startswith("test_") and t.command[0] not in ctx.listings:
            ctx.listings[t.command[0]] = listed_suites(t, ctx.log, ctx.env)
    return None


def suites_pass_alone(ctx, chosen):
    """Runs each suite of the chosen mutations' fast paths once on the unmutated tree: a suite that fails alone
    (an order dependence the full ctest run hides) would catch every bug. Returns an error message or None."""
    seen = set()
    for m in [] if ctx.full else chosen:
        for suite, t, cmd in fast_runs(m, ctx.tests, ctx.listings):
            if tuple(cmd) not in seen:
                seen.add(tuple(cmd))
                if isinstance(fast_path([(suite, t, cmd)], ctx.build, ctx.jobs, ctx.env, ctx.log), tuple):
                    return f"mutate: suite {suite} fails alone on the unmutated tree (see {ctx.log})"
    return None


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="run only these mutations")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copy")
    ap.add_argument("--full", action="store_true", help="no fast path: the full build and ctest for every mutation")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    return ap.parse_args()


def main():
    a = parse_args()
    if a.list:
        for m in MUTATIONS:
            print(f"{m.name:30} {m.path:24} {m.why}")
        return 0
    chosen = [m for m in MUTATIONS if not a.names or m.name in a.names]
    unknown = set(a.names) - {m.name for m in MUTATIONS}
    if unknown:
        print("mutate: unknown mutation(s): " + ", ".join(sorted(unknown)), file=sys.stderr)
        return 2
    # Every snippet must be found exactly once, every hint must name a suite, before anything is built.
    missing = refuse_upfront(chosen)
    if missing:
        print("mutate: the code changed; update these mutations:\n  " + "\n  ".join(missing), file=sys.stderr)
        return 2

    model = os.path.abspath(os.environ.get("KVEVAL_MODEL", os.path.join(ROOT, "models", "stories260K.gguf")))
    if not os.path.isfile(model):
        print(f"mutate: model file {model} not found (run scripts/fetch-model.sh): most tests would be skipped",
              file=sys.stderr)
        return 2
    ctx = argparse.Namespace(full=a.full, jobs=a.jobs)
    ctx.scratch = tempfile.mkdtemp(prefix="kveval-mutate-", dir=os.environ.get("KVEVAL_MUTATE_DIR",
                                                                                tempfile.gettempdir()))
    ctx.log = os.path.join(ctx.scratch, "mutate.log")
    ctx.env = dict(os.environ)
    ctx.env.setdefault("CCACHE_DIR", os.path.join(os.path.dirname(ROOT), ".ccache"))
    ctx.env["CCACHE_BASEDIR"] = os.path.commonpath([ROOT, ctx.scratch])  # same relative paths: cache hits across trees
    print(f"mutate: scratch copy {ctx.scratch} (log {ctx.log})", flush=True)
    try:
        copy_tree(ctx.scratch)
        ctx.build = os.path.join(ctx.scratch, "build")
        configure = ["cmake", "-S", ctx.scratch, "-B", ctx.build, "-DCMAKE_BUILD_TYPE=Release",
                     *(["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else []),
                     f"-DKVEVAL_TEST_MODEL={model}",
                     f"-DKVEVAL_TEST_SHARED={os.path.join(os.path.dirname(ROOT), 'shared')}"]
        ctx.build_cmd = ["cmake", "--build", ctx.build, "-j", str(a.jobs)]
        ctx.test_cmd = ["ctest", "--test-dir", ctx.build, "-j", str(a.jobs), "--output-on-failure",
                        "--timeout", str(CTEST_TIMEOUT)]
        t0 = time.time()
        error = baseline(ctx, configure) or suites_pass_alone(ctx, chosen)
        if error:
            print(error, file=sys.stderr)
            return 2
        print(f"mutate: baseline built and passing ({time.time() - t0:.0f} s)", flush=True)
        results = [try_mutation(m, ctx) for m in chosen]
        caught = sum(1 for status, _ in results if status == "caught")
        by_suite = sum(1 for r in results if r == ("caught", "suite"))
        print(f"\npaths: {by_suite} caught by their suite, {caught - by_suite} by the full ctest; "
              f"{sum(1 for s, _ in results if s == 'SURVIVED')} survived, "
              f"{sum(1 for s, _ in results if s == 'BUILD FAILED')} did not build")
        print(f"mutation score: {caught}/{len(results)} caught "
              f"({time.time() - t0:.0f} s in all)")
        return 0 if caught == len(results) else 1
    finally:
        if a.keep:
            print(f"mutate: kept {ctx.scratch}")
        else:
            shutil.rmtree(ctx.scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
