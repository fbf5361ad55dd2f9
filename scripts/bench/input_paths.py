"""Every way a training run reads its rows, at two git revisions: the same model and prediction bytes?

    python -m scripts.bench.input_paths REV_A REV_B [--work DIR]

For a change that must not change what is trained (a restructuring of the input, a check added on the way): the
same small data is trained on through each input path once at REV_A and once at REV_B (a clean worktree of each,
its own mpinn/ on PYTHONPATH), one model each (--ensemble 1, one epoch, --seed 0), then predicted on one file.
Prints a table (path, ranks, parameters bitwise equal, predictions bitwise equal) and writes JSON.

The paths: a CSV file; a directory of two CSV files; an .npz; click-log text read whole, streamed by rank 0, and
streamed by every rank (--readers all); a packed .mpinn read by rank 0 and by every rank (--input local); a
multi-part dataset packed by two ranks; the embedded click log."""
import argparse
import datetime
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np

from scripts import RESULTS, ROOT
from scripts.bench.common import mpiexec, revision_tree

TRAIN = ["--epochs", "1", "--ensemble", "1", "--seed", "0", "--no-progress", "--hash-bits", "14"]
CSV = ["--label", "clicked", "--categorical", "site,ad,device", "--numeric", "price,age"]


def paths(d, k):
    """(name, ranks, train arguments, the file predicted[, predict's own arguments]); k: the revision's packed files
    (packed by it). Arguments starting with API train through mpinn.api (arrays from the .npz that follows)."""
    csv, text, mp = os.path.join(d, "clicks.csv"), os.path.join(d, "day.tsv"), os.path.join(d, "clicks-%d.mpinn" % k)
    test, days = os.path.join(d, "clicks-test.csv"), os.path.join(d, "days")
    return [
        ("csv", 2, ["--data", csv] + CSV, os.path.join(d, "clicks-test.csv")),
        ("csv directory", 2, ["--data", os.path.join(d, "two")] + CSV, os.path.join(d, "clicks-test.csv")),
        ("npz", 2, ["--data", os.path.join(d, "xy.npz")], os.path.join(d, "xy.npz")),
        ("click text, in memory", 2, ["--data", text, "--stream", "off"], text),
        ("click text, streamed by rank 0", 2, ["--data", text, "--stream", "on"], text),
        ("click text, --readers all", 2, ["--data", text, "--stream", "on", "--readers", "all"], text),
        ("packed, rank 0", 2, ["--data", mp], os.path.join(d, "clicks-test.csv")),
        ("packed, --input local", 2, ["--data", mp, "--input", "local"], os.path.join(d, "clicks-test.csv")),
        ("parts manifest", 2, ["--data", os.path.join(d, "parts-%d.mpinn" % k)], os.path.join(d, "clicks-test.csv")),
        ("embedded click log", 2, ["--default-rows", "20000"], None),
        # beyond the ten: the API's rows, .mat, the held-out paths, one reader of its own, the other predict paths
        ("API arrays (mpinn.api.arrays)", 2, ["API", os.path.join(d, "xy.npz")], os.path.join(d, "xy.npz")),
        ("mat", 2, ["--data", os.path.join(d, "xy.mat")], os.path.join(d, "xy.mat")),
        ("parts manifest, --input local", 2, ["--data", os.path.join(d, "parts-%d.mpinn" % k), "--input", "local"],
         test),
        ("packed in two passes (auto hash bits)", 2, ["--data", os.path.join(d, "auto-%d.mpinn" % k)], test),
        ("csv, --valid", 2, ["--data", csv, "--valid", os.path.join(d, "clicks-valid.csv")] + CSV, test),
        ("csv, --holdout-by last", 2, ["--data", csv, "--holdout-by", "last"] + CSV, test),
        ("csv, --holdout-by time:day", 2, ["--data", csv, "--holdout-by", "time:day"] + CSV, test),
        ("csv, --holdout-by group:site", 2, ["--data", csv, "--holdout-by", "group:site"] + CSV, test),
        ("click text streamed, --valid read in blocks", 2, ["--data", text, "--stream", "on", "--valid",
                                                             os.path.join(days, "day_2.tsv")], text),
        ("click text days streamed, last file held out", 2, ["--data", days, "--stream", "on", "--holdout-by",
                                                             "last"], text),
        ("click text, --readers all at 1 rank", 1, ["--data", text, "--stream", "on", "--readers", "all"], text),
        ("csv, predicted as a stream", 2, ["--data", csv] + CSV, test, ["--stream", "on"]),
        ("click text, predicted as a stream", 2, ["--data", text, "--stream", "off"], text, ["--stream", "on"]),
    ]


