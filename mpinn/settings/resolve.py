"""The second step of a configuration: what the options left to the job and the data (the device, the
task and head, the model shape's defaults, the automatic batch, the table mode), decided once and
returned as a new, resolved RunConfig. Nothing changes a configuration after it is made."""
from dataclasses import replace
from types import MappingProxyType

import numpy as np

from mpinn.optim import REGISTRY
from mpinn.settings.parse import from_keywords
from mpinn.settings.rules import check, check_data
from mpinn.settings.shapes import LOSS_OF_TASK, METRIC_OF_TASK, SHAPES, auto_batch, model_shape
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


def resolve_device(cfg, comm):
    """--device auto decided by the communicator that was made (cpu or gpu), and the rules checked again."""
    if cfg.device != "auto":
        return cfg
    d = _Decisions(cfg)
    d("device", "gpu" if comm.backend.device is not None else "cpu")
    out = d.config()
    check(out)
    return out


def resolve(cfg, info, comm):
    """The resolved RunConfig for the data's shapes (info: meta, layout, n_train, has_valid, ...; the
    same on every rank) on this job (comm: its size, nodes and memory). Collective (the table mode)."""
    d = _Decisions(cfg)
    task, n_sparse = info["meta"]["task"], info["layout"]["n_sparse"]
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
        d("batch_size", auto_batch(info["n_train"]))
    if cfg.wide == "auto":
        d("wide", "on" if n_sparse and cfg.hidden else "off")
    if cfg.early_stop is None and cfg.where("epochs") == "given":
        d("early_stop", 0)          # --epochs N given: N epochs, unless --early-stop is given too
    for key in ("epochs", "lr_decay", "early_stop"):
        if d.get(key) is None:
            d(key, defaults[key])
    if cfg.parallel == "tower" or not info["has_valid"]:    # nothing to pick the best epoch by
        if cfg.where("early_stop") != "given":
            d("early_stop", 0)
        d("keep", "last")
    if cfg.stop_metric == "auto":
        d("stop_metric", METRIC_OF_TASK[task])
    target = ((info["meta"].get("transform") or {}).get("target") or {})
    batch = cfg.batch_per_rank * comm.size if cfg.batch_per_rank else d.get("batch_size")
    out = d.config(batch=int(batch), model_shape=shape, target_scale=float(target.get("scale", 1.0)),
                   stage="resolved")
    check(out)
    check_data(out, {"n_sparse": n_sparse, "has_valid": info["has_valid"]})
    table, why = choose_table(out, comm, n_sparse, info)
    if table != out.table or why:
        d = _Decisions(out)
        if table != out.table:
            d("table", table)
        out = d.config(table_why=why)
        check(out)          # the rules on the table chosen (a sharded table's options on a replicated one)
    return out


def choose_table(cfg, comm, n_sparse, info):
    """("replicated" or "sharded", why) for --table (collective: every rank reaches the same choice).
    auto shards a hashed table when the job spans several nodes (a replicated table's exchange gathers
    every rank's gradient rows on every rank, traffic and update work growing with the ranks:
    scripts/cluster_model.py) or when the node's replicas of the table and its optimizer state would
    take more than half of the memory a node has available."""
    if cfg.table != "auto":
        return cfg.table, "asked for"
    others = [flag for flag, on in (("--parallel tower", cfg.parallel == "tower"),
                                    ("--reduce gather", cfg.reduce != "allreduce"), ("--compress", cfg.compress),
                                    ("--overlap", cfg.overlap), ("--average-every", cfg.average_every),
                                    ("--comm shm", cfg.comm == "shm"), ("--device gpu", cfg.device == "gpu")) if on]
    if not n_sparse or comm.size == 1 or others:
        return "replicated", ("one rank" if comm.size == 1 else "no hashed inputs" if not n_sparse
                              else "auto, with %s" % others[0])
    nodes, per_node = comm.node_shape()
    if nodes > 1:
        return "sharded", "auto: the job spans %d nodes" % nodes
    from mpinn.process import mem_available
    from importlib import import_module
    module, cls = REGISTRY[cfg.optimizer].where.split(":")
    state_arrays = len(getattr(import_module(module), cls).element_state)
    width = (cfg.hidden[0] if cfg.hidden else 0) + (info["n_out"] if cfg.wide == "on" or not cfg.hidden else 0)
    table_bytes = n_sparse * width * np.dtype(cfg.dtype).itemsize * (1 + state_arrays)
    room = comm.allreduce_min_obj(mem_available() or 1 << 62)
    if per_node * table_bytes > room // 2:
        return "sharded", "auto: %d replicas of the table (%.0f MiB each) would take over half of the node's " \
                          "%.0f MiB available" % (per_node, table_bytes / 2**20, room / 2**20)
    return "replicated", "auto: one node, with room for the replicas"


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
    return d.config(batch=int(batch), stage="resolved")
