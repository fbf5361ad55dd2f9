"""A benchmark run: one of the peers' workloads, wired as training wires a run (mpinn.settings and
mpinn.training.wire), fed in the peers' batch order, timed between two Barriers, one record written."""
import os
import time
from dataclasses import replace as changed

import numpy as np

from mpinn import __version__, settings
from mpinn.bench.measure import LoadWindow, peak_rss_mb, thread_info, write_result
from mpinn.bench.workloads import WORKLOADS
from mpinn.core.errors import MpinnError
from mpinn.comm.node import mpi_library_version
from mpinn.data.info import DataInfo
from mpinn.host.memory import memory_mb
from mpinn.model.mlp import MLP
from mpinn.optim import REGISTRY, fused
from mpinn.training import Run, Trainer, open_job
from mpinn.training.build import build_step, communicator
from mpinn.training.feed import Reading, make_feed
from mpinn.training.staging import device_feed


def bench_reading(args):
    """Who reads the benchmark's rows (its own --input, as mpinn.settings.input_plan.choose_reading reads train's):
    every rank its slice of the packed batch (local), or rank 0, scattering."""
    return Reading("local" if args.input == "local" else "rank0")


def workload_config(args, wl, batch=None):
    """The RunConfig of a benchmark run: the workload's model and batch (or `batch`), the benchmark's options."""
    lr = args.lr or (wl.lr if args.optimizer == "sgd" else REGISTRY[args.optimizer].lr)
    return settings.from_keywords(
        None, hidden=wl.spec.hidden, wide="off", activation=wl.spec.activation, loss=wl.spec.loss, dtype=wl.spec.dtype,
        task=wl.task, optimizer=args.optimizer, lr=lr, batch_size=batch or wl.batch, epochs=1, early_stop=0, holdout=0,
        reduce=args.reduce, compress=args.compress, comm=args.comm, overlap=args.overlap, device=args.device, graph=args.graph,
        average_every=args.average_every, table=args.hashed_table, no_prefetch=not args.prefetch, quiet=True,
        shard_exchange=args.shard_exchange, hot_rows=args.hot_rows, wire_rows=args.wire_rows,
        stale_rows=args.stale_rows)


def workload_info(wl):
    """What training learns from its data's first pass, for a workload (settings.resolve, the Run)."""
    return DataInfo({"task": wl.task}, wl.layout, wl.spec.n_out, wl.spec.sparse_fan_in, wl.n, False)


class WorkloadRows:
    """A workload's rows as the feed reads a data set's (take), rank 0's (or, --input local, every rank's)."""

    def __init__(self, wl, data):
        self.wl, self.data = wl, data

    def take(self, rows, dtype=None):      # the bench's orders are runs of consecutive rows
        return self.wl.rows(self.data, int(rows[0]), int(rows[-1]) + 1)


class BenchOrder:
    """The peers' batch order: step s takes rows [k B, k B + B), k = s mod (n // B), as an epoch order the feed
    slices (row s B + i of the order is row k B + i)."""

    def __init__(self, n, batch):
        self.batches, self.B = n // batch, batch

    def __getitem__(self, sl):
        s, r = divmod(sl.start, self.B)
        lo = (s % self.batches) * self.B + r
        return np.arange(lo, lo + sl.stop - sl.start)


