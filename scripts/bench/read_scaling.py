"""Does reading scale with the ranks (issue 36's 1.7x)? A read-bound streamed run, timed at several rank counts: a
linear model (--hidden '') on W4 click-log text in day files, one epoch, no held-out rows, every rank reading its
share (--readers all; np 1 reads alone). The reading and hashing are most of its time, so its rows/s are the
readers'. Each rank count runs --reps times, alternating; the table gives the median wall rows/s, its ratio to the
first rank count's, and the CPU seconds the run used over its wall seconds (the cores it kept busy: np 1 already
keeps more than one, with its read-ahead thread and pyarrow's).

    python -m scripts.bench.read_scaling --rows 5000000 --files 8 --nps 1,2,4

The data: W4 (python -m mpinn.bench.w4, --scale 100) cut into --files day files under --workdir, made once and
reused (scripts.bench.common.w4_day_files). Output: a Markdown table, and scripts/results/read-scaling-DATE.json."""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from scripts.bench.common import mpiexec, print_and_save, w4_day_files


def child_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(days, np_, out_dir, sample_rows):
    """One run: wall seconds, the rows trained on, rows/s and the CPU seconds its processes used."""
    os.makedirs(out_dir, exist_ok=True)
    metrics = os.path.join(out_dir, "metrics.json")
    cmd = [mpiexec(), "-n", str(np_), sys.executable, "-m", "mpinn.train", "--data", days, "--stream", "on",
           "--readers", "all" if np_ > 1 else "1", "--hidden", "", "--holdout", "0", "--epochs", "1",
           "--sample-rows", str(sample_rows), "--no-progress", "--model-out", os.path.join(out_dir, "m.npz"),
           "--metrics-out", metrics]
    cpu, t = child_cpu_s(), time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t, child_cpu_s() - cpu
    if r.returncode != 0:
        raise SystemExit("failed: %s\n%s" % (" ".join(cmd), r.stderr[-3000:]))
    rows = json.load(open(metrics))["summary"]["samples"]
    said = {k: next((line for line in r.stdout.splitlines() if line.startswith(k + ":")), "") for k in ("data", "done")}
    return {"np": np_, "wall_s": wall, "rows": rows, "rows_per_s": rows / wall, "cpu_s": cpu, "cores_busy": cpu / wall,
            "data_line": said["data"], "done_line": said["done"]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rows", type=int, default=5_000_000, help="rows of the log (default 5M)")
    p.add_argument("--files", type=int, default=8, help="day files they are cut into (default 8)")
    p.add_argument("--nps", default="1,2", help="rank counts, the first the baseline (default 1,2)")
    p.add_argument("--reps", type=int, default=3, help="runs of each rank count, alternating (default 3)")
    p.add_argument("--sample-rows", type=int, default=100_000, help="the stream's sample (default 100,000)")
    p.add_argument("--scale", type=int, default=100, help="W4's cardinality divisor (default 100)")
    p.add_argument("--jobs", type=int, default=2, help="generators run at once when the files are made (default 2)")
    p.add_argument("--workdir", default="/tmp/mpinn-read-scaling", help="where the data is written and reused")
    a = p.parse_args(argv)
    nps = [int(x) for x in a.nps.split(",")]
    days = w4_day_files(os.path.join(a.workdir, "days"), a.rows, a.files, a.scale, jobs=a.jobs)
    runs = []
    for rep in range(a.reps):
        for n in nps:
            r = dict(run(days, n, os.path.join(a.workdir, "run-np%d" % n), a.sample_rows), rep=rep)
            runs.append(r)
            print("np %d rep %d: %.1f s, %.0f rows/s, %.2f cores busy" % (n, rep, r["wall_s"], r["rows_per_s"],
                                                                        r["cores_busy"]), flush=True)
            print("  " + r["done_line"], flush=True)
    med = {n: statistics.median(r["rows_per_s"] for r in runs if r["np"] == n) for n in nps}
    busy = {n: statistics.median(r["cores_busy"] for r in runs if r["np"] == n) for n in nps}
    lines = ["| np | readers | median rows/s | ratio to np %d | cores busy (median) |" % nps[0], "|---|---|---|---|---|"]
    lines += ["| %d | %s | %.0f | %.2f | %.2f |" % (n, "all" if n > 1 else "1", med[n], med[n] / med[nps[0]], busy[n])
              for n in nps]
    table = "\n".join(lines + ["", "%d CPU cores here; %d rows in %d files, %d runs each" % (
        os.cpu_count(), a.rows, a.files, a.reps)])
    path = print_and_save("read-scaling", table, {"rows": a.rows, "files": a.files, "nps": nps, "cpus": os.cpu_count(),
                                                   "median_rows_per_s": med, "runs": runs})
    print("records written to %s" % path)


if __name__ == "__main__":
    main()
