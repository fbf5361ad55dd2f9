"""W2 with the hashed table sharded against replicated, side by side in one run: one node, and two hosts.

    python -m scripts.bench.sharded                       # ~6 min; table + scripts/results/bench-sharded-DATE.json
    python -m scripts.bench.sharded --reps 5 --setups node-2 hosts-2x2

Every run is `python -m mpinn.bench --workload w2 --hashed-table T` (the peers' W2: exact data, init,
batch 1024, 300 SGD steps, the timed window after 30 warm-up steps, rank 0 scattering each batch);
the repetitions go round-robin over the configurations, and the table gives medians (and ranges).
Setups:
  node-2      np 2 on this machine (gradients summed in shared memory for replicated: the default)
  hosts-2x2   2 hosts x 2 ranks: network namespaces on a bridge, TCP over veth, the launcher and
              environment of tests/cluster/test_multihost.py (scripts/lab/netns.py; needs root). Both "hosts" share this
              machine's 2 cores: 4 busy-polling ranks on 2 cores, so absolute rates are low
  hosts-2x1   2 hosts x 1 rank
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from scripts import ROOT
from scripts.bench.common import print_and_save
from scripts.bench.scaling import wait_quiet
from scripts.lab import netns

TABLES = ("replicated", "sharded")


def bench_args(table, out):
    return ["-m", "mpinn.bench", "--workload", "w2", "--hashed-table", table, "--timing-steps", "0", "--out", out]


def run_node(P, table, out):
    d = os.path.dirname(sys.executable)
    launcher = os.path.join(d, "mpiexec") if os.path.exists(os.path.join(d, "mpiexec")) else "mpiexec"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([launcher, "-n", str(P), sys.executable] + bench_args(table, out), cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    if r.returncode:
        raise SystemExit("failed: %s" % r.stderr[-2000:])


def run_hosts(cluster, per_host, table, out):
    job = cluster.mpich(2 * per_host, bench_args(table, out), cluster.hostfile("two-nodes.mpich", per_host),
                        limit_s=600, name="bench-%s" % table)
    rc = job.wait(620)
    if rc:
        raise SystemExit("failed: %s" % (job.stdout + job.stderr)[-2000:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--setups", nargs="+", default=["node-2", "hosts-2x2"],
                    choices=["node-2", "node-3", "hosts-2x2", "hosts-2x1"])
    ap.add_argument("--quiet-wait", type=float, default=20.0,
                    help="before each run, wait up to this many seconds for an idle machine (shared machine)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-sharded-")
    cluster = None
    if any(s.startswith("hosts") for s in args.setups):
        reason = netns.skip_reason(netns.default_mpiexec())
        if reason:
            raise SystemExit("the hosts setups need network namespaces: %s" % reason)
        netns.remove_stale()
        cluster = netns.Cluster(2, tmp).up()
    recs = {(s, t): [] for s in args.setups for t in TABLES}
    try:
        for rep in range(args.reps):
            for setup, table in recs:
                out = os.path.join(tmp, "%s-%s-%d.jsonl" % (setup, table, rep))
                wait_quiet(args.quiet_wait)
                if setup.startswith("node"):
                    run_node(int(setup[-1]), table, out)
                else:
                    run_hosts(cluster, int(setup[-1]), table, out)
                    cluster.stop_jobs()
                with open(out) as f:
                    rec = json.loads(f.read().splitlines()[-1])
                recs[(setup, table)].append(rec)
                print("rep %d %s %s: %.0f samples/s, step %.2f ms, foreign %.2f cores" % (
                    rep + 1, setup, table, rec["samples_per_s"], rec["step_ms"], rec["load"]["foreign_cpu_cores"]),
                    flush=True)
    finally:
        if cluster is not None:
            cluster.down()
    lines = ["| setup | --table | samples/s, median (range) of %d | step ms | comm ms | sharded / replicated | "
             "loss_final |" % args.reps, "|---|---|---|---|---|---|---|"]
    rows = []
    for (setup, table), rs in recs.items():
        rate = statistics.median(r["samples_per_s"] for r in rs)
        rows.append({"setup": setup, "table": table, "samples_per_s_median": rate,
                     "samples_per_s_runs": [r["samples_per_s"] for r in rs],
                     "step_ms_median": statistics.median(r["step_ms"] for r in rs),
                     "comm_ms_median": statistics.median(r["comm_ms"] for r in rs),
                     "comm_parts_ms_rank0": rs[0].get("comm_parts_ms_per_rank", [{}])[0],
                     "foreign_cores_runs": [r["load"]["foreign_cpu_cores"] for r in rs],
                     "loss_final": rs[0]["loss_final"], "np": rs[0]["np"]})
    base = {r["setup"]: r["samples_per_s_median"] for r in rows if r["table"] == "replicated"}
    for r in rows:
        lines.append("| %s (np %d) | %s | %.0f (%.0f-%.0f) | %.2f | %.2f | %s | %.6f |" % (
            r["setup"], r["np"], r["table"], r["samples_per_s_median"], min(r["samples_per_s_runs"]),
            max(r["samples_per_s_runs"]), r["step_ms_median"], r["comm_ms_median"],
            "%.2fx" % (r["samples_per_s_median"] / base[r["setup"]]) if r["table"] == "sharded" else "-",
            r["loss_final"]))
    path = print_and_save("bench-sharded", "\n".join(lines), {"rows": rows, "reps": args.reps})
    print("\nwrote %s" % os.path.relpath(path, ROOT))


if __name__ == "__main__":
    main()
