"""Quantile bins (--numeric-bins) and periodic embeddings (--numeric-embedding) on scikit-learn's bundled tables, as a user trains them: python -m mpinn.train with
only --label at np 2, each setting over a few seeds, on a seeded 20% test split, beside a logistic (ridge)
regression and LightGBM on the same split. Prints a Markdown table and writes JSON. (Census income, cells,
diamonds and the rest: python -m scripts.bench.real_data --settings "--numeric-bins off" ...)

    python -m scripts.bench.numeric_bins --sets breast_cancer,diabetes,wine,digits --bins off,8,16 --seeds 0,1,2
    python -m scripts.bench.numeric_bins --bins auto --embeddings off,auto,periodic      # the embeddings instead"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time

import numpy as np

from scripts import RESULTS

SETS = {"breast_cancer": "binary", "diabetes": "regression", "wine": "multiclass", "digits": "multiclass"}


def make(name, work):
    """<name>-train.csv and -test.csv: the set's columns and `target`, a seeded 20% tested."""
    import pandas as pd
    from sklearn import datasets
    d = getattr(datasets, "load_" + name)(as_frame=True)
    f = d.frame.rename(columns=lambda c: str(c).replace(" ", "_"))
    test = np.zeros(len(f), bool)
    test[np.random.default_rng(7).permutation(len(f))[:len(f) // 5]] = True
    for part, rows in (("train", ~test), ("test", test)):
        pd.DataFrame(f[rows]).to_csv(os.path.join(work, "%s-%s.csv" % (name, part)), index=False)


def score(task, y, p):
    from sklearn.metrics import accuracy_score, roc_auc_score
    if task == "regression":
        return {"rmse": float(np.sqrt(np.mean((y - p) ** 2)))}
    if task == "binary":
        return {"accuracy": float(accuracy_score(y, p > 0.5)), "auc": float(roc_auc_score(y, p))}
    return {"accuracy": float(accuracy_score(y, np.argmax(p, axis=1)))}


def baselines(name, task, work):
    import lightgbm as lgb
    import pandas as pd
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    tr, te = (pd.read_csv(os.path.join(work, "%s-%s.csv" % (name, p))) for p in ("train", "test"))
    X, Xt, y, yt = tr.drop(columns="target"), te.drop(columns="target"), tr["target"], te["target"]
    out = {}
    for what, model in (("linear", make_pipeline(StandardScaler(), Ridge() if task == "regression" else
                                                  LogisticRegression(max_iter=5000))),
                        ("lightgbm", (lgb.LGBMRegressor if task == "regression" else lgb.LGBMClassifier)(
                            verbose=-1, random_state=0))):
        model.fit(X, y)
        p = model.predict(Xt) if task == "regression" else model.predict_proba(Xt)
        out[what] = score(task, yt.to_numpy(), p[:, 1] if task == "binary" else p)
    return out


def mpinn(name, work, bins, seed, np_=2, embedding="auto"):
    """Train with only the label (and the task where auto would not see it: diabetes' integer target), predict the
    test file."""
    train, test = (os.path.join(work, "%s-%s.csv" % (name, p)) for p in ("train", "test"))
    model = os.path.join(work, "%s-%s-%s-%d.npz" % (name, bins, embedding.replace(":", "_"), seed))
    pred = model[:-4] + ".json"
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    t = time.perf_counter()
    cmd = [here if os.path.exists(here) else "mpiexec", "-n", str(np_), sys.executable, "-m", "mpinn.train", "--data",
           train, "--label", "target", "--numeric-bins", bins, "--numeric-embedding", embedding, "--seed", str(seed),
           "--model-out", model, "--no-progress"]
    cmd += ["--task", "regression"] if SETS[name] == "regression" else []
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t
    if r.returncode:
        sys.exit("mpinn failed: %s" % r.stderr[-2000:])
    p = subprocess.run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", test, "--metrics-out", pred],
                       capture_output=True, text=True, env=env)
    if p.returncode:
        sys.exit("mpinn predict failed: %s" % p.stderr[-2000:])
    line = [s for s in r.stdout.splitlines() if s.startswith("preprocessing:")]
    chose = [s for s in r.stdout.splitlines() if s.startswith("numeric embedding:")]
    return dict(json.load(open(pred)), seconds=seconds, preprocessing=line[0] if line else "",
                embedding=chose[0] if chose else "")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--bins", default="off,8,16", help="--numeric-bins values, comma-separated")
    ap.add_argument("--embeddings", default="auto", help="--numeric-embedding values, comma-separated")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--work", default="/tmp/mpinn-numeric-bins")
    ap.add_argument("--out", default=os.path.join(RESULTS, "numeric-bins-%s.json" % datetime.date.today()))
    args = ap.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    embeddings = args.embeddings.split(",")     # the records' keys: BINS, or BINS/EMBEDDING when several are tried
    settings = [b if embeddings == ["auto"] else "%s/%s" % (b, e) for b in args.bins.split(",") for e in embeddings]
    records, rows = {}, []
    for name in args.sets.split(","):
        task = SETS[name]
        make(name, args.work)
        metric = "rmse" if task == "regression" else "auc" if task == "binary" else "accuracy"
        rec = {"task": task, "baselines": baselines(name, task, args.work), "mpinn": {}}
        for key in settings:
            bins, emb = key.split("/") if "/" in key else (key, "auto")
            runs = [mpinn(name, args.work, bins, s, embedding=emb) for s in seeds]
            rec["mpinn"][key] = runs
            vals = [r[metric] for r in runs]
            print("  %-14s %-20s %s %s (mean %.4f)  %.1f s  %s" % (name, key, metric, " ".join(
                "%.4f" % v for v in vals), np.mean(vals), np.mean([r["seconds"] for r in runs]),
                (runs[0]["embedding"] or runs[0]["preprocessing"])[:140]), flush=True)
        cells = ["%.4f" % np.mean([r[metric] for r in rec["mpinn"][b]]) for b in settings]
        rows.append("| %s | %s | %s | %s | %.4f | %.4f |" % (name, task, metric, " | ".join(cells),
                                                             rec["baselines"]["linear"][metric],
                                                             rec["baselines"]["lightgbm"][metric]))
        records[name] = rec
        print(rows[-1], flush=True)
    table = ["| data | task | metric | %s | linear | LightGBM |" % " | ".join(
        "mpinn %s (mean of %d seeds)" % (b, len(seeds)) for b in settings), "|---" * (5 + len(settings)) + "|"] + rows
    print("\n".join(table))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"date": str(datetime.date.today()), "command": " ".join(sys.argv), "sets": records,
                   "table": table}, f, indent=1)
    print("records written to %s" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
