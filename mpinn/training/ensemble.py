"""--ensemble K: a seed ensemble. Member k (0..K-1) is the run --seed S+k would be with the rows --seed S reads and
holds out: its own initialisation and batch order, and every member the same held-out rows, so that the averaged
model (the one written) has held-out metrics of its own, reported wherever one figure is shown. The data is read
as --seed S reads it (the embedded click log's rows are drawn with the seed; a stream's held-out draw and window
shuffle stay those of S): data held in memory is read and split once (mpinn.data.inputs.load_everywhere's
resplit), a stream is opened again. The members train one after another, each on every rank; the model
file holds their kept parameters stacked, as tower mode's replicas, and predict averages their predictions
(mpinn.training.towers.mix, equal weights). With checkpoints, member k (k >= 1) writes its own into member-(k+1)
below the run's directory (member_checkpoints), so that a resume of the run takes up each member where it stopped.

The first member is the run api._run makes; more_members trains the rest."""
import os
import time
from dataclasses import dataclass, replace
from types import MappingProxyType

import numpy as np

from mpinn import settings
from mpinn.comm.guard import START_KNOB
from mpinn.core.errors import MpinnError
from mpinn.data.info import DataInfo
from mpinn.data.inputs import load_everywhere
from mpinn.files.checkpoint import TRIAL_DIR, list_checkpoints, member_dir
from mpinn.model.metrics import better, format_metrics
from mpinn.model.mlp import MLP
from mpinn.settings import messages
from mpinn.settings.input_plan import job_input_plan
from mpinn.settings.table import DATA
from mpinn.training.evaluate import evaluate
from mpinn.training.run import Run
from mpinn.training.towers import mix


def kept_metrics(history, summary):
    """The held-out metrics of the kept point (an --eval-every point inside an epoch, or an epoch's end)."""
    return summary.get("kept_valid") or next((r.get("valid", {}) for r in history
                                              if r["epoch"] == summary["kept_epoch"]), {})


def _line(k, count, seed, summary, metrics, seconds):
    return "ensemble: member %d of %d (--seed %d): %s kept%s (%.1f s)" % (
        k + 1, count, seed, "step %d of epoch %d" % (summary["kept_step"], summary["kept_epoch"])
        if summary.get("kept_step") else "epoch %d" % summary["kept_epoch"],
        ", held-out " + format_metrics(metrics) if metrics else "", seconds)


def member_data(given, job, resplit, reading=("rank0", 1)):
    """(train, valid, info) of a member: the rows read once, split as --seed S split them (resplit: what
    load_everywhere appended on this rank), or, for a stream, the data opened again. Collective."""
    if not job.comm.bcast_obj(bool(resplit) if job.rank == 0 else None):
        return load_everywhere(job_input_plan(given, job), job.comm, lambda msg: None)
    train, valid = resplit[0]() if resplit else (None, None)
    info = job.comm.bcast_obj(DataInfo.of(train, valid, given.dtype, reading) if job.rank == 0 else None)
    return train, valid, info


def scores_averaged(cfg, streamed):
    """Are the members' averaged predictions scored on their (common) held-out rows (held_out_metrics)? Where those
    rows are held in memory on the CPU; a stream's or a GPU run's ensemble reports member 1's."""
    return cfg.device == "cpu" and not streamed


def held_out_metrics(job, spec, layout, stacked, valid, target_scale):
    """The held-out metrics of the members' averaged predictions (stacked: their parameters, on rank 0; valid: the
    held-out rows, on rank 0), scored as one model's are (mpinn.training.evaluate). Collective."""
    members = job.comm.bcast_array(stacked, what="the ensemble's parameters")
    model = MLP(spec)

    def predict(local):
        preds = []
        for p in members:
            model.params[...] = p
            preds.append(model.predict(local))
        return mix(preds)
    out = evaluate(model, job.comm, layout, valid, predict=predict)
    if "rmse" in out:
        out["rmse"] *= target_scale     # in the label's units, as the trainer's
    return out


def member_checkpoints(cfg, given, k, comm):
    """(member k's configuration, the directory a resume names) with checkpoints: member k writes into member-(k+1)
    below the run's directory (the first member writes there; k None: the first member's periodic trial, into
    trial-periodic), and a resume of the run resumes the members that had begun (a finished one ends at once, its
    kept parameters restored) and starts the others afresh."""
    home = given.checkpoint_dir or given.resume
    if not home:
        return cfg, None
    place = member_dir(home, k) if k is not None else os.path.join(home, TRIAL_DIR)
    begun = bool(given.resume) and comm.bcast_obj(bool(list_checkpoints(place)) if comm.rank == 0 else None)
    return replace(cfg, checkpoint_dir=place, resume=place if begun else None), home


