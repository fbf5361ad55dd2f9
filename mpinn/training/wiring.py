"""One function wires a run from its resolved configuration: the model, the optimizer, the learning-rate
schedule and the Trainer. The Python API (and so the command line), the benchmark and the doctor all
build their runs here."""
import math
from dataclasses import dataclass

from mpinn.batch import Layout
from mpinn.config import ModelSpec
from mpinn.model import MLP
from mpinn.optim import create_optimizer
from mpinn.optim.schedule import make_schedule
from mpinn.training.sharded import own_rows
from mpinn.training.trainer import Trainer


@dataclass
class Run:
    """What a training run is made of (the same on every rank)."""
    cfg: object             # the resolved RunConfig
    spec: ModelSpec
    layout: Layout
    model: MLP
    optimizer: object
    schedule: object        # global step -> learning rate (mpinn.optim.schedule.Schedule)
    trainer: Trainer


def model_spec(cfg, info):
    """The model of a resolved configuration for the data's shapes (info: layout, n_out, fan_in)."""
    lay = info["layout"]
    return ModelSpec(lay["n_sparse"], lay["n_dense"], cfg.hidden, info["n_out"], cfg.activation, cfg.loss, cfg.dtype,
                     sparse_fan_in=info["fan_in"], wide=cfg.wide == "on")


def wire(cfg, comm, info, hooks=None):
    """The Run of a resolved configuration on communicator comm, for the data's shapes (info: layout,
    n_out, fan_in, n_train). Collective (the trainer's strategy may share memory between ranks). The
    parameters are initialised from cfg.seed (each rank its own rows of a sharded table; a tower from
    seed + rank)."""
    spec = model_spec(cfg, info)
    model = MLP(spec, comm.backend)
    opt = create_optimizer(cfg.optimizer, model.size, comm.backend.xp, cfg.weight_decay, model.weight_slices,
                           table=model.table, hashed_update=cfg.hashed_update, momentum=cfg.momentum,
                           adagrad_rowwise=cfg.adagrad_rowwise, l1=cfg.l1, l2=cfg.l2, ftrl_beta=cfg.ftrl_beta)
    steps = cfg.epochs * math.ceil(info["n_train"] / cfg.batch)
    schedule = make_schedule(cfg.lr, cfg.batch, cfg.lr_base_batch or cfg.batch_per_rank, cfg.lr_scaling,
                             cfg.warmup_steps, cfg.lr_decay, steps)
    # a sharded table: each rank writes only its own rows (the others' pages are never touched)
    model.init_(cfg.seed + (comm.rank if cfg.towers else 0),
                rows=own_rows(comm, spec.n_sparse) if cfg.table == "sharded" else None)
    trainer = Trainer(cfg, model, opt, schedule, comm, Layout(**info["layout"]), hooks)
    return Run(cfg, spec, trainer.layout, model, opt, schedule, trainer)
