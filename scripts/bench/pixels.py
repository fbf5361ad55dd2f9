"""Pixels with the dense defaults (issue 37, item 4): the 784-800-10 network (`--hidden 800 --epochs 10`, nothing
else), and the same with `--lr-decay cosine`, on Fashion-MNIST and on scikit-learn's 8x8 digits, beside a
logistic regression and LightGBM on the same split. Prints a Markdown table and writes JSON.

    apt-get download dataset-fashion-mnist && dpkg -x dataset-fashion-mnist_*.deb fmnist-deb
    python -m scripts.bench.pixels --fashion-dir fmnist-deb/usr/share/datasets/fashion-mnist

Data (nothing is downloaded):
  fashion  Fashion-MNIST (Xiao et al. 2017; Debian's dataset-fashion-mnist, the four idx .gz files): 60,000
           training and 10,000 test images of 28x28 grey pixels, 10 classes; its own test file
  digits   scikit-learn's load_digits (UCI optical digits, 1,797 images of 8x8 pixels, 10 classes): a fixed
           random 20% tested. No 60,000-image digit set (MNIST) can be had offline here; this is the closest.
mpinn trains at np 2 on the training file with the raw pixels (0-255 or 0-16) as a user would give them, keeps
10% of it for its own held-out checks, and mpinn.predict scores the test file. The logistic regression
(scikit-learn, lbfgs, pixels scaled to [0, 1]) and LightGBM (200 rounds) train on the whole training file."""
import argparse
import datetime
import gzip
import json
import os
import subprocess
import sys
import time

import numpy as np

from scripts import RESULTS
from scripts.bench.common import mpiexec

TRAIN = ["--hidden", "800", "--epochs", "10"]
SETTINGS = {"defaults": [], "cosine": ["--lr-decay", "cosine"]}


def idx(path, offset):
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def fashion(d):
    """(X_train, y_train, X_test, y_test) from the four idx files."""
    x = [idx(os.path.join(d, "%s-images-idx3-ubyte.gz" % s), 16).reshape(-1, 784) for s in ("train", "t10k")]
    y = [idx(os.path.join(d, "%s-labels-idx1-ubyte.gz" % s), 8).astype(np.int64) for s in ("train", "t10k")]
    return x[0], y[0], x[1], y[1]


def digits():
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    test = np.random.default_rng(0).permutation(len(y))[: len(y) // 5]
    is_test = np.zeros(len(y), bool)
    is_test[test] = True
    return X[~is_test], y[~is_test], X[is_test], y[is_test]


def run_mpinn(name, data, work, np_, setting):
    Xtr, ytr, Xte, yte = data
    train, test = os.path.join(work, name + "-train.npz"), os.path.join(work, name + "-test.npz")
    np.savez(train, X=Xtr, y=ytr)
    np.savez(test, X=Xte, y=yte)
    model, pred = (os.path.join(work, "%s-%s%s" % (name, setting, ext)) for ext in (".npz", "-test.json"))
    cmd = [mpiexec(), "-n", str(np_), sys.executable, "-m", "mpinn.train", "--data", train, "--model-out", model,
           "--no-progress"] + TRAIN + SETTINGS[setting]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if r.returncode:
        sys.exit("mpinn failed: %s\n%s" % (" ".join(cmd), r.stderr))
    p = subprocess.run([sys.executable, "-m", "mpinn.predict", "--model", model, "--data", test, "--metrics-out",
                        pred], capture_output=True, text=True)
    if p.returncode:
        sys.exit("mpinn predict failed: %s" % p.stderr)
    return {"accuracy": json.load(open(pred))["accuracy"], "seconds": seconds,
            "startup": [x for x in r.stdout.splitlines() if x.startswith(("config:", "model:", "model written"))]}


def baselines(data):
    Xtr, ytr, Xte, yte = data
    scale = float(Xtr.max())
    out = {}
    from sklearn.linear_model import LogisticRegression
    t = time.perf_counter()
    lr = LogisticRegression(max_iter=300).fit(Xtr / scale, ytr)
    out["logistic"] = {"accuracy": float((lr.predict(Xte / scale) == yte).mean()), "seconds": time.perf_counter() - t}
    try:
        import lightgbm
    except ImportError:
        out["lightgbm"] = {"error": "lightgbm is not installed"}
        return out
    t = time.perf_counter()
    gbm = lightgbm.LGBMClassifier(n_estimators=200, verbose=-1).fit(Xtr, ytr)
    out["lightgbm"] = {"accuracy": float((gbm.predict(Xte) == yte).mean()), "seconds": time.perf_counter() - t}
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fashion-dir", default="/usr/share/datasets/fashion-mnist",
                   help="the folder of Fashion-MNIST's idx .gz files (default: where Debian's package puts them)")
    p.add_argument("--sets", default="fashion,digits", help="which: fashion, digits (default both)")
    p.add_argument("--np", type=int, default=2, help="mpinn's ranks (default 2)")
    p.add_argument("--no-baselines", action="store_true", help="mpinn only (the baselines take minutes)")
    p.add_argument("--work", default="/tmp/mpinn-pixels", help="where the data files and models go")
    p.add_argument("--out", default=os.path.join(RESULTS, "pixels-%s.json" % datetime.date.today()),
                   help="JSON record")
    args = p.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    rows, record = [], {"command": TRAIN, "np": args.np, "sets": {}}
    for name in args.sets.split(","):
        data = fashion(args.fashion_dir) if name == "fashion" else digits()
        rec = {"train_rows": len(data[1]), "test_rows": len(data[3])}
        for setting in SETTINGS:
            rec["mpinn " + setting] = run_mpinn(name, data, args.work, args.np, setting)
            print("%s, %s: %s" % (name, setting, rec["mpinn " + setting]["startup"][-1]), file=sys.stderr)
        rec.update({} if args.no_baselines else baselines(data))
        record["sets"][name] = rec
        acc = [rec.get(k, {}).get("accuracy") for k in ("mpinn defaults", "mpinn cosine", "logistic", "lightgbm")]
        rows.append("| %s | %s |" % (name, " | ".join("%.4f" % a if a is not None else "-" for a in acc)))
    table = "\n".join(["| data | mpinn --hidden 800 --epochs 10 | the same, --lr-decay cosine | logistic regression "
                       "| LightGBM |", "|---|---|---|---|---|"] + rows)
    print(table)
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
    print("record written to %s" % args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
