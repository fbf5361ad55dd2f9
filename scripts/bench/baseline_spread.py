"""How far the baselines of scripts/bench/real_data.py move with their own settings: the logistic regression's
test AUC over its L2 strength (scikit-learn's C; real_data uses C = 1) and LightGBM's over its trees and leaves
(real_data uses 100 trees of 31 leaves), on the same files and split. Where a baseline's own reasonable settings
spread its test AUC wider than a bar's margin, the bar cannot be decided on that set's test rows.

    python -m scripts.bench.baseline_spread --sets obd-bts,obd-random --work /tmp/mpinn-real-data

Binary sets only. Prints a Markdown table and writes JSON (scripts/results/baseline-spread-DATE.json)."""
import argparse
import os
import sys

from scripts.bench.common import print_and_save
from scripts.bench.real_data import _frames, _target, linear_pipeline, native_categories
from scripts.bench.real_sets import SETS, ensure

CS = (0.01, 0.1, 0.3, 1.0, 3.0, 10.0)
TREES = ((25, 7), (25, 31), (50, 7), (50, 31), (100, 7), (100, 31), (200, 7), (200, 31))


def logistic(cat, num, tr, te, y, c):
    """As real_data.linear, at C = c."""
    return linear_pipeline("binary", cat, num, c).fit(tr, y).predict_proba(te)[:, 1]


def lightgbm(cat, num, tr, te, y, trees, leaves):
    """As real_data.trees: categorical columns as LightGBM's own, a value unseen in training missing."""
    import lightgbm as lgb
    frames = native_categories(cat, num, tr, te)
    model = lgb.LGBMClassifier(verbose=-1, random_state=0, n_estimators=trees, num_leaves=leaves)
    return model.fit(frames[0], y).predict_proba(frames[1])[:, 1]


def main(argv=None):
    from sklearn.metrics import roc_auc_score
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default="obd-bts,obd-random", help="comma-separated binary sets of real_data")
    ap.add_argument("--work", default="/tmp/mpinn-real-data", help="where the CSV files are (made if missing)")
    args = ap.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    records, rows = {}, []
    for name in args.sets.split(","):
        if SETS.get(name, {}).get("task") != "binary":
            ap.error("%r is not a binary set of real_data (%s)" % (name, ", ".join(SETS)))
        ensure(name, args.work)
        spec, cat, num, tr, te = _frames(name, args.work)
        y, yt = _target(spec, tr), _target(spec, te)
        lin = {"C=%g" % c: float(roc_auc_score(yt, logistic(cat, num, tr, te, y, c))) for c in CS}
        gbm = {"%d trees, %d leaves" % t: float(roc_auc_score(yt, lightgbm(cat, num, tr, te, y, *t))) for t in TREES}
        records[name] = {"test_rows": int(len(yt)), "test_positives": int(yt.sum()), "logistic": lin, "lightgbm": gbm}
        for lib, aucs, used in (("logistic", lin, "C=1"), ("lightgbm", gbm, "100 trees, 31 leaves")):
            rows.append("| %s | %d | %s | %.4f | %.4f to %.4f | %s |" % (
                name, yt.sum(), lib, aucs[used], min(aucs.values()), max(aucs.values()),
                ", ".join("%s %.4f" % kv for kv in aucs.items())))
            print(rows[-1], flush=True)
    table = "\n".join(["| data | test positives | baseline | real_data's setting | range | every setting |",
                       "|---|---|---|---|---|---|"] + rows)
    print("records written to %s" % print_and_save("baseline-spread", table, {"sets": records}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
