"""Resident memory of the hashed table per rank: --table sharded against replicated, measured from /proc.

    python -m scripts.bench.shard_memory                     # W2 (2^18 x 64) and 2^22 x 64, np 2 and 3; ~2 min
    python -m scripts.bench.shard_memory --bits 18 --nps 2 --steps 50

Each configuration is `mpiexec -n P python -m scripts.bench.shard_memory --probe ...`: every rank builds
the model as training does (mpinn.api.build's path: MLP.init_ with the rank's own rows when sharded),
trains `--steps` SGD steps of W2's data (the peers' click-log generator, its 20 columns hashed to
2^bits rows; global batch 1024; rank 0 scatters) through the Trainer, then reads, per rank:
  table_resident_mb  the table's bytes in memory: mincore(2) over the table's part of the flat parameter
                     buffer, page by page (pages never touched are not resident)
  own_rows_mb        the bytes of the rows this rank owns (the table / P, up to a row)
  rss_mb, pss_mb     the whole process (/proc/self/smaps_rollup: data, MPI, Python included)
and rank 0 prints the table and writes scripts/results/shard-memory-DATE.json. numpy advises huge pages
for big arrays (madvise, 2 MiB), so a rank's slice can be rounded out by up to 2 MiB at each end.
"""
import argparse
import json
import os
import subprocess
import sys
import time

from scripts import ROOT
from scripts.bench.common import mpiexec, print_and_save

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"


def w2_rows(bits, n):
    """W2's rows (the peers' generator) with their 20 columns hashed into 2^bits rows: (idx, y)."""
    import numpy as np
    from mpinn.hashing import token_columns
    from mpinn.bench.workloads import W2_CARDS, make_w2_codes
    codes, y = make_w2_codes(n)
    idx = np.empty(codes.shape, np.int32)
    for j, c in enumerate(W2_CARDS):
        idx[:, j] = token_columns("c%d" % j, np.arange(c), bits, 0)[codes[:, j]]
    return idx, y


