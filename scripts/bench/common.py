"""What the benchmark scripts share: the MPI launcher, timing a collective on every rank, and printing a Markdown
table then writing it with its records as JSON under scripts/results/NAME-DATE.json."""
import glob
import json
import os
import shutil
import subprocess
import sys
import time

from scripts import RESULTS, ROOT


def revision_tree(rev, where):
    """A clean git worktree of rev at `where` with this checkout's compiled kernels (the same kernels at both
    revisions of a side-by-side comparison); its own mpinn/ is what runs there (PYTHONPATH=where)."""
    shutil.rmtree(where, ignore_errors=True)
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-f", where, rev], check=True,
                   capture_output=True)
    for so in glob.glob(os.path.join(ROOT, "mpinn", "optim", "*.so")):
        shutil.copy(so, os.path.join(where, "mpinn", "optim"))
    return where


def mpiexec():
    """The launcher beside this Python (the mpich wheel's), else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec") or "mpiexec"


def timed_on_all_ranks(comm, fn, reps):
    """The slowest rank's median time of fn() over reps runs (one warm-up), each run started together
    (mpinn.comm.timing's, the network probe's)."""
    # start-up: mpi4py starts MPI at import, and the scripts that only launch mpiexec import this module too
    from mpinn.comm.timing import timed_on_all_ranks as timed
    return timed(comm, fn, reps)


def command_module():
    """The running script as python -m names it (scripts.bench.NAME), for the records' "command"."""
    main = sys.modules["__main__"]
    return main.__spec__.name.replace(".__main__", "") if main.__spec__ else os.path.basename(sys.argv[0])


def print_and_save(name, table, record):
    """Print the table, then write record (with the table, the command and the time) as JSON."""
    print()
    print(table)
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, "%s-%s.json" % (name, time.strftime("%Y-%m-%d")))
    record = dict(record, table=table, time=time.strftime("%Y-%m-%dT%H:%M:%S"),
                  command=" ".join(["python", "-m", command_module()] + sys.argv[1:]))
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
    return path


def w4_day_files(d, rows, files, scale, jobs=2):
    """The directory d of `files` W4 text files (day_0.tsv ...) holding the log's first `rows` rows in order, made
    `jobs` at a time, once: a hidden manifest says what is there, and a directory that matches it is reused."""
    import subprocess
    os.makedirs(d, exist_ok=True)
    manifest = os.path.join(d, ".made.json")
    want = {"rows": rows, "files": files, "scale": scale}
    if os.path.exists(manifest) and json.load(open(manifest)) == want:
        return d
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    per = [rows // files + (i < rows % files) for i in range(files)]
    running = []
    for i in range(files):
        running.append(subprocess.Popen([sys.executable, "-m", "mpinn.bench.w4", "--rows", str(per[i]), "--start",
                                         str(sum(per[:i])), "--scale", str(scale), "--out",
                                         os.path.join(d, "day_%d.tsv" % i), "--quiet"]))
        if len(running) >= jobs:
            assert running.pop(0).wait() == 0
    assert all(p.wait() == 0 for p in running)
    json.dump(want, open(manifest, "w"))
    return d
