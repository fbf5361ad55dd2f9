"""The non-finite guard: a NaN on one rank skips the step on every rank, exactly as if that batch
had never been seen; the optimizers' state is left untouched too."""
import numpy as np
import pytest

from ranks import COMM, OPTIMIZERS, agree, make_optimizer, make_trainer, toy_data
from mpinn.core.spec import ModelSpec
from mpinn.core.batch import Layout
from mpinn.core.batch import Batch
from mpinn.model.mlp import MLP
from mpinn.training import Faults, Hooks


def run(reduce_, optimizer, faults, skip=(), steps=6, batch=7, threshold=0.25):
    Xs, Xd, y = toy_data()
    spec = ModelSpec(64, 3, (8,), 3, "tanh", "softmax", "float64", sparse_fan_in=2.5)
    model = MLP(spec).init_(0)
    opt = make_optimizer(optimizer, model)
    trainer = make_trainer(model, opt, Layout(64, 3, "float64", "int64"), batch, reduce=reduce_,
                           sparse_threshold=threshold, hooks=Hooks(faults=Faults(faults, COMM.rank)))
    trainer.start()
    verdicts = []
    for s in range(steps):
        if s + 1 in skip:
            continue
        rows = np.arange(s * batch, (s + 1) * batch) % len(y)
        trainer.global_step = s   # the fault is keyed on the global step
        _, ok = trainer.step(Batch(Xs[rows], Xd[rows], y[rows]) if trainer.rank0 else None, len(rows))
        verdicts.append(ok)
    return model.params.copy(), verdicts


@pytest.mark.parametrize("reduce_,threshold", [("allreduce", 10.0), ("allreduce", 0.0), ("gather", 0.25)])
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_a_nan_on_one_rank_skips_the_step_everywhere(reduce_, threshold, optimizer):
    last = COMM.size - 1
    poisoned, verdicts = run(reduce_, optimizer, "nan:%d:3" % last, threshold=threshold)
    clean, _ = run(reduce_, optimizer, "", skip=(3,), threshold=threshold)
    agree(verdicts == [True, True, False, True, True, True], "verdicts %s" % verdicts)
    agree(np.isfinite(poisoned).all() and np.array_equal(poisoned, clean),
          "max diff %g" % np.nanmax(np.abs(poisoned - clean)))
    every = COMM.allgather(poisoned)          # and every rank holds the same parameters
    agree(all(np.array_equal(p, every[0]) for p in every))
