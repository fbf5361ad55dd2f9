"""The fused kernels' builds side by side on W2 (the peers' wide hashed workload, python -m mpinn.bench):
the installed -march=native build, the installed x86-64-v3 and portable builds, a run-time -march=native
build, the numpy
passes, and optionally another revision's tree (its own kernels, as it builds them). Each round runs every
build once per optimizer, the builds' order rotated from round to round; prints the median samples/s and
the update's share of the step per build and optimizer, and the ratio to the first build; writes JSON.

    python -m scripts.bench.kernels --reps 5 [--np 1] [--rev 6e46f8c]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from scripts import ROOT
from scripts.bench.common import print_and_save

BUILDS = {"installed native": {"MPINN_FUSED": "native"}, "installed v3": {"MPINN_FUSED": "v3"},
          "installed base": {"MPINN_FUSED": "base"},
          "run-time native": {"MPINN_FUSED": "runtime"}, "numpy passes": {"MPINN_FUSED": "0"}}


def bench(tree, np_, optimizer, env, out):
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **env)
    cmd = [mpiexec, "-n", str(np_), sys.executable, "-m", "mpinn.bench", "--workload", "w2", "--optimizer",
           optimizer, "--timing-steps", "0", "--out", out]
    r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=900)
    if r.returncode:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr[-2000:]))
    with open(out) as f:
        return json.loads(f.read().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=5, help="rounds (default 5)")
    p.add_argument("--np", type=int, default=1, help="ranks (default 1)")
    p.add_argument("--optimizers", default="adam,adagrad,ftrl", help="comma-separated (default adam,adagrad,ftrl)")
    p.add_argument("--builds", default=",".join(BUILDS), help="comma-separated, of: %s" % ", ".join(BUILDS))
    p.add_argument("--rev", help="also run this git revision's tree (a worktree), with its own kernels")
    args = p.parse_args(argv)
    builds = {b: (ROOT, BUILDS[b]) for b in args.builds.split(",")}
    tmp = tempfile.mkdtemp(prefix="mpinn-bench-kernels-")
    if args.rev:
        tree = os.path.join(tmp, "rev")
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-f", tree, args.rev], check=True,
                       capture_output=True)
        builds["revision %s" % args.rev] = (tree, {})
    names, recs = list(builds), {}
    try:
        for rep in range(args.reps):
            for opt in args.optimizers.split(","):
                for name in names[rep % len(names):] + names[:rep % len(names)]:
                    tree, env = builds[name]
                    rec = bench(tree, args.np, opt, env, os.path.join(tmp, "r.jsonl"))
                    recs.setdefault((name, opt), []).append(rec)
                    print("%-22s %-8s %9.0f samples/s  update %.3f ms  kernels %s" % (
                        name, opt, rec["samples_per_s"], rec["phase_ms_rank0"]["update"], rec.get("fused_kernels")),
                        flush=True)
    finally:
        if args.rev:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], capture_output=True)
    rows = ["| optimizer | build | samples/s (median of %d) | / %s | update ms/step | loss_final |" % (
        args.reps, names[0]), "|---|---|---|---|---|---|"]
    out = []
    for opt in args.optimizers.split(","):
        first = statistics.median(r["samples_per_s"] for r in recs[(names[0], opt)])
        for name in names:
            rs = recs[(name, opt)]
            rate = statistics.median(r["samples_per_s"] for r in rs)
            upd = statistics.median(r["phase_ms_rank0"]["update"] for r in rs)
            losses = sorted({r["loss_final"] for r in rs})
            rows.append("| %s | %s | %.0f | %.3f | %.3f | %s |" % (opt, name, rate, rate / first, upd,
                                                                  " ".join("%.10g" % x for x in losses)))
            out.append({"optimizer": opt, "build": name, "samples_per_s": rate, "ratio": rate / first,
                        "update_ms": upd, "runs": [r["samples_per_s"] for r in rs], "loss_final": losses})
    path = print_and_save("bench-kernels-np%d" % args.np, "\n".join(rows), {"rows": out, "np": args.np})
    print("records: %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
