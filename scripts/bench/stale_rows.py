"""W2 with a sharded table: --stale-rows 0 against 1 (rows fetched a step ahead), with each way of driving MPI's
progress on the rows in flight, side by side in one run on this machine.

    python -m scripts.bench.stale_rows            # ~5 min; table + scripts/results/stale-rows-DATE.json
    python -m scripts.bench.stale_rows --reps 5 --np 2

Every run is `mpiexec -n P python -m mpinn.bench --workload w2 --hashed-table sharded --input local` (the peers' W2:
exact data, init, batch 1024, 300 SGD steps, the timed window after 30 warm-up steps; every rank slicing its own
rows); the repetitions go round-robin over the variants, and the table gives medians (and ranges) of 3. Variants:
  sync          --stale-rows 0 (today's step: the rows' Alltoallv blocking)
  stale-none    --stale-rows 1, nobody drives the posted Ialltoallv but this rank's own later MPI calls
                (the gradient rows' Alltoallv and the dense Allreduce of the held batch)
  stale-thread  --stale-rows 1, a thread calls Test on it while the rank computes and updates
  stale-async   --stale-rows 1 without the thread, under MPIR_CVAR_ASYNC_PROGRESS=1 (MPICH's own progress thread)
The timeline's parts (rank 0, ms a step) say where the communication time went: for the stale variants the posting
(the counts and ids, blocking, and the rows' Ialltoallv posted) and the wait for the rows at the end of the call,
whose smallness says the rows had arrived before it."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from scripts import ROOT
from scripts.bench.common import mpiexec, print_and_save
from scripts.bench.scaling import wait_quiet

VARIANTS = {"sync": (["--stale-rows", "0"], {}),
            "stale-none": (["--stale-rows", "1", "--stale-progress", "none"], {}),
            "stale-thread": (["--stale-rows", "1", "--stale-progress", "thread"], {}),
            "stale-async": (["--stale-rows", "1", "--stale-progress", "none"], {"MPIR_CVAR_ASYNC_PROGRESS": "1"})}


def run(P, variant, out):
    """One benchmark run: its record."""
    flags, env = VARIANTS[variant]
    cmd = [mpiexec(), "-n", str(P), sys.executable, "-m", "mpinn.bench", "--workload", "w2", "--hashed-table",
           "sharded", "--input", "local", "--timing-steps", "0", "--out", out] + flags
    r = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1", **env), capture_output=True,
                       text=True, timeout=600)
    if r.returncode:
        raise SystemExit("failed: %s" % r.stderr[-2000:])
    with open(out) as f:
        return json.loads(f.read().splitlines()[-1])


def probe(nbytes, compute_ms, reps):
    """Under mpiexec: does a posted Ialltoallv of nbytes a rank move while the rank computes with no MPI call? The
    median over reps of the wait after compute_ms of numpy work, against a blocking Alltoallv of the same bytes
    (progress: the thread of --stale-progress thread when MPINN_PROBE_PROGRESS=thread). Rank 0 prints one JSON."""
    import numpy as np
    from mpi4py import MPI
    from mpinn.comm.base import Communicator
    from mpinn.comm.progress import Progress
    c = Communicator()
    P, n = c.size, nbytes // 4 // c.size
    counts = np.full(P, n, np.int64)
    send, recv = np.ones(n * P, np.float32), np.empty(n * P, np.float32)
    a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    progress = Progress() if os.environ.get("MPINN_PROBE_PROGRESS") == "thread" else None
    waits, blocking, work = [], [], []
    for _ in range(reps):
        c.barrier()
        t0 = MPI.Wtime()
        c.Alltoallv_(send, counts, recv, counts, "probe")
        blocking.append(MPI.Wtime() - t0)
        c.barrier()
        request = c.Ialltoallv_(send, counts, recv, counts, "probe")
        if progress is not None:
            progress.resume(request)
        t1 = MPI.Wtime()
        while MPI.Wtime() - t1 < compute_ms / 1e3:
            a = np.tanh(a @ a * 1e-3)
        t2 = MPI.Wtime()
        if progress is not None:
            progress.pause()
        request.Wait()
        waits.append(MPI.Wtime() - t2)
        work.append(t2 - t1)
    got = c.gather_obj((statistics.median(waits), statistics.median(blocking), statistics.median(work)))
    if progress is not None:
        progress.close()
    if c.rank == 0:
        print(json.dumps({"wait_ms": max(g[0] for g in got) * 1e3, "blocking_ms": max(g[1] for g in got) * 1e3,
                          "compute_ms": max(g[2] for g in got) * 1e3}))


def run_probe(P, variant, nbytes, compute_ms, reps):
    env = {"MPINN_PROBE_PROGRESS": "thread"} if variant == "stale-thread" else VARIANTS[variant][1]
    cmd = [mpiexec(), "-n", str(P), sys.executable, "-m", "scripts.bench.stale_rows", "--probe-bytes",
           str(nbytes), "--probe-compute-ms", str(compute_ms), "--reps", str(reps)]
    r = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1", **env), capture_output=True,
                       text=True, timeout=600)
    if r.returncode:
        raise SystemExit("probe failed: %s" % r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def row_of(P, variant, rs):
    """The medians of a variant's runs at P ranks, and what the table shows of them."""
    def med(f):
        return statistics.median(f(r) for r in rs)
    parts = {}
    for r in rs:
        for k, v in r["comm_parts_ms_per_rank"][0].items():
            parts.setdefault(k, []).append(v)
    return {"np": P, "variant": variant, "samples_per_s_median": med(lambda r: r["samples_per_s"]),
            "samples_per_s_runs": [r["samples_per_s"] for r in rs], "step_ms_median": med(lambda r: r["step_ms"]),
            "comm_ms_median": med(lambda r: r["phase_ms_rank0"]["comm"]),
            "compute_ms_median": med(lambda r: r["compute_ms"]),
            "comm_parts_ms_rank0_median": {k: statistics.median(v) for k, v in parts.items()},
            "foreign_cores_runs": [r["load"]["foreign_cpu_cores"] for r in rs],
            "loss_final_runs": [r["loss_final"] for r in rs], "reduce": rs[0]["reduce"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--np", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--quiet-wait", type=float, default=10.0,
                    help="before each run, wait up to this many seconds for an idle machine (shared machine)")
    ap.add_argument("--probe-bytes", type=int, default=0, help=argparse.SUPPRESS)   # under mpiexec: probe()
    ap.add_argument("--probe-compute-ms", type=float, default=4.0,
                    help="the overlap probe's compute between the post and the wait (ms)")
    ap.add_argument("--probe-only", action="store_true", help="only the overlap probe")
    args = ap.parse_args()
    if args.probe_bytes:
        return probe(args.probe_bytes, args.probe_compute_ms, args.reps)
    probes = []
    for P in args.np:       # W2's rows fetched a step, about 0.4 MB a rank (the bench's exchange count at np 2)
        for variant in ("stale-none", "stale-thread", "stale-async"):
            got = dict(run_probe(P, variant, 1 << 19, args.probe_compute_ms, 31), np=P, variant=variant)
            probes.append(got)
            print("probe np %d %s: wait %.3f ms after %.2f ms of compute; a blocking Alltoallv %.3f ms" % (
                P, variant, got["wait_ms"], got["compute_ms"], got["blocking_ms"]), flush=True)
    if args.probe_only:
        return
    tmp = tempfile.mkdtemp(prefix="bench-stale-")
    recs = {(P, v): [] for P in args.np for v in args.variants}
    for rep in range(args.reps):
        for P, variant in recs:
            wait_quiet(args.quiet_wait)
            rec = run(P, variant, os.path.join(tmp, "%d-%s-%d.jsonl" % (P, variant, rep)))
            recs[(P, variant)].append(rec)
            print("rep %d np %d %s: %.0f samples/s, step %.2f ms, comm %.2f ms, foreign %.2f cores" % (
                rep + 1, P, variant, rec["samples_per_s"], rec["step_ms"], rec["phase_ms_rank0"]["comm"],
                rec["load"]["foreign_cpu_cores"]), flush=True)
    rows = [row_of(P, v, rs) for (P, v), rs in recs.items()]
    base = {r["np"]: r["samples_per_s_median"] for r in rows if r["variant"] == "sync"}
    lines = ["| np | variant | samples/s, median (range) of %d | / sync | step ms | compute ms | comm ms | of it: "
             "rows fetched or posted | wait for rows | gradient rows | dense Allreduce |" % args.reps,
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r["comm_parts_ms_rank0_median"]
        fetch = p.get("fetch rows (Alltoallv)", p.get("row ids to owners, rows posted (Ialltoallv)", 0.0))
        lines.append("| %d | %s | %.0f (%.0f-%.0f) | %s | %.2f | %.2f | %.2f | %.2f | %s | %.2f | %.2f |" % (
            r["np"], r["variant"], r["samples_per_s_median"], min(r["samples_per_s_runs"]),
            max(r["samples_per_s_runs"]), "%.2fx" % (r["samples_per_s_median"] / base[r["np"]])
            if r["np"] in base else "-", r["step_ms_median"], r["compute_ms_median"], r["comm_ms_median"], fetch,
            "%.3f" % p["wait for the next batch's rows"] if "wait for the next batch's rows" in p else "-",
            p.get("gradient rows to owners (Alltoallv)", 0.0), p.get("dense Allreduce", 0.0)))
    path = print_and_save("stale-rows", "\n".join(lines), {
        "rows": rows, "reps": args.reps, "workload": "W2 sharded, --input local, 300 steps (30 warm-up)",
        "measured": "samples/s and the rank-0 timeline's phases a step (mpinn.bench); compute = forward/backward "
                    "+ update; comm = the timeline's communication phase a step",
        "cores": os.cpu_count(), "overlap_probe": probes,
        "overlap_probe_what": "0.5 MiB a rank (2^19 bytes split over the ranks) posted as an Ialltoallv, then numpy "
                              "work with no MPI call for --probe-compute-ms, then Wait: the wait's median of 31 (the "
                              "slowest rank's), against a blocking Alltoallv of the same bytes"})
    print("\nwrote %s" % os.path.relpath(path, ROOT))


if __name__ == "__main__":
    main()
