"""One training run, started one way by every entry point (the API and so the command line, the benchmark, the
doctor): on the job probed once (mpinn.comm.topology.open_job), the plan made (mpinn.settings.plan), the model, optimizer and schedule,
the communicator and the step built from the plan, the hot rows picked, the parameters given or a checkpoint
restored, the trainer started (Run.start); then the loop (Run.fit) and its end (Run.finish)."""
import math
import numpy as np

from mpinn.core.batch import Layout
from mpinn.device.backend import get_backend
from mpinn.model.mlp import MLP
from mpinn.optim import create_optimizer
from mpinn.optim.schedule import make_schedule
from mpinn.settings.plan import make_plan
from mpinn.settings.job_rules import check_job
from mpinn.settings.shapes import model_spec
from mpinn.training import checkpoints
from mpinn.training.build import build_step, communicator
from mpinn.training.feed import Reading
from mpinn.training.hot import count_ids, pick_hot
from mpinn.training.sharded import own_rows
from mpinn.training.trainer import Hooks, Trainer


def make_optimizer(cfg, model):
    """The optimizer of a configuration for a model (its state is allocated where the plan's step keeps it)."""
    return create_optimizer(cfg.optimizer, model.size, model.xp, cfg.weight_decay, model.weight_slices,
                            table=model.table, hashed_update=cfg.hashed_update, momentum=cfg.momentum,
                            adagrad_rowwise=cfg.adagrad_rowwise, l1=cfg.l1, l2=cfg.l2, ftrl_beta=cfg.ftrl_beta)


class Run:
    """A run on every rank of `job` from a resolved configuration (mpinn.settings.resolve) and the data's shapes
    (info: mpinn.data.DataInfo, the same everywhere). Made: the plan, its communicator, the model (initialised
    from cfg.seed: each rank its own rows of a sharded table, a tower from seed + rank), the optimizer and the
    learning-rate schedule. start() builds the step and the trainer. Collective throughout."""

    def __init__(self, cfg, job, info, hooks=None, backend=None):
        self.job, self.info, self.hooks = job, info, hooks or Hooks()
        self.spec = model_spec(cfg, info)
        check_job(cfg, job.topology, self.spec)     # the plan's first check, before the model takes its memory
        self.layout = Layout(**vars(info.layout)) if not isinstance(info.layout, Layout) else info.layout
        if backend is None:
            backend = get_backend("cupy" if cfg.device == "gpu" else "numpy")     # bound by the probe
        self.model = MLP(self.spec, backend)
        self.optimizer = make_optimizer(cfg, self.model)           # its state is allocated by the step
        self.plan = make_plan(cfg, job.topology, self.spec, self.optimizer)
        job.comm.check_signature({"plan": self.plan.summary()})    # made everywhere, from the same inputs
        self.cfg = cfg = self.plan.cfg
        self.comm = communicator(self.plan, job.comm.comm, backend, dup=False)    # the job's duplicate
        job.runs.append(self)       # released by finish(), or by the job's close() after an error
        steps = cfg.epochs * math.ceil(info.n_train / cfg.batch)
        self.schedule = make_schedule(cfg.lr, cfg.batch, cfg.lr_base_batch or cfg.batch_per_rank, cfg.lr_scaling,
                                      cfg.warmup_steps, cfg.lr_decay, steps)
        # a sharded table: each rank writes only its own rows (the others' pages are never touched)
        self.model.init_(cfg.seed + (self.comm.rank if cfg.towers else 0),
                         rows=own_rows(self.comm.size, self.comm.rank, self.spec.n_sparse)
                         if self.plan.table == "sharded" else None)
        self.trainer = None
        self.hot_line = None

    def lines(self):
        """The start-up lines that say how the job was planned (after start: the sharded table's hot rows too)."""
        return self.plan.lines(self.spec.n_sparse) + ([self.hot_line] if self.hot_line else [])

    def pick_hot(self, train=None, counts=None):
        """A sharded table's hot rows (--hot-rows, when the plan asks for them): counted by rank 0 over the first
        training rows of `train` (or taken from `counts`: (per-id counts, rows counted)). Collective."""
        plan, comm = self.plan, self.comm
        if not plan.needs_counts:
            return np.empty(0, np.int64), 0

        def pick():
            got, n = counts if counts is not None else count_ids(train, self.spec.n_sparse)
            return pick_hot(plan.hot_rows, got, n, self.cfg.batch / comm.size, self.model.table[1],
                            self.model.params.itemsize), n
        return comm.bcast_obj(comm.root_call(pick))

    def start(self, train=None, counts=None, params=False, say=lambda msg: None, checkpoint_home=None):
        """Build the step and the trainer, then start: the hot rows picked (from `train` or `counts` on rank 0),
        `params` (rank 0's whole flat parameters, None elsewhere; False: none given) loaded, or the checkpoint of
        --resume restored, and every rank given rank 0's parameters (checkpoint_home: see checkpoints.start).
        Returns the Trainer."""
        plan, cfg = self.plan, self.cfg
        hot, counted = self.pick_hot(train, counts)
        if plan.table == "sharded":
            self.hot_line = plan.hot_line(len(hot), counted)
        step = build_step(plan, self.comm, self.model, self.optimizer, self.hooks.faults, hot=hot)
        self.trainer = trainer = Trainer(cfg, self.model, self.optimizer, self.schedule, step, self.layout, self.hooks,
                                         Reading(*self.info.reading))
        if params is not False:     # given (on rank 0; None elsewhere)
            trainer.load_params_(params)
        checkpoints.start(cfg, trainer, self.spec, self.info, say, checkpoint_home)
        trainer.start()
        return trainer

    def release_(self):
        """Collective: what the run made for its exchanges (shared memory, a node's communicators) is freed, the
        model and the optimizer keeping their arrays; by finish(), or by the job's close() after an error."""
        if self.trainer is not None:
            if self.trainer.posted is not None:     # after an error: a batch posted ahead arrives first
                self.trainer.posted.drop_()
            self.trainer.release_()
        else:
            self.comm.release_(self.model)
        if self in self.job.runs:
            self.job.runs.remove(self)

    def finish(self):
        """Collective, after training: the summary (every rank), the timeline written (--timeline), the shared
        memory released, and the parameters kept (the best epoch's with --keep best; tower mode: every tower's,
        stacked) whole on rank 0, None elsewhere."""
        trainer, cfg = self.trainer, self.cfg
        with trainer.watchdog.guard("the run's end (the summary; the kept parameters to rank 0)"):
            if cfg.timeline:
                trainer.write_timeline(cfg.timeline)
            summary = trainer.summary()
            self.release_()               # the returned model owns its arrays; shared-memory windows are freed
            if cfg.towers:
                params = trainer.gather_towers()    # the last epoch's (the rules refuse --keep best with towers)
            else:
                params = trainer.final_params()     # the kept epoch's: the best one with --keep best
            summary = self.comm.bcast_obj(summary)
        summary["kept_epoch"] = trainer.kept_epoch
        best = trainer.best if trainer.keep_best and trainer.best is not None else {}
        if best.get("at") == "step":    # a point inside the epoch: its step and metrics
            summary["kept_step"], summary["kept_valid"] = best["step"], best["valid"]
        return params, summary