def make_data(d):
    """The data, made once by this checkout's mpinn (the same files for both revisions)."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    run = lambda args, **kw: subprocess.run(args, cwd=d, env=env, check=True, capture_output=True, **kw)  # noqa: E731
    run([sys.executable, "-m", "mpinn.bench.tour"])
    os.makedirs(os.path.join(d, "two"), exist_ok=True)
    lines = open(os.path.join(d, "clicks.csv")).read().splitlines(True)
    half = (len(lines) + 1) // 2
    for i, rows in enumerate((lines[1:half], lines[half:])):
        with open(os.path.join(d, "two", "part%d.csv" % i), "w") as f:
            f.writelines([lines[0]] + rows)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 12)).astype(np.float32)
    np.savez(os.path.join(d, "xy.npz"), X=X, y=(X[:, 0] + 0.5 * X[:, 1] > 0).astype(np.int64))
    import scipy.io
    scipy.io.savemat(os.path.join(d, "xy.mat"), {"X": X.astype(np.float64), "y": 1 + (X[:, 0] > 0)})
    run([sys.executable, "-m", "mpinn.bench.w4", "--rows", "20000", "--scale", "100", "--out",
         os.path.join(d, "day.tsv")])
    os.makedirs(os.path.join(d, "days"), exist_ok=True)
    for i in range(3):
        run([sys.executable, "-m", "mpinn.bench.w4", "--rows", "6000", "--start", str(6000 * i), "--scale", "100",
             "--out", os.path.join(d, "days", "day_%d.tsv" % i)])


def pack(d, tree, k):
    """The packed file and the two-rank parts of revision k, packed by its own mpinn."""
    env = dict(os.environ, PYTHONPATH=tree)
    columns = ["--label", "clicked", "--categorical", "site,ad,device", "--numeric", "price,age", "--hash-bits", "14"]
    for launch, data, out, bits in (([], "clicks.csv", "clicks-%d.mpinn", True),
                                    ([mpiexec(), "-n", "2"], "two", "parts-%d.mpinn", True),
                                    ([], "clicks.csv", "auto-%d.mpinn", False)):
        subprocess.run(launch + [sys.executable, "-m", "mpinn.prepare", "--data", data, "--out", out % k]
                       + (columns if bits else columns[:-2]), cwd=d, env=env, check=True, capture_output=True)


def packed_bytes(d, k):
    """{file: sha256} of revision k's packed files (the writers' output: one pass, two passes, parts); a manifest names
    its parts' folder, whose name holds k: read as K."""
    found = sorted(glob.glob(os.path.join(d, "*-%d.mpinn" % k)) + glob.glob(os.path.join(d, "*-%d.mpinn.*" % k))
                   + glob.glob(os.path.join(d, "parts-%d.mpinn.parts" % k, "*")))
    return {os.path.relpath(p, d).replace("-%d." % k, "-K."):
            hashlib.sha256(open(p, "rb").read().replace(b"-%d.mpinn.parts" % k, b"-K.mpinn.parts")).hexdigest()
            for p in found if os.path.isfile(p)}


API = ("import sys, numpy as np, mpinn.api as mp; z = np.load(sys.argv[1]); "
       "mp.train(mp.arrays(z['X'], z['y']), model_out=sys.argv[2], epochs=1, ensemble=1, seed=0, quiet=True)")


