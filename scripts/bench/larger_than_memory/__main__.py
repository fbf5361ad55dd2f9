"""Training from a packed W4 file larger than the memory its processes may use (issue 27, item 3).

    python -m scripts.bench.larger_than_memory          # 3M rows (a 984 MB file), a 300 MiB limit, np 2
    python -m scripts.bench.larger_than_memory --rows 2400000 --limit 250 --keep --workdir /tmp/ltm

Writes a packed W4 file (python -m mpinn.bench.w4) or takes --data, then trains on it twice with the same
options, each time after dropping the file from the page cache (fsync, POSIX_FADV_DONTNEED): with no limit,
then with every process of the job (mpiexec, its proxy, the ranks) in a memory cgroup made under this
process's own: v1 (memory.limit_in_bytes, and memsw so that swap cannot hide it) or v2 (memory.max,
memory.swap.max 0), which counts anonymous, shared and kernel memory and the page cache the job reads. Where
no cgroup can be made (not root, no memory controller), each rank gets `prlimit --data` of limit / np: that
bounds private writable VIRTUAL memory, of which a rank maps about 230 MiB before reading data, so --limit
must be 500 or more at np 2 (a rank refused memory inside MPI can hang until --timeout). The two model files
are compared array by array, bit for bit; exits 1 with one line if the limited run fails or they differ.

Per run: seconds (the whole mpiexec), rows/s (the training loop's, from --metrics-out), the group's peak (all
it was charged, page cache included) and per rank the peak resident set (VmHWM at exit: it counts mapped
pages of the data file and of shared libraries) and the peak anonymous memory (RssAnon sampled every 0.25 s).

The training options suit a file larger than memory: --shuffle-block 65536 (rows read in runs), --holdout-by
last --holdout 0.01. Each page fault on the map reads the device's read-ahead around it (8 MiB on this VM),
so short runs thrash the page cache under the limit: on a 607 MB file at 300 MiB, --shuffle-block 1024 took
87 s (34 GB refaulted), 65536 took 14 s, no limit 12 s.
"""
import argparse
import json
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from scripts import RESULTS, ROOT

MIB = 1 << 20

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


class Unavailable(Exception):
    """No memory cgroup can be made here; the message says why."""


def _read(path):
    with open(path) as f:
        return f.read()


def _stat(path):
    return {k: int(v) for k, v in (line.split() for line in _read(path).splitlines())}


def _own_cgroup():
    """(v1 memory mount, our path in it) and (v2 mount, our path), each None where absent."""
    mounts = [line.split()[1:4] for line in _read("/proc/mounts").splitlines()]
    v1 = [d for d, kind, opts in mounts if kind == "cgroup" and "memory" in opts.split(",")]
    v2 = [d for d, kind, _ in mounts if kind == "cgroup2"]
    own = {}
    for line in _read("/proc/self/cgroup").splitlines():
        _, controllers, path = line.split(":", 2)
        own["v2" if controllers == "" else controllers] = path
    mem = next((p for c, p in own.items() if "memory" in c.split(",")), None)
    return ((v1[0], mem) if v1 and mem is not None else None, (v2[0], own["v2"]) if v2 and "v2" in own else None)


