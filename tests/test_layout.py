"""The package's shape holds: the layers of docs/style.md (import-linter's contracts in setup.cfg), no
import circles (in mpinn, and among the scripts), no module past the size where it wants splitting (mpinn/,
scripts/, tests/)."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, run

MAX_LINES = 400
LONGER = {}     # module path -> why it may be longer (none today)


@pytest.mark.launch
def test_import_contracts_hold():
    lint = shutil.which("lint-imports") or os.path.join(os.path.dirname(sys.executable), "lint-imports")
    r = run([lint, "--no-logo", "--no-cache"], timeout=120)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def import_circles(package="mpinn"):
    """Pairs (a, b) of the package's modules where a imports b and b reaches a again (any import, lazy ones too)."""
    import grimp
    graph = grimp.build_graph(package)
    circles = []
    for m in sorted(graph.modules):
        for dep in sorted(graph.find_modules_directly_imported_by(m)):
            if dep.startswith(package) and dep != m and graph.find_shortest_chain(importer=dep, imported=m):
                circles.append((m, dep))
    return circles


def test_no_import_circles():
    assert import_circles() == []


def test_no_import_circles_among_the_scripts():
    assert import_circles("scripts") == []


def test_modules_stay_small():
    long = {}
    for top in ("mpinn", "scripts", "tests"):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.relpath(os.path.join(folder, name), ROOT)
                    with open(os.path.join(ROOT, path)) as f:
                        n = sum(1 for _ in f)
                    if n > MAX_LINES and path not in LONGER:
                        long[path] = n
    assert not long, "split these along their seams (or say why in LONGER): %s" % long


@pytest.mark.launch
def test_import_mpinn_needs_no_mpi_and_no_gpu():
    """import mpinn and the single-process modules start neither MPI nor cupy."""
    code = ("import sys, mpinn, mpinn.model.mlp, mpinn.optim, mpinn.data, mpinn.hashing, mpinn.inference.score, "
            "mpinn.predict; "
            "print(sorted(m for m in ('mpi4py.MPI', 'cupy') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
