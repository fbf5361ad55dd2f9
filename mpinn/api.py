"""The Python API: mpinn.api.train(...) trains exactly as python -m mpinn.train does (the CLI calls it).

    import mpinn.api as mp
    result = mp.train("clicks.csv", label="clicked", categorical="site,app,device", epochs=3)
    print(result.metrics["auc"])

Run a script that calls it under `mpirun -np N python -m mpi4py script.py`: every rank makes the
same call; `-m mpi4py` turns an unhandled exception on one rank into an abort of the whole job. Only rank 0
prints (nothing with quiet=True), and train() writes a model file only when model_out names one."""
import errno
import os
import time
from dataclasses import dataclass, replace

from mpinn.host.launch import pin_threads

pin_threads()       # before numpy loads its BLAS

from mpinn.core.errors import MpinnError  # noqa: E402
from mpinn.core.spec import ModelSpec  # noqa: E402
from mpinn import settings  # noqa: E402
from mpinn.data.formats.dense import dense_xy  # noqa: E402
from mpinn.data.inputs import load_everywhere  # noqa: E402
from mpinn.data.progress import reading  # noqa: E402
from mpinn.host.memory import memory_limits  # noqa: E402
from mpinn.inference.onnx_client import OnnxPredictor  # noqa: E402,F401 (mpinn.api.OnnxPredictor)
from mpinn.inference.onnx_export import export as onnx_export  # noqa: E402
from mpinn.inference.predictor import Predictor  # noqa: E402
from mpinn.model.metrics import format_metrics  # noqa: E402
from mpinn.optim import fused  # noqa: E402
from mpinn.settings.input_plan import job_input_plan  # noqa: E402
from mpinn.settings.messages import out_of_memory  # noqa: E402


@dataclass
class TrainResult:
    """What a training run gives back, on every rank."""
    history: list          # one record per epoch: train_loss, seconds, skipped_steps, valid metrics
    metrics: dict          # the kept epoch's held-out metrics ({} without held-out rows); --ensemble: the averaged
    #                        model's (meta["ensemble"]["held_out"] says "averaged", or "member 1" for a stream's)
    summary: dict          # samples/s, time split, steps, skipped steps
    model: object          # the trained mpinn.model.mlp.MLP (on every rank; tower mode: this rank's tower; --ensemble:
    #                        the first member; history and summary are the first member's too)
    model_path: str        # where the model file was written (by rank 0); None: none was asked for
    spec: ModelSpec
    meta: dict             # task, classes, hashing contract, source columns
    rank: int              # this process's rank (print on rank 0 only)
    config: object = None  # the resolved mpinn.settings.RunConfig
    params: object = None  # the kept parameters, whole, as a host array: on rank 0 (on every rank with
    #                        params_everywhere); tower mode and --ensemble: every tower's or member's, stacked


def train(data=None, comm=None, **options):
    """Train on `data` (a .csv/.parquet/.npz/.mat/.mpinn path, an in-memory mpinn.data.Dataset, or
    None for the embedded click log) with the options of python -m mpinn.train as keywords
    (hidden=(64,), epochs=3, batch_size=1024, reduce="allreduce", model_out="m.npz", quiet=True...), or
    config="run.toml" (a file of them, the keywords overriding it). Collective over `comm` (default
    MPI_COMM_WORLD). Rank 0 alone prints; a model file is written only when model_out names one (the
    command line writes mpinn-model.npz by default, the API nothing). Raises MpinnError for bad input."""
    return run(settings.from_keywords(data, **options), comm)


def predict(model_path, data=None):
    """(predictions, metrics) of a model file on a data path, in-memory data (arrays()), or None for a model trained on
    the embedded data (its held-out rows). One process, no MPI. The model file is read at every call: a service that
    scores again and again loads it once, Predictor(model_path), and calls its predict()."""
    return Predictor(model_path).scored(data)


def export(model_path, out_path, **options):
    """Write model file `model_path` as an ONNX model at `out_path` (python -m mpinn.export, docs/serving.md); returns
    what was written (path, bytes, external data file, opset). OnnxPredictor(out_path) scores it in ONNX Runtime."""
    return onnx_export(model_path, out_path, **options)


def arrays(X, y, task="auto"):
    """An in-memory data set: features X (n, d), labels y (classes of any type, or numbers), checked as a .npz's."""
    return dense_xy(X, y, "arrays", task, None, True)