class MemoryGroup:
    """A memory cgroup made under this process's own for one run (limit None: no limit); close() removes it."""

    def __init__(self, limit=None, tag="mpinn-ltm"):
        self.path, self.anon_peak = None, 0
        if os.geteuid() != 0:
            raise Unavailable("making a memory cgroup needs root")
        try:
            v1, v2 = _own_cgroup()
        except (OSError, ValueError) as e:
            raise Unavailable("cannot read this process's cgroups: %s" % e)
        if not (v1 or v2):
            raise Unavailable("no memory cgroup is mounted (neither v1 with memory nor v2)")
        self.version = 1 if v1 else 2
        mount, own = v1 or v2
        parent = os.path.join(mount, own.lstrip("/"))
        parent = parent if os.path.isdir(parent) else mount      # a namespace or bind mount hides our path
        if self.version == 2 and "memory" not in _read(os.path.join(parent, "cgroup.subtree_control")).split():
            raise Unavailable("cgroup v2 at %s does not hand the memory controller to its children" % parent)
        path = os.path.join(parent, "%s-%d-%s" % (tag, os.getpid(), secrets.token_hex(3)))
        try:
            os.mkdir(path)
        except OSError as e:
            raise Unavailable("cannot make a cgroup under %s: %s" % (parent, e.strerror))
        self.path = path
        try:
            if limit is not None and self.version == 1:
                self._write("memory.limit_in_bytes", limit)
                self._write("memory.memsw.limit_in_bytes", limit, optional=True)   # absent without swap accounting
            elif limit is not None:
                self._write("memory.max", limit)
                self._write("memory.swap.max", 0, optional=True)
        except OSError as e:
            self.close()
            raise Unavailable("cannot set the limit in %s: %s" % (path, e.strerror))

    def _write(self, name, value, optional=False):
        path = os.path.join(self.path, name)
        if not (optional and not os.path.exists(path)):
            with open(path, "w") as f:
                f.write(str(value))

    @property
    def mechanism(self):
        return "cgroup v%d" % self.version

    def enter(self):
        """For Popen(preexec_fn=...): the child joins the group before it execs, so all it starts is inside."""
        self._write("cgroup.procs", os.getpid())

    def sample(self):
        """Keep the peak of the group's anonymous memory."""
        try:
            st = _stat(os.path.join(self.path, "memory.stat"))
            self.anon_peak = max(self.anon_peak, st.get("total_rss", st.get("anon", 0)))
        except (OSError, ValueError):
            pass

    def stats(self):
        """The group's peak usage (MiB) and its OOM kills. (v1's failcnt stays 0 on this kernel at the limit.)"""
        p = lambda name: os.path.join(self.path, name)      # noqa: E731
        if self.version == 1:
            peak, oom = int(_read(p("memory.max_usage_in_bytes"))), _stat(p("memory.oom_control")).get("oom_kill", 0)
        else:
            peak = int(_read(p("memory.peak"))) if os.path.exists(p("memory.peak")) else float("nan")   # < 5.19
            oom = _stat(p("memory.events")).get("oom_kill", 0)
        return {"peak_mib": peak / MIB, "anon_peak_mib_sampled": self.anon_peak / MIB, "oom_kills": oom}

    def close(self):
        """Kill what is left inside (processes this script started), then remove the group."""
        for _ in range(100):
            if not self.path:
                return
            procs = os.path.join(self.path, "cgroup.procs")
            _kill([int(x) for x in _read(procs).split()] if os.path.exists(procs) else [])
            try:
                os.rmdir(self.path)
                self.path = None
            except OSError:
                time.sleep(0.1)
        print("warning: could not remove the cgroup %s" % self.path, file=sys.stderr)


