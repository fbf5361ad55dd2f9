"""Time to AUC on W4: mpinn (np 1 and 2, its defaults and a tuned setting) beside LightGBM, Vowpal Wabbit and a
scikit-learn logistic regression, each system's test AUC measured at several points of its training.

    python -m scripts.bench.time_to_auc --rows 1000000 --test-rows 100000 --out auc.json --plot auc.png

The data: W4 (python -m mpinn.bench.w4), the first --rows rows of the log to train, the next --test-rows to
test, as click logs are evaluated; written once as tab-separated text into --workdir and reused. Every
system reads that text file itself, so reading and parsing it are part of everyone's time.

The clocks. A peer's clock starts when its process starts and stops while it scores the test rows
(scripts/bench/auc_peers.py). mpinn's point is the record its --curve writes at each --eval-every point and epoch
end: its Unix time less the moment this script launched mpirun, less the seconds its earlier held-out
evaluations took. mpinn reads the test rows at its start (inside its time), the peers outside theirs.

The peers run in their own venv (--peers-venv, made and filled from PyPI on first use, as the
shared peers benchmark's setup.sh does for the neural peers): lightgbm, vowpalwabbit, scikit-learn, pandas.

Output: --out, JSON lines, one per point: system, np, seconds, auc, rows_seen, point, config (mpinn: the
options beside the data's), params (peers); a line with system "hidden model" gives the AUC of the log's
own click probabilities on the test rows, the best any model can expect. --plot: AUC against seconds, every
run one line. The table: each run's final AUC and time, its distance from the hidden model, and for every
mpinn run the seconds it took to reach each peer's final AUC; then the issue's two goals as measured.
"""
import argparse
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

PEERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "auc_peers.py")   # run by path in the peers' venv
PEER_PACKAGES = ["lightgbm==4.7.0", "vowpalwabbit==9.11.9", "scikit-learn==1.9.1", "pandas==3.1.1",
                 "numpy", "scipy", "matplotlib"]
PEER_IMPORTS = "import lightgbm, vowpalwabbit.pyvw, sklearn, pandas, numpy, scipy"
SYSTEMS = ("mpinn", "lightgbm", "vw", "logreg")


def say(msg):
    print("time_to_auc: " + msg, file=sys.stderr, flush=True)


def fail(msg):
    print("time_to_auc: error: " + msg, file=sys.stderr, flush=True)
    sys.exit(2)


# ------------------------------------------------------------------------------------------- the peers' venv
def peers_python(venv, install=True):
    """The peers' interpreter, after making the venv and installing the peers into it where needed."""
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(py) and subprocess.run([py, "-c", PEER_IMPORTS], capture_output=True).returncode == 0:
        return py
    if not install:
        fail("the peers' venv %s lacks %s (run without --no-install to make it)" % (venv, PEER_IMPORTS[7:]))
    say("making the peers' venv %s: pip install %s (once)" % (venv, " ".join(PEER_PACKAGES)))
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    r = subprocess.run([py, "-m", "pip", "install", "-q"] + PEER_PACKAGES)
    if r.returncode != 0 or subprocess.run([py, "-c", PEER_IMPORTS]).returncode != 0:
        fail("could not install the peers into %s (pip exit %d)" % (venv, r.returncode))
    return py


# ------------------------------------------------------------------------------------------------- the data
def make_data(args):
    """train.tsv, test.tsv and the test rows' hidden click probabilities, made once per (rows, scale, seed)."""
    tag = "w4-s%d-seed%d" % (args.scale, args.seed)
    train = os.path.join(args.workdir, "%s-train-%d.tsv" % (tag, args.rows))
    test = os.path.join(args.workdir, "%s-test-%d-%d.tsv" % (tag, args.rows, args.test_rows))
    truth = test[:-4] + "-truth.npy"
    for path, start, n, extra in ((train, 0, args.rows, []), (test, args.rows, args.test_rows, ["--truth", truth])):
        if os.path.exists(path + ".done"):
            continue
        say("writing %d W4 rows to %s" % (n, path))
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "mpinn.bench.w4", "--rows", str(n), "--start", str(start), "--out",
                        path, "--scale", str(args.scale), "--seed", str(args.seed), "--quiet"] + extra, check=True)
        open(path + ".done", "w").close()
        say("  %.1f s, %.0f MB" % (time.perf_counter() - t, os.path.getsize(path) / 1e6))
    return train, test, truth


