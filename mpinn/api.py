"""The Python API: mpinn.api.train(...) trains exactly as python -m mpinn.train does (the CLI calls it).

    import mpinn.api as mp
    result = mp.train("clicks.csv", label="clicked", categorical="site,app,device", epochs=3)
    print(result.metrics["auc"])

Run a script that calls it under `mpirun -np N python -m mpi4py script.py`: every rank makes the
same call; `-m mpi4py` turns an unhandled exception on one rank into an abort of the whole job."""
import json
import os
import time
from dataclasses import dataclass

from mpinn.process import pin_threads

pin_threads()       # before numpy loads its BLAS

from mpinn.config import ModelSpec, MpinnError  # noqa: E402
from mpinn import settings  # noqa: E402


@dataclass
class TrainResult:
    """What a training run gives back, on every rank."""
    history: list          # one record per epoch: train_loss, seconds, skipped_steps, valid metrics
    metrics: dict          # the kept epoch's held-out metrics ({} without held-out rows)
    summary: dict          # samples/s, time split, steps, skipped steps
    model: object          # the trained mpinn.model.MLP (on every rank; tower mode: this rank's tower)
    model_path: str        # where the model file was written (by rank 0)
    spec: ModelSpec
    meta: dict             # task, classes, hashing contract, source columns
    rank: int              # this process's rank (print on rank 0 only)
    config: object = None  # the resolved mpinn.settings.RunConfig


def train(data=None, comm=None, **options):
    """Train on `data` (a .csv/.parquet/.npz/.mat/.mpinn path, an in-memory mpinn.data.Dataset, or
    None for the embedded click log) with the options of python -m mpinn.train as keywords
    (hidden=(64,), epochs=3, batch_size=1024, reduce="allreduce", model_out="m.npz", quiet=True...).
    Collective over `comm` (default MPI_COMM_WORLD). Raises MpinnError for bad input."""
    return run(settings.from_keywords(data, **options), comm)


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


def run(cfg, comm=None):
    """Train as `python -m mpinn.train` does, from a RunConfig (mpinn.settings.from_argv/from_keywords).
    Collective: every rank calls it. Returns a TrainResult on every rank.

    The options are checked against the rule table before anything else (no data file is opened until
    they pass), again once the device is known, and again when the data resolves the rest."""
    from mpinn.comm import create_communicator
    from mpinn.comm.guard import StopSignals, world_rank_size
    from mpinn.comm.node import unwired_srun

    t_start = time.perf_counter()
    settings.check(cfg)
    settings.check_requirements(cfg)
    unwired = unwired_srun(world_rank_size()[1], os.environ)
    if unwired:     # before anything is read or written: N lone copies would all write the same files
        raise MpinnError(unwired, collective=True)
    comm = create_communicator("tower" if cfg.towers else cfg.reduce, comm, sparse_threshold=cfg.sparse_threshold,
                               compress=cfg.compress, device=cfg.device, transport=cfg.comm)
    from mpinn.outputs import check_outputs
    comm.root_call(lambda: (check_outputs(cfg), own_checkpoint_dir(cfg)))   # before anything is read
    stop = StopSignals().install()      # SIGTERM / SIGUSR1: a checkpoint and a clean stop at a step boundary
    try:
        return _run(cfg, comm, stop, t_start)
    finally:
        stop.uninstall()


