"""mpinn's benchmark at two git revisions, side by side: python -m scripts.bench.revs REV_A REV_B

For a change that must not change behaviour (a restructuring, a clean-up): each round runs every
workload (W1 W2 W3), rank count and input mode once at REV_A and once at REV_B, alternating, so load
on the machine falls on both alike. Prints a table of median samples/s, the ratio B/A, and whether
every run's loss_final is bitwise equal between the two; writes every record as JSON lines.
    REPS=3 NPS="1 2" INPUTS="scatter local" WORKLOADS="w1 w2 w3" OUT=scripts/results/revs-DATE.jsonl
ARGS: more `python -m mpinn.bench` arguments for every run (e.g. ARGS="--hashed-table sharded")."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from scripts import RESULTS, ROOT


def checkout(rev, where):
    """A clean worktree of rev (its own mpinn/ is the one `python -m mpinn.bench` runs there)."""
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-f", where, rev], check=True,
                   capture_output=True)
    return where


def bench(tree, wl, np_, inp, out):
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = [mpiexec, "-n", str(np_), sys.executable, "-m", "mpinn.bench", "--workload", wl, "--input", inp,
           "--out", out] + os.environ.get("ARGS", "").split()
    r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode:
        sys.exit("failed (%s): %s\n%s" % (tree, " ".join(cmd), r.stderr[-2000:]))
    with open(out) as f:
        return json.loads(f.read().splitlines()[-1])


def main(rev_a, rev_b):
    reps = int(os.environ.get("REPS", 3))
    nps = [int(x) for x in os.environ.get("NPS", "1 2").split()]
    inputs = os.environ.get("INPUTS", "scatter local").split()
    wls = os.environ.get("WORKLOADS", "w1 w2 w3").split()
    out = os.environ.get("OUT") or os.path.join(RESULTS, "revs-%s.jsonl" % time.strftime("%Y-%m-%d"))
    tmp = tempfile.mkdtemp(prefix="mpinn-revs-")
    trees = {"A": checkout(rev_a, os.path.join(tmp, "a")), "B": checkout(rev_b, os.path.join(tmp, "b"))}
    recs = {}
    try:
        with open(out, "w") as f:
            for rep in range(reps):
                for wl in wls:
                    for np_ in nps:
                        for inp in inputs:
                            for side in ("AB" if rep % 2 == 0 else "BA"):
                                rec = bench(trees[side], wl, np_, inp, os.path.join(tmp, "r.jsonl"))
                                rec.update(rev=rev_a if side == "A" else rev_b, side=side, rep=rep)
                                f.write(json.dumps(rec) + "\n")
                                f.flush()
                                recs.setdefault((wl, np_, inp, side), []).append(rec)
                                print("%s np %d %-7s %s  %10.0f samples/s  loss_final %r" % (
                                    wl, np_, inp, side, rec["samples_per_s"], rec["loss_final"]), flush=True)
    finally:
        for t in trees.values():
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", t], capture_output=True)
    print("\n| workload | np | input | A samples/s | B samples/s | B/A | loss_final bitwise equal |")
    print("|---|---|---|---|---|---|---|")
    for wl in wls:
        for np_ in nps:
            for inp in inputs:
                a, b = recs[(wl, np_, inp, "A")], recs[(wl, np_, inp, "B")]
                ma = statistics.median(r["samples_per_s"] for r in a)
                mb = statistics.median(r["samples_per_s"] for r in b)
                same = len({r["loss_final"] for r in a + b}) == 1
                print("| %s | %d | %s | %.0f | %.0f | %.3f | %s |" % (wl.upper(), np_, inp, ma, mb, mb / ma,
                                                                     "yes" if same else "NO"))
    print("\nA = %s, B = %s, medians of %d runs each; records in %s" % (rev_a, rev_b, reps, out))


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="Environment: REPS, NPS, INPUTS, WORKLOADS, OUT (see the module docstring).")
    ap.add_argument("rev_a", help="a git revision")
    ap.add_argument("rev_b", help="another git revision")
    args = ap.parse_args()
    main(args.rev_a, args.rev_b)