def probe(args):
    import numpy as np
    import scipy.sparse as sp
    from mpinn.core.batch import Batch, Layout
    from mpinn.comm import Communicator
    from mpinn.comm.topology import probe as probe_job
    from mpinn.core.spec import ModelSpec
    from mpinn.model.mlp import MLP
    from mpinn.optim import REGISTRY, create_optimizer
    from mpinn.optim.schedule import make_schedule
    from mpinn.settings import fixed, make_plan
    from mpinn.training import Trainer
    from mpinn.training.build import build_step, communicator
    from mpinn.host.memory import memory_mb, resident_bytes
    from mpinn.training.sharded import own_rows
    job = Communicator()
    n_rows, width, B = 1 << args.bits[0], 64, 1024
    spec = ModelSpec(n_rows, 0, (width,), 1, "relu", "sigmoid", "float32", sparse_fan_in=20)
    own = own_rows(job.size, job.rank, n_rows)
    model = MLP(spec).init_(0, rows=own if args.table == "sharded" else None)
    opt = create_optimizer(args.optimizer, model.size, np, weight_slices=model.weight_slices, table=model.table)
    lr = 0.1 if args.optimizer == "sgd" else REGISTRY[args.optimizer].lr
    cfg = fixed(B, table=args.table, comm=args.comm, optimizer=args.optimizer, quiet=True)
    plan = make_plan(cfg, probe_job(job), spec, opt)        # as a training run plans and builds its step
    comm = communicator(plan, job.comm, dup=False)
    trainer = Trainer(plan.cfg, model, opt, make_schedule(lr), build_step(plan, comm, model, opt),
                      Layout(n_rows, 0, "float32", "float32"))
    trainer.start()
    data = w2_rows(args.bits[0], args.steps * B) if comm.rank == 0 else None
    t0 = time.perf_counter()
    for s in range(args.steps):
        batch = None
        if comm.rank == 0:
            idx, y = data[0][s * B:(s + 1) * B], data[1][s * B:(s + 1) * B]
            Xs = sp.csr_matrix((np.ones(idx.size, np.float32), idx.ravel(), np.arange(0, idx.size + 1, 20)),
                               shape=(B, n_rows))
            batch = Batch(Xs, None, y)
        trainer.step(batch, B)
    seconds = time.perf_counter() - t0
    del data
    table = model.params[:n_rows * width]
    rss, pss = memory_mb()
    state = {k: resident_bytes(v[:n_rows * width]) / 2**20 for k, v in (opt.arrays or {}).items()
             if k in opt.element_state}
    rec = {"rank": comm.rank, "table_resident_mb": resident_bytes(table) / 2**20,
           "own_rows_mb": (own[1] - own[0]) * width * 4 / 2**20 if args.table == "sharded" else n_rows * width * 4 / 2**20,
           "state_resident_mb": state, "rss_mb": rss, "pss_mb": pss,
           "shared_params": trainer.shared_params}
    recs = comm.gather_obj(rec)
    if comm.rank == 0:
        with open(args.probe, "w") as f:
            json.dump({"ranks": recs, "seconds": seconds}, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bits", nargs="+", type=int, default=[18, 22], help="table rows = 2^bits (width 64)")
    ap.add_argument("--nps", nargs="+", type=int, default=[2, 3])
    ap.add_argument("--steps", type=int, default=100, help="training steps before measuring (default 100)")
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])
    ap.add_argument("--tables", nargs="+", default=["sharded", "replicated"])
    ap.add_argument("--table", help=argparse.SUPPRESS)
    ap.add_argument("--comm", default="mpi", help=argparse.SUPPRESS)
    ap.add_argument("--probe", metavar="OUT", help=argparse.SUPPRESS)     # internal: under mpiexec
    args = ap.parse_args()
    if args.probe:
        return probe(args)
    rows = []
    for bits in args.bits:
        for P in args.nps:
            # replicated with --comm mpi: a table per rank; with the default (shm) on one node, one per node
            for table, comm in [(t, c) for t in args.tables for c in (["mpi"] if t == "sharded" else ["mpi", "auto"])]:
                out = "/tmp/shard-memory-%d.json" % os.getpid()
                cmd = [mpiexec(), "-n", str(P), sys.executable, "-m", "scripts.bench.shard_memory", "--probe", out,
                       "--table", table, "--comm", comm, "--bits", str(bits), "--steps", str(args.steps),
                       "--optimizer", args.optimizer]
                subprocess.run(cmd, check=True, timeout=900, cwd=ROOT)
                with open(out) as f:
                    got = json.load(f)
                table_mb = (1 << bits) * 64 * 4 / 2**20
                for r in got["ranks"]:
                    rows.append(dict(r, bits=bits, np=P, table=table, comm=comm, table_mb=table_mb,
                                     ratio=r["table_resident_mb"] / (table_mb / P)))
                print("2^%d x 64, np %d, %s (--comm %s): %s" % (bits, P, table, comm, ", ".join(
                    "rank %d %.1f MB" % (r["rank"], r["table_resident_mb"]) for r in got["ranks"])), flush=True)
    lines = ["| table | np | --table | --comm | rank | resident table MB | table / P MB | resident / (table / P) | "
             "own rows MB | process RSS MB | process PSS MB |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| 2^%d x 64 (%.0f MB) | %d | %s | %s | %d | %.1f | %.1f | %.3f | %.1f | %.0f | %.0f |" % (
            r["bits"], r["table_mb"], r["np"], r["table"], r["comm"], r["rank"], r["table_resident_mb"],
            r["table_mb"] / r["np"], r["ratio"], r["own_rows_mb"], r["rss_mb"], r["pss_mb"]))
    path = print_and_save("shard-memory", "\n".join(lines), {"rows": rows, "steps": args.steps,
                                                          "optimizer": args.optimizer})
    print("\nwrote %s" % os.path.relpath(path, ROOT))


if __name__ == "__main__":
    main()