def _run(cfg, comm, stop, t_start):
    """run(), once the options and the outputs have passed their checks and the signals are caught."""
    from mpinn.comm.guard import NoWatchdog, Watchdog
    cfg = settings.resolve_device(cfg, comm)
    rank0 = comm.rank == 0
    watchdog = Watchdog(cfg.step_timeout) if cfg.step_timeout > 0 else NoWatchdog()
    if cfg.start_timeout > 0:
        watchdog.arm("start-up (reading the data, building the model)", cfg.start_timeout)
    say = (lambda msg: print(msg, flush=True)) if rank0 and not cfg.quiet else (lambda msg: None)
    say("device: %s" % comm.device_note)
    if comm.backend.device is None:
        from mpinn.optim import fused
        say("kernels: %s" % fused.status())       # the optimizers' compiled update, or why the numpy passes run
    from mpinn.data.inputs import load_everywhere
    train_set, valid, info = load_everywhere(cfg, comm, say)
    cfg = settings.resolve(cfg, info, comm)
    from mpinn.report import Curve
    from mpinn.training import Faults, Hooks, wire
    curve = Curve(cfg.curve, cfg.plot) if rank0 and (cfg.curve or cfg.plot) else None
    hooks = Hooks(watchdog, Faults(os.environ.get("MPINN_FAULT", ""), comm.rank), curve.add if curve else None, stop,
                  curve.add if curve else None)
    wired = wire(cfg, comm, info, hooks)
    trainer = wired.trainer
    trainer.t_origin = t_start          # the records' "elapsed": since the run began, reading included
    hot = trainer.use_hot_rows_(train_set)  # before a checkpoint is restored: the hot rows' state has owners
    setup_checkpoints(cfg, comm, wired, info)
    trainer.start()
    if comm.size > 1 and cfg.table == "sharded":
        say("gradients: hashed table sharded by rows over %d ranks (%s): each batch's rows fetched from their "
            "owners and its gradient rows sent back (Alltoallv), each rank stepping its own rows; dense layers "
            "MPI_Allreduce" % (comm.size, cfg.table_why))
        say(hot)
    elif comm.size > 1 and comm.transport_note:
        say("gradients: %s" % comm.transport_note + (
            "; parameters and optimizer state: one copy per node, each rank steps its part"
            if trainer.shared_params else "") + ("; table replicated (%s)" % cfg.table_why
                                                 if wired.spec.n_sparse and not cfg.towers else ""))
    watchdog.disarm()
    say(describe_run(cfg, comm, wired))
    say(settings.describe(cfg))
    history = trainer.fit(train_set, valid, cfg.epochs, progress=not (cfg.no_progress or cfg.quiet))
    watchdog.stop()
    if cfg.timeline:
        trainer.write_timeline(cfg.timeline)
    summary = trainer.summary()
    trainer.release_()            # the returned model owns its arrays; shared-memory windows are freed
    if cfg.towers:
        params = trainer.gather_towers()
        if trainer.keep_best and trainer.best_params is not None:
            wired.model.params[...] = trainer.best_params
    else:
        params = trainer.final_params()     # the kept epoch's: the best one with --keep best
    kept = trainer.best["epoch"] if trainer.best is not None and trainer.keep_best else len(history)
    summary = comm.bcast_obj(summary)
    summary["kept_epoch"] = kept
    final = next((r.get("valid", {}) for r in history if r["epoch"] == kept), {})
    result = TrainResult(history, final, summary, wired.model, cfg.model_out, wired.spec, info["meta"], comm.rank,
                         cfg)
    if not rank0:
        return result
    write_results(cfg, comm, wired, params, result, say)
    if curve is not None:
        curve.finish(say)       # the curve file and the --plot PNG, rank 0 only
    return result


# ---------------------------------------------------------------- checkpoints and --resume
def resume_config(cfg):
    """The options a checkpoint records and a resume must match: all but those marked resume=True in
    the option table (mpinn.settings.table), as JSON values."""
    from mpinn.settings.table import OPTIONS
    values = cfg.options()
    return json.loads(json.dumps({f.name: values[f.name] for f in OPTIONS if not f.metadata["resume"]}))


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


