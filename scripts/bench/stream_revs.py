"""A streamed W4 log trained at two git revisions, side by side: rank 0's peak memory and rows/s at two sizes.

    python -m scripts.bench.stream_revs REV_A REV_B [--rows 200000,800000] [--files 4] [--reps 1]

For a change to how a stream reads its rows (a check on each chunk, a file's state recorded): W4 click-log text
(python -m mpinn.bench.w4 --scale 100) cut into --files day files per size, trained with
`mpiexec -n 2 python -m mpinn.train --data DIR --stream on --epochs 1 --ensemble 1` at each revision in turn (a
clean worktree of each, its own mpinn/ on PYTHONPATH), alternating so that load falls on both alike. Each run's
peak resident set per rank and samples/s come from its own summary (--metrics-out), and its held-out loss says it
trained the same rows. Prints a Markdown table (medians over --reps) and writes JSON."""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

from scripts import RESULTS, ROOT
from scripts.bench.common import mpiexec, revision_tree, w4_day_files


def run(tree, data, out, readers):
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    metrics = out + ".json"
    subprocess.run([mpiexec(), "-n", "2", sys.executable, "-m", "mpinn.train", "--data", data, "--stream", "on",
                    "--readers", readers, "--epochs", "1", "--ensemble", "1", "--seed", "0", "--no-progress",
                    "--metrics-out", metrics, "--model-out", out + ".npz"], env=env, check=True,
                   capture_output=True, cwd=os.path.dirname(out))
    m = json.load(open(metrics))
    return {"peak_rss_mib_rank0": m["summary"]["peak_rss_mib_per_rank"][0],
            "samples_per_s": m["summary"]["samples_per_s"], "valid": m["valid"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("rev_a")
    ap.add_argument("rev_b")
    ap.add_argument("--rows", default="200000,800000", help="the sizes, in rows (default 200000,800000)")
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--readers", default="1", help="--readers of every run (default 1: rank 0 reads)")
    ap.add_argument("--work", default="/tmp/mpinn-stream-revs")
    ap.add_argument("--out", default=os.path.join(RESULTS, "stream-revs-%s.json" % datetime.date.today()))
    a = ap.parse_args(argv)
    os.makedirs(a.work, exist_ok=True)
    revs, trees = (a.rev_a, a.rev_b), {}
    for rev in revs:
        trees[rev] = revision_tree(rev, os.path.join(a.work, "tree-" + rev.replace("/", "_")))
    rows = []
    try:
        print("| rows | rev | rank 0 peak MiB | samples/s | held-out logloss |\n|---|---|---|---|---|")
        for n in [int(x) for x in a.rows.split(",")]:
            data = w4_day_files(os.path.join(a.work, "w4-%d" % n), n, a.files, 100)
            got = {rev: [] for rev in revs}
            for r in range(a.reps):
                for k, rev in enumerate(revs):
                    got[rev].append(run(trees[rev], data, os.path.join(a.work, "run-%d-%d-%d" % (n, k, r)),
                                        a.readers))
            for rev in revs:
                rec = {"rows": n, "rev": rev, "runs": got[rev],
                       "peak_rss_mib_rank0": statistics.median(x["peak_rss_mib_rank0"] for x in got[rev]),
                       "samples_per_s": statistics.median(x["samples_per_s"] for x in got[rev])}
                rows.append(rec)
                print("| %d | %s | %.0f | %.0f | %s |" % (n, rev, rec["peak_rss_mib_rank0"], rec["samples_per_s"],
                                                       (got[rev][0]["valid"] or {}).get("logloss")), flush=True)
        with open(a.out, "w") as f:
            json.dump({"date": str(datetime.date.today()), "command": "python -m scripts.bench.stream_revs "
                       + " ".join(argv or sys.argv[1:]), "rows": rows}, f, indent=1)
        print("wrote", a.out)
    finally:
        for tree in trees.values():
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
