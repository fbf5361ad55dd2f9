"""What the plan's layout promises (docs/architecture.md), held by reading the code: the job is probed in one
place; nothing in training asks a communicator or a step what it can do (the plan said it); option names appear
in errors only where the options live (mpinn/settings/) and in the readers' data errors; the API stays a thin
layer over the Run."""
import ast
import io
import os
import re
import tokenize

from conftest import ROOT

PACKAGE = os.path.join(ROOT, "mpinn")
FLAG = re.compile(r"--[a-z][a-z0-9-]+")
WHY = ("memory", "optional", "cycle", "start-up")     # the reasons an import may stay inside a function (issue 61)


def modules(under=PACKAGE):
    for folder, _, files in os.walk(under):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path) as f:
                    yield os.path.relpath(path, ROOT), ast.parse(f.read())


def calls(tree, names):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            if name in names:
                yield node


def test_the_job_is_probed_in_one_place():
    """Only mpinn.comm.topology asks MPI which ranks share a node (MPI_Comm_split_type)."""
    found = [(path, node.lineno) for path, tree in modules() for node in calls(tree, {"Split_type"})]
    assert {path for path, _ in found} == {os.path.join("mpinn", "comm", "topology.py")}, found


def test_training_never_asks_a_communicator_or_a_step_what_it_can_do():
    found = []
    for path, tree in modules(os.path.join(PACKAGE, "training")):
        for node in calls(tree, {"hasattr", "getattr"}):
            target = ast.unparse(node.args[0]) if node.args else ""
            if "comm" in target or "step" in target:
                found.append((path, node.lineno, ast.unparse(node)))
    assert not found, found


def flag_errors(path, tree):
    """The MpinnError (and Stopped) raised in a module whose text names a --flag: (line, the flags)."""
    out = []
    for node in calls(tree, {"MpinnError", "Stopped"}):
        flags = [m for sub in ast.walk(node) if isinstance(sub, ast.Constant) and isinstance(sub.value, str)
                 for m in FLAG.findall(sub.value)]
        if flags:
            out.append((path, node.lineno, flags))
    return out


def test_errors_name_options_only_where_the_options_live():
    """An error that names a --flag is raised by mpinn/settings/ (the option table, its rules, the plan, the
    messages about outcomes) or by a reader about the data it was given (mpinn/data/: a missing --label column,
    a --holdout-by column it cannot parse)."""
    allowed = (os.path.join("mpinn", "settings") + os.sep, os.path.join("mpinn", "data") + os.sep)
    found = [e for path, tree in modules() if not path.startswith(allowed) for e in flag_errors(path, tree)]
    assert not found, found


def test_the_check_sees_a_flag_in_an_error():
    tree = ast.parse('raise MpinnError("--resume %s: nothing there" % d)\nraise MpinnError("no flag here")')
    assert flag_errors("x.py", tree) == [("x.py", 1, ["--resume"])]


def test_the_api_stays_a_thin_layer():
    with open(os.path.join(PACKAGE, "api.py")) as f:
        assert sum(1 for _ in f) < 250


def imports_without_why(source, path="x.py"):
    """The import statements inside a function (or method) of `source` with no comment giving a reason (a word of
    WHY) on their line or the line above: (path, line, the statement)."""
    comments = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string
    out = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                said = " ".join(comments.get(n, "") for n in range(child.lineno - 1, child.end_lineno + 1))
                if not any(word in said for word in WHY):
                    out.append((path, child.lineno, ast.unparse(child)))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
    visit(ast.parse(source), False)
    return out


def test_imports_inside_functions_say_why():
    """Issue 61: an import sits at the top of its module, unless a comment says why it may not (memory: loaded
    after rank 0 reads its data; optional: a dependency that may be missing; cycle: the module imports this one;
    start-up: --help stays fast)."""
    found = []
    for folder, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
            if name.endswith(".py"):
                with open(path) as f:
                    found += imports_without_why(f.read(), rel)
    assert not found, "\n".join("%s:%d: %s" % f for f in found)


def test_the_check_sees_an_import_inside_a_function_without_a_reason():
    source = ("import os\n\n\ndef f():\n    import json\n    import cupy  # optional: cupy\n"
              "    # memory: after the data is read\n    from scipy import stats\n\n\n"
              "class C:\n    def m(self):\n        def inner():\n            from mpinn import api\n")
    assert imports_without_why(source) == [("x.py", 5, "import json"), ("x.py", 14, "from mpinn import api")]
