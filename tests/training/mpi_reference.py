"""Whole runs, started as training starts them (mpinn.settings -> mpinn.training.Run -> Trainer.fit), equal the
plain reference of tests/reference.py: every optimizer with warm-up, cosine decay and weight decay, with
the optimizer state replicated on every rank, held once per node in shared memory, or sharded with the
table over the ranks. Runs at np = 1, 2 and 3 (tests/test_mpi.py)."""
import numpy as np
import pytest

from ranks import COMM, OPTIMIZERS, agree, toy_data
from reference import Reference, lr_at
from mpinn.core.batch import Layout
from mpinn.data import Dataset
from mpinn.data.info import DataInfo
from mpinn.model.mlp import MLP
from mpinn.settings import fixed
from mpinn.training import Run, open_job
from mpinn.training.run import model_spec
from mpinn.training.feed import epoch_order

BATCH, EPOCHS, WARMUP, DECAY = 12, 6, 3, 0.01
LR = {"sgd": 0.2, "momentum": 0.05, "adam": 0.02, "adagrad": 0.1, "ftrl": 0.5}
REF_KW = {"adam-dense": {"lazy": False}, "adagrad-rowwise": {"rowwise": True}, "ftrl": {"l1": 1e-3, "l2": 1e-2}}
OPT_KW = {"adam-dense": {"hashed_update": "dense"}, "adagrad-rowwise": {"adagrad_rowwise": True},
          "ftrl": {"l1": 1e-3, "l2": 1e-2}}
# how the state is held: replicated (MPI_Allreduce), once per node in shared memory, sharded with the table
MODES = {"replicated": {"table": "replicated", "comm": "mpi"}, "shared": {"table": "replicated", "comm": "shm"},
         "sharded": {"table": "sharded", "comm": "mpi"}}


def config(variant, mode, decay="cosine"):
    name = variant.split("-")[0]
    return fixed(BATCH, optimizer=name, lr=LR[name], weight_decay=DECAY, warmup_steps=WARMUP, lr_decay=decay,
                 epochs=EPOCHS, hidden=(6,), activation="tanh", loss="softmax", dtype="float64", seed=4,
                 **OPT_KW.get(variant, {}), **MODES[mode])


def info_of(data):
    return DataInfo({"task": "multiclass"}, Layout(64, 3, "float64", "int64"), 3, data.sparse_fan_in, len(data), False)


def dataset():
    Xs, Xd, y = toy_data()
    return Dataset(Xs, Xd, y, {"task": "multiclass", "classes": [0, 1, 2]})


def run_mpinn(cfg):
    data = dataset()
    job = open_job()
    trainer = Run(cfg, job, info_of(data)).start()
    trainer.fit(data if job.rank == 0 else None, None, cfg.epochs, progress=False)
    params = trainer.final_params()
    params = None if params is None else np.array(params)
    trainer.release_()
    job.close()
    return params


def run_reference(cfg, variant):
    """The same batches in the same order (the trainer's seeded epoch order), the gradient of the
    reference's own parameters, the reference update at the reference rate."""
    data = dataset()
    model = MLP(model_spec(cfg, info_of(data))).init_(cfg.seed)
    weights = np.zeros(model.size, bool)
    for a, b in model.weight_slices:
        weights[a:b] = True
    name = variant.split("-")[0]
    ref = Reference(name, model.size, weights, *model.table, weight_decay=DECAY, **REF_KW.get(variant, {}))
    steps = -(-len(data) // BATCH)
    step = 0
    for epoch in range(1, EPOCHS + 1):
        order = epoch_order(len(data), cfg.seed, epoch)
        for s in range(steps):
            rows = order[s * BATCH:(s + 1) * BATCH]
            batch = data.take(rows, np.float64)
            model.loss_grad_(batch, 1.0 / len(rows))
            rate = lr_at(step, cfg.lr, warmup=WARMUP, decay=cfg.lr_decay, total=EPOCHS * steps)
            ref.step(model.params, model.grads.copy(), np.unique(batch.Xs.indices), rate)
            step += 1
    return model.params.copy()


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("variant", OPTIMIZERS)
def test_a_wired_run_equals_the_reference(variant, mode):
    cfg = config(variant, mode)
    got = run_mpinn(cfg)
    if COMM.rank == 0:
        want = run_reference(cfg, variant)
        err = np.max(np.abs(got - want)) / np.max(np.abs(want))
    agree(COMM.rank != 0 or err < 1e-12, "%s %s: max difference %.3g of the scale" % (
        variant, mode, err if COMM.rank == 0 else 0))


@pytest.mark.parametrize("variant", ["adam", "ftrl"])
def test_the_schedule_changes_the_run(variant):
    """--lr-decay cosine trains to other parameters than --lr-decay none (adam used to ignore it)."""
    cosine = run_mpinn(config(variant, "replicated"))
    constant = run_mpinn(config(variant, "replicated", decay="none"))
    agree(COMM.rank != 0 or np.max(np.abs(cosine - constant)) > 1e-4)