def hidden_auc(test, truth):
    import numpy as np
    from mpinn.model.metrics import auc
    with open(test, "rb") as f:
        y = np.array([line[:1] == b"1" for line in f], dtype=np.float64)
    return float(auc(y, np.load(truth).astype(np.float64)))


# ------------------------------------------------------------------------------------------------- the runs
def run_mpinn(args, train, test, np_, name, options):
    """One mpinn run under mpirun; its points from the curve's records."""
    from mpinn.settings.shapes import auto_batch
    words = shlex.split(options)
    batch = int(words[words.index("--batch-size") + 1]) if "--batch-size" in words else auto_batch(args.rows)
    every = max(1, math.ceil(args.rows / batch / args.points))
    base = os.path.join(args.workdir, "mpinn-%s-np%d" % (name, np_))
    curve = base + ".curve.jsonl"
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")      # the mpich wheel's, else PATH's
    launcher = here if os.path.exists(here) else shutil.which("mpiexec") or "mpirun"
    cmd = [launcher, "-n", str(np_), sys.executable, "-m", "mpinn.train", "--data", train, "--valid", test,
           "--curve", curve, "--eval-every", str(every), "--no-progress", "--model-out", base + ".npz"] + words
    say("mpinn %s np %d: %s" % (name, np_, " ".join(cmd[4:])))
    t_launch = time.time()
    with open(base + ".log", "w") as log:
        try:
            r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            fail("mpinn %s np %d ran past --timeout %d s (its log: %s.log)" % (name, np_, args.timeout, base))
    if r.returncode != 0:
        fail("mpinn %s np %d exited %d (its log: %s.log)" % (name, np_, r.returncode, base))
    points = []
    for line in open(curve):
        rec = json.loads(line)
        points.append({"system": "mpinn " + name, "np": np_, "seconds": round(rec["time"] - t_launch - rec["eval_seconds"], 4),
                       "auc": round(rec["valid_auc"], 6), "rows_seen": rec["samples"],
                       "point": "epoch %d %s %d" % (rec["epoch"], rec["at"], rec["step"]), "config": options})
        say("  %-24s %8.2f s  AUC %.4f" % (points[-1]["point"], points[-1]["seconds"], points[-1]["auc"]))
    return points + written_point(base + ".log", points)


def written_point(log, points):
    """The model mpinn wrote, as a last point at the run's last one: the parameters of the epoch its log names
    (the best by held-out loss when it ran more than one; --valid is the test rows here, so that choice saw
    them), with that epoch's AUC. [] when the written epoch is the last point already."""
    line = next((x for x in open(log) if x.startswith("model written to ")), "")
    m = re.search(r"the parameters of epoch (\d+)", line)
    ends = {int(p["point"].split()[1]): p for p in points if p["point"].split()[2] == "epoch"}
    if not m or int(m.group(1)) not in ends or ends[int(m.group(1))] is points[-1]:
        return []
    best = ends[int(m.group(1))]
    return [dict(points[-1], auc=best["auc"], point="model written: epoch %s's parameters" % m.group(1))]


