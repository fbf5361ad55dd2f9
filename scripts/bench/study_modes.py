"""Measure how accuracy and time move with the global batch (with and without linear LR scaling),
and tower mode against data parallelism, on the embedded click log and on digits (Ng's network).

    python -m scripts.bench.study_modes --np 2 --out study.json       # prints Markdown tables

Every number is one run of python -m mpinn.train under mpiexec on this machine (no repeats: the
accuracy differences are the point, the times are indicative)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def train(np_, args, tmp):
    metrics = os.path.join(tmp, "m.json")
    cmd = [os.path.join(os.path.dirname(sys.executable), "mpiexec"), "-n", str(np_), sys.executable, "-m",
           "mpinn.train", "--quiet", "--model-out", os.path.join(tmp, "m.npz"), "--metrics-out", metrics] + args
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit("failed: %s\n%s" % (" ".join(cmd), r.stderr))
    out = json.load(open(metrics))
    return {"valid": out["valid"], "seconds": out["summary"]["seconds"],
            "samples_per_s": out["summary"]["samples_per_s"]}


def digits_file(tmp):
    import numpy as np
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    path = os.path.join(tmp, "digits.npz")
    np.savez(path, X=X / 16.0, y=y)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--out", default="study-modes.json")
    a = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        digits = digits_file(tmp)
        sets = {
            "click log": ([], "auc", 3, 256, 0.3),
            "digits": ([digits, "--hidden", "25", "--activation", "sigmoid", "--loss", "sigmoid"],
                       "accuracy", 20, 32, 1.0),
        }
        for name, (data, metric, epochs, base, lr) in sets.items():
            for batch in (base, 4 * base, 16 * base):
                for scaling in ("none", "linear"):
                    if batch == base and scaling == "linear":
                        continue
                    extra = ["--lr-scaling", "linear", "--lr-base-batch", str(base)] if scaling == "linear" else []
                    r = train(a.np, data + ["--epochs", str(epochs), "--batch-size", str(batch), "--lr", str(lr)]
                              + extra, tmp)
                    rows.append(dict(study="batch", data=name, batch=batch, scaling=scaling, epochs=epochs,
                                     metric=metric, value=r["valid"][metric], seconds=r["seconds"]))
                    print(rows[-1], flush=True)
            for mode, extra in (("data parallel", []),
                                ("tower, shard, mean", ["--parallel", "tower"]),
                                ("tower, shard, fit", ["--parallel", "tower", "--tower-mix", "fit"]),
                                ("tower, same, mean", ["--parallel", "tower", "--tower-data", "same"])):
                r = train(a.np, data + ["--epochs", str(epochs), "--batch-size", str(4 * base), "--lr", str(lr)]
                          + extra, tmp)
                towers = [t[metric] for t in r["valid"].get("towers", [])]
                rows.append(dict(study="tower", data=name, mode=mode, epochs=epochs, metric=metric,
                                 value=r["valid"][metric], towers=towers, seconds=r["seconds"],
                                 samples_per_s=r["samples_per_s"]))
                print(rows[-1], flush=True)
    json.dump({"np": a.np, "rows": rows}, open(a.out, "w"), indent=1)
    print("\n| data | global batch | LR | epochs | held-out | time (s) |\n|---|---|---|---|---|---|")
    for r in rows:
        if r["study"] == "batch":
            print("| %s | %d | %s | %d | %s %.4f | %.1f |" % (r["data"], r["batch"], r["scaling"], r["epochs"],
                                                            r["metric"], r["value"], r["seconds"]))
    print("\n| data | mode | held-out (mixture) | each tower | time (s) | samples/s |\n|---|---|---|---|---|---|")
    for r in rows:
        if r["study"] == "tower":
            print("| %s | %s | %s %.4f | %s | %.1f | %.0f |" % (
                r["data"], r["mode"], r["metric"], r["value"], " ".join("%.4f" % t for t in r["towers"]) or "-",
                r["seconds"], r["samples_per_s"]))


if __name__ == "__main__":
    main()
