"""What a run says and writes: the start-up line of what is trained and how, and at the end the model file, the
closing lines and the metrics file (rank 0)."""
import json
import os
import tempfile
import time

from mpinn.files.checkpoint import save_model
from mpinn.core.errors import MpinnError
from mpinn.model.metrics import format_metrics
from mpinn.files.outputs import why_not_written, written_whole
from mpinn.settings import messages


def describe_run(run):
    """The start-up line that says what is being trained, and how."""
    cfg, comm, spec, schedule = run.cfg, run.comm, run.spec, run.schedule
    epochs = "%d epoch%s" % (cfg.epochs, "" if cfg.epochs == 1 else "s")
    return "model: %s -> %s (%s, %s head)%s, %d parameters; %d rank%s, %s, %s lr %g%s, global batch %d%s" % (
        "%d hashed + %d dense%s" % (spec.n_sparse, spec.n_dense, " + %d from periodic embeddings of %d numeric "
                                    "columns (sigma %g)" % (spec.periodic_width, spec.periodic["columns"],
                                                            spec.periodic["sigma"]) if spec.periodic else ""),
        "-".join(map(str, spec.hidden + (spec.n_out,))),
        spec.activation, cfg.loss, " + a linear part (--wide on)" if spec.has_wide else
        " (linear: no hidden layers)" if not spec.hidden else "", run.model.size, comm.size, "" if comm.size == 1 else "s",
        "--parallel tower (%s data, a replica per rank)" % cfg.towers if cfg.towers else "--reduce " + comm.name,
        cfg.optimizer, schedule.target,
        " (%s-scaled from %g%s)" % (cfg.lr_scaling, schedule.lr, ", %d warm-up steps" % cfg.warmup_steps
                                    if cfg.warmup_steps else "")
        if schedule.target != schedule.lr or cfg.warmup_steps else "",
        cfg.batch, " in %d micro-batches per rank" % cfg.grad_accum if cfg.grad_accum > 1 else "") + (
        "; %s%s, lr decay %s%s" % (
            epochs, " at most (early stop after %d without a better held-out %s)" % (
                cfg.early_stop, cfg.stop_metric) if cfg.early_stop else "", cfg.lr_decay,
            ", keeping the best epoch" if cfg.keep == "best" else "")) + (
        "; an ensemble of %d such models (--seed %d to %d, the same held-out rows), one after another, their "
        "predictions averaged" % (cfg.ensemble, cfg.seed, cfg.seed + cfg.ensemble - 1)
        if cfg.ensemble > 1 else "") + (
        "; the first trained again with periodic embeddings of the numeric columns, the better on its held-out rows "
        "going for every member (--numeric-embedding auto)" if cfg.numeric_embedding == "auto" else "") + (
        "; %s exists and will be replaced at the end" % cfg.model_out
        if cfg.model_out and os.path.exists(cfg.model_out) else "")


def write_results(run, params, result, say):
    """Rank 0, at the end: the model file, the closing lines, the metrics file."""
    cfg, comm, trainer = run.cfg, run.comm, run.trainer
    history, summary, final = result.history, result.summary, result.metrics
    meta = dict(result.meta, train={"epochs": len(history), "max_epochs": cfg.epochs, "kept_epoch": summary["kept_epoch"],
                                    "kept_step": summary.get("kept_step"),
                                    "keep": cfg.keep, "stop_metric": cfg.stop_metric, "batch_size": cfg.batch,
                                    "optimizer": cfg.optimizer, "lr": run.schedule.target,
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
    if meta.get("ensemble"):
        e = meta["ensemble"]
        meta["train"]["kept_epoch"] = e["kept_epochs"]
    replaced = save_model_or_say_where(cfg.model_out, params, run.spec, meta, trainer) if cfg.model_out else False
    say_model = say if cfg.model_out else (lambda line: None)      # the Python API writes a model file when asked
    ph = summary["phase_s_mean"]
    busy = sum(ph.values()) or 1.0
    parts = summary.get("comm_parts_s_mean") or {}      # a sharded table's exchanges
    say("done%s: %d samples in %.1f s, %.0f samples/s over %d rank%s; time split (mean over ranks): "
        "data wait %.0f%% (%.2f ms/step), compute %.0f%%, communication %.0f%%%s, update %.0f%%" % (
            " (the first of %d members)" % meta["ensemble"]["members"] if meta.get("ensemble") else "",
            summary["samples"], summary["seconds"], summary["samples_per_s"], comm.size, "" if comm.size == 1 else "s",
            100 * ph["data"] / busy, 1e3 * summary["data_wait_s_per_step"], 100 * ph["compute"] / busy,
            100 * ph["comm"] / busy, " (%s)" % ", ".join("%s %.0f%%" % (k, 100 * v / busy) for k, v in parts.items())
            if parts else "", 100 * ph["update"] / busy))
    peaks = summary.get("peak_rss_mib_per_rank")
    if peaks:
        say("peak memory (RSS) per rank: %s MiB" % ", ".join("%.0f" % m for m in peaks))
    if cfg.timeline:
        say("timeline written to %s" % cfg.timeline)
    kept, step = summary["kept_epoch"], summary.get("kept_step")
    if meta.get("ensemble"):
        e = meta["ensemble"]
        say_model("model written to %s%s: %d members (--seed %d to %d), their predictions averaged%s" % (
            cfg.model_out, " (replacing the file there)" if replaced else "", e["members"], e["seeds"][0],
            e["seeds"][-1], "" if not final else "; held-out, the averaged model: " + format_metrics(final)
            if e["held_out"] == "averaged" else "; held-out, member 1 (the averaged model's are not scored on a "
            "stream's or a GPU's held-out rows): " + format_metrics(final)))
    else:
        say_model("model written to %s%s%s" % (
            cfg.model_out, " (replacing the file there)" if replaced else "",
            "" if kept == len(history) and cfg.keep == "last" else ": the parameters %s (%s by held-out %s)%s" % (
                "at step %d of epoch %d" % (step, kept) if step else "of epoch %d" % kept,
                "best" if cfg.keep == "best" else "last", cfg.stop_metric,
                ", " + format_metrics(final) if final else "")))
    if cfg.metrics_out:
        with written_whole(cfg.metrics_out, "the metrics" + (" (the model was written to %s)" % cfg.model_out
                                                             if cfg.model_out else "")) as f:
            record = {"history": history, "summary": summary, "valid": final}
            if meta.get("ensemble"):        # the history and the summary are the first member's
                record["ensemble"] = meta["ensemble"]
            json.dump(record, f, indent=1, default=float)


def save_model_or_say_where(path, params, spec, meta, trainer):
    """The model file written (atomically); whether it replaced one. A write that fails (a full disk, a file-size
    limit) leaves the file there as it was, and the model goes to a fallback file in the temporary directory
    ($TMPDIR), or the error names the last checkpoint: one line either way, and the parameters are kept."""
    existed = os.path.exists(path)
    try:
        save_model(path, params, spec, meta)
        return existed
    except OSError as e:
        why = why_not_written(e)
    fallback = os.path.join(tempfile.gettempdir(), "mpinn-model-%s-%d.npz" % (time.strftime("%Y%m%d-%H%M%S"),
                                                                               os.getpid()))
    try:
        save_model(fallback, params, spec, meta)
    except OSError:
        fallback = None
    checkpoint = trainer.checkpoints.last if trainer.checkpoints is not None else None
    raise MpinnError(messages.model_not_written(path, why, existed, fallback, checkpoint), collective=True)