def run(cfg, comm=None, params_everywhere=False):
    """Train as `python -m mpinn.train` does, from a RunConfig (mpinn.settings.from_argv/from_keywords).
    Collective: every rank calls it. Returns a TrainResult on every rank (with the kept parameters on every
    rank, broadcast from rank 0, when params_everywhere; on rank 0 alone otherwise).

    The ranks' options are compared first (one small collective: mpinn.settings.agree), then checked against
    the rule table (no data file is opened until they pass), again once the job is probed (its nodes, memory,
    GPUs), and again when the data and the plan (mpinn.settings.plan) resolve the rest. At several ranks, an
    error only this rank raised (a bug, a MpinnError the ranks did not agree on) ends the whole job with one line,
    as the command line does: the other ranks would wait for this one; errors every rank raised together are
    raised to the caller on every rank."""
    # start-up: mpi4py starts MPI at its import; import mpinn.api (train --help, predict()) needs none
    from mpinn.comm.guard import START_KNOB, NoWatchdog, StopSignals, Watchdog, end_alone, world_rank_size
    from mpinn.comm.node import unwired_srun  # start-up: as mpinn.comm.guard
    from mpinn.comm.topology import open_job, start_gather, start_size  # start-up: as mpinn.comm.guard

    t_start = time.perf_counter()
    watchdog = Watchdog(cfg.step_timeout) if cfg.step_timeout > 0 else NoWatchdog()
    if cfg.start_timeout > 0:       # from the ranks' agreement on: every collective of the run is under a deadline
        watchdog.arm("start-up (the job's probe, reading the data, building the model)", cfg.start_timeout,
                     START_KNOB)
    try:
        settings.agree(cfg, start_gather(comm))     # first: a rank given other options would fail or wait alone
        settings.check(cfg)
        settings.check_requirements(cfg)
        unwired = unwired_srun(world_rank_size()[1], os.environ)
        if unwired:     # before anything is read or written: N lone copies would all write the same files
            raise MpinnError(unwired, collective=True)
        job = open_job(comm, cfg.device, nccl=cfg.comm == "nccl")      # the one probe of the job
        try:
            cfg = settings.resolve_device(cfg, job.topology)
            claims = job.comm.root_call(lambda: settings.claim_outputs(cfg))      # none read; held by rank 0 to the end
            try:
                stop = StopSignals().install()  # SIGTERM / SIGINT / SIGUSR1: a checkpoint and a clean stop at a step
                try:                            # boundary
                    return _run(cfg, job, stop, watchdog, t_start, params_everywhere)
                finally:
                    stop.uninstall()
            finally:
                if claims is not None:
                    claims.release()
        except BaseException as e:
            _close_after(job, e)
            raise
    except BaseException as e:
        error = _in_words(e)
        end_alone(error, start_size(comm))      # an error on this rank alone ends the job: the others wait for it
        if error is e:
            raise
        raise error from None
    finally:        # a caller that catches this run's error goes on: no deadline of the run may end it later
        watchdog.stop()


def _in_words(e):
    """Running out of memory (numpy's MemoryError, an mmap's ENOMEM) as one line with the limits in force; any other
    exception as it is."""
    if not (isinstance(e, MemoryError) or isinstance(e, OSError) and e.errno == errno.ENOMEM):
        return e
    return MpinnError(out_of_memory(str(e) if isinstance(e, MemoryError) else e.strerror, memory_limits()))


def _close_after(job, error):
    """A run that raised frees what it made where every rank raised together (one process, or an error the ranks
    agreed on): a caller that goes on (a search over settings, some of them diverging) would otherwise run out of
    MPI's communicators after a few hundred failed runs (7 left behind by each at np 2) and keep their shared
    memory."""
    if job.size == 1 or getattr(error, "collective", False):
        try:
            job.close()
        except Exception:  # noqa: BLE001 - the run's own error is the one to raise
            pass


