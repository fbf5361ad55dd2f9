"""What a lever of the sharded table's exchange costs in model quality on W4 (issue 63, item 6): each arm trained
the same way, at the same global batch, from a packed file, for the same number of steps, and scored on the log's
next rows (test AUC and logloss), over several seeds. The arms so far: rows on the wire as fp32 and as bf16
(--wire-rows). Decision rule (the issue's): a lever may be a default only when its test AUC is within 0.001 of
fp32's at the same global batch, by the mean over the seeds.

    python -m scripts.bench.wire_auc [--rows 1000000] [--test-rows 200000] [--batch 32768] [--steps 1000]
                                     [--seeds 0,1,2] [--arms fp32,bf16] [--out scripts/results/wire-auc.json]

Measured in one process (np 1, --table sharded): at one rank every row a step uses is rounded once and the
batch's gradient rows once; at P ranks each rank rounds its own share's gradient rows (tests/training/
mpi_sharded.py: P ranks equal one process rounding each share), so P ranks round a row's gradient up to P times
a step where one process rounds it once. The data: W4 (python -m mpinn.bench.w4, scale 100, its seed 0), written
once into --workdir as text (scripts.bench.time_to_auc's files) and packed (python -m mpinn.prepare)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from scripts.bench.time_to_auc import make_data


def say(msg):
    print("wire_auc: " + msg, file=sys.stderr, flush=True)


def packed(path):
    """path packed once (python -m mpinn.prepare), next to it."""
    out = path[:-4] + ".mpinn"
    if not os.path.exists(out + ".done"):
        say("packing %s" % path)
        subprocess.run([sys.executable, "-m", "mpinn.prepare", "--data", path, "--out", out, "--quiet"], check=True)
        open(out + ".done", "w").close()
    return out


def arm(args, train, test, wire, seed):
    """One run: its test metrics, seconds, steps."""
    epochs = max(1, -(-args.steps * args.batch // args.rows))
    with tempfile.TemporaryDirectory() as d:
        metrics = os.path.join(d, "m.json")
        cmd = [sys.executable, "-m", "mpinn.train", "--data", train, "--valid", test, "--table", "sharded",
               "--wire-rows", wire, "--batch-size", str(args.batch), "--epochs", str(epochs), "--early-stop", "0",
               "--seed", str(seed), "--no-progress", "--metrics-out", metrics] + args.extra.split()
        say(" ".join(cmd[2:]))
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        if r.returncode != 0:
            raise SystemExit("wire_auc: the %s run (seed %d) exited %d: %s" % (wire, seed, r.returncode,
                                                                                (r.stderr or r.stdout)[-800:]))
        rec = json.load(open(metrics))
    last = rec["history"][-1]
    valid = last["valid"]
    return {"wire": wire, "seed": seed, "auc": valid["auc"], "logloss": valid["logloss"], "steps": last["step"],
            "epochs": epochs, "seconds": round(time.perf_counter() - t, 1)}


def summary(runs, arms):
    by = {a: [r for r in runs if r["wire"] == a] for a in arms}
    base = statistics.mean(r["auc"] for r in by[arms[0]])
    out = {}
    for a, rs in by.items():
        aucs, losses = [r["auc"] for r in rs], [r["logloss"] for r in rs]
        out[a] = {"auc_mean": statistics.mean(aucs), "auc_spread": max(aucs) - min(aucs),
                  "logloss_mean": statistics.mean(losses), "seeds": len(rs),
                  "auc_minus_%s" % arms[0]: statistics.mean(aucs) - base,
                  "within_0.001": abs(statistics.mean(aucs) - base) <= 0.001}
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1000000, help="training rows, the log's first (default 1,000,000)")
    p.add_argument("--test-rows", type=int, default=200000, help="test rows, the next ones (default 200,000)")
    p.add_argument("--batch", type=int, default=32768, help="the global batch (default 32768)")
    p.add_argument("--steps", type=int, default=1000, help="at least this many steps an arm (whole epochs)")
    p.add_argument("--seeds", default="0,1,2", help="mpinn's --seed of each run (default 0,1,2)")
    p.add_argument("--arms", default="fp32,bf16", help="--wire-rows of each arm, the first the baseline")
    p.add_argument("--extra", default="", help="more mpinn.train options for every arm")
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "mpinn-time-to-auc"))
    p.add_argument("--timeout", type=int, default=3600, help="seconds one run may take")
    p.add_argument("--out", default="scripts/results/wire-auc.json")
    args = p.parse_args(argv)
    os.makedirs(args.workdir, exist_ok=True)
    data = argparse.Namespace(workdir=args.workdir, rows=args.rows, test_rows=args.test_rows, scale=100, seed=0)
    train, test, _ = make_data(data)
    train = packed(train)
    arms = args.arms.split(",")
    runs = [arm(args, train, test, a, int(s)) for s in args.seeds.split(",") for a in arms]
    rec = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows": args.rows, "test_rows": args.test_rows,
           "batch": args.batch, "extra": args.extra, "runs": runs, "summary": summary(runs, arms),
           "measured": "np 1, --table sharded; see the module docstring for what one process rounds"}
    with open(args.out, "w") as f:
        json.dump(rec, f, indent=1)
    print("| arm | test AUC (mean of %d seeds) | spread | logloss | AUC - %s | within 0.001 |" % (
        len(args.seeds.split(",")), arms[0]))
    print("|---|---|---|---|---|---|")
    for a, s in rec["summary"].items():
        print("| %s | %.5f | %.5f | %.5f | %+.5f | %s |" % (a, s["auc_mean"], s["auc_spread"], s["logloss_mean"],
                                                          s["auc_minus_%s" % arms[0]], s["within_0.001"]))
    say("written %s" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
