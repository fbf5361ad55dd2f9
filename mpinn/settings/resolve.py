"""The second step of a configuration: what the options left to the data (the task and head, the model shape's
defaults, the automatic batch), decided once and returned as a new, resolved RunConfig. What the job decides is
the plan's (mpinn.settings.plan). Nothing changes a configuration after it is made."""
import math
from dataclasses import replace
from types import MappingProxyType

from mpinn.core.errors import MpinnError
from mpinn.optim import REGISTRY
from mpinn.settings.parse import from_keywords
from mpinn.settings.rules import check, check_data
from mpinn.settings.shapes import (LOG_POINTS, LOG_ROWS, LOSS_OF_TASK, METRIC_OF_TASK, SHAPES, SMALL_TABLE_MEMBERS,
                                   SMALL_TABLE_PARAMS, SMALL_TABLE_VALUES, auto_batch, embedding_trial, model_shape,
                                   model_spec)
from mpinn.settings.table import DATA, DEFAULT

class _Decisions:
    """New values and where they came from, applied to a config in one replace()."""

    def __init__(self, cfg):
        self.cfg, self.values, self.origin = cfg, {}, dict(cfg.origin)

    def __call__(self, name, value, how=DATA):
        self.values[name] = value
        self.origin[name] = how

    def get(self, name):
        return self.values.get(name, getattr(self.cfg, name))

    def config(self, **extra):
        return replace(self.cfg, **self.values, **extra, origin=MappingProxyType(self.origin))


def resolve(cfg, info, ranks):
    """The resolved RunConfig for the data's shapes (info: mpinn.data.DataInfo, the same on every rank) on a job of
    `ranks` ranks. What the job decides (the device, the table, how gradients travel) is the plan's
    (mpinn.settings.plan)."""
    if info.layout.n_sparse + info.layout.n_dense <= 0:     # every rank reads the same: one line, from rank 0
        raise MpinnError("the data leaves no input column to learn from: only the label, or every other column left "
                         "out (the start-up's 'columns chosen' line says why); name them with --categorical and "
                         "--numeric", collective=True)
    d = _Decisions(cfg)
    task, n_sparse = info.task, info.n_sparse
    if cfg.task == "auto":
        d("task", task)
    if cfg.loss == "auto":
        d("loss", LOSS_OF_TASK[task])
    shape = model_shape(n_sparse, task)
    defaults = SHAPES[shape]
    if cfg.optimizer is None:
        d("optimizer", defaults["optimizer"])
        if cfg.lr is None:      # the shape's rate goes with the shape's optimizer, not with one named
            d("lr", defaults["lr"])
    elif cfg.lr is None:
        d("lr", REGISTRY[cfg.optimizer].lr, DEFAULT)
    if cfg.batch_size is None and not cfg.batch_per_rank:
        d("batch_size", auto_batch(info.n_train))
    if cfg.wide == "auto":
        d("wide", "on" if n_sparse and cfg.hidden else "off")
    if cfg.early_stop is None and cfg.where("epochs") == "given":
        d("early_stop", 0)          # --epochs N given: N epochs, unless --early-stop is given too
    if n_sparse and info.n_train >= LOG_ROWS and cfg.epochs is None and cfg.parallel != "tower":
        d("epochs", 1)              # a log: one pass (see shapes.LOG_ROWS), checked inside it
        if cfg.early_stop is None:
            d("early_stop", 0)
        if info.has_valid and cfg.where("eval_every") != "given":
            batch = cfg.batch_per_rank * ranks if cfg.batch_per_rank else d.get("batch_size")
            d("eval_every", max(1, math.ceil(math.ceil(info.n_train / batch) / LOG_POINTS)))
    for key in ("epochs", "early_stop"):
        if d.get(key) is None:
            d(key, defaults[key])
    if cfg.ensemble is None:        # a small table: the average of several seeds' models (see shapes.SMALL_TABLE_VALUES)
        params = model_spec(d.config(), info).n_params     # the model the run will build
        small = (info.n_train < LOG_ROWS and info.n_train * info.layout.n_dense <= SMALL_TABLE_VALUES
                 and params <= SMALL_TABLE_PARAMS and not info.streamed)
        d("ensemble", SMALL_TABLE_MEMBERS if small and cfg.parallel == "data" else 1)
    if cfg.numeric_embedding == "auto" and not embedding_trial(d.config(), info):
        d("numeric_embedding", "off")      # else "auto" stays: the ensemble tries it (mpinn.training.ensemble)
    if cfg.parallel == "tower" or not info.has_valid:    # nothing to pick the best epoch by
        if cfg.where("early_stop") != "given":
            d("early_stop", 0)
        if cfg.where("keep") != "given":        # given, the rules refuse it (keep-best-held-out)
            d("keep", "last")
    if d.get("lr_decay") is None:       # plateau counts epochs by the held-out metric: without it, none
        counted = info.has_valid and cfg.parallel != "tower"
        d("lr_decay", "none" if defaults["lr_decay"] == "plateau" and not counted else defaults["lr_decay"])
    if cfg.stop_metric == "auto":
        d("stop_metric", METRIC_OF_TASK[task])
    target = ((info.meta.get("transform") or {}).get("target") or {})
    batch = cfg.batch_per_rank * ranks if cfg.batch_per_rank else d.get("batch_size")
    out = d.config(batch=int(batch), model_shape=shape, target_scale=float(target.get("scale", 1.0)),
                   stage="resolved")
    check(out)
    check_data(out, {"n_sparse": n_sparse, "has_valid": info.has_valid})
    return out


def fixed(batch, **options):
    """A resolved RunConfig without data, for code that builds its own model and feeds its own batches
    (tests, scripts): the options as keywords (checked by the rule table); what the data would decide is
    given here: the global batch; the table replicated unless asked; no early stop, and the last epoch
    kept, unless asked."""
    cfg = from_keywords(None, **options)
    check(cfg)
    d = _Decisions(cfg)
    if cfg.early_stop is None:
        d("early_stop", 0)
    if cfg.where("keep") != "given":
        d("keep", "last")
    if cfg.table == "auto" and cfg.where("table") != "given":
        d("table", "replicated")
    if cfg.stop_metric == "auto":
        d("stop_metric", "logloss")
    if cfg.ensemble is None:
        d("ensemble", 1)
    if cfg.numeric_embedding == "auto":
        d("numeric_embedding", "off")
    return d.config(batch=int(batch), stage="resolved")
