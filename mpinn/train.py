"""Entry point: mpirun -np N python -m mpinn.train [DATA] [options]."""
import argparse
import json
import os
import sys


def _pin_threads():
    """Several ranks per machine: one BLAS thread each unless the user said otherwise
    (must run before numpy loads its BLAS)."""
    local = os.environ.get("MPI_LOCALNRANKS") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE")
    if local and int(local) > 1:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, str(max(1, (os.cpu_count() or 1) // int(local))))


_pin_threads()

import numpy as np  # noqa: E402

from mpinn.config import ModelSpec, MpinnError  # noqa: E402


def _rank_from_env():
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


class Parser(argparse.ArgumentParser):
    """argparse that speaks on rank 0 only and exits 2 on every rank for a bad option."""

    def _print_message(self, message, file=None):
        if _rank_from_env() == 0:
            super()._print_message(message, file)

    def error(self, message):
        """One line, not a usage wall."""
        self.exit(2, "mpinn: error: %s (see %s --help)\n" % (message, self.prog))


def positive_int(s):
    v = int(s)
    if v <= 0:
        raise argparse.ArgumentTypeError("must be a positive integer, not %s" % s)
    return v


def nonneg_int(s):
    v = int(s)
    if v < 0:
        raise argparse.ArgumentTypeError("must be >= 0, not %s" % s)
    return v


def positive_float(s):
    v = float(s)
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number, not %s" % s)
    return v


def nonneg_float(s):
    v = float(s)
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError("must be >= 0, not %s" % s)
    return v


def hidden_sizes(s):
    try:
        sizes = tuple(int(x) for x in s.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma-separated widths such as 64,32, not %r" % s)
    if any(h <= 0 for h in sizes):
        raise argparse.ArgumentTypeError("layer widths must be positive")
    return sizes


def build_parser():
    p = Parser(prog="python -m mpinn.train",
               description="Train an MLP data-parallel over MPI ranks. Rank 0 reads and hashes the data "
                           "and scatters each global batch; every rank computes its slice; gradients are "
                           "allreduced (or gathered to rank 0). Run under mpirun -np N.",
               epilog="Without DATA, trains on the embedded synthetic click log (20 categorical features, "
                      "4 numeric, binary label). Example: mpirun -np 2 python -m mpinn.train data.csv "
                      "--label y --categorical a,b,c --numeric x1,x2")
    d = p.add_argument_group("data")
    d.add_argument("data", nargs="?", help=".csv, .parquet, .npz (X, y), .mat (Ng format: X, y in 1..10) or "
                   ".mpinn (written by python -m mpinn.prepare); omitted: the embedded click log")
    d.add_argument("--label", help="CSV label column")
    d.add_argument("--categorical", default="", help="comma-separated CSV columns to hash")
    d.add_argument("--numeric", default="", help="comma-separated CSV columns used as numbers")
    d.add_argument("--task", default="auto", choices=["auto", "multiclass", "binary", "regression"])
    d.add_argument("--valid", help="held-out file (same format); default: --holdout of the data")
    d.add_argument("--holdout", type=nonneg_float, default=0.1, help="share of rows held out (default 0.1)")
    from mpinn.hashing import add_hashing_arguments
    add_hashing_arguments(d)        # --hash-mode, --hash-k, --hash-bits, --hash-seed, --buckets
    d.add_argument("--default-rows", type=positive_int, default=200_000,
                   help="rows of the embedded click log (default 200000)")
    m = p.add_argument_group("model")
    m.add_argument("--hidden", type=hidden_sizes, default=(64,), help="hidden widths (default 64)")
    m.add_argument("--activation", default="relu", choices=["relu", "sigmoid", "tanh"])
    m.add_argument("--loss", default="auto", choices=["auto", "softmax", "sigmoid", "squared"],
                   help="head; auto: softmax (multiclass), sigmoid (binary), squared (regression)")
    m.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    o = p.add_argument_group("optimisation")
    o.add_argument("--optimizer", default="sgd", choices=["sgd", "momentum", "adam"],
                   help="sgd updates only the rows of the sparse layer a batch touches; momentum and adam "
                        "update every row every step (exact, but slow for a large hashed layer)")
    o.add_argument("--lr", type=positive_float, default=None,
                   help="learning rate (default: sgd 0.3, momentum 0.03, adam 0.002)")
    o.add_argument("--momentum", type=nonneg_float, default=0.9)
    o.add_argument("--weight-decay", type=nonneg_float, default=0.0, help="L2 lambda on weights (not biases)")
    o.add_argument("--batch-size", type=positive_int, default=None,
                   help="GLOBAL batch, split over the ranks (default 1024)")
    o.add_argument("--batch-per-rank", type=positive_int, default=None,
                   help="instead of --batch-size: rows per rank per step, so the global batch grows "
                        "with the number of ranks")
    o.add_argument("--grad-accum", type=positive_int, default=1, metavar="K",
                   help="compute each rank's share of a step in K micro-batches and add the gradients "
                        "(same step, a K-th of the activation memory)")
    o.add_argument("--lr-scaling", default="none", choices=["none", "linear", "sqrt"],
                   help="scale --lr by (global batch / --lr-base-batch) or its square root")
    o.add_argument("--lr-base-batch", type=positive_int, default=None,
                   help="the global batch --lr was tuned for (default with --batch-per-rank: that batch)")
    o.add_argument("--warmup-steps", type=nonneg_int, default=0,
                   help="ramp the learning rate linearly to its (scaled) value over this many steps")
    o.add_argument("--epochs", type=positive_int, default=3)
    o.add_argument("--seed", type=int, default=0, help="initialisation and shuffling seed")
    c = p.add_argument_group("distribution")
    c.add_argument("--reduce", default="allreduce", choices=["allreduce", "gather"],
                   help="allreduce: every rank steps; gather: rank 0 steps and broadcasts (DT42)")
    c.add_argument("--input", default="scatter", choices=["scatter", "local"],
                   help="scatter: rank 0 reads (and hashes) the rows and scatters each batch; local: "
                        "every rank reads its own rows of a packed file (python -m mpinn.prepare)")
    c.add_argument("--no-prefetch", action="store_true",
                   help="do not read and send the next batch while this one computes")
    c.add_argument("--parallel", default="data", choices=["data", "tower"],
                   help="data: one model, gradients combined every step; tower: every rank trains its "
                        "own replica (seed + rank) and predictions are mixed (the wide-sparse seed's mode)")
    c.add_argument("--tower-data", default="shard", choices=["shard", "same"],
                   help="tower mode: each tower trains on its slice of every batch (shard) or on the "
                        "whole batch (same)")
    c.add_argument("--tower-mix", default="mean", choices=["mean", "fit"],
                   help="tower mode: mix the towers' predictions by a plain mean, or with weights fitted "
                        "to the held-out loss")
    c.add_argument("--sparse-threshold", type=nonneg_float, default=0.25,
                   help="send the sparse layer's gradient as rows while the touched rows of all ranks "
                        "are at most this share of the table, else allreduce it dense")
    f = p.add_argument_group("checkpoints and failure handling")
    f.add_argument("--checkpoint-dir", help="write checkpoints here (rank 0, atomically): every "
                   "--checkpoint-every steps and at each epoch end")
    f.add_argument("--checkpoint-every", type=nonneg_int, default=0,
                   help="steps between checkpoints (default 0: at epoch ends only)")
    f.add_argument("--keep-checkpoints", type=positive_int, default=3, help="keep the newest K (default 3)")
    f.add_argument("--resume", metavar="DIR", help="continue from the newest checkpoint in DIR with the "
                   "same options (--epochs may grow; the number of ranks may change); checkpoints "
                   "go on being written there unless --checkpoint-dir says otherwise")
    f.add_argument("--step-timeout", type=nonneg_float, default=300.0,
                   help="seconds a step, an evaluation or a checkpoint may take before the job is "
                        "aborted as hung (default 300; 0: no deadline)")
    f.add_argument("--start-timeout", type=nonneg_float, default=3600.0,
                   help="seconds for start-up: reading and hashing the data (default 3600; 0: none)")
    f.add_argument("--max-bad-steps", type=positive_int, default=20,
                   help="stop after this many consecutive steps with a non-finite loss or gradient "
                        "(each is skipped on every rank; default 20)")
    r = p.add_argument_group("output")
    r.add_argument("--model-out", default="mpinn-model.npz", help="model file written at the end")
    r.add_argument("--metrics-out", help="write the history and summary as JSON here")
    r.add_argument("--curve", metavar="FILE", help="append each epoch's losses and metrics to FILE "
                   "(.csv: one row per epoch; otherwise JSON lines)")
    r.add_argument("--plot", metavar="PNG", help="at the end, plot the loss and metric curves to PNG "
                   "(needs matplotlib: pip install 'mpinn[plot]')")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--quiet", action="store_true", help="only errors")
    return p


def default_loss(task):
    return {"multiclass": "softmax", "binary": "sigmoid", "regression": "squared"}[task]


# options that may change between a run and its --resume; all others must match the checkpoint
RESUME_MAY_CHANGE = {"epochs", "resume", "checkpoint_dir", "checkpoint_every", "keep_checkpoints",
                     "step_timeout", "start_timeout", "max_bad_steps", "model_out", "metrics_out",
                     "no_progress", "quiet", "reduce", "sparse_threshold", "curve", "plot", "input",
                     "no_prefetch"}  # (towers: no resume)


def resume_config(args):
    """The options a checkpoint records, as JSON values."""
    return json.loads(json.dumps({k: v for k, v in sorted(vars(args).items()) if k not in RESUME_MAY_CHANGE}))


def check_resume(header, config, spec, meta, n_train, batch):
    """A checkpoint continues only the run that wrote it: name the first thing that differs."""
    path = header["path"]
    saved = header.get("config", {})
    for k in sorted(set(saved) | set(config)):
        if saved.get(k) != config.get(k):
            raise MpinnError("--resume %s: the checkpoint was written with --%s %s, this run has %s"
                             % (path, k.replace("_", "-"), saved.get(k), config.get(k)))
    if header.get("spec") != spec.to_dict():
        raise MpinnError("--resume %s: the checkpoint's architecture %s does not match this run's %s"
                         % (path, header.get("spec"), spec.to_dict()))
    stored, wanted = (header.get("meta") or {}).get("hashing"), meta.get("hashing")
    if stored != wanted:
        from mpinn.hashing import check_contract
        if stored is None or wanted is None:
            raise MpinnError("--resume %s: the checkpoint and this run's data differ in hashing" % path)
        check_contract(stored, wanted)
    if header["position"]["batch_size"] != batch:
        raise MpinnError("--resume %s: the checkpoint's global batch is %s rows, this run's is %d (with "
                         "--batch-per-rank it changes with the number of ranks)"
                         % (path, header["position"]["batch_size"], batch))
    if header.get("n_train") != n_train:
        raise MpinnError("--resume %s: the checkpoint was trained on %s rows, this data has %d"
                         % (path, header.get("n_train"), n_train))


def run(args):
    from mpinn.comm import NoWatchdog, Watchdog, create_communicator
    from mpinn.checkpoint import save_model
    from mpinn.data import load_data
    from mpinn.model import MLP
    from mpinn.optim import create_optimizer, lr_schedule
    from mpinn.metrics import format_metrics
    from mpinn.report import Curve
    from mpinn.trainer import Faults, Trainer

    if args.batch_size and args.batch_per_rank:
        raise MpinnError("give --batch-size (global) or --batch-per-rank, not both")
    args.batch_size = args.batch_size or (None if args.batch_per_rank else 1024)
    if args.plot:
        from mpinn.report import check_plotting
        check_plotting()

    towers = args.tower_data if args.parallel == "tower" else None
    if towers and (args.checkpoint_dir or args.resume):
        raise MpinnError("--parallel tower does not write or resume checkpoints yet; leave out "
                         "--checkpoint-dir / --resume")
    comm = create_communicator("tower" if towers else args.reduce, sparse_threshold=args.sparse_threshold)
    rank0 = comm.rank == 0
    watchdog = Watchdog(args.step_timeout) if args.step_timeout > 0 else NoWatchdog()
    if args.start_timeout > 0:
        watchdog.arm("start-up (reading the data, building the model)", args.start_timeout)
    say = (lambda msg: print(msg, flush=True)) if rank0 and not args.quiet else (lambda msg: None)

    def load():
        import time
        t = time.perf_counter()
        kw = dict(label=args.label, categorical=args.categorical, numeric=args.numeric,
                  hash_bits=args.hash_bits, hash_seed=args.hash_seed, task=args.task,
                  default_rows=args.default_rows, default_seed=args.seed, hash_mode=args.hash_mode,
                  hash_k=args.hash_k, buckets=args.buckets)
        data = load_data(args.data, **kw)
        if args.valid:
            valid = load_data(args.valid, **dict(kw, task=data.task, classes=data.meta.get("classes"),
                                                 contract=data.meta.get("hashing")))
            train = data
        else:
            train, valid = data.split(args.holdout, args.seed)
        if len(train) < comm.size:
            raise MpinnError("%d training rows for %d ranks: every rank needs at least one row"
                             % (len(train), comm.size))
        say("data: %s, %d training rows, %d held out, %s input columns + %d dense, task %s (%.1f s)" % (
            args.data or "embedded click log", len(train), len(valid) if valid is not None else 0,
            train.n_sparse, train.n_dense, train.task, time.perf_counter() - t))
        return train, valid

    if args.input == "local" and not (args.data or "").endswith(".mpinn"):
        raise MpinnError("--input local needs a packed file: python -m mpinn.prepare DATA ... --out DATA.mpinn")
    loaded = comm.root_call(load)
    train, valid = loaded if rank0 else (None, None)
    if args.input == "local" and not rank0:     # the same file, the same seeded split, on every rank
        train, valid = load()
    # every rank learns the shapes it needs; the data itself stays on rank 0
    info = comm.bcast_obj({"meta": train.meta, "layout": vars(train.layout(args.dtype)),
                           "fan_in": train.sparse_fan_in,
                           "n_out": (len(train.meta["classes"]) if train.task == "multiclass" else 1),
                           "n_train": len(train)}
                          if rank0 else None)
    from mpinn.data import Layout
    layout = Layout(**info["layout"])
    meta = info["meta"]
    loss = default_loss(meta["task"]) if args.loss == "auto" else args.loss
    if meta["task"] == "multiclass" and loss == "squared":
        raise MpinnError("--loss squared needs a regression task", collective=True)
    if meta["task"] != "multiclass" and loss == "softmax":
        raise MpinnError("--loss softmax needs a multiclass task (task is %s)" % meta["task"], collective=True)
    spec = ModelSpec(layout.n_sparse, layout.n_dense, args.hidden, info["n_out"], args.activation, loss,
                     args.dtype, sparse_fan_in=info["fan_in"])
    model = MLP(spec).init_(args.seed + (comm.rank if towers else 0))
    base_lr = args.lr if args.lr is not None else {"sgd": 0.3, "momentum": 0.03, "adam": 0.002}[args.optimizer]
    batch = args.batch_per_rank * comm.size if args.batch_per_rank else args.batch_size
    lr_at, lr = lr_schedule(base_lr, batch, args.lr_base_batch or args.batch_per_rank, args.lr_scaling,
                            args.warmup_steps)
    opt = create_optimizer(args.optimizer, model.size, np, lr, args.weight_decay, model.weight_slices,
                           args.momentum)
    curve = Curve(args.curve, args.plot) if rank0 and (args.curve or args.plot) else None
    trainer = Trainer(model, opt, comm, layout, batch, args.seed, verbose=not args.quiet,
                      watchdog=watchdog, max_bad_steps=args.max_bad_steps,
                      faults=Faults(os.environ.get("MPINN_FAULT", ""), comm.rank), grad_accum=args.grad_accum,
                      lr_at=lr_at if (args.lr_scaling != "none" or args.warmup_steps) else None,
                      on_epoch=curve.add if curve else None, towers=towers, tower_mix=args.tower_mix,
                      prefetch=not args.no_prefetch, read_local=args.input == "local")
    config = resume_config(args)
    if args.resume:
        def load_checkpoint_checked():
            from mpinn.checkpoint import load_checkpoint
            arrays, header = load_checkpoint(args.resume)
            check_resume(header, config, spec, meta, info["n_train"], batch)
            return arrays, header
        arrays, header = comm.root_call(load_checkpoint_checked) or (None, None)
        trainer.restore(arrays, header)
        say("resumed from %s: epoch %d, step %d of the epoch (%d steps done)" % (
            trainer.last_checkpoint, trainer.epoch, trainer.next_step, trainer.global_step))
    ckpt_dir = args.checkpoint_dir or args.resume
    if ckpt_dir:
        trainer.enable_checkpoints(ckpt_dir, args.checkpoint_every, args.keep_checkpoints,
                                   {"config": config, "spec": spec.to_dict(), "meta": meta,
                                    "n_train": info["n_train"]})
    trainer.start()
    watchdog.disarm()
    say("model: %s -> %s (%s, %s head), %d parameters; %d ranks, %s, %s lr %g%s, global batch %d%s" % (
        "%d hashed + %d dense" % (spec.n_sparse, spec.n_dense), "-".join(map(str, spec.hidden + (spec.n_out,))),
        spec.activation, loss, model.size, comm.size,
        "--parallel tower (%s data, a replica per rank)" % towers if towers else "--reduce " + comm.name,
        args.optimizer, lr,
        " (%s-scaled from %g%s)" % (args.lr_scaling, base_lr, ", %d warm-up steps" % args.warmup_steps
                                    if args.warmup_steps else "") if lr != base_lr or args.warmup_steps else "",
        batch, " in %d micro-batches per rank" % args.grad_accum if args.grad_accum > 1 else ""))
    history = trainer.fit(train, valid, args.epochs, progress=not (args.no_progress or args.quiet))
    watchdog.stop()
    summary = trainer.summary()
    params = trainer.gather_towers() if towers else model.params
    if not rank0:
        return 0
    if curve:
        curve.finish(say)
    final = history[-1].get("valid", {})
    meta = dict(meta, train={"epochs": args.epochs, "batch_size": batch, "optimizer": args.optimizer,
                             "lr": lr, "ranks": comm.size, "reduce": comm.name, "seed": args.seed},
                valid_metrics=final, holdout=0.0 if args.valid else args.holdout)
    if towers:
        weights = trainer.tower_weights or [1.0 / comm.size] * comm.size
        meta["towers"] = {"count": comm.size, "data": towers, "mix": args.tower_mix, "weights": weights,
                          "seeds": [args.seed + r for r in range(comm.size)]}
        if final.get("towers"):
            say("towers: %s; mixture (%s, weights %s): %s" % (
                "; ".join(format_metrics(m) for m in final["towers"]), args.tower_mix,
                " ".join("%.3f" % w for w in weights), format_metrics(final)))
    save_model(args.model_out, params, spec, meta)
    ph = summary["phase_s_mean"]
    busy = sum(ph.values()) or 1.0
    say("done: %d samples in %.1f s, %.0f samples/s over %d ranks; time split (mean over ranks): "
        "data wait %.0f%% (%.2f ms/step), compute %.0f%%, communication %.0f%%" % (
            summary["samples"], summary["seconds"], summary["samples_per_s"], comm.size,
            100 * ph["data"] / busy, 1e3 * summary["data_wait_s_per_step"],
            100 * ph["compute"] / busy, 100 * ph["comm"] / busy))
    say("model written to %s" % args.model_out)
    if args.metrics_out:
        with open(args.metrics_out, "w") as f:
            json.dump({"history": history, "summary": summary, "valid": final}, f, indent=1, default=float)
    return 0


def main(argv=None):
    args = build_parser().parse_args(argv)
    from mpinn.comm import run_guarded
    return run_guarded(run, args)


if __name__ == "__main__":
    sys.exit(main())
