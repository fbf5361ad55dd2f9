"""One run of mpinn.train on a packed file, its file evicted from the page cache first, its ranks' memory watched
from /proc; and the verdict on two runs' models (bit for bit)."""
import json
import os
import subprocess
import sys
import time

from scripts.bench.common import mpiexec
from scripts.bench.larger_than_memory.cgroup import kill, read

# Each rank runs mpinn.train in this wrapper, in the same process: at exit it writes its peak resident set
# (VmHWM, kB) to $MPINN_LTM_DIR/peak-rank<PMI_RANK>.txt. No numpy before mpinn.train pins the BLAS threads.
RANK_WRAPPER = """
import atexit, os, runpy
def _peak():
    with open("/proc/self/status") as f:
        kb = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    name = "peak-rank%s.txt" % os.environ.get("PMI_RANK", "0")
    with open(os.path.join(os.environ["MPINN_LTM_DIR"], name), "w") as f:
        f.write(kb)
atexit.register(_peak)
runpy.run_module("mpinn.train", run_name="__main__", alter_sys=True)
"""


def _files(path):
    return [os.path.join(path, f) for f in sorted(os.listdir(path))] if os.path.isdir(path) else [path]


def evict(path):
    """Drop the file's pages from the page cache (a directory: its files'): the run reads them again, and its group
    is charged for them (a page is charged to the group that brings it in: pages the generator left cached would
    come free)."""
    if os.path.isdir(path):
        for f in _files(path):
            evict(f)
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cached_share(path):
    """The share of the file's pages in the page cache (mincore; a directory: of its files' pages)."""
    import numpy as np
    from mpinn.host.memory import resident_bytes
    files = _files(path)
    size = sum(os.path.getsize(f) for f in files)
    return sum(resident_bytes(np.memmap(f, dtype=np.uint8, mode="r")) for f in files if os.path.getsize(f)) / size \
        if size else 0.0


def _job(run_dir):
    """{pid: its PMI_RANK, None for the launcher and its proxy} of every process of the run in run_dir: they
    carry MPINN_LTM_DIR=run_dir (hydra puts each rank in a process group of its own, so no group kill does)."""
    out = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = read("/proc/%s/environ" % d).split("\0")
        except (OSError, UnicodeDecodeError):
            continue
        if "MPINN_LTM_DIR=" + run_dir in env:
            rank = next((v[len("PMI_RANK="):] for v in env if v.startswith("PMI_RANK=")), None)
            out[int(d)] = None if rank is None else int(rank)
    return out


def _rss_anon_kb(pid):
    try:
        return next(int(line.split()[1]) for line in read("/proc/%d/status" % pid).splitlines()
                    if line.startswith("RssAnon:"))
    except (OSError, StopIteration):
        return 0


def run_training(data, run_dir, train_args, np_=2, timeout=1200, group=None, prlimit_bytes=None, say=print):
    """One run of mpinn.train with train_args on data at np_ ranks, in run_dir (model.npz, metrics.json,
    log.txt), inside group (a MemoryGroup) or with each rank under prlimit --data; the file is evicted first."""
    os.makedirs(run_dir, exist_ok=True)
    evict(data)
    cached = cached_share(data)
    wrap = ["prlimit", "--data=%d" % prlimit_bytes] if prlimit_bytes else []
    # relative output names, run in run_dir: the command, and so the model file's header, is the same every run
    cmd = [mpiexec(), "-n", str(np_)] + wrap + [sys.executable, "-c", RANK_WRAPPER, "--data", os.path.abspath(data),
                                                 "--model-out", "model.npz", "--metrics-out", "metrics.json"]
    env = dict(os.environ, MPINN_LTM_DIR=run_dir, PYTHONUNBUFFERED="1")
    log = os.path.join(run_dir, "log.txt")
    anon, timed_out = {}, False
    t0 = time.perf_counter()
    note = t0 + 30
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd + list(train_args), stdout=out, stderr=subprocess.STDOUT, cwd=run_dir, env=env,
                                start_new_session=True, preexec_fn=group.enter if group else None)
        while proc.poll() is None:
            for pid, rank in _job(run_dir).items():
                if rank is not None:
                    anon[rank] = max(anon.get(rank, 0), _rss_anon_kb(pid))
            if group:
                group.sample()
            now = time.perf_counter()
            if now - t0 > timeout:
                timed_out = True
                kill([proc.pid] + list(_job(run_dir)))
                proc.wait()
            elif now > note:
                say("  ... %.0f s" % (now - t0))
                note = now + 30
            time.sleep(0.25)
    seconds = time.perf_counter() - t0
    peak = [os.path.join(run_dir, "peak-rank%d.txt" % r) for r in range(np_)]
    metrics = os.path.join(run_dir, "metrics.json")
    summary = json.loads(read(metrics))["summary"] if proc.returncode == 0 and os.path.exists(metrics) else {}
    return {"exit": proc.returncode, "timed_out": timed_out, "seconds": seconds, "file_cached_before": cached,
            "rows": summary.get("samples"), "rows_per_s": summary.get("samples_per_s"),
            "peak_rss_mib": [int(read(f)) / 1024 if os.path.exists(f) else None for f in peak],
            "peak_anon_mib_sampled": [anon[r] / 1024 if r in anon else None for r in range(np_)],
            "group": group.stats() if group else None, "model": os.path.join(run_dir, "model.npz"), "log": log,
            "log_tail": "" if proc.returncode == 0 else read(log)[-2000:]}


def same_model(a, b):
    """(equal, the arrays that differ, all arrays): every array of the two model files, dtype, shape and bytes."""
    import numpy as np
    with np.load(a, allow_pickle=False) as za, np.load(b, allow_pickle=False) as zb:
        names = sorted(set(za.files) | set(zb.files))
        differ = [k for k in names if k not in za.files or k not in zb.files or za[k].dtype != zb[k].dtype
                  or za[k].shape != zb[k].shape or za[k].tobytes() != zb[k].tobytes()]
        return not differ, differ, names


def verdict(runs, timeout):
    """(the failure as one line or None, models equal or None, what the table says of the models)."""
    free, lim = runs["unlimited"], runs["limited"]
    if lim["exit"] != 0 or lim["timed_out"]:
        oom = (lim["group"] or {}).get("oom_kills", 0)
        how = "timed out after %d s" % timeout if lim["timed_out"] else "exit %s" % lim["exit"]
        return ("the limited run failed: %s%s (log: %s)" % (how, ", %d OOM kill(s)" % oom if oom else "", lim["log"]),
                None, "not compared (the limited run failed)")
    if free["exit"] != 0:
        return ("the unlimited run failed: exit %s (log: %s)" % (free["exit"], free["log"]), None,
                "not compared (the unlimited run failed)")
    equal, differ, names = same_model(free["model"], lim["model"])
    if not equal:
        return "the models differ: %s" % ", ".join(differ), False, "DIFFER in %s" % ", ".join(differ)
    return None, True, "bitwise equal (every array: %s)" % ", ".join(names)