def run_peer(args, py, train, test, system):
    out = os.path.join(args.workdir, "peer-%s.jsonl" % system)
    if os.path.exists(out):
        os.remove(out)
    cmd = [py, PEERS, "--system", system, "--train", train, "--test", test, "--out", out,
           "--threads", str(args.threads), "--tmpdir", args.workdir] + shlex.split(getattr(args, system + "_args"))
    say("%s: %s" % (system, " ".join(cmd[2:])))
    try:
        r = subprocess.run(cmd, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        fail("%s ran past --timeout %d s" % (system, args.timeout))
    if r.returncode != 0:
        fail("%s exited %d" % (system, r.returncode))
    return [json.loads(line) for line in open(out)]


# -------------------------------------------------------------------------------------------- the summary
def runs_of(points):
    """{(system, np): [points in time order]}, the hidden model left out."""
    runs = {}
    for p in points:
        if p["system"] != "hidden model":
            runs.setdefault((p["system"], p["np"]), []).append(p)
    return {k: sorted(v, key=lambda p: p["seconds"]) for k, v in runs.items()}


def time_to_reach(run, target):
    """The first seconds at which the run's AUC is at least target, or None."""
    return next((p["seconds"] for p in run if p["auc"] >= target), None)


def auc_at(run, seconds):
    """The run's AUC at that time: its last point at or before it (None before its first)."""
    done = [p for p in run if p["seconds"] <= seconds]
    return done[-1]["auc"] if done else None


def table(points, hidden):
    runs = runs_of(points)
    peers = {k: v for k, v in runs.items() if not k[0].startswith("mpinn")}
    mine = {k: v for k, v in runs.items() if k[0].startswith("mpinn")}
    lines = ["| run | final AUC | best AUC | hidden − final | seconds (final) | rows seen |", "|---|---|---|---|---|---|"]
    for (system, np_), run in runs.items():
        last = run[-1]
        lines.append("| %s np %d | %.4f | %.4f | %.4f | %.1f | %d |" % (
            system, np_, last["auc"], max(p["auc"] for p in run), hidden - last["auc"], last["seconds"],
            last["rows_seen"]))
    lines += ["", "mpinn's seconds to reach each peer's final AUC (the peer's own seconds in brackets):", "",
              "| mpinn run | " + " | ".join("%s %.4f (%.1f s)" % (k[0], v[-1]["auc"], v[-1]["seconds"])
                                           for k, v in peers.items()) + " |",
              "|---|" + "---|" * len(peers)]
    for (system, np_), run in mine.items():
        cells = []
        for peer in peers.values():
            t = time_to_reach(run, peer[-1]["auc"])
            cells.append("%.1f s" % t if t is not None else "not reached")
        lines.append("| %s np %d | %s |" % (system, np_, " | ".join(cells)))
    lines += ["", "The goals, as measured:"]
    for (system, np_), run in mine.items():
        if np_ != 2:
            continue
        if ("vw", 1) in peers:
            vw = peers[("vw", 1)][-1]
            t = time_to_reach(run, vw["auc"])
            lines.append("- %s np 2 reaches VW's final AUC %.4f %s VW's %.1f s: %s" % (
                system, vw["auc"], "in %.1f s against" % t if t is not None else "never, against", vw["seconds"],
                "met" if t is not None and t < vw["seconds"] else "NOT met"))
        if ("lightgbm", 1) in peers:
            lg = peers[("lightgbm", 1)][-1]
            a = auc_at(run, lg["seconds"])
            lines.append("- %s np 2 at LightGBM's %.1f s: AUC %s against LightGBM's %.4f (goal: at least %.4f): %s" % (
                system, lg["seconds"], "%.4f" % a if a is not None else "none yet", lg["auc"], lg["auc"] - 0.005,
                "met" if a is not None and a >= lg["auc"] - 0.005 else "NOT met"))
    return "\n".join(lines)


def plot(points, hidden, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    fig, ax = plt.subplots(figsize=(8, 5))
    for (system, np_), run in runs_of(points).items():
        ax.plot([p["seconds"] for p in run], [p["auc"] for p in run], "o-" if system.startswith("mpinn") else "s--",
                markersize=3, label="%s np %d" % (system, np_) if system.startswith("mpinn") else system)
    ax.axhline(hidden, color="grey", linestyle=":", label="hidden model %.4f" % hidden)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("training wall seconds (log scale)")
    ax.set_ylabel("test AUC")
    ax.set_ylim(max(0.5, min(p["auc"] for p in points) - 0.005), hidden + 0.01)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ------------------------------------------------------------------------------------------------------ main
def main(argv=None):
    p = argparse.ArgumentParser(prog="time_to_auc.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--rows", type=int, help="training rows (the log's first)")
    p.add_argument("--test-rows", type=int, help="test rows (the next ones)")
    p.add_argument("--out", help="JSON lines, one per point")
    p.add_argument("--summarize", metavar="POINTS", help="print the table (and --plot) of a points file written "
                   "before, and exit")
    p.add_argument("--plot", help="PNG of AUC against seconds")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="of %s (default: all)" % ",".join(SYSTEMS))
    p.add_argument("--np", default="1,2", help="mpinn's numbers of ranks (default 1,2)")
    p.add_argument("--mpinn-best", default="--epochs 1",
                   help="mpinn's tuned options beside the defaults' run ('' for none) (default: %(default)s)")
    p.add_argument("--points", type=int, default=8, help="mpinn: held-out evaluations per epoch (default 8)")
    p.add_argument("--scale", type=int, default=100, help="W4's --scale (default 100)")
    p.add_argument("--seed", type=int, default=0, help="W4's --seed (default 0)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="LightGBM's threads (default %(default)s)")
    p.add_argument("--lightgbm-args", default="", help="more auc_peers.py options for LightGBM, e.g. '--rounds 500'")
    p.add_argument("--vw-args", default="", help="more auc_peers.py options for VW, e.g. '--passes 2'")
    p.add_argument("--logreg-args", default="", help="more auc_peers.py options for the logistic regression")
    p.add_argument("--workdir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "mpinn-time-to-auc"),
                   help="the data, logs and curves (default: %(default)s)")
    p.add_argument("--peers-venv", default=os.environ.get("MPINN_PEERS_VENV", "/tmp/mpinn-auc-peers"),
                   help="the peers' venv (default: $MPINN_PEERS_VENV or %(default)s)")
    p.add_argument("--no-install", action="store_true", help="never make or fill the peers' venv")
    p.add_argument("--timeout", type=int, default=3600, help="seconds any one run may take (default 3600)")
    args = p.parse_args(argv)
    if args.summarize:
        points = [json.loads(line) for line in open(args.summarize)]
        report(points, args.plot)
        return 0
    if args.rows is None or args.test_rows is None or args.out is None:
        fail("--rows, --test-rows and --out are needed (or --summarize POINTS)")
    systems = [s for s in args.systems.split(",") if s]
    if any(s not in SYSTEMS for s in systems):
        fail("--systems: each of %s" % ",".join(SYSTEMS))
    try:
        nps = [int(n) for n in args.np.split(",")]
    except ValueError:
        fail("--np: ranks separated by commas, e.g. 1,2")
    if args.rows < 1000 or args.test_rows < 100 or args.points < 1 or min(nps) < 1:
        fail("--rows at least 1000, --test-rows at least 100, --points and --np at least 1")
    os.makedirs(args.workdir, exist_ok=True)
    py = peers_python(args.peers_venv, not args.no_install) if set(systems) - {"mpinn"} else None
    train, test, truth = make_data(args)
    hidden = hidden_auc(test, truth)
    say("the hidden model's AUC on the test rows: %.4f" % hidden)
    points = [{"system": "hidden model", "np": 0, "seconds": 0.0, "auc": round(hidden, 6), "rows_seen": 0,
               "point": "the log's click probabilities", "data": {"rows": args.rows, "test_rows": args.test_rows,
                                                                "scale": args.scale, "seed": args.seed}}]
    for system in systems:
        if system != "mpinn":
            points += run_peer(args, py, train, test, system)
            continue
        for np_ in nps:
            points += run_mpinn(args, train, test, np_, "defaults", "")
            if args.mpinn_best:
                points += run_mpinn(args, train, test, np_, "tuned", args.mpinn_best)
    with open(args.out, "w") as f:
        f.write("".join(json.dumps(p) + "\n" for p in points))
    print("points written to %s" % args.out)
    report(points, args.plot)
    return 0


def report(points, png):
    """The table of a run's points (the first: the hidden model's, with the data's description), and the plot."""
    hidden, data = points[0]["auc"], points[0]["data"]
    print("W4 --scale %d: %d training rows, %d test rows; hidden model AUC %.4f; %d cores\n" % (
        data["scale"], data["rows"], data["test_rows"], hidden, os.cpu_count()))
    print(table(points, hidden))
    if any(p["point"].startswith("model written") for p in points):
        print("\n(model written: a run of several epochs writes its best epoch's parameters, chosen by the held-out "
              "loss on --valid, here the test rows; its final AUC is theirs)")
    if png:
        plot(points, hidden, png)
        print("plot written to %s" % png)


if __name__ == "__main__":
    sys.exit(main())