def run(args):
    t_start = time.perf_counter()
    wl = WORKLOADS[args.workload]
    steps = args.steps if args.steps is not None else wl.steps
    warmup = args.warmup if args.warmup is not None else wl.warmup
    cfg = workload_config(args, wl)
    settings.check(cfg)
    job = open_job(device=cfg.device)      # binds each rank to its GPU for --device gpu
    rank0, P, B = job.rank == 0, job.size, wl.batch
    if args.batch_per_rank:     # weak scaling: N rows a rank, the peers' rows in their order, N P at a time
        B = args.batch_per_rank * P
        if B > wl.n:
            raise MpinnError("%d rows a rank at %d ranks: the global batch %d is more than the workload's %d "
                             "rows" % (args.batch_per_rank, P, B, wl.n), collective=True)
        cfg = workload_config(args, wl, B)
        settings.check(cfg)
    reading = bench_reading(args)
    local_input = reading.who == "local"
    data = wl.make() if rank0 or local_input else None   # local: every rank has the data (as DDP's do)
    info = workload_info(wl)
    cfg = settings.resolve(cfg, info, P)
    r = Run(cfg, job, info)
    if args.stale_progress:     # the benchmark's variant of the plan's choice (mpinn.settings.plan.STALE_PROGRESS)
        r.plan = changed(r.plan, stale_progress=args.stale_progress)
    comm, model, table, lr = r.comm, r.model, r.plan.table, cfg.lr
    # a sharded table: rank 0 holds the peers' whole init only for the first loss and until each rank has its rows
    start = MLP(wl.spec).set_params(wl.init()) if rank0 else None
    loss0 = start.loss_sum(wl.rows(data, 0, wl.eval_rows)) / wl.eval_rows if rank0 else None
    counts = None
    if rank0 and r.plan.needs_counts:       # the hot rows, counted over the workload's rows
        Xs = wl.rows(data, 0, wl.n).Xs
        counts = np.bincount(np.asarray(Xs.indices, np.int64), minlength=model.table[0]), wl.n
    trainer = r.start(counts=counts, params=start.params if rank0 else None)
    del start
    rows, order = WorkloadRows(wl, data) if data is not None else None, BenchOrder(wl.n, B)

    def feed(first, stop):      # the trainer's feed, in the peers' batch order
        # the workloads' rows are slices of arrays in memory: no read-ahead thread, which only competed with the
        # compute for the cores (W2 np 1: 568k against 641k samples/s with it, medians of 5)
        f = make_feed(rows, order, reading, first, comm, wl.layout, B, wl.spec.dtype, steps=stop,
                      prefetch=args.prefetch, read_ahead=False)
        return f if trainer.stepper.stages else device_feed(f, model.backend)   # staged on a GPU (a graph step: by it)

    def run_steps(first, stop, last=None):
        f = feed(first, stop)
        for s in range(first, stop):
            t = time.perf_counter()
            local = f.next()
            trainer.timeline.add("data", t, time.perf_counter(), trainer.global_step + 1)
            loss, ok = trainer.step_slice(local, B)
            trainer.global_step += 1
            for loss, _, _, step in trainer.stepper.outcomes((loss, ok, B, s), flush=s == stop - 1):
                if last is not None and step >= stop - 10:      # a graph step's settle later
                    last.append(loss)

    def eval_loss():
        return model.loss_sum(wl.rows(data, 0, wl.eval_rows)) / wl.eval_rows if rank0 else None

    setup_s = time.perf_counter() - t_start

    run_steps(0, warmup)
    comm.barrier()
    lw = LoadWindow()
    lw.start()
    trainer.timeline.reset()
    shards = trainer.stepper.shards if table == "sharded" else None
    traffic0 = shards.traffic.as_dict() if shards is not None else None
    last = []
    t0 = time.perf_counter()
    run_steps(warmup, steps, last)
    trainer.settle_()           # local SGD: the final loss is the averaged model's (timed: part of the work)
    comm.barrier()
    t1 = time.perf_counter()
    own_cpu = lw.stop()
    measured = steps - warmup
    traffic = None
    if shards is not None:      # what this rank sent in the timed steps (the exchange counts as it posts)
        traffic = {k: v - traffic0[k] for k, v in shards.traffic.as_dict().items()}
    per = {k: v / measured * 1e3 for k, v in trainer.times.items()}
    parts = {k: v / measured * 1e3 for k, v in trainer.timeline.parts.items()}
    trainer.final_params()      # collective: a sharded table whole again on rank 0, for the final loss
    loss_final = eval_loss()

    # compute alone: more steps with no gradient exchange (the batch is still scattered);
    # the weights then diverge across ranks, which no longer matters
    null_ms = None
    if args.timing_steps:
        null_ms = compute_alone_ms(r, WorkloadRows(wl, data) if data is not None else None, order, args,
                                   range(steps, steps + args.timing_steps))

    infos = comm.gather_obj({"rss": peak_rss_mb(), "pss": memory_mb()[1], "per": per, "own_cpu": own_cpu, "null_ms": null_ms,
                             "parts": parts, "traffic": traffic})
    if not rank0:
        return 0
    step_ms = (t1 - t0) / measured * 1e3
    variant = (" gpu" if r.plan.device == "gpu" else "") + (
        " " + r.plan.transport if args.reduce == "allreduce" and table != "sharded" else "") + (
        " local" if local_input else "") + (" " + args.compress if args.compress else "") + (" overlap" if args.overlap else "") + (
        " avg%d" % args.average_every if args.average_every else "") + (" graph" if r.plan.step == "graph" else "") + (
        " " + args.optimizer if args.optimizer != "sgd" else "") + (" sharded" if table == "sharded" else "") + (
        " %s-rows" % args.wire_rows if args.wire_rows != "fp32" else "") + (
        " stale-%s%s" % (r.plan.stale_progress, "+async" if os.environ.get("MPIR_CVAR_ASYNC_PROGRESS") == "1" else "")
        if args.stale_rows else "")
    per["other"] = step_ms - sum(per.values())
    rec = {
        "peer": "mpinn", "workload": args.workload.upper(), "np": P,
        "variant": "mpinn %s%s, %s" % (args.reduce, variant, wl.what), "reduce": args.reduce + variant,
        "compress": args.compress, "average_every": args.average_every, "prefetch": args.prefetch, "overlap": args.overlap,
        "stale_rows": args.stale_rows, "stale_progress": r.plan.stale_progress if args.stale_rows else None,
        "mpir_cvar_async_progress": os.environ.get("MPIR_CVAR_ASYNC_PROGRESS"), "input": args.input,
        "comm": r.plan.transport, "device": r.plan.device_note,
        "launcher": "mpiexec", "global_batch": B, "batch_per_rank": B // P if args.batch_per_rank else B / P,
        "batch": "per rank (--batch-per-rank: weak scaling)" if args.batch_per_rank else "global (the workload's)", "lr": lr, "optimizer": args.optimizer,
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
        "threadpools": thread_info(), "fused_kernels": fused.library() is not None, "fused_from": fused.source,
        "config": cfg.options(),
    }
    if traffic is not None:
        st = trainer.stepper
        total = {k: sum(i["traffic"][k] for i in infos) / measured for k in traffic}
        rec["exchange"] = {"shard_exchange": st.exchange, "why": st.exchange_why, "hot_rows": st.hot_rows,
                           "inter_node_messages_per_step": total["inter_node_messages"],
                           "inter_node_bytes_per_step": total["inter_node_bytes"],
                           "messages_per_step": total["messages"], "bytes_per_step": total["bytes"],
                           "counted": "sent by all ranks per timed step, as the exchange posts them"}
    write_result(rec, args.out or os.environ.get("PEERS_RESULTS") or "bench-results.jsonl")
    print("mpinn %s np=%d %s: %.0f samples/s, %.2f ms/step (compute %.2f, comm %.2f), "
          "loss %.4f -> %.6f, foreign load %.2f cores" % (
              rec["workload"], P, rec["reduce"], rec["samples_per_s"], step_ms, rec["compute_ms"],
              rec["comm_ms"], loss0, loss_final, rec["load"]["foreign_cpu_cores"]), flush=True)
    return 0




def compute_alone_ms(r, rows, order, args, steps):
    """ms a step with no gradient exchange (the batch is still scattered): a step built on the null communicator
    from the run's plan, the table replicated; the weights then diverge across ranks, which no longer matters."""
    plan = r.plan
    plan = changed(plan, reduce="null", transport="none", step="reduce", shared_params=False, table="replicated",
                   cfg=changed(plan.cfg, table="replicated", overlap=False, average_every=0, compress=None))
    comm = communicator(plan, r.job.comm.comm)
    null = Trainer(plan.cfg, r.model, r.optimizer, r.schedule, build_step(plan, comm, r.model, r.optimizer),
                   r.layout)
    B = r.cfg.batch
    f = make_feed(rows, order, bench_reading(args), steps.start, comm, r.layout, B, r.spec.dtype, steps=steps.stop,
                  prefetch=args.prefetch, read_ahead=False)
    comm.barrier()
    tc = time.perf_counter()
    for _ in steps:
        null.step_slice(f.next(), B)
    null.stepper.outcomes(None, flush=True)     # a graph step's queued work done (the host ran ahead)
    ms = (time.perf_counter() - tc) / len(steps) * 1e3
    comm.barrier()
    comm.comm.Free()
    return ms
