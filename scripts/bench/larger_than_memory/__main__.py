"""The larger-than-memory benchmark's command line and its table (the package docstring says what it measures)."""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

from scripts import RESULTS, ROOT
from scripts.bench.larger_than_memory import __doc__ as doc
from scripts.bench.larger_than_memory.cgroup import MIB, MemoryGroup, Unavailable, read
from scripts.bench.larger_than_memory.runs import run_training, verdict


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
                                 description=doc.split("\n\n")[0], epilog=doc.split("\n\n", 1)[1],
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
    from mpinn.data.packed.format import MAGIC
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
            return int(read(q))
    return None


if __name__ == "__main__":
    sys.exit(main())
