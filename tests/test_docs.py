"""The README and the user guide cannot drift from the code: every command in an `sh` block runs here (in a
directory holding the small files the examples name), the Python in the README runs, the API page shows
scripts/api_example.py as it is and what it prints, the architecture page names every package, and every script
under scripts/ answers --help (python -m scripts.bench.NAME --help, from the repository root, run in this
process). (`text` blocks are
output, or commands for a cluster or for minutes-long benchmarks: the cluster ones run in tests/cluster/, the
benchmarks are scripts.)"""
import glob
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, api_page_output, masked_rates, mpirun, run
from launch import in_process
from mpinn.bench.tour import FILES, write_tour_files

PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
# the README's install and test commands are what .ci/run runs (CI runs them): not run again from inside the suite
NOT_HERE = ('pip install -e ".[test]"', "python -m pytest")


def blocks(path, kind):
    """The fenced blocks of `kind` in a page: [(line number, text)]."""
    out, lines, start = [], open(path).read().split("\n"), None
    for i, line in enumerate(lines):
        if line.startswith("```"):
            if start is None:
                start, info = i, line[3:].strip()
            else:
                if info == kind:
                    out.append((start + 1, "\n".join(lines[start + 1:i])))
                start = None
    return out


def commands(text):
    """The block's command lines: continuations joined, comments and blank lines left out."""
    out, cur = [], ""
    for line in text.split("\n"):
        line = line.rstrip()
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        cmd = cur.split("  #")[0].strip() if not cur.lstrip().startswith("#") else ""
        cur = ""
        if cmd:
            out.append(cmd)
    return out


