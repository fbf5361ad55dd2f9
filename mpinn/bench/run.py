"""A benchmark run: one of the peers' workloads, wired as training wires a run (mpinn.settings and
mpinn.training.wire), fed in the peers' batch order, timed between two Barriers, one record written."""
import os
import time
from dataclasses import replace

import numpy as np

from mpinn import __version__
from mpinn.bench.measure import LoadWindow, peak_rss_mb, thread_info, write_result
from mpinn.bench.workloads import WORKLOADS
from mpinn.process import memory_mb


def workload_config(args, wl):
    """The RunConfig of a benchmark run: the workload's model and batch, the benchmark's options."""
    from mpinn import settings
    from mpinn.optim import REGISTRY
    lr = args.lr or (wl.lr if args.optimizer == "sgd" else REGISTRY[args.optimizer].lr)
    return settings.from_keywords(
        None, hidden=wl.spec.hidden, wide="off", activation=wl.spec.activation, loss=wl.spec.loss, dtype=wl.spec.dtype,
        task=wl.task, optimizer=args.optimizer, lr=lr, batch_size=wl.batch, epochs=1, early_stop=0, holdout=0,
        reduce=args.reduce, compress=args.compress, comm=args.comm, overlap=args.overlap,
        average_every=args.average_every, table=args.hashed_table, no_prefetch=not args.prefetch, quiet=True,
        shard_exchange=args.shard_exchange, hot_rows=args.hot_rows)


def workload_info(wl):
    """What training learns from its data's first pass, for a workload (settings.resolve, wire)."""
    return {"meta": {"task": wl.task}, "layout": vars(wl.layout), "fan_in": wl.spec.sparse_fan_in,
            "n_out": wl.spec.n_out, "n_train": wl.n, "has_valid": False}


def run(args):
    from mpinn import settings
    from mpinn.comm import create_communicator, split_counts
    from mpinn.comm.node import mpi_library_version
    from mpinn.model import MLP
    from mpinn.optim import fused
    from mpinn.training import Trainer, wire

    t_start = time.perf_counter()
    wl = WORKLOADS[args.workload]
    steps = args.steps if args.steps is not None else wl.steps
    warmup = args.warmup if args.warmup is not None else wl.warmup
    cfg = workload_config(args, wl)
    settings.check(cfg)
    comm = create_communicator(cfg.reduce, compress=cfg.compress, transport=cfg.comm)
    rank0, P, B = comm.rank == 0, comm.size, wl.batch
    local_input = args.input == "local"
    data = wl.make() if rank0 or local_input else None   # local: every rank has the data (as DDP's do)
    info = workload_info(wl)
    cfg = settings.resolve(cfg, info, comm)
    wired = wire(cfg, comm, info)
    trainer, model, opt, table, lr = wired.trainer, wired.model, wired.optimizer, cfg.table, cfg.lr
    init = wl.init() if rank0 else None
    # a sharded table: rank 0 holds the peers' whole init only for the first loss and until each rank has its rows
    start = MLP(wl.spec).set_params(init) if rank0 else None
    loss0 = start.loss_sum(wl.rows(data, 0, wl.eval_rows)) / wl.eval_rows if rank0 else None
    if table == "sharded":      # the hot rows, counted over the workload's rows (rank 0's)
        def counts():
            Xs = wl.rows(data, 0, wl.n).Xs
            return np.bincount(np.asarray(Xs.indices, np.int64), minlength=model.table[0]), wl.n
        trainer.use_hot_rows_(counts=counts() if rank0 else None)
    trainer.load_params_(start.params if rank0 else None)
    del start, init
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
    shards = getattr(trainer.stepper, "shards", None)
    traffic0 = shards.traffic.as_dict() if shards is not None else None
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
        null_cfg = replace(cfg, table="replicated", overlap=False, average_every=0, compress=None)
        nt = Trainer(null_cfg, model, opt, wired.schedule, create_communicator("null"), wl.layout)
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
                             "parts": parts, "traffic": traffic})
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


