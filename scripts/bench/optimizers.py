"""The optimizers side by side: python -m scripts.bench.optimizers [--reps 3] [--out FILE.json]

1. W2 (the peers' wide hashed workload, python -m mpinn.bench) at np 1 and 2 with sgd, adam (lazy),
   adagrad and ftrl: median samples/s over --reps runs, interleaved (each round runs every
   configuration once, the optimizers' order rotated from round to round: the last runs of a round
   measured slower here), the ratio to sgd's rate in the same rounds, the update's share of the step,
   and the node's memory (the sum of the ranks' PSS) at np 2.
2. Dense Adam on a 784-800-10 network, global batch 128, np 2 (python -m mpinn.train on W1's 60000 x 784
   data): the update's share of the step with the state held once per node and stepped in parts
   (--comm shm, the default on one node) against every rank stepping its own full copy (--comm mpi).
3. The embedded click log, defaults, 3 epochs, np 2: held-out AUC and loss with each optimizer.
Prints Markdown tables and writes every number as JSON."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from scripts import RESULTS, ROOT

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
OPTIMIZERS = ("sgd", "adam", "adagrad", "ftrl")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def mpirun(np_, args, timeout=900):
    cmd = [MPIEXEC, "-n", str(np_), sys.executable] + args
    r = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout)
    if r.returncode:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr[-3000:]))
    return r


def w2(reps, tmp):
    out = {}
    for rep in range(reps):
        for np_ in (1, 2):
            for opt in OPTIMIZERS[rep % 4:] + OPTIMIZERS[:rep % 4]:    # rotated: no optimizer always runs last
                path = os.path.join(tmp, "w2.jsonl")
                mpirun(np_, ["-m", "mpinn.bench", "--workload", "w2", "--optimizer", opt, "--timing-steps", "0",
                             "--out", path])
                with open(path) as f:
                    rec = json.loads(f.read().splitlines()[-1])
                out.setdefault((np_, opt), []).append(rec)
                print("W2 np %d %-8s %8.0f samples/s  update %.2f of %.2f ms/step  loss_final %.4f" % (
                    np_, opt, rec["samples_per_s"], rec["phase_ms_rank0"]["update"], rec["step_ms"],
                    rec["loss_final"]), flush=True)
    rows = []
    for np_ in (1, 2):
        sgd = [r["samples_per_s"] for r in out[(np_, "sgd")]]
        for opt in OPTIMIZERS:
            recs = out[(np_, opt)]
            rates = [r["samples_per_s"] for r in recs]
            rows.append({"np": np_, "optimizer": opt, "samples_per_s": statistics.median(rates),
                         "range": [min(rates), max(rates)],
                         "ratio_to_sgd": statistics.median(a / b for a, b in zip(rates, sgd)),
                         "update_share": statistics.median(r["phase_ms_rank0"]["update"] / r["step_ms"] for r in recs),
                         "node_pss_mb": statistics.median(sum(r["pss_mb_per_rank"]) for r in recs),
                         "loss_final": recs[0]["loss_final"]})
    return rows


def dense_adam(reps, tmp):
    data = os.path.join(tmp, "w1.npz")
    code = ("import numpy as np; from mpinn.bench.workloads import make_w1; X, y = make_w1(); "
            "np.savez(%r, X=X, y=y)" % data)
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=ENV, check=True)
    out = {}
    for rep in range(reps):
        for comm in ("shm", "mpi"):
            m = os.path.join(tmp, "m.json")
            mpirun(2, ["-m", "mpinn.train", data, "--hidden", "800", "--batch-size", "128", "--optimizer",
                       "adam", "--lr", "0.001", "--epochs", "1", "--comm", comm, "--no-progress",
                       "--metrics-out", m, "--model-out", os.path.join(tmp, "m.npz")])
            with open(m) as f:
                s = json.load(f)["summary"]
            ph = s["phase_s_mean"]
            busy = sum(ph.values())
            out.setdefault(comm, []).append({"samples_per_s": s["samples_per_s"], "update_share": ph["update"] / busy,
                                             "update_ms": 1e3 * ph["update"] / s["global_steps"],
                                             "step_ms": 1e3 * busy / s["global_steps"]})
            print("dense adam np 2 --comm %s: %.0f samples/s, update %.0f%% of the step" % (
                comm, s["samples_per_s"], 100 * ph["update"] / busy), flush=True)
    return {c: {k: statistics.median(r[k] for r in v) for k in v[0]} for c, v in out.items()}


def clicklog(tmp):
    rows = []
    for opt in OPTIMIZERS:
        m = os.path.join(tmp, "c.json")
        t = time.perf_counter()
        mpirun(2, ["-m", "mpinn.train", "--optimizer", opt, "--epochs", "3", "--no-progress",
                   "--metrics-out", m, "--model-out", os.path.join(tmp, "c.npz")])
        with open(m) as f:
            valid = json.load(f)["valid"]
        rows.append({"optimizer": opt, "auc": valid.get("auc"), "loss": valid.get("logloss"),
                     "accuracy": valid.get("accuracy"), "wall_s": time.perf_counter() - t})
        print("click log %-8s AUC %.4f loss %.4f" % (opt, valid.get("auc"), valid.get("logloss")), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(RESULTS, "bench-optimizers-%s.json" % time.strftime("%Y-%m-%d")))
    ap.add_argument("--only", choices=["w2", "dense", "clicklog"], help="run one part")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mpinn-bench-opt-")
    res = {}
    if args.only in (None, "w2"):
        res["w2"] = w2(args.reps, tmp)
    if args.only in (None, "dense"):
        res["dense_adam"] = dense_adam(args.reps, tmp)
    if args.only in (None, "clicklog"):
        res["clicklog"] = clicklog(tmp)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    if "w2" in res:
        print("\n| W2 | optimizer | samples/s (median) | range | / sgd | update share | node PSS MB | loss_final |")
        print("|---|---|---|---|---|---|---|---|")
        for r in res["w2"]:
            print("| np %d | %s | %.0f | %.0f–%.0f | %.2f | %.0f%% | %.0f | %.4f |" % (
                r["np"], r["optimizer"], r["samples_per_s"], r["range"][0], r["range"][1], r["ratio_to_sgd"],
                100 * r["update_share"], r["node_pss_mb"], r["loss_final"]))
    if "dense_adam" in res:
        print("\n| 784-800-10 adam, batch 128, np 2 | samples/s | update ms/step | step ms | update share |")
        print("|---|---|---|---|---|")
        for c, r in res["dense_adam"].items():
            print("| %s | %.0f | %.2f | %.2f | %.0f%% |" % (
                "--comm shm (state once per node, stepped in parts)" if c == "shm" else
                "--comm mpi (every rank steps its own copy)", r["samples_per_s"], r["update_ms"], r["step_ms"],
                100 * r["update_share"]))
    if "clicklog" in res:
        print("\n| click log, 3 epochs, np 2 | held-out AUC | loss | accuracy |")
        print("|---|---|---|---|")
        for r in res["clicklog"]:
            print("| %s | %.4f | %.4f | %.4f |" % (r["optimizer"], r["auc"], r["loss"], r["accuracy"]))
    print("\nwritten to %s" % args.out)


if __name__ == "__main__":
    main()