SH = [(os.path.relpath(p, ROOT), n, cmd) for p in PAGES for n, text in blocks(p, "sh") for cmd in commands(text)]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The files the examples name: the tour's (clicks.csv, -valid, -test: mpinn.bench.tour, which the README's
    first command of the tour runs too); hostfiles/ and scripts/ as in the repository."""
    d = tmp_path_factory.mktemp("docs")
    write_tour_files(str(d))
    for sub in ("hostfiles", "scripts"):
        os.symlink(os.path.join(ROOT, sub), d / sub)
    return d


def test_the_pages_have_commands_to_run():
    assert len(SH) >= 10, SH
    assert any(cmd == "mpirun -np 2 python -m mpinn.train" for _, _, cmd in SH)


def test_the_tour_makes_the_files_it_trains_on_from_nothing(tmp_path):
    """A fresh clone has no clicks.csv: the README's tour makes them (the command it shows, in an empty directory)
    before its first command that reads one, and they are the files the docs' commands run on here."""
    readme = [cmd for page, _, cmd in SH if page == "README.md"]
    make = readme.index("python -m mpinn.bench.tour")
    assert make < min(i for i, cmd in enumerate(readme) if "clicks" in cmd)
    r = run([sys.executable, "-m", "mpinn.bench.tour"], cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    reference = tmp_path / "reference"
    write_tour_files(str(reference))
    for name, rows, _ in FILES:
        made = (tmp_path / name).read_text()
        assert made == (reference / name).read_text() and len(made.splitlines()) == rows + 1


def test_the_readme_install_and_test_commands_are_what_ci_runs():
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        ci = f.read()
    readme = [cmd for page, _, cmd in SH if page == "README.md" and cmd.startswith(NOT_HERE)]
    assert sorted(readme) == sorted(NOT_HERE)
    for cmd in readme:
        assert re.search(r"^%s\s" % re.escape(cmd), ci, re.M), cmd


FIRST_RUN_COMMAND = "mpirun -np 2 python -m mpinn.train"     # the README's first run, whose output it shows
FIRST_RUN = []          # its output, as test_every_shown_command_runs ran it
SHELL = {">", ">>", "|", "&&", "||", ";", "<"}        # a command holding one of these runs in bash


@pytest.mark.mpi
@pytest.mark.parametrize("page,line,cmd", [c for c in SH if not c[2].startswith(NOT_HERE)],
                         ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None)
def test_every_shown_command_runs(page, line, cmd, workdir, launcher):
    env = {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    words = shlex.split(cmd)
    if set(words) & SHELL:
        r = run(["bash", "-c", cmd], timeout=300, env=env, cwd=str(workdir))
    elif words[:2] == ["python", "-m"]:         # one of mpinn's commands: in this process (tests/launch.py)
        r = run([sys.executable] + words[1:], timeout=300, cwd=str(workdir))
    elif words[:3] == ["mpirun", "-np", "2"] and words[3:5] == ["python", "-m"]:   # on warm ranks, where they serve
        r = mpirun(2, words[4:], timeout=300, cwd=str(workdir))
    else:
        r = run(["bash", "-c", cmd], timeout=300, env=env, cwd=str(workdir))
    assert r.returncode == 0, "%s:%d: %s\n%s\n%s" % (page, line, cmd, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    if page == "README.md" and cmd == FIRST_RUN_COMMAND:
        FIRST_RUN.append(r.stdout)
    if cmd.endswith("scripts/api_example.py"):      # the API page shows what it prints (samples/s aside: the machine's)
        assert masked_rates(r.stdout) == api_page_output()


def stable(text):
    """The lines of a run's output that the machine's speed does not change: not the kernels' path, the progress
    bar, the done line's rates nor the memory; the seconds at a line's end left out; a model file replaced (a run
    again in the same directory) read as one written."""
    out = []
    for line in text.strip().split("\n"):
        if not line.startswith(("kernels:", "done:", "peak memory")) and not re.match(r"epoch \d+/\d+ \[", line):
            line = re.sub(r"\s+\(\d+(\.\d+)? s\)$", "", line).replace(" (replacing the file there)", "")
            out.append(re.sub(r"; \S+ exists and will be replaced at the end$", "", line))
    return out


@pytest.mark.mpi
def test_the_readme_shows_what_its_first_run_prints(tmp_path, launcher):
    """The README's first transcript is the real output of its first command (the run test_every_shown_command_runs
    made, or one made here): every stable line, in order."""
    (_, shown), = [(n, text) for n, text in blocks(os.path.join(ROOT, "README.md"), "text")
                   if text.startswith("device:")][:1]
    if not FIRST_RUN:
        r = mpirun(2, shlex.split(FIRST_RUN_COMMAND)[4:], timeout=300, cwd=str(tmp_path))
        assert r.returncode == 0, r.stderr
        FIRST_RUN.append(r.stdout)
    assert stable(shown) == stable(FIRST_RUN[-1])


@pytest.mark.launch
def test_the_readme_python_runs(workdir):
    for line, code in blocks(os.path.join(ROOT, "README.md"), "python"):
        r = run([sys.executable, "-c", code], timeout=300, cwd=str(workdir))
        assert r.returncode == 0, "README.md:%d\n%s" % (line, r.stderr[-3000:])


def test_the_api_page_shows_the_example_script_as_it_is():
    (_, shown), = blocks(os.path.join(ROOT, "docs", "api.md"), "python")
    with open(os.path.join(ROOT, "scripts", "api_example.py")) as f:
        script = f.read()
    assert shown.strip() in script


def test_the_architecture_page_names_every_package():
    with open(os.path.join(ROOT, "docs", "architecture.md")) as f:
        page = f.read()
    packages = sorted("mpinn." + os.path.basename(os.path.dirname(p))
                      for p in glob.glob(os.path.join(ROOT, "mpinn", "*", "__init__.py")))
    assert packages and all("`%s`" % p in page for p in packages), [p for p in packages if "`%s`" % p not in page]


# the modules under scripts/ that the scripts import and nobody runs
SCRIPT_PARTS = {"scripts/bench/common.py", "scripts/bench/cluster_model/costs.py",
                "scripts/bench/cluster_model/model.py", "scripts/bench/cluster_model/report.py",
                "scripts/bench/cluster_model/levers.py",
                "scripts/bench/larger_than_memory/cgroup.py", "scripts/bench/larger_than_memory/runs.py"}


def script_modules():
    """Every script under scripts/ as `python -m` names it, run from the repository root: each module but the
    packages' __init__.py and SCRIPT_PARTS, a package by its __main__.py."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "scripts", "**", "*.py"), recursive=True)):
        rel = os.path.relpath(path, ROOT)
        if os.path.basename(rel) != "__init__.py" and rel not in SCRIPT_PARTS:
            out.append(rel[:-len(".py")].replace(os.sep, ".").replace(".__main__", ""))
    return out


def test_the_script_parts_are_there():
    assert all(os.path.exists(os.path.join(ROOT, p)) for p in SCRIPT_PARTS)
    assert len(script_modules()) >= 20 and "scripts.bench.cluster_model" in script_modules()


@pytest.mark.parametrize("module", script_modules())
def test_every_script_answers_help(module):
    """Each script's --help, answered in this process (tests/launch.py: run as `python -m` runs it)."""
    r = in_process(module, ["--help"], timeout=60)
    assert r.returncode == 0 and "usage:" in r.stdout, (module, r.stdout[-500:], r.stderr[-1500:])


def test_every_path_under_scripts_the_pages_name_is_there():
    """A moved or removed script or result file cannot stay named in the docs (DATE, NAME and * match any)."""
    missing = []
    for page in PAGES:
        with open(page) as f:
            for path in re.findall(r"scripts/[\w.*/-]+", f.read()):
                pattern = re.sub(r"DATE|NAME", "*", path.rstrip(".,"))
                if not glob.glob(os.path.join(ROOT, pattern)):
                    missing.append((os.path.relpath(page, ROOT), path))
    assert missing == []


@pytest.mark.launch
def test_nothing_foreign_is_tracked():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not files:
        pytest.skip("not a git checkout")
    assert not [f for f in files if f.endswith((".whl", ".tar.gz", ".zip", ".so"))]
    outside, parent = [], ".." + "/shared"      # (spelt so that this file does not name it)
    for f in files:
        if f.endswith((".py", ".md", ".cfg", ".sh", ".toml", ".sbatch")):
            with open(os.path.join(ROOT, f), errors="replace") as fh:
                if parent in fh.read():
                    outside.append(f)
    assert outside == [], "files that point outside the repository: %s" % outside
