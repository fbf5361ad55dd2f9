"""What the test suite checks, counted: for a before-and-after when tests move (docs/testing.md).

    python -m scripts.suite_census [--root DIR] [--json OUT]

Counts, read from the tests' source (an AST walk of tests/**/*.py; nothing is run but pytest's collection):
- tests: what `python -m pytest --collect-only` collects, plus the multi-rank modules' (mpi_*.py) tests;
- assertions: `assert` statements and `pytest.raises(...)` calls;
- refusals: checks of a refusal's exit code or error: a comparison of `.returncode`/`rc`/`.code`/`.value.code`
  with 2, a `pytest.raises(MpinnError | SystemExit ...)`, and string constants holding "mpinn: error";
- multi-rank: the tests of mpi_*.py (each run at np 1, 2 and 3 by tests/test_mpi.py) times three, and the call
  sites that launch mpiexec with 2 or more ranks (`mpirun(N, ...)` with a literal N >= 2, or a variable N).
"""
import argparse
import ast
import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFUSAL_NAMES = {"returncode", "rc", "code"}
REFUSAL_ERRORS = {"MpinnError", "SystemExit", "UsageError"}


def _is_raises(node):
    f = node.func if isinstance(node, ast.Call) else None
    return isinstance(f, ast.Attribute) and f.attr == "raises" and isinstance(f.value, ast.Name) \
        and f.value.id == "pytest"


def _names_refusal(expr):
    return (isinstance(expr, ast.Attribute) and expr.attr in REFUSAL_NAMES) or \
        (isinstance(expr, ast.Name) and expr.id in REFUSAL_NAMES)


def count_file(path):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    out = dict(asserts=0, raises=0, refusals=0, launches_np2=0)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            out["asserts"] += 1
        elif isinstance(node, ast.Call) and _is_raises(node):
            out["raises"] += 1
            if node.args and isinstance(node.args[0], (ast.Name, ast.Attribute)):
                name = node.args[0].id if isinstance(node.args[0], ast.Name) else node.args[0].attr
                out["refusals"] += name in REFUSAL_ERRORS
        elif isinstance(node, ast.Compare) and any(isinstance(o, (ast.Eq, ast.In)) for o in node.ops):
            sides = [node.left] + node.comparators
            if any(_names_refusal(s) for s in sides) and \
                    any(isinstance(s, ast.Constant) and s.value == 2 for s in sides):
                out["refusals"] += 1
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "mpinn: error" in node.value:
            out["refusals"] += 1
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("mpirun", "mpi_run") \
                and node.args:
            n = node.args[0]
            out["launches_np2"] += not (isinstance(n, ast.Constant) and isinstance(n.value, int) and n.value < 2)
    return out


def collected(root, *extra):
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-n", "0",
                        "tests"] + list(extra), cwd=root, capture_output=True, text=True)
    ids = [line for line in r.stdout.splitlines() if "::" in line]
    if not ids:
        raise SystemExit("scripts.suite_census: pytest collected nothing in %s:\n%s" % (root, r.stdout[-2000:]))
    return ids


def census(root):
    files = sorted(glob.glob(os.path.join(root, "tests", "**", "*.py"), recursive=True))
    totals = dict(asserts=0, raises=0, refusals=0, launches_np2=0)
    for path in files:
        for k, v in count_file(path).items():
            totals[k] += v
    plain = collected(root)
    ranked = collected(root, "-o", "python_files=mpi_*.py")
    ranked = [t for t in ranked if "/mpi_" in t or t.startswith("tests/mpi_")]
    return dict(tests=len(plain), mpi_module_tests=len(ranked), multi_rank_cases_np123=3 * len(ranked),
                assertions=totals["asserts"] + totals["raises"], **totals)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.suite_census", description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=HERE, help="the checkout to count (default: this one)")
    p.add_argument("--json", help="also write the counts here")
    args = p.parse_args(argv)
    counts = census(os.path.abspath(args.root))
    for k, v in counts.items():
        print("%-24s %d" % (k, v))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(counts, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
