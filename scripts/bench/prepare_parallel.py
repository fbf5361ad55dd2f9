"""Prepare in parallel (issue 36, item 4): `mpiexec -n NP python -m mpinn.prepare --data DIR --out X.mpinn` on W4
click-log text in --files files, np 1 (one packed file) against np 2, 3, ... (a multi-part dataset, each rank
packing its share of the files), timed as a user runs it (wall seconds of the whole command, start-up included).

    python -m scripts.bench.prepare_parallel --rows 2000000 --files 8 --scale 100 --nps 1,2 --reps 3

The data: W4 (python -m mpinn.bench.w4) as tab-separated text, the log's first --rows rows cut into --files files,
written once into --workdir and reused. The runs alternate (np 1, np 2, np 1, ...), --reps of each; the table gives
each np's median, its speed against np 1's median, the CPU seconds of all its processes (the work, whatever else
the machine runs), and whether the multi-part dataset's meta (the hashing contract, classes, numeric statistics
and transform) is np 1's file's, bit for bit.

Output: a Markdown table, and scripts/results/prepare-parallel-DATE.json with every run's record."""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

from scripts.bench.common import print_and_save, w4_day_files


def make_files(workdir, rows, files, scale):
    """The directory of `files` W4 text files holding the log's first `rows` rows (made once)."""
    return w4_day_files(os.path.join(workdir, "logs"), rows, files, scale)


def prepare(data, np_, out, threads):
    """One run: its wall seconds and the CPU seconds of all its processes (user + system)."""
    cmd = [sys.executable, "-m", "mpinn.prepare", "--data", data, "--out", out, "--quiet"]
    if threads:
        cmd += ["--threads", str(threads)]
    if np_ > 1:
        cmd = ["mpiexec", "-n", str(np_)] + cmd
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    now = resource.getrusage(resource.RUSAGE_CHILDREN)      # the launcher waits for its ranks: they count
    cpu = now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime
    if r.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr[-3000:]))
    return seconds, cpu


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.bench.prepare_parallel", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000, help="rows of the log in all (default 2000000)")
    p.add_argument("--files", type=int, default=8, help="files the rows are cut into (default 8)")
    p.add_argument("--scale", type=float, default=100, help="W4's --scale (default 100: the issue's W4)")
    p.add_argument("--nps", default="1,2", help="rank counts (default 1,2; the first is the baseline)")
    p.add_argument("--reps", type=int, default=3, help="runs of each rank count, alternating (default 3)")
    p.add_argument("--threads", type=int, default=0, help="prepare's --threads (default: prepare's own default)")
    p.add_argument("--workdir", default="/tmp/mpinn-bench-prepare-parallel", help="where the files are made")
    args = p.parse_args(argv)
    nps = [int(x) for x in args.nps.split(",")]
    data = make_files(args.workdir, args.rows, args.files, args.scale)
    times, cpus, loads = {n: [] for n in nps}, {n: [] for n in nps}, []
    for _ in range(args.reps):
        for n in nps:
            loads.append(os.getloadavg()[0])
            t, c = prepare(data, n, os.path.join(args.workdir, "np%d.mpinn" % n), args.threads)
            times[n].append(t)
            cpus[n].append(c)
    from mpinn.data.packed.parts import open_packed
    base_meta = open_packed(os.path.join(args.workdir, "np%d.mpinn" % nps[0])).meta
    base = statistics.median(times[nps[0]])
    rows_out, records = [], []
    for n in nps:
        med = statistics.median(times[n])
        d = open_packed(os.path.join(args.workdir, "np%d.mpinn" % n))
        same = d.meta == base_meta and len(d) == args.rows
        parts = len(getattr(d, "parts", [d]))
        rows_out.append("| %d | %d | %s | %.2f | %.0f | %.2fx | %.1f | %s |" % (
            n, parts, ", ".join("%.2f" % t for t in times[n]), med, args.rows / med, base / med,
            statistics.median(cpus[n]), "yes" if same else "NO"))
        records.append({"np": n, "parts": parts, "seconds": times[n], "median_s": med, "rows_per_s": args.rows / med,
                        "speedup": base / med, "cpu_seconds": cpus[n], "same_meta": same})
    table = "\n".join(["prepare of %d W4 rows (--scale %g) in %d text files, %d cores (load average %.1f to %.1f "
                       "before the runs), medians of %d alternating runs" % (
                           args.rows, args.scale, args.files, os.cpu_count() or 1, min(loads), max(loads), args.reps),
                       "", "| np | parts | runs (s) | median (s) | rows/s | speed vs np %d | CPU s, all ranks | "
                       "meta = np %d's |" % (nps[0], nps[0]), "|---|---|---|---|---|---|---|---|"] + rows_out)
    print_and_save("prepare-parallel", table, {"rows": args.rows, "files": args.files, "scale": args.scale,
                                               "cores": os.cpu_count(), "load_before_runs": loads, "runs": records})


if __name__ == "__main__":
    main()
