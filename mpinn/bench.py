"""Benchmark: the peers' workloads W1/W2/W3 (exact data, init, batch order, timed window) as peer-format records."""
import os

from mpinn.process import memory_mb, pin_threads

pin_threads(1)      # one BLAS thread per rank, as every peer runs (before numpy loads)

import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from mpinn import __version__  # noqa: E402
from mpinn import fused  # noqa: E402
from mpinn.workloads import WORKLOADS  # noqa: E402


# ---------------------------------------------------------------- measuring
_CLK = os.sysconf("SC_CLK_TCK")


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cpu_busy_s():
    """Machine-wide busy CPU seconds (user+nice+system+irq+softirq) and steal, from /proc/stat."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    return (user + nice + system + irq + softirq) / _CLK, steal / _CLK


class LoadWindow:
    """How many cores other processes used during the timed window (the peers' load meter)."""

    def start(self):
        self.busy0, self.steal0 = cpu_busy_s()
        self.cpu0, self.t0 = time.process_time(), time.perf_counter()

    def stop(self):
        self.busy1, self.steal1 = cpu_busy_s()
        self.cpu1, self.t1 = time.process_time(), time.perf_counter()
        return self.cpu1 - self.cpu0

    def summary(self, own_cpu_s_total):
        wall = self.t1 - self.t0
        return {"window_s": round(wall, 3), "own_cpu_cores": round(own_cpu_s_total / wall, 3),
                "foreign_cpu_cores": round(max(self.busy1 - self.busy0 - own_cpu_s_total, 0.0) / wall, 3),
                "steal_cores": round((self.steal1 - self.steal0) / wall, 3)}


def thread_info():
    try:
        from threadpoolctl import threadpool_info
        return [(d.get("internal_api"), d.get("num_threads")) for d in threadpool_info()]
    except Exception as e:  # noqa: BLE001 - optional detail
        return repr(e)


def write_result(rec, path):
    rec.setdefault("time", time.strftime("%Y-%m-%dT%H:%M:%S"))
    rec.setdefault("host", platform.node())
    line = json.dumps(rec, sort_keys=True)
    with open(path, "a") as f:
        f.write(line + "\n")
    print("RESULT " + line, flush=True)


# ---------------------------------------------------------------- the benchmark
def run(args):
    from mpinn.comm import create_communicator, split_counts
    from mpinn.comm.node import mpi_library_version
    from mpinn.model import MLP
    from mpinn.optim import DEFAULT_LR, create_optimizer
    from mpinn.training import Trainer

    t_start = time.perf_counter()
    wl = WORKLOADS[args.workload]
    steps = args.steps if args.steps is not None else wl.steps
    warmup = args.warmup if args.warmup is not None else wl.warmup
    comm = create_communicator(args.reduce, compress=args.compress, transport=args.comm)
    rank0, P, B = comm.rank == 0, comm.size, wl.batch
    local_input = args.input == "local"
    data = wl.make() if rank0 or local_input else None   # local: every rank has the data (as DDP's do)
    model = MLP(wl.spec)
    lr = args.lr or (wl.lr if args.optimizer == "sgd" else DEFAULT_LR[args.optimizer])
    opt = create_optimizer(args.optimizer, model.size, model.xp, lr, weight_slices=model.weight_slices,
                           table=model.table)
    from mpinn.training.sharded import choose_table
    table, _ = choose_table(args.hashed_table, comm, wl.spec, len(opt.element_state), reduce=args.reduce,
                            compress=args.compress, overlap=args.overlap, average_every=args.average_every,
                            transport=args.comm)
    # a sharded table: rank 0 holds the peers' whole init only until each rank has its rows
    start = MLP(wl.spec).set_params(wl.init()) if rank0 and table == "sharded" else model
    if rank0 and table != "sharded":
        model.set_params(wl.init())
    loss0 = start.loss_sum(wl.rows(data, 0, wl.eval_rows)) / wl.eval_rows if rank0 else None
    trainer = Trainer(model, opt, comm, wl.layout, B, verbose=False, average_every=args.average_every,
                      overlap=args.overlap, table=table)
    trainer.load_params_(start.params if rank0 else None)
    del start
    trainer.start()
    n_batches = wl.n // B

    def batch(s):       # step s uses rows [k*B, k*B + B), k = s mod n_batches; only rank 0 has data
        lo = (s % n_batches) * B
        return wl.rows(data, lo, lo + B) if rank0 else None

    counts = split_counts(B, P)
    my_lo = int(np.sum(counts[:comm.rank]))

    def my_rows(s):     # --input local: this rank's contiguous slice of step s's batch, from its own copy
        lo = (s % n_batches) * B + my_lo
        return wl.rows(data, lo, lo + int(counts[comm.rank]))

    def eval_loss():
        return model.loss_sum(wl.rows(data, 0, wl.eval_rows)) / wl.eval_rows if rank0 else None

    setup_s = time.perf_counter() - t_start

    layout, rec_phase = wl.layout, trainer.timeline
    pending = [None]

    def step(s, stop):
        """Step s; with prefetch, the next batch's Iscatterv is posted before this one computes
        (what the trainer's Feed does), so the transfer overlaps the compute."""
        if local_input:
            t = time.perf_counter()
            local = my_rows(s)
            rec_phase.add("data", t, time.perf_counter(), trainer.global_step + 1)
            return trainer.step_slice(local, B)
        if not args.prefetch:
            return trainer.step(batch(s), B)
        t = time.perf_counter()
        cur = pending[0] or comm.post_batch(batch(s), layout)
        pending[0] = comm.post_batch(batch(s + 1), layout) if s + 1 < stop else None
        local = cur.wait()
        rec_phase.add("data", t, time.perf_counter(), trainer.global_step + 1)
        return trainer.step_slice(local, B)

    for s in range(warmup):
        step(s, warmup)
    comm.barrier()
    lw = LoadWindow()
    lw.start()
    trainer.timeline.reset()
    last = []
    t0 = time.perf_counter()
    for s in range(warmup, steps):
        loss, _ = step(s, steps)
        if s >= steps - 10:
            last.append(loss)
    trainer.settle_()           # local SGD: the final loss is the averaged model's (timed: part of the work)
    comm.barrier()
    t1 = time.perf_counter()
    own_cpu = lw.stop()
    measured = steps - warmup
    per = {k: v / measured * 1e3 for k, v in trainer.times.items()}
    parts = {k: v / measured * 1e3 for k, v in trainer.timeline.parts.items()}
    trainer.final_params()      # collective: a sharded table whole again on rank 0, for the final loss
    loss_final = eval_loss()

    # compute alone: more steps with no gradient exchange (the batch is still scattered);
    # the weights then diverge across ranks, which no longer matters
    null_ms = None
    if args.timing_steps:
        nt = Trainer(model, opt, create_communicator("null"), wl.layout, B, verbose=False)
        comm.barrier()
        tc = time.perf_counter()
        for s in range(steps, steps + args.timing_steps):
            if local_input:
                nt.step_slice(my_rows(s), B)
            else:
                nt.step(batch(s), B)
        null_ms = (time.perf_counter() - tc) / args.timing_steps * 1e3
        comm.barrier()

    infos = comm.gather_obj({"rss": peak_rss_mb(), "pss": memory_mb()[1], "per": per, "own_cpu": own_cpu, "null_ms": null_ms,
                             "parts": parts})
    if not rank0:
        return 0
    step_ms = (t1 - t0) / measured * 1e3
    variant = (" " + getattr(comm, "transport", "") if args.reduce == "allreduce" and table != "sharded" else "") + (
        " local" if local_input else "") + (" " + args.compress if args.compress else "") + (" overlap" if args.overlap else "") + (
        " avg%d" % args.average_every if args.average_every else "") + (
        " " + args.optimizer if args.optimizer != "sgd" else "") + (" sharded" if table == "sharded" else "")
    per["other"] = step_ms - sum(per.values())
    rec = {
        "peer": "mpinn", "workload": args.workload.upper(), "np": P,
        "variant": "mpinn %s%s, %s" % (args.reduce, variant, wl.what), "reduce": args.reduce + variant,
        "compress": args.compress, "average_every": args.average_every, "prefetch": args.prefetch, "overlap": args.overlap,
        "input": args.input, "comm": getattr(comm, "transport", None),
        "launcher": "mpiexec", "global_batch": B, "lr": lr, "optimizer": args.optimizer,
        "steps_total": steps, "warmup_steps": warmup, "measured_steps": measured,
        "samples_per_s": measured * B / (t1 - t0), "step_ms": step_ms,
        "compute_ms": per["compute"] + per["update"], "comm_ms": per["data"] + per["comm"],
        "comm_split_method": "rank-0 Trainer phase timers: compute = forward/backward + update, "
                             "comm = batch Scatterv (--input local: slicing this rank's rows) + gradient "
                             "exchange (incl. coalescing sparse rows) "
                             "+ param sync (include waiting for peers); phase_ms_rank0.other = rank-0 "
                             "batch slicing + loop overhead",
        "phase_ms_rank0": per, "phase_ms_per_rank": [i["per"] for i in infos], "table": table,
        "comm_parts_ms_per_rank": [i["parts"] for i in infos],
        "null_comm_step_ms": None if null_ms is None else max(i["null_ms"] for i in infos),
        "null_comm_step_ms_per_rank": [i["null_ms"] for i in infos], "timing_steps": args.timing_steps,
        "grad_exchange": comm.last_exchange,
        "peak_rss_mb_per_rank": [round(i["rss"], 1) for i in infos],
        "peak_rss_mb_max": round(max(i["rss"] for i in infos), 1),
        "pss_mb_per_rank": [i["pss"] and round(i["pss"], 1) for i in infos],
        "loss_initial": loss0, "loss_final": loss_final, "loss_eval_rows": wl.eval_rows,
        "train_loss_last10_mean_rank0": float(np.mean(last)) if last else None,
        "load": lw.summary(sum(i["own_cpu"] for i in infos)), "setup_s": setup_s,
        "mpinn_version": __version__, "mpi_library": mpi_library_version(),
        "threadpools": thread_info(), "fused_kernels": fused.library() is not None,
    }
    write_result(rec, args.out or os.environ.get("PEERS_RESULTS") or "bench-results.jsonl")
    print("mpinn %s np=%d %s: %.0f samples/s, %.2f ms/step (compute %.2f, comm %.2f), "
          "loss %.4f -> %.6f, foreign load %.2f cores" % (
              rec["workload"], P, rec["reduce"], rec["samples_per_s"], step_ms, rec["compute_ms"],
              rec["comm_ms"], loss0, loss_final, rec["load"]["foreign_cpu_cores"]), flush=True)
    return 0


# ---------------------------------------------------------------- the side-by-side table
TRAINING_PEERS = ("ddp_gloo", "mpi4py_naive", "mpinn")


def short_variant(r):
    if r["peer"] == "ddp_gloo":
        return {"embbag_sparse": "EmbBag sparse", "embbag_dense": "EmbBag dense",
                "csr": "sparse CSR mm"}.get(r.get("w2_mode"), "MLP")
    if r["peer"] == "mpi4py_naive":
        return "DT42-style"
    return r.get("reduce") or r.get("variant", "")[:14]


def print_table(paths, out=sys.stdout):
    recs = []
    for p in paths:
        with open(p) as f:
            recs += [json.loads(line) for line in f if line.strip()]
    rows = sorted((r for r in recs if r.get("peer") in TRAINING_PEERS and r.get("samples_per_s") is not None),
                  key=lambda r: (r["workload"], r["np"], r.get("steps_total", 0) < 100,
                                 TRAINING_PEERS.index(r["peer"]), short_variant(r)))
    fmt = "%-12s %-3s %-14s %2s %9s %8s %8s %8s %7s %-9s %-9s %5s %s"
    print(fmt % ("peer", "wl", "variant", "np", "samples/s", "step_ms", "comp_ms", "comm_ms", "RSS_MB",
                 "loss_init", "loss_final", "steps", "foreign_cores"), file=out)
    prev = None
    for r in rows:
        if prev is not None and (r["workload"], r["np"]) != prev:
            print(file=out)
        prev = (r["workload"], r["np"])
        ld = r.get("load") or {}
        print(fmt % (r["peer"], r["workload"], short_variant(r), r["np"], "%.0f" % r["samples_per_s"],
                     "%.2f" % r["step_ms"], "%.2f" % r["compute_ms"], "%.2f" % r["comm_ms"],
                     "%.0f" % r["peak_rss_mb_max"], "%.6f" % r["loss_initial"], "%.6f" % r["loss_final"],
                     r["steps_total"], "-" if ld.get("foreign_cpu_cores") is None
                     else "%.2f" % ld["foreign_cpu_cores"]), file=out)
    for r in recs:
        if r.get("status") not in (None, "ok"):
            print("FAILED: %s %s rc=%s" % (r.get("run_name") or r.get("peer"), r.get("status"), r.get("rc")),
                  file=out)


def build_parser():
    from mpinn.options import Parser, positive_int
    p = Parser(prog="python -m mpinn.bench",
               description="mpinn's benchmark: train the peers' workloads (see the peers README) with "
                           "exactly their data, initial weights, batch order and step counts; time the "
                           "steps after the warm-up between two Barriers; write one JSON record "
                           "(peer \"mpinn\") in the peers' format. Run under mpiexec -n P.",
               epilog="W1: MLP 784-256-256-10 on 60000x784 float32, batch 256, SGD 0.05, 300 steps (30 warm-up). "
                      "W2: hashed CSR 2^18 -> 64 -> 1 on 262144 rows x 20 categoricals, batch 1024, SGD 0.1, "
                      "300 steps (30). W3: Ng's 400-25-10 sigmoid net on 5000x400 float64, full-batch GD "
                      "0.8, 100 iterations (10). Example: mpiexec -n 2 python -m mpinn.bench --workload w1; "
                      "python -m mpinn.bench --table bench-results.jsonl /tmp/peers-results.jsonl")
    p.add_argument("--workload", choices=sorted(WORKLOADS), help="which workload to train")
    p.add_argument("--reduce", default="allreduce", choices=["allreduce", "gather"],
                   help="gradient strategy: allreduce (default) or gather (DT42 pattern: Gather to rank 0, "
                        "rank 0 steps and Bcasts)")
    p.add_argument("--compress", choices=["fp16", "bf16"], help="16-bit dense gradient exchange (allreduce)")
    p.add_argument("--comm", default="auto", choices=["auto", "shm", "mpi"],
                   help="how --reduce allreduce sums gradients: shm (a shared-memory window), mpi "
                        "(MPI_Allreduce); auto (default): shm when every rank is on one node")
    p.add_argument("--average-every", type=int, default=0, metavar="K",
                   help="local SGD: average the parameters every K steps instead of reducing gradients")
    p.add_argument("--overlap", action="store_true",
                   help="Iallreduce the later layers' gradients while earlier layers back-propagate")
    p.add_argument("--hashed-table", default="auto", choices=["auto", "replicated", "sharded"],
                   help="the hashed block (W2): replicated, sharded over the ranks, or auto: as training's --table")
    p.add_argument("--input", default="scatter", choices=["scatter", "local"],
                   help="scatter (default): rank 0 holds the data and scatters each batch (Iscatterv, "
                        "posted a step ahead); local: every rank holds the data and takes its own slice "
                        "of each batch, as training's --input local reads its rows of a packed file (and "
                        "as every DDP rank holds the data)")
    p.add_argument("--no-prefetch", dest="prefetch", action="store_false",
                   help="scatter each batch when its step starts (default: post the next batch's "
                        "Iscatterv before this step computes, as training does)")
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "momentum", "adam", "adagrad", "ftrl"],
                   help="the optimizer (default sgd, as the peers); the others at their default learning "
                        "rate (see python -m mpinn.train --help), so their loss_final is not the peers'")
    p.add_argument("--lr", type=float, help="learning rate (default: the workload's for sgd)")
    p.add_argument("--steps", type=positive_int, help="total steps (default: the workload's)")
    p.add_argument("--warmup", type=int, help="untimed steps first (default: the workload's)")
    p.add_argument("--timing-steps", type=int, default=30,
                   help="extra steps after the final loss with no gradient exchange, timed to give "
                        "null_comm_step_ms (0: skip; default 30)")
    p.add_argument("--out", help="JSONL file the record is appended to (default: $PEERS_RESULTS if set, "
                                 "else ./bench-results.jsonl)")
    p.add_argument("--table", nargs="+", metavar="FILE",
                   help="print the side-by-side table of the training records (mpinn and peers) in "
                        "these JSONL files, and exit (no MPI)")
    return p


def main(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    if args.table:
        print_table(args.table)
        return 0
    if not args.workload:
        p.error("--workload is required (or --table FILE)")
    wl = WORKLOADS[args.workload]
    if not 0 <= (wl.warmup if args.warmup is None else args.warmup) < (args.steps or wl.steps):
        p.error("need 0 <= --warmup < --steps")
    from mpinn.comm.guard import run_guarded
    return run_guarded(run, args)


if __name__ == "__main__":
    sys.exit(main())