def run_identity(config, spec, meta, n_train):
    """What a checkpoint must match to continue a run, as 12 hex digits: its files carry it in their name, so
    that a directory two runs share keeps each run's checkpoints apart."""
    import hashlib
    key = json.dumps({"config": config, "spec": spec.to_dict(), "hashing": meta.get("hashing"),
                      "transform": meta.get("transform"), "n_train": n_train}, sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def own_checkpoint_dir(cfg):
    """A fresh run (no --resume) starts in a --checkpoint-dir that holds no checkpoint, or with
    --overwrite-checkpoints, which removes them now: another run's files are never mistaken for this one's."""
    from mpinn.checkpoint import list_checkpoints, remove_stale_temporaries
    if not cfg.checkpoint_dir or cfg.resume:
        return
    found = list_checkpoints(cfg.checkpoint_dir)
    if found and not cfg.overwrite_checkpoints:
        raise MpinnError("--checkpoint-dir %s holds %d checkpoint(s) of an earlier run (the newest %s): continue "
                         "it with --resume %s, use another directory, or give --overwrite-checkpoints to delete "
                         "them" % (cfg.checkpoint_dir, len(found), os.path.basename(found[-1][1]),
                                   cfg.checkpoint_dir), collective=True)
    for _, path in found:
        os.unlink(path)
    remove_stale_temporaries(cfg.checkpoint_dir)


def setup_checkpoints(cfg, comm, wired, info):
    """Restore the trainer from --resume, and have it write checkpoints where asked."""
    trainer, config = wired.trainer, resume_config(cfg)
    run = run_identity(config, wired.spec, info["meta"], info["n_train"])
    if cfg.resume:
        def load_checkpoint_checked():
            from mpinn.checkpoint import load_checkpoint
            arrays, header = load_checkpoint(cfg.resume, run)
            check_resume(header, config, wired.spec, info["meta"], info["n_train"], cfg.batch)
            return arrays, header
        arrays, header = comm.root_call(load_checkpoint_checked) or (None, None)
        trainer.restore(arrays, header)
        if comm.rank == 0 and not cfg.quiet:
            print("resumed from %s: epoch %d, step %d of the epoch (%d steps done)" % (
                trainer.last_checkpoint, trainer.epoch, trainer.next_step, trainer.global_step), flush=True)
    ckpt_dir = cfg.checkpoint_dir or cfg.resume
    if ckpt_dir:
        from mpinn.checkpoint import clear_stopped
        comm.root_call(lambda: clear_stopped(ckpt_dir))     # this run goes on: no longer "stopped"
        trainer.enable_checkpoints(ckpt_dir, cfg.checkpoint_every, cfg.keep_checkpoints,
                                   {"config": config, "spec": wired.spec.to_dict(), "meta": info["meta"],
                                    "n_train": info["n_train"], "run": run})


# ---------------------------------------------------------------- what is said and written
def describe_run(cfg, comm, wired):
    """The start-up line that says what is being trained, and how."""
    spec, schedule = wired.spec, wired.schedule
    epochs = "%d epoch%s" % (cfg.epochs, "" if cfg.epochs == 1 else "s")
    return "model: %s -> %s (%s, %s head)%s, %d parameters; %d rank%s, %s, %s lr %g%s, global batch %d%s" % (
        "%d hashed + %d dense" % (spec.n_sparse, spec.n_dense), "-".join(map(str, spec.hidden + (spec.n_out,))),
        spec.activation, cfg.loss, " + a linear part (--wide on)" if spec.has_wide else
        " (linear: no hidden layers)" if not spec.hidden else "", wired.model.size, comm.size, "" if comm.size == 1 else "s",
        "--parallel tower (%s data, a replica per rank)" % cfg.towers if cfg.towers else "--reduce " + comm.name,
        cfg.optimizer, schedule.target,
        " (%s-scaled from %g%s)" % (cfg.lr_scaling, schedule.lr, ", %d warm-up steps" % cfg.warmup_steps
                                    if cfg.warmup_steps else "")
        if schedule.target != schedule.lr or cfg.warmup_steps else "",
        cfg.batch, " in %d micro-batches per rank" % cfg.grad_accum if cfg.grad_accum > 1 else "") + (
        "; %s%s, lr decay %s%s" % (
            epochs, " at most (early stop after %d without a better held-out %s)" % (
                cfg.early_stop, cfg.stop_metric) if cfg.early_stop else "", cfg.lr_decay,
            ", keeping the best epoch" if cfg.keep == "best" else ""))


def write_results(cfg, comm, wired, params, result, say):
    """Rank 0, at the end: the model file, the closing lines, the metrics file."""
    from mpinn.checkpoint import save_model
    from mpinn.metrics import format_metrics
    trainer = wired.trainer
    history, summary, final = result.history, result.summary, result.metrics
    meta = dict(result.meta, train={"epochs": len(history), "max_epochs": cfg.epochs, "kept_epoch": summary["kept_epoch"],
                                    "keep": cfg.keep, "stop_metric": cfg.stop_metric, "batch_size": cfg.batch,
                                    "optimizer": cfg.optimizer, "lr": wired.schedule.target,
                                    "lr_decay": cfg.lr_decay, "ranks": comm.size, "reduce": comm.name,
                                    "seed": cfg.seed},
                config=cfg.options(), config_origin=dict(cfg.origin),
                valid_metrics=final, holdout=0.0 if cfg.valid else cfg.holdout)
    if cfg.towers:
        weights = trainer.tower_weights or [1.0 / comm.size] * comm.size
        meta["towers"] = {"count": comm.size, "data": cfg.towers, "mix": cfg.tower_mix, "weights": weights,
                          "seeds": [cfg.seed + r for r in range(comm.size)]}
        if final.get("towers"):
            say("towers: %s; mixture (%s, weights %s): %s" % (
                "; ".join(format_metrics(m) for m in final["towers"]), cfg.tower_mix,
                " ".join("%.3f" % w for w in weights), format_metrics(final)))
    save_model(cfg.model_out, params, wired.spec, meta)
    ph = summary["phase_s_mean"]
    busy = sum(ph.values()) or 1.0
    parts = summary.get("comm_parts_s_mean") or {}      # a sharded table's exchanges
    say("done: %d samples in %.1f s, %.0f samples/s over %d rank%s; time split (mean over ranks): "
        "data wait %.0f%% (%.2f ms/step), compute %.0f%%, communication %.0f%%%s, update %.0f%%" % (
            summary["samples"], summary["seconds"], summary["samples_per_s"], comm.size, "" if comm.size == 1 else "s",
            100 * ph["data"] / busy, 1e3 * summary["data_wait_s_per_step"], 100 * ph["compute"] / busy,
            100 * ph["comm"] / busy, " (%s)" % ", ".join("%s %.0f%%" % (k, 100 * v / busy) for k, v in parts.items())
            if parts else "", 100 * ph["update"] / busy))
    if cfg.timeline:
        say("timeline written to %s" % cfg.timeline)
    kept = summary["kept_epoch"]
    say("model written to %s%s" % (cfg.model_out, "" if kept == len(history) and cfg.keep == "last" else
                                   ": the parameters of epoch %d (%s by held-out %s)%s" % (
                                       kept, "best" if cfg.keep == "best" else "last", cfg.stop_metric,
                                       ", " + format_metrics(final) if final else "")))
    if cfg.metrics_out:
        with open(cfg.metrics_out, "w") as f:
            json.dump({"history": history, "summary": summary, "valid": final}, f, indent=1, default=float)
