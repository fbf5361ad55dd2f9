"""The Python API: mpinn.api.train(...) trains exactly as python -m mpinn.train does (the CLI calls it).

    import mpinn.api as mp
    result = mp.train("clicks.csv", label="clicked", categorical="site,app,device", epochs=3)
    print(result.metrics["auc"])

Run a script that calls it under `mpirun -np N python -m mpi4py script.py`: every rank makes the
same call; `-m mpi4py` turns an unhandled exception on one rank into an abort of the whole job."""
import json
import os
from dataclasses import dataclass

from mpinn.process import pin_threads

pin_threads()       # before numpy loads its BLAS

from mpinn.config import ModelSpec, MpinnError  # noqa: E402


@dataclass
class TrainResult:
    """What a training run gives back, on every rank."""
    history: list          # one record per epoch: train_loss, seconds, skipped_steps, valid metrics
    metrics: dict          # the last epoch's held-out metrics ({} without held-out rows)
    summary: dict          # samples/s, time split, steps, skipped steps
    model: object          # the trained mpinn.model.MLP (on every rank; tower mode: this rank's tower)
    model_path: str        # where the model file was written (by rank 0)
    spec: ModelSpec
    meta: dict             # task, classes, hashing contract, source columns
    rank: int              # this process's rank (print on rank 0 only)