def _run(cfg, job, stop, watchdog, t_start, params_everywhere):
    """run(), once the options, the job and the outputs have passed their checks and the signals are caught (the
    watchdog armed with the start-up's deadline)."""
    from mpinn.comm.guard import START_KNOB, STEP_KNOB  # start-up: as in run()
    rank0 = job.rank == 0
    say = (lambda msg: print(msg, flush=True)) if rank0 and not cfg.quiet else (lambda msg: None)
    say("device: %s" % settings.device_line(cfg, job.topology))
    if cfg.device == "cpu":
        say("kernels: %s" % fused.status())       # the optimizers' compiled update, or why the numpy passes run
    with reading("the data", enabled=rank0 and not (cfg.quiet or cfg.no_progress)):
        plan = job_input_plan(cfg, job)     # how the rows are read, decided once
        for line in plan.lines():
            say(line)
        resplit = [] if cfg.ensemble != 1 else None      # an ensemble's members split the rows read once
        train_set, valid, info = load_everywhere(plan, job.comm, say, resplit)
    given, cfg = cfg, settings.resolve(cfg, info, job.size)
    if cfg.ensemble == 1 and resplit:
        resplit.clear()     # one model after all (--ensemble left to the data): the rows read are let go before
    #                         the imports below (a 200k-row log: rank 0's peak 395 MiB when they came after, 383 here)
    # training's modules load once the data is read: their imports (scipy.stats among them) would add tens of MiB
    # to rank 0's peak while it reads (a file three times a 250 MiB limit ran out of memory: tests/data)
    from mpinn.files.report import Curve  # memory: as said above
    from mpinn.training import Faults, Hooks, Run  # memory: as said above
    from mpinn.training.ensemble import kept_metrics  # memory: as said above
    from mpinn.training.results import describe_run, write_results  # memory: as said above
    curve = Curve(cfg.curve, cfg.plot, cfg.log_dir, cfg.ensemble) if rank0 and (cfg.curve or cfg.plot or cfg.log_dir) \
        else None
    hooks = Hooks(watchdog, Faults(os.environ.get("MPINN_FAULT", ""), job.rank), curve.add if curve else None, stop,
                  curve.add if curve else None)
    run = Run(cfg, job, info, hooks)
    trainer = run.start(train=train_set, say=say)
    trainer.t_origin = t_start          # the records' "elapsed": since the run began, reading included
    for line in run.lines():
        say(line)
    watchdog.disarm()
    say(describe_run(run))
    say(settings.describe(run.cfg))
    if curve is not None:
        curve.begin(trainer.samples, time.perf_counter() - t_start, trainer.eval_seconds, trainer.history,
                    trainer.global_step)
    history = trainer.fit(train_set, valid, cfg.epochs, progress=not (cfg.no_progress or cfg.quiet))
    params, summary = run.finish()
    final = kept_metrics(history, summary)
    if params is not None:
        params = run.model.backend.asnumpy(params)
    if cfg.ensemble > 1:        # members 2..K, each on every rank (the curve records the first alone)
        from mpinn.training.ensemble import Member, more_members, periodic_trial  # memory: as above
        first = Member(run, history, params, summary, final, time.perf_counter() - t_start)
        quiet_hooks, progress, tried = replace(hooks, on_epoch=None, on_eval=None), not (cfg.no_progress or
                                                                                         cfg.quiet), None
        if cfg.numeric_embedding == "auto":     # the first member again with periodic embeddings; the better goes on
            first, chosen, tried = periodic_trial(given, first, job, info, quiet_hooks, say, progress, resplit)
            given = replace(given, numeric_embedding=chosen)
            run, history, params, summary, final = (first.run, first.history, first.params, first.summary,
                                                    first.metrics)
        params, info.meta["ensemble"] = more_members(given, cfg.ensemble, job, info, params, summary, final,
                                                     first.seconds, quiet_hooks, say, progress, resplit)
        if tried:
            info.meta["ensemble"]["numeric_embedding"] = tried
        with watchdog.guard("the ensemble's held-out metrics"):
            final, info.meta["ensemble"]["held_out"] = _ensemble_held_out(cfg, job, run, info, params, valid, final,
                                                                          say)
        if curve is not None and info.meta["ensemble"]["held_out"] == "averaged":
            curve.add_ensemble(final, trainer.global_step)
    if params_everywhere:
        with watchdog.guard("the kept parameters sent to every rank"):
            params = job.comm.bcast_array(params, what="the kept parameters")
    result = TrainResult(history, final, summary, run.model, cfg.model_out, run.spec, info.meta, job.rank, run.cfg,
                         params)

    def write():        # the curve file, the event file and the --plot PNG too: rank 0 only
        write_results(run, params, result, say)
        if curve is not None:
            curve.finish(say, summary)
    # the others wait asleep while rank 0 writes (root_call), and share its error (a model that could not be
    # written); as long as start-up may take (a model as large as the data's hashed rows, a slow file system)
    with watchdog.guard("rank 0 writing the model", cfg.start_timeout or None, START_KNOB if cfg.start_timeout
                        else STEP_KNOB):
        job.comm.root_call(write)
    job.close()
    return result


def _ensemble_held_out(cfg, job, run, info, params, valid, first, say):
    """(An ensemble's held-out metrics, whose they are): its averaged predictions' on the held-out rows (every
    member's), "averaged", where they are scored (mpinn.training.ensemble.scores_averaged), else the first member's
    (`first`), "member 1"."""
    from mpinn.training.ensemble import held_out_metrics, scores_averaged  # memory: as in _run
    if not (scores_averaged(cfg, info.streamed) and job.comm.bcast_obj(valid is not None if job.rank == 0 else None)):
        return first, "member 1"
    out = held_out_metrics(job, run.spec, run.layout, params, valid, cfg.target_scale)
    say("ensemble: the %d members' averaged predictions on the held-out rows (the same rows for each; the model "
        "written): %s" % (cfg.ensemble, format_metrics(out)))
    return out, "averaged"