@dataclass
class Member:
    """One trained member: its Run (its model, spec and trainer), history, kept parameters (host, rank 0),
    summary, kept held-out metrics and seconds."""
    run: object
    history: list
    params: object
    summary: dict
    metrics: dict
    seconds: float


def train_member(given, k, seed, job, info, hooks, say, progress, resplit, **options):
    """Train the member of `seed` (k: its index, None for the periodic trial) on its split of the data, with
    `options` replaced in the configuration as given. Collective."""
    t = time.perf_counter()
    if given.start_timeout > 0:
        hooks.watchdog.arm("start-up of ensemble member %s" % (k + 1 if k is not None else "1's trial"),
                           given.start_timeout, START_KNOB)
    cfg, home = member_checkpoints(replace(given, seed=seed, ensemble=1, **options), given, k, job.comm)
    train, valid, mine = member_data(given, job, resplit, info.reading)
    if mine.meta != info.meta:      # the columns, transform and contract are fitted before the split
        raise MpinnError(messages.ensemble_member_differs(k + 1 if k is not None else 1), collective=True)
    cfg = settings.resolve(cfg, mine, job.size)
    run = Run(cfg, job, mine, hooks)
    trainer = run.start(train=train, say=say, checkpoint_home=home)
    hooks.watchdog.disarm()
    history = trainer.fit(train, valid, cfg.epochs, progress=progress)
    p, s = run.finish()
    return Member(run, history, run.model.backend.asnumpy(p) if p is not None else None, s, kept_metrics(history, s),
                  time.perf_counter() - t)


def periodic_trial(given, first, job, info, hooks, say, progress, resplit):
    """--numeric-embedding auto (mpinn.settings.shapes.embedding_trial): the first member (`first`, a Member trained
    without periodic embeddings) trained again with them, the same seed and held-out rows; returns (the better of
    the two by the held-out --stop-metric, the choice for every member, the record the model file keeps).
    Collective."""
    metric = first.run.cfg.stop_metric
    trial = train_member(given, None, given.seed, job, info, hooks, say, progress, resplit,
                         numeric_embedding="periodic")
    off, on = first.metrics.get(metric), trial.metrics.get(metric)
    chosen = "periodic" if on is not None and off is not None and better(metric, on, off) else "off"
    spec = trial.run.spec.periodic
    say("numeric embedding: periodic (sigma %g, %d columns) on member 1's held-out rows: %s %s against %s without; "
        "%s for every member (--numeric-embedding auto)" % (
            spec["sigma"], spec["columns"], metric, _value(on), _value(off),
            "kept" if chosen == "periodic" else "left out"))
    record = {"tried": "periodic", "metric": metric, "with": on, "without": off, "chosen": chosen}
    if chosen == "periodic":    # the run's configuration (its ensemble, its checkpoint directory), the choice made
        trial.run.cfg = replace(first.run.cfg, numeric_embedding=chosen,
                                origin=MappingProxyType(dict(first.run.cfg.origin, numeric_embedding=DATA)))
    return (trial if chosen == "periodic" else first), chosen, record


def _value(v):
    return "%.4f" % v if v is not None else "none"


def more_members(given, count, job, info, params, summary, metrics, seconds, hooks, say, progress, resplit):
    """Members 2..count of `given` (the configuration as given, before resolve: each member resolves its own, on
    the same data), after the first (its kept `params` on rank 0, its `summary`, held-out `metrics` and
    `seconds`; resplit: see member_data). Collective. Returns (every member's parameters stacked, (K, n), on rank 0
    (None elsewhere); the record the model file's meta keeps)."""
    say(_line(0, count, given.seed, summary, metrics, seconds))
    stacked = [params]
    members = [{"seed": given.seed, "kept_epoch": summary["kept_epoch"], "valid": metrics}]
    for k in range(1, count):
        m = train_member(given, k, given.seed + k, job, info, hooks, say, progress, resplit)
        stacked.append(m.params)
        members.append({"seed": given.seed + k, "kept_epoch": m.summary["kept_epoch"], "valid": m.metrics})
        say(_line(k, count, given.seed + k, m.summary, m.metrics, m.seconds))
    record = {"members": count, "seeds": [m["seed"] for m in members],
              "kept_epochs": [m["kept_epoch"] for m in members], "valid": [m["valid"] for m in members]}
    return (np.stack(stacked) if job.rank == 0 else None), record