def _kill(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def evict(path):
    """Drop the file's pages from the page cache: the run reads them again, and its group is charged for them
    (a page is charged to the group that brings it in: pages the generator left cached would come free)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cached_share(path):
    """The share of the file's pages in the page cache (mincore)."""
    import numpy as np
    from mpinn.process import resident_bytes
    size = os.path.getsize(path)
    return resident_bytes(np.memmap(path, dtype=np.uint8, mode="r")) / size if size else 0.0


def mpiexec():
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec") or "mpiexec"


def _job(run_dir):
    """{pid: its PMI_RANK, None for the launcher and its proxy} of every process of the run in run_dir: they
    carry MPINN_LTM_DIR=run_dir (hydra puts each rank in a process group of its own, so no group kill does)."""
    out = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = _read("/proc/%s/environ" % d).split("\0")
        except (OSError, UnicodeDecodeError):
            continue
        if "MPINN_LTM_DIR=" + run_dir in env:
            rank = next((v[len("PMI_RANK="):] for v in env if v.startswith("PMI_RANK=")), None)
            out[int(d)] = None if rank is None else int(rank)
    return out


def _rss_anon_kb(pid):
    try:
        return next(int(line.split()[1]) for line in _read("/proc/%d/status" % pid).splitlines()
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
                _kill([proc.pid] + list(_job(run_dir)))
                proc.wait()
            elif now > note:
                say("  ... %.0f s" % (now - t0))
                note = now + 30
            time.sleep(0.25)
    seconds = time.perf_counter() - t0
    peak = [os.path.join(run_dir, "peak-rank%d.txt" % r) for r in range(np_)]
    metrics = os.path.join(run_dir, "metrics.json")
    summary = json.loads(_read(metrics))["summary"] if proc.returncode == 0 and os.path.exists(metrics) else {}
    return {"exit": proc.returncode, "timed_out": timed_out, "seconds": seconds, "file_cached_before": cached,
            "rows": summary.get("samples"), "rows_per_s": summary.get("samples_per_s"),
            "peak_rss_mib": [int(_read(f)) / 1024 if os.path.exists(f) else None for f in peak],
            "peak_anon_mib_sampled": [anon[r] / 1024 if r in anon else None for r in range(np_)],
            "group": group.stats() if group else None, "model": os.path.join(run_dir, "model.npz"), "log": log,
            "log_tail": "" if proc.returncode == 0 else _read(log)[-2000:]}


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


def _mib(x):
    return "-" if x is None else "%.0f" % x


def table(file_mib, rows, args, mechanism, runs, models):
    lines = ["W4 packed file: %d rows, %.0f MiB; limit %d MiB (%s): the file is %.2fx the limit; np %d" % (
        rows, file_mib, args.limit, mechanism, file_mib / args.limit, args.np), "",
        "| run | limit | seconds | rows/s (training) | group peak MiB | group anon peak MiB | "
        "peak RSS MiB per rank | peak anon MiB per rank | OOM kills | exit |", "|---" * 10 + "|"]
    for name, r in runs.items():
        g = r["group"] or {}
        lines.append("| %s | %s | %.1f | %s | %s | %s | %s | %s | %s | %s |" % (
            name, "%d MiB" % args.limit if name == "limited" else "none", r["seconds"],
            "%.0f" % r["rows_per_s"] if r["rows_per_s"] else "-", _mib(g.get("peak_mib")),
            _mib(g.get("anon_peak_mib_sampled")), " / ".join(map(_mib, r["peak_rss_mib"])),
            " / ".join(map(_mib, r["peak_anon_mib_sampled"])), g.get("oom_kills", "-"),
            "timed out" if r["timed_out"] else r["exit"]))
    lines += ["", "models: %s" % models,
              "peak RSS = VmHWM at exit, counting mapped pages of the data file and of shared libraries; "
              "peak anon = RssAnon sampled every 0.25 s (a lower bound); group peak = all the group was "
              "charged, page cache included; MiB = 2^20 bytes"]
    return "\n".join(lines)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m scripts.bench.larger_than_memory",
                                 description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=3_000_000,
                    help="W4 rows to generate (default 3000000: a 984 MB file, 3.1x the default limit)")
    ap.add_argument("--data", metavar="FILE", help="train on this packed file instead of generating one")
    ap.add_argument("--limit", type=int, default=300, metavar="MIB", help="the memory limit in MiB (default 300)")
    ap.add_argument("--mechanism", choices=["auto", "cgroup", "prlimit"], default="auto",
                    help="auto: a memory cgroup where one can be made, else prlimit --data per rank (default auto)")
    ap.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("--scale", type=float, default=100, help="W4 --scale (default 100)")
    ap.add_argument("--seed", type=int, default=0, help="W4 --seed (default 0)")
    ap.add_argument("--hidden", default="8", help="train --hidden (default 8)")
    ap.add_argument("--hash-bits", type=int, default=12, help="W4 and train --hash-bits (default 12)")
    ap.add_argument("--epochs", type=int, default=1, help="train --epochs (default 1)")
    ap.add_argument("--batch-size", type=int, default=2048, help="train --batch-size (default 2048)")
    ap.add_argument("--shuffle-block", type=int, default=65536, help="train --shuffle-block (default 65536)")
    ap.add_argument("--holdout", type=float, default=0.01, help="train --holdout, the last rows (default 0.01)")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds each run may take (default 1200)")
    ap.add_argument("--workdir", help="where the file, the models and the logs go (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the generated file, the models and the logs")
    ap.add_argument("--out", help="JSON result (default scripts/results/larger-than-memory-DATE.json)")
    return ap.parse_args(argv)


def choose_mechanism(args):
    """(cgroup version or None, the mechanism in words)."""
    why_not = None
    if args.mechanism != "prlimit":
        try:
            probe = MemoryGroup(None)
            probe.close()
            return probe.mechanism, "%s, on the whole job, page cache included" % probe.mechanism
        except Unavailable as e:
            why_not = str(e)
            if args.mechanism == "cgroup":
                sys.exit("error: %s" % why_not)
    if not shutil.which("prlimit"):
        sys.exit("error: no memory cgroup (%s) and no prlimit" % why_not)
    return None, "prlimit --data %d MiB per rank%s" % (args.limit // args.np,
                                                       " (no memory cgroup: %s)" % why_not if why_not else "")


def main(argv=None):
    args = parse_args(argv)
    limit = args.limit * MIB
    workdir = args.workdir or tempfile.mkdtemp(prefix="mpinn-ltm-")
    os.makedirs(workdir, exist_ok=True)
    out = args.out or os.path.join(RESULTS, "larger-than-memory-%s.json" % time.strftime("%Y-%m-%d"))
    t_start, load = time.perf_counter(), os.getloadavg()
    say = lambda msg: print("[%6.1f s] %s" % (time.perf_counter() - t_start, msg), flush=True)  # noqa: E731
    version, mechanism = choose_mechanism(args)

    made, data = [], args.data
    if not data:
        data = os.path.join(workdir, "w4-%d.mpinn" % args.rows)
        say("generating %d W4 rows into %s" % (args.rows, data))
        r = subprocess.run([sys.executable, "-m", "mpinn.bench.w4", "--rows", str(args.rows), "--out", data,
                            "--scale", str(args.scale), "--seed", str(args.seed), "--hash-bits", str(args.hash_bits)],
                           cwd=ROOT, timeout=3600)
        if r.returncode:
            sys.exit("error: the W4 generator failed (exit %d)" % r.returncode)
        made.append(data)
    rows, file_mib = _packed_rows(data), os.path.getsize(data) / MIB
    if file_mib < 3 * args.limit:
        say("note: the file (%.0f MiB) is less than 3x the limit (%d MiB)" % (file_mib, args.limit))

    train_args = ["--epochs", str(args.epochs), "--hidden", args.hidden, "--hash-bits", str(args.hash_bits),
                  "--batch-size", str(args.batch_size), "--shuffle-block", str(args.shuffle_block),
                  "--holdout-by", "last", "--holdout", str(args.holdout), "--no-progress"]
    runs = {}
    for name, lim in (("unlimited", None), ("limited", limit)):
        group = MemoryGroup(lim) if version else None
        say("%s run (%s) ..." % (name, "no limit" if lim is None else "%s, %d MiB" % (version or "prlimit",
                                                                                      args.limit)))
        try:
            runs[name] = r = run_training(data, os.path.join(workdir, name), train_args, args.np, args.timeout,
                                          group, limit // args.np if lim and not group else None, say)
        finally:
            if group:
                group.close()
        say("%s run: exit %s in %.1f s" % (name, r["exit"], r["seconds"]))

    failed, equal, models = verdict(runs, args.timeout)
    text = table(file_mib, rows, args, mechanism, runs, models)
    print("\n" + text)
    record = {"file": {"path": data, "bytes": os.path.getsize(data), "rows": rows, "generated": bool(made),
                       "scale": args.scale, "seed": args.seed},
              "limit_mib": args.limit, "file_over_limit": file_mib / args.limit, "mechanism": mechanism,
              "np": args.np, "train_args": train_args, "runs": runs, "models_equal": equal,
              "machine": {"cores": os.cpu_count(), "kernel": platform.release(),
                          "memory_total_mib": os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / MIB,
                          "load_average_at_start": load, "read_ahead_kb": _read_ahead_kb(data)},
              "table": text, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "command": " ".join(["python -m scripts.bench.larger_than_memory"]
                                  + list(sys.argv[1:] if argv is None else argv))}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(record, f, indent=1)
    print("\nwrote %s" % os.path.relpath(out, ROOT))
    if not args.keep:       # a failed run's log stays, for the error line names it
        for p in made + ([] if failed else [os.path.join(workdir, n) for n in runs]):
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
        if not (args.workdir or failed):
            shutil.rmtree(workdir, ignore_errors=True)
    if failed:
        print("error: %s" % failed, file=sys.stderr)
        return 1
    return 0


def _packed_rows(path):
    """n_rows from a packed file's header (read, not mapped: a mapped page could not be evicted)."""
    from mpinn.data.packed import MAGIC
    with open(path, "rb") as f:
        head = f.read(16)
        if head[:8] != MAGIC:
            sys.exit("error: %s is not an mpinn packed file" % path)
        return json.loads(f.read(int.from_bytes(head[8:16], "little")))["n_rows"]


def _read_ahead_kb(path):
    """The read-ahead of the block device holding path: about what each page fault on a map reads."""
    dev = os.stat(path).st_dev
    base = "/sys/dev/block/%d:%d" % (os.major(dev), os.minor(dev))
    for q in (base + "/queue/read_ahead_kb", base + "/../queue/read_ahead_kb"):
        if os.path.exists(q):
            return int(_read(q))
    return None


if __name__ == "__main__":
    sys.exit(main())