def train_and_predict(tree, d, name, ranks, args, scored, out, predict_args=()):
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    model, pred = out + ".npz", out + ".pred.csv"
    command = ["-m", "mpi4py", "-c", API, args[1], model] if args[0] == "API" else \
        ["-m", "mpinn.train"] + args + TRAIN + ["--model-out", model]
    r = subprocess.run([mpiexec(), "-n", str(ranks), sys.executable] + command, cwd=d, env=env, capture_output=True,
                       text=True)
    if r.returncode:
        return {"error": (r.stderr or r.stdout).strip().splitlines()[-1]}
    p = subprocess.run([sys.executable, "-m", "mpinn.predict", "--model", model, "--out", pred]
                       + (["--data", scored] if scored else []) + list(predict_args), cwd=d, env=env,
                       capture_output=True, text=True)
    params = np.load(model)["params"]
    return {"params": hashlib.sha256(params.tobytes()).hexdigest(),
            "predictions": hashlib.sha256(open(pred, "rb").read()).hexdigest() if p.returncode == 0 else
            "error: " + (p.stderr or p.stdout).strip().splitlines()[-1]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("rev_a")
    ap.add_argument("rev_b")
    ap.add_argument("--work", default="/tmp/mpinn-input-paths", help="scratch directory (made anew)")
    ap.add_argument("--out", default=os.path.join(RESULTS, "input-paths-%s.json" % datetime.date.today()))
    a = ap.parse_args(argv)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(os.path.join(a.work, "data"))
    trees = {}
    for rev in (a.rev_a, a.rev_b):
        trees[rev] = revision_tree(rev, os.path.join(a.work, "tree-" + rev.replace("/", "_")))
    try:
        d = os.path.join(a.work, "data")
        make_data(d)
        for k, rev in enumerate((a.rev_a, a.rev_b)):
            pack(d, trees[rev], k)
        rows = []
        print("| input path | ranks | parameters equal | predictions equal |\n|---|---|---|---|")
        for i in range(len(paths(d, 0))):
            got = {}
            for k, rev in enumerate((a.rev_a, a.rev_b)):
                name, ranks, args, scored, *predict_args = paths(d, k)[i]
                got[rev] = train_and_predict(trees[rev], d, name, ranks, args, scored,
                                             os.path.join(a.work, "m%d-%d" % (i, k)), *predict_args)
            ga, gb = got[a.rev_a], got[a.rev_b]
            row = {"path": name, "ranks": ranks, "args": args, a.rev_a: ga, a.rev_b: gb,
                   "params_equal": "params" in ga and ga.get("params") == gb.get("params"),
                   "predictions_equal": "predictions" in ga and ga.get("predictions") == gb.get("predictions")}
            rows.append(row)
            print("| %s | %d | %s | %s |" % (name, ranks, row["params_equal"] or ga.get("error") or gb.get("error"),
                                             row["predictions_equal"]), flush=True)
        packed = [packed_bytes(d, k) for k in (0, 1)]
        same = packed[0] == packed[1] and len(packed[0]) > 0
        print("packed writers (one pass, two passes, parts of 2 ranks): %d files, bytes %s"
              % (len(packed[0]), "equal" if same else "DIFFERENT: %s" % sorted(
                  f for f in set(packed[0]) | set(packed[1]) if packed[0].get(f) != packed[1].get(f))))
        with open(a.out, "w") as f:
            json.dump({"date": str(datetime.date.today()), "revs": [a.rev_a, a.rev_b], "packed_equal": same,
                       "packed": packed,
                       "command": "python -m scripts.bench.input_paths " + " ".join(argv or sys.argv[1:]),
                       "rows": rows}, f, indent=1)
        print("wrote", a.out)
        return 0 if same and all(r["params_equal"] and r["predictions_equal"] for r in rows) else 1
    finally:
        for tree in trees.values():
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
