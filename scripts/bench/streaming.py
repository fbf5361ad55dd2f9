"""Streamed training on W4 click-log text in many files (issue 36): rank 0's peak memory against the rows, the time to
the first step, rows/s at np 1 and 2, the test AUC beside the in-memory path's on the same rows, and one reader's
parse-and-hash speed beside pyarrow's reader alone.

    python -m scripts.bench.streaming --rows 20000000 --small-rows 5000000 --files 8 --nps 1,2

The data: W4 (python -m mpinn.bench.w4 --scale 100) as tab-separated text without a header, the log's first
--rows rows cut into --files day files, written once into --workdir and reused; a second set of --small-rows rows
(the first rows of the same log) shows whether the memory grows with the rows; the test rows come from far later
in the log. Every run is `mpiexec -n NP python -m mpinn.train --data DIR --epochs 1 --stream on` (the default,
auto, streams a log of more than a million rows), and at np > 1 also with `--readers all`; its peak resident set per rank and its first step's time come from
the run's own summary (--metrics-out), its test AUC from python -m mpinn.predict. The in-memory comparison
trains --stream on and --stream off on the same --compare-rows rows (np 2).

Output: a Markdown table, and scripts/results/streaming-DATE.json with every run's record."""
import argparse
import json
import os
import subprocess
import sys
import time

from scripts.bench.common import mpiexec, print_and_save, w4_day_files

TEST_START = 40_000_000         # the test rows: this far into the log, after any training set here


def generate(path, rows, start, scale):
    return subprocess.Popen([sys.executable, "-m", "mpinn.bench.w4", "--rows", str(rows), "--start", str(start),
                             "--scale", str(scale), "--out", path, "--quiet"])


def train(data, np_, out_dir, extra=()):
    """One run: its wall seconds, summary (peak memory per rank, first step) and test AUC."""
    os.makedirs(out_dir, exist_ok=True)
    model, metrics = os.path.join(out_dir, "m.npz"), os.path.join(out_dir, "metrics.json")
    cmd = [mpiexec(), "-n", str(np_), sys.executable, "-m", "mpinn.train", "--data", data, "--epochs", "1",
           "--no-progress", "--model-out", model, "--metrics-out", metrics] + list(extra)
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit("failed: %s\n%s" % (" ".join(cmd), r.stderr[-3000:]))
    summary = json.load(open(metrics))["summary"]
    return {"np": np_, "wall_s": wall, "samples": summary["samples"], "train_s": summary["seconds"],
            "rows_per_s": summary["samples"] / wall, "first_step_s": summary["first_step_s"],
            "peak_rss_mib_per_rank": summary["peak_rss_mib_per_rank"], "model": model,
            "log_head": [line for line in r.stdout.splitlines() if line.startswith(("data:", "stream:"))]}


def test_auc(model, test, out_dir):
    path = os.path.join(out_dir, "test.json")
    r = subprocess.run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", test, "--metrics-out",
                        path], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("predict failed: %s" % r.stderr[-2000:])
    return json.load(open(path))["auc"]