def options_to_argv(data, options):
    """Keyword options as the CLI's arguments: hidden=(64, 32) -> --hidden 64,32; a True flag -> --flag."""
    argv = [] if data is None or not isinstance(data, (str, os.PathLike)) else ["--data", os.fspath(data)]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv += [flag, ",".join(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv


def parse_options(data=None, **options):
    """The CLI's parser checks the options: the same names, defaults and messages (as MpinnError)."""
    from mpinn.options import build_train_parser
    parser = build_train_parser()
    known = {a.dest for a in parser._actions}
    for key in options:
        if key not in known or key == "data":
            raise TypeError("mpinn.api.train() got an unknown option %r (see python -m mpinn.train --help)" % key)
    parser.raise_errors = True
    args = parser.parse_args(options_to_argv(data, options))
    if data is not None and not isinstance(data, (str, os.PathLike)):
        args.data = data            # an in-memory data set (mpinn.data.Dataset / Rows) on rank 0
    return args


def train(data=None, comm=None, **options):
    """Train on `data` (a .csv/.parquet/.npz/.mat/.mpinn path, an in-memory mpinn.data.Dataset, or
    None for the embedded click log) with the options of python -m mpinn.train as keywords
    (hidden=(64,), epochs=3, batch_size=1024, reduce="allreduce", model_out="m.npz", quiet=True...).
    Collective over `comm` (default MPI_COMM_WORLD). Raises MpinnError for bad input."""
    return train_from_args(parse_options(data, **options), comm)


def predict(model_path, data=None):
    """(predictions, metrics) of a model file on a data path, in-memory data (arrays()), or None
    for a model trained on the embedded data (its held-out rows). One process, no MPI."""
    from mpinn.predict import predict_file
    pred, metrics, _, _ = predict_file(model_path, data)
    return pred, metrics


def arrays(X, y, task="auto"):
    """An in-memory data set from numpy arrays: features X (n, d), labels y (class labels of any
    type, or numbers for regression), checked as a .npz file's would be."""
    from mpinn.data.dense import dense_xy
    return dense_xy(X, y, "arrays", task, None, True)


def default_loss(task):
    return {"multiclass": "softmax", "binary": "sigmoid", "regression": "squared"}[task]


# options that may change between a run and its --resume; all others must match the checkpoint
RESUME_MAY_CHANGE = {"epochs", "resume", "checkpoint_dir", "checkpoint_every", "keep_checkpoints",
                     "step_timeout", "start_timeout", "max_bad_steps", "model_out", "metrics_out",
                     "no_progress", "quiet", "reduce", "sparse_threshold", "curve", "plot", "input",
                     "no_prefetch", "compress", "timeline", "device", "comm", "early_stop", "keep", "table"}
# (towers: no resume)


def resume_config(args):
    """The options a checkpoint records, as JSON values."""
    return json.loads(json.dumps({k: v for k, v in sorted(vars(args).items()) if k not in RESUME_MAY_CHANGE},
                                 default=lambda obj: "<in-memory %s of %d rows>" % (type(obj).__name__, len(obj))))


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
    from mpinn.data.transform import check_same
    check_same((header.get("meta") or {}).get("transform"), meta.get("transform"), "--resume %s" % path)
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


def train_from_args(args, comm=None):
    """Train as `python -m mpinn.train` does, from its parsed options (an argparse Namespace).
    Collective: every rank calls it. Returns a TrainResult on every rank."""
    from mpinn.comm import create_communicator
    from mpinn.comm.guard import NoWatchdog, Watchdog, world_rank_size
    from mpinn.comm.node import unwired_srun

    towers = check_options(args)
    unwired = unwired_srun(world_rank_size()[1], os.environ)
    if unwired:     # before anything is read or written: N lone copies would all write the same files
        raise MpinnError(unwired, collective=True)
    comm = create_communicator("tower" if towers else args.reduce, comm, sparse_threshold=args.sparse_threshold,
                               compress=args.compress, device=args.device, transport=args.comm)
    if comm.backend.device is not None and args.grad_accum > 1:     # its row coalescing is host code
        raise MpinnError("--grad-accum runs on --device cpu only (for now)", collective=True)
    rank0 = comm.rank == 0
    watchdog = Watchdog(args.step_timeout) if args.step_timeout > 0 else NoWatchdog()
    if args.start_timeout > 0:
        watchdog.arm("start-up (reading the data, building the model)", args.start_timeout)
    say = (lambda msg: print(msg, flush=True)) if rank0 and not args.quiet else (lambda msg: None)
    say("device: %s" % comm.device_note)
    from mpinn.data.inputs import load_everywhere
    train, valid, info = load_everywhere(args, comm, say)
    run = build(args, comm, info, towers)
    trainer, curve = make_trainer(args, comm, run, towers, watchdog)
    trainer.start()
    if comm.size > 1 and run.table == "sharded":
        say("gradients: hashed table sharded by rows over %d ranks (%s): each batch's rows fetched from their "
            "owners and its gradient rows sent back (Alltoallv), each rank stepping its own rows; dense layers "
            "MPI_Allreduce" % (comm.size, run.table_why))
    elif comm.size > 1 and comm.transport_note:
        say("gradients: %s" % comm.transport_note + (
            "; parameters and optimizer state: one copy per node, each rank steps its part"
            if trainer.shared_params else "") + ("; table replicated (%s)" % run.table_why
                                                 if run.spec.n_sparse and not towers else ""))
    watchdog.disarm()
    say(describe_run(args, comm, run, towers))
    history = trainer.fit(train, valid, args.epochs, progress=not (args.no_progress or args.quiet))
    watchdog.stop()
    if args.timeline:
        trainer.write_timeline(args.timeline)
    summary = trainer.summary()
    trainer.release_()            # the returned model owns its arrays; shared-memory windows are freed
    params = trainer.gather_towers() if towers else trainer.final_params()
    kept = len(history)           # the epoch whose parameters are kept: the best one with --keep best
    if trainer.best is not None and trainer.keep_best:
        kept = trainer.best["epoch"]
        if trainer.best_params is not None:     # every rank, or rank 0 alone with a sharded table
            run.model.params[...] = trainer.best_params
            params = params if towers else run.model.params
    summary = comm.bcast_obj(summary)
    summary["kept_epoch"] = kept
    final = next((r.get("valid", {}) for r in history if r["epoch"] == kept), {})
    result = TrainResult(history, final, summary, run.model, args.model_out, run.spec, run.meta, comm.rank)
    if not rank0:
        return result
    write_results(args, comm, run, trainer, params, result, towers, say)
    if curve is not None:
        curve.finish(say)       # the curve file and the --plot PNG, rank 0 only
    return result


def check_options(args):
    """The option combinations no single option's parser can refuse. Returns the tower mode (or None)."""
    if args.batch_size and args.batch_per_rank:
        raise MpinnError("give --batch-size (global) or --batch-per-rank, not both", collective=True)
    if args.plot:
        from mpinn.report import check_plotting
        check_plotting()
    towers = args.tower_data if args.parallel == "tower" else None
    if towers and (args.checkpoint_dir or args.resume):
        raise MpinnError("--parallel tower does not write or resume checkpoints yet; leave out "
                         "--checkpoint-dir / --resume", collective=True)
    if (args.compress or args.average_every) and (towers or args.reduce != "allreduce"):
        raise MpinnError("--compress and --average-every need --reduce allreduce and --parallel data", collective=True)
    if args.average_every and (args.checkpoint_dir or args.resume):
        # between averages the ranks' parameters and optimizer states differ; a checkpoint holds
        # rank 0's only, so a resume could not be exact
        raise MpinnError("--average-every does not write or resume checkpoints yet; leave out "
                         "--checkpoint-dir / --resume", collective=True)
    if args.compress and args.average_every:
        raise MpinnError("--compress shrinks the gradient Allreduce, which --average-every replaces: "
                         "give one of them", collective=True)
    if args.input == "local" and not str(args.data or "").endswith(".mpinn"):
        raise MpinnError("--input local needs a packed file: python -m mpinn.prepare --data FILE ... --out FILE.mpinn",
                         collective=True)
    return towers


@dataclass
class Run:
    """What a training run is made of, once the data's shapes are known (the same on every rank)."""
    layout: object
    meta: dict
    loss: str
    spec: ModelSpec
    model: object
    optimizer: object
    base_lr: float
    lr: float
    lr_at: object           # global step -> learning rate, or None (constant)
    batch: int              # the global batch
    n_train: int
    table: str = "replicated"   # the hashed block: replicated or sharded (--table)
    table_why: str = ""


def build(args, comm, info, towers):
    """The model, its optimizer and the learning-rate schedule for the data's shapes (info)."""
    from mpinn.batch import Layout
    from mpinn.model import MLP
    from mpinn.defaults import model_shape, resolve
    from mpinn.optim import DEFAULT_LR, create_optimizer, lr_schedule
    from mpinn.schedule import with_decay
    layout = Layout(**info["layout"])
    meta = info["meta"]
    loss = default_loss(meta["task"]) if args.loss == "auto" else args.loss
    if meta["task"] == "multiclass" and loss == "squared":
        raise MpinnError("--loss squared needs a regression task", collective=True)
    if meta["task"] != "multiclass" and loss == "softmax":
        raise MpinnError("--loss softmax needs a multiclass task (task is %s)" % meta["task"], collective=True)
    spec = ModelSpec(layout.n_sparse, layout.n_dense, args.hidden, info["n_out"], args.activation, loss,
                     args.dtype, sparse_fan_in=info["fan_in"])
    model = MLP(spec, comm.backend)
    filled = resolve(args, model_shape(layout.n_sparse, meta["task"]), info["n_train"], DEFAULT_LR)
    if towers or not info["has_valid"]:     # nothing to pick the best epoch by: the last one, no stopping
        if args.early_stop and "early_stop" not in filled:
            raise MpinnError("--early-stop needs %s" % ("--parallel data" if towers else
                             "held-out rows (--valid FILE or --holdout > 0)"), collective=True)
        args.early_stop, args.keep = 0, "last"
    args.stop_metric = stop_metric(args.stop_metric, meta["task"])
    base_lr = args.lr
    batch = args.batch_per_rank * comm.size if args.batch_per_rank else args.batch_size
    lr_at, lr = lr_schedule(base_lr, batch, args.lr_base_batch or args.batch_per_rank, args.lr_scaling,
                            args.warmup_steps)
    total = args.epochs * -(-info["n_train"] // batch)
    lr_at = with_decay(lr_at, args.lr_decay, total, args.warmup_steps)
    opt = create_optimizer(args.optimizer, model.size, comm.backend.xp, lr, args.weight_decay, model.weight_slices,
                           args.momentum, table=model.table, hashed_update=args.hashed_update,
                           adagrad_rowwise=args.adagrad_rowwise, l1=args.l1, l2=args.l2, ftrl_beta=args.ftrl_beta)
    from mpinn.training.sharded import choose_table, own_rows
    table, why = choose_table(args.table, comm, spec, len(opt.element_state), towers, args.reduce,
                              args.compress, args.overlap, args.average_every, args.comm)
    # a sharded table: each rank writes only its own rows (the others' pages are never touched)
    model.init_(args.seed + (comm.rank if towers else 0),
                rows=own_rows(comm, spec.n_sparse) if table == "sharded" else None)
    varies = args.lr_scaling != "none" or args.warmup_steps or args.lr_decay != "none"
    return Run(layout, meta, loss, spec, model, opt, base_lr, lr, lr_at if varies else None, batch, info["n_train"],
               table, why)


def stop_metric(name, task):
    """The held-out metric that picks the best epoch: auto is logloss (rmse for regression)."""
    if name == "auto":
        return "rmse" if task == "regression" else "logloss"
    fits = {"rmse": ("regression",), "auc": ("binary",), "logloss": ("binary", "multiclass"),
            "accuracy": ("binary", "multiclass")}[name]
    if task not in fits:
        raise MpinnError("--stop-metric %s does not exist for a %s task" % (name, task), collective=True)
    return name


def make_trainer(args, comm, run, towers, watchdog):
    """The Trainer for a run, restored from --resume and writing checkpoints where asked. Returns
    (trainer, the learning-curve writer on rank 0 or None)."""
    from mpinn.report import Curve
    from mpinn.training import Faults, Trainer
    rank0 = comm.rank == 0
    curve = Curve(args.curve, args.plot) if rank0 and (args.curve or args.plot) else None
    target = (run.meta.get("transform") or {}).get("target")     # regression: metrics in the label's units
    trainer = Trainer(run.model, run.optimizer, comm, run.layout, run.batch, args.seed, verbose=not args.quiet,
                      watchdog=watchdog, max_bad_steps=args.max_bad_steps,
                      faults=Faults(os.environ.get("MPINN_FAULT", ""), comm.rank), grad_accum=args.grad_accum,
                      lr_at=run.lr_at, on_epoch=curve.add if curve else None, towers=towers,
                      tower_mix=args.tower_mix, prefetch=not args.no_prefetch, read_local=args.input == "local",
                      shuffle_block=args.shuffle_block,
                      average_every=args.average_every, timeline=bool(args.timeline), overlap=args.overlap,
                      early_stop=args.early_stop, keep_best=args.keep == "best", stop_metric=args.stop_metric,
                      target_scale=target["scale"] if target else 1.0, table=run.table)
    config = resume_config(args)
    if args.resume:
        def load_checkpoint_checked():
            from mpinn.checkpoint import load_checkpoint
            arrays, header = load_checkpoint(args.resume)
            check_resume(header, config, run.spec, run.meta, run.n_train, run.batch)
            return arrays, header
        arrays, header = comm.root_call(load_checkpoint_checked) or (None, None)
        trainer.restore(arrays, header)
        if rank0 and not args.quiet:
            print("resumed from %s: epoch %d, step %d of the epoch (%d steps done)" % (
                trainer.last_checkpoint, trainer.epoch, trainer.next_step, trainer.global_step), flush=True)
    ckpt_dir = args.checkpoint_dir or args.resume
    if ckpt_dir:
        trainer.enable_checkpoints(ckpt_dir, args.checkpoint_every, args.keep_checkpoints,
                                   {"config": config, "spec": run.spec.to_dict(), "meta": run.meta,
                                    "n_train": run.n_train})
    return trainer, curve


def describe_run(args, comm, run, towers):
    """The start-up line that says what is being trained, and how."""
    spec, lr, base_lr = run.spec, run.lr, run.base_lr
    return "model: %s -> %s (%s, %s head), %d parameters; %d ranks, %s, %s lr %g%s, global batch %d%s" % (
        "%d hashed + %d dense" % (spec.n_sparse, spec.n_dense), "-".join(map(str, spec.hidden + (spec.n_out,))),
        spec.activation, run.loss, run.model.size, comm.size,
        "--parallel tower (%s data, a replica per rank)" % towers if towers else "--reduce " + comm.name,
        args.optimizer, lr,
        " (%s-scaled from %g%s)" % (args.lr_scaling, base_lr, ", %d warm-up steps" % args.warmup_steps
                                    if args.warmup_steps else "") if lr != base_lr or args.warmup_steps else "",
        run.batch, " in %d micro-batches per rank" % args.grad_accum if args.grad_accum > 1 else "") + (
        "; %d epochs%s, lr decay %s%s" % (
            args.epochs, " at most (early stop after %d without a better held-out %s)" % (
                args.early_stop, args.stop_metric) if args.early_stop else "", args.lr_decay,
            ", keeping the best epoch" if args.keep == "best" else ""))


def write_results(args, comm, run, trainer, params, result, towers, say):
    """Rank 0, at the end: the model file, the closing lines, the metrics file."""
    from mpinn.checkpoint import save_model
    from mpinn.metrics import format_metrics
    history, summary, final = result.history, result.summary, result.metrics
    meta = dict(run.meta, train={"epochs": len(history), "max_epochs": args.epochs, "kept_epoch": summary["kept_epoch"],
                                 "keep": args.keep, "stop_metric": args.stop_metric, "batch_size": run.batch,
                                 "optimizer": args.optimizer, "lr": run.lr, "lr_decay": args.lr_decay,
                                 "ranks": comm.size, "reduce": comm.name, "seed": args.seed},
                valid_metrics=final, holdout=0.0 if args.valid else args.holdout)
    if towers:
        weights = trainer.tower_weights or [1.0 / comm.size] * comm.size
        meta["towers"] = {"count": comm.size, "data": towers, "mix": args.tower_mix, "weights": weights,
                          "seeds": [args.seed + r for r in range(comm.size)]}
        if final.get("towers"):
            say("towers: %s; mixture (%s, weights %s): %s" % (
                "; ".join(format_metrics(m) for m in final["towers"]), args.tower_mix,
                " ".join("%.3f" % w for w in weights), format_metrics(final)))
    save_model(args.model_out, params, run.spec, meta)
    ph = summary["phase_s_mean"]
    busy = sum(ph.values()) or 1.0
    parts = summary.get("comm_parts_s_mean") or {}      # a sharded table's exchanges
    say("done: %d samples in %.1f s, %.0f samples/s over %d ranks; time split (mean over ranks): "
        "data wait %.0f%% (%.2f ms/step), compute %.0f%%, communication %.0f%%%s, update %.0f%%" % (
            summary["samples"], summary["seconds"], summary["samples_per_s"], comm.size,
            100 * ph["data"] / busy, 1e3 * summary["data_wait_s_per_step"], 100 * ph["compute"] / busy,
            100 * ph["comm"] / busy, " (%s)" % ", ".join("%s %.0f%%" % (k, 100 * v / busy) for k, v in parts.items())
            if parts else "", 100 * ph["update"] / busy))
    if args.timeline:
        say("timeline written to %s" % args.timeline)
    kept = summary["kept_epoch"]
    say("model written to %s%s" % (args.model_out, "" if kept == len(history) and args.keep == "last" else
                                   ": the parameters of epoch %d (%s by held-out %s)%s" % (
                                       kept, "best" if args.keep == "best" else "last", args.stop_metric,
                                       ", " + format_metrics(final) if final else "")))
    if args.metrics_out:
        with open(args.metrics_out, "w") as f:
            json.dump({"history": history, "summary": summary, "valid": final}, f, indent=1, default=float)
