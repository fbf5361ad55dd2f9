"""mpinn beside a logistic (or ridge) regression and LightGBM on any CSV file, as a user would try it on a table
of their own: a seeded random share held out as the test rows, mpinn given the label only (np 2, its defaults
choosing everything else), the baselines given the columns as pandas reads them (text: one-hot / native
categories; numbers: standardised / as they are). Prints a Markdown table and writes JSON
(scripts/results/one-table-DATE.json).

    python -m scripts.bench.one_table churn.csv:churn loans.csv:Class --np 2
    python -m scripts.bench.one_table prices.csv:price -- --epochs 5         # options after -- go to mpinn

The test metric: AUC for two classes (the positive class: the label's last value in sorted order), accuracy for
more, RMSE for a number (a numeric label with more than 20 values)."""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from scripts.bench.common import mpiexec, print_and_save


def split(path, label, work, test, seed):
    """The file's rows as a training and a test CSV in `work` (a seeded random `test` share), and the task."""
    import pandas as pd
    frame = pd.read_csv(path)
    if label not in frame:
        sys.exit("%s has no column %r (its columns: %s)" % (path, label, ", ".join(map(str, frame.columns))))
    frame = frame[frame[label].notna()]
    y = frame[label]
    task = ("binary" if y.nunique() == 2 else
            "regression" if pd.api.types.is_numeric_dtype(y) and y.nunique() > 20 else "multiclass")
    held = np.random.RandomState(seed).rand(len(frame)) < test
    base = os.path.join(work, os.path.splitext(os.path.basename(path))[0])
    frame[~held].to_csv(base + "-train.csv", index=False)
    frame[held].to_csv(base + "-test.csv", index=False)
    return frame[~held], frame[held], task, base


def run_mpinn(base, label, positive, np_, extra):
    """Train at np_ ranks with the label (and the positive class) only, predict the test file; its metrics."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = [mpiexec(), "-n", str(np_), sys.executable, "-m", "mpinn.train", "--data", base + "-train.csv",
           "--label", label, "--model-out", base + ".npz", "--no-progress"]
    cmd += (["--positive-class", positive] if positive is not None else []) + list(extra)
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t
    if r.returncode:
        sys.exit("mpinn failed: %s\n%s" % (" ".join(cmd), r.stdout[-2000:] + r.stderr[-2000:]))
    p = subprocess.run([sys.executable, "-m", "mpinn.predict", "--model", base + ".npz", "--data", base + "-test.csv",
                        "--out", base + ".pred.csv", "--metrics-out", base + ".pred.json"],
                       capture_output=True, text=True, env=env)
    if p.returncode:
        sys.exit("mpinn predict failed: %s" % p.stderr[-2000:])
    startup = [line for line in r.stdout.splitlines() if line.startswith(("columns chosen", "preprocessing:"))]
    return dict(json.load(open(base + ".pred.json")), seconds=seconds, startup=startup)


def baselines(train, test, label, task, positive):
    """The logistic / ridge regression (scikit-learn's defaults) and LightGBM's test metric."""
    import lightgbm as lgb
    import pandas as pd
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler
    x, xt = train.drop(columns=[label]), test.drop(columns=[label])
    cat = [c for c in x if not pd.api.types.is_numeric_dtype(x[c])]
    num = [c for c in x if c not in cat]
    onehot = make_pipeline(SimpleImputer(strategy="constant", fill_value="(missing)"),
                           OneHotEncoder(handle_unknown="ignore"))
    columns = ColumnTransformer([("c", onehot, cat), ("n", make_pipeline(SimpleImputer(), StandardScaler()), num)])
    native = [f.astype({c: "category" for c in cat}).copy() for f in (x, xt)]
    for c in cat:                                   # LightGBM wants the test file's categories as training's
        native[1][c] = pd.Categorical(native[1][c], categories=native[0][c].cat.categories)
    y, yt = train[label], test[label]
    if task == "regression":
        lin = make_pipeline(columns, Ridge()).fit(x, y).predict(xt)
        gbm = lgb.LGBMRegressor(verbose=-1, random_state=0).fit(native[0], y).predict(native[1])
        return {k: float(np.sqrt(np.mean((yt - p) ** 2))) for k, p in (("linear", lin), ("trees", gbm))}
    if task == "binary":
        from sklearn.metrics import roc_auc_score
        y, yt = (y.astype(str) == positive).astype(int), (yt.astype(str) == positive).astype(int)
        lin = make_pipeline(columns, LogisticRegression(max_iter=5000)).fit(x, y).predict_proba(xt)[:, 1]
        gbm = lgb.LGBMClassifier(verbose=-1, random_state=0).fit(native[0], y).predict_proba(native[1])[:, 1]
        return {k: float(roc_auc_score(yt, p)) for k, p in (("linear", lin), ("trees", gbm))}
    y, yt = y.astype(str), yt.astype(str)
    lin = make_pipeline(columns, LogisticRegression(max_iter=5000)).fit(x, y).predict(xt)
    gbm = lgb.LGBMClassifier(verbose=-1, random_state=0).fit(native[0], y).predict(native[1])
    return {k: float(np.mean(p == yt)) for k, p in (("linear", lin), ("trees", gbm))}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tables", nargs="+", metavar="FILE:LABEL", help="a CSV file and its label column")
    ap.add_argument("--np", type=int, default=2, help="ranks for mpinn (default 2)")
    ap.add_argument("--test", type=float, default=0.2, help="the share of rows tested (default 0.2)")
    ap.add_argument("--seed", type=int, default=0, help="the test rows' seed (default 0)")
    ap.add_argument("--work", default="/tmp/mpinn-one-table", help="where the split files and models go")
    args = ap.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    rows, records = [], {}
    for spec in args.tables:
        path, sep, label = spec.rpartition(":")
        if not sep or not os.path.isfile(path):
            ap.error("%r: give FILE:LABEL, an existing CSV file and its label column" % spec)
        train, test, task, base = split(path, label, args.work, args.test, args.seed)
        positive = str(sorted(train[label].astype(str).unique())[-1]) if task == "binary" else None
        m = run_mpinn(base, label, positive, args.np, extra)
        key = {"binary": "auc", "multiclass": "accuracy", "regression": "rmse"}[task]
        b = baselines(train, test, label, task, positive)
        records[os.path.basename(path)] = {"label": label, "task": task, "rows": [len(train), len(test)],
                                           "mpinn": m, "baselines": b, "metric": key}
        rows.append("| %s | %s | %d / %d | %s %.4f | %.4f | %.4f | %.1f |" % (
            os.path.basename(path), label, len(train), len(test), key, m[key], b["linear"], b["trees"], m["seconds"]))
        print(rows[-1], flush=True)
    table = "\n".join(["| data | label | rows (train / test) | mpinn, label only | logistic / ridge | LightGBM | "
                       "mpinn seconds |", "|---|---|---|---|---|---|---|"] + rows)
    print("records written to %s" % print_and_save("one-table", table, {"np": args.np, "test": args.test,
                                                                        "seed": args.seed, "mpinn_options": extra,
                                                                        "tables": records}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