def reader_speed(data_dir, rows):
    """One process: rows/s of mpinn's stream (read, parse, hash, batch; no training) over the first `rows` rows,
    and of pyarrow's CSV reader alone over the same file(s)."""
    import numpy as np
    import pyarrow.csv as pacsv
    from mpinn import settings
    from mpinn.data.stream_setup import open_streamed
    from mpinn.settings.input_plan import input_files, plan_input
    cfg = settings.from_argv(["--data", data_dir, "--sample-rows", "100000", "--holdout", "0", "--stream", "on"])
    stream, _ = open_streamed(plan_input(cfg, *input_files(cfg), 1))
    t, n = time.perf_counter(), 0
    for b in stream.batches(1024, np.float32, 0, 1):
        n += b.n
        if n >= rows:
            break
    ours = n / (time.perf_counter() - t)
    first = sorted(os.path.join(data_dir, f) for f in os.listdir(data_dir) if f.endswith(".tsv"))[0]
    t = time.perf_counter()
    table = pacsv.read_csv(first, parse_options=pacsv.ParseOptions(delimiter="\t", quote_char=False),
                           read_options=pacsv.ReadOptions(autogenerate_column_names=True))
    arrow = table.num_rows / (time.perf_counter() - t)
    return {"mpinn_rows_per_s": ours, "rows": n, "pyarrow_read_csv_rows_per_s": arrow, "pyarrow_rows": table.num_rows}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rows", type=int, default=20_000_000, help="rows of the large set (default 20M)")
    p.add_argument("--small-rows", type=int, default=5_000_000, help="rows of the small set (default 5M)")
    p.add_argument("--compare-rows", type=int, default=1_000_000, help="rows of the stream/in-memory comparison")
    p.add_argument("--files", type=int, default=8, help="files a set is cut into (default 8)")
    p.add_argument("--test-rows", type=int, default=200_000)
    p.add_argument("--nps", default="1,2", help="ranks to run with (default 1,2)")
    p.add_argument("--scale", type=int, default=100, help="W4's cardinality divisor (default 100)")
    p.add_argument("--workdir", default="/tmp/mpinn-streaming", help="where the data is written and reused")
    p.add_argument("--reader-rows", type=int, default=1_000_000, help="rows timed for the reader's speed")
    a = p.parse_args(argv)
    nps = [int(x) for x in a.nps.split(",")]
    os.makedirs(a.workdir, exist_ok=True)
    test = os.path.join(a.workdir, "test.tsv")
    if not os.path.exists(test):
        assert generate(test, a.test_rows, TEST_START, a.scale).wait() == 0
    sets = {name: w4_day_files(os.path.join(a.workdir, name), rows, a.files, a.scale)
            for name, rows in (("large", a.rows), ("small", a.small_rows), ("compare", a.compare_rows))}
    record = {"rows": a.rows, "small_rows": a.small_rows, "files": a.files, "scale": a.scale, "runs": []}
    record["reader"] = reader_speed(sets["large"], a.reader_rows)
    print("reader: %(mpinn_rows_per_s).0f rows/s (mpinn, parse + hash + batch), pyarrow read_csv alone "
          "%(pyarrow_read_csv_rows_per_s).0f rows/s" % record["reader"], flush=True)
    runs = [("large", n, ("--stream", "on")) for n in nps] + [
        ("large", n, ("--stream", "on", "--readers", "all")) for n in nps if n > 1] + [
        ("small", n, ("--stream", "on")) for n in nps] + [
        ("compare", 2, ("--stream", "on")), ("compare", 2, ("--stream", "off"))]
    for name, n, extra in runs:
        out = os.path.join(a.workdir, "run-%s-np%d-%s" % (name, n, "-".join(extra).replace("--", "")))
        r = train(sets[name], n, out, extra)
        r.update(set=name, rows=record[{"large": "rows", "small": "small_rows"}.get(name, "rows")]
                 if name != "compare" else a.compare_rows, options=list(extra), test_auc=test_auc(r["model"], test, out))
        record["runs"].append(r)
        print("%-8s np %d %-14s rows/s %8.0f  first step %5.1f s  rank 0 peak %6.0f MiB  test AUC %.4f" % (
            name, n, " ".join(extra), r["rows_per_s"], r["first_step_s"], r["peak_rss_mib_per_rank"][0],
            r["test_auc"]), flush=True)
    lines = ["| set | rows | np | options | rows/s (wall) | first step (s) | peak RSS per rank (MiB) | test AUC |",
             "|---|---|---|---|---|---|---|---|"]
    for r in record["runs"]:
        lines.append("| %s | %d | %d | %s | %.0f | %.1f | %s | %.4f |" % (
            r["set"], r["rows"], r["np"], " ".join(r["options"]) or "defaults", r["rows_per_s"], r["first_step_s"],
            ", ".join("%.0f" % m for m in r["peak_rss_mib_per_rank"]), r["test_auc"]))
    by = {(r["set"], r["np"], tuple(r["options"])): r for r in record["runs"]}
    goals = []
    for n in nps:
        big, small = by[("large", n, ("--stream", "on"))], by[("small", n, ("--stream", "on"))]
        goals.append("np %d: rank 0 peak %.0f MiB on %d rows, %.0f MiB on %d (ratio %.2f)" % (
            n, big["peak_rss_mib_per_rank"][0], a.rows, small["peak_rss_mib_per_rank"][0], a.small_rows,
            big["peak_rss_mib_per_rank"][0] / small["peak_rss_mib_per_rank"][0]))
    if 1 in nps and 2 in nps:
        one = by[("large", 1, ("--stream", "on"))]["rows_per_s"]
        goals.append("rows/s np 2 / np 1 (large): %.2f with rank 0 reading, %.2f with every rank reading" % (
            by[("large", 2, ("--stream", "on"))]["rows_per_s"] / one,
            by[("large", 2, ("--stream", "on", "--readers", "all"))]["rows_per_s"] / one))
    on, off = by[("compare", 2, ("--stream", "on"))], by[("compare", 2, ("--stream", "off"))]
    goals.append("test AUC, stream - in memory (%d rows, np 2): %+.4f" % (a.compare_rows, on["test_auc"] -
                                                                         off["test_auc"]))
    goals.append("reader: %.0f rows/s (pyarrow alone %.0f)" % (record["reader"]["mpinn_rows_per_s"],
                                                               record["reader"]["pyarrow_read_csv_rows_per_s"]))
    table = "\n".join(lines + [""] + ["- " + g for g in goals])
    print_and_save("streaming", table, record)


if __name__ == "__main__":
    main()
