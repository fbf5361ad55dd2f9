"""Checkpoints hold the whole optimizer state whatever the rank count: state written by P ranks (each
holding its part of the node's one copy) is restored bitwise by Q ranks, and training continues as if
never interrupted. At np N: N-1 ranks -> N ranks, and N ranks -> 1 rank."""
import os
import shutil

import numpy as np
import pytest

from ranks import (COMM, OPTIMIZERS, agree, make_optimizer, make_trainer, restore_then_start, shared_dir, toy_data,
                   write_checkpoint)
from mpinn.core.batch import Batch, Layout
from mpinn.core.spec import ModelSpec
from mpinn.model.mlp import MLP

SPEC = ModelSpec(64, 3, (8,), 3, "tanh", "softmax", "float64", sparse_fan_in=2.5, wide=True)   # wide and deep, as trained by default
BATCH, FIRST, TOTAL = 12, 3, 6


def trainer_on(mpi_comm, optimizer):
    model = MLP(SPEC).init_(0)
    return make_trainer(model, make_optimizer(optimizer, model), Layout(64, 3, "float64", "int64"), BATCH,
                        mpi_comm=mpi_comm)


def steps(trainer, start, stop):
    Xs, Xd, y = toy_data()
    for s in range(start, stop):
        rows = np.arange(s * BATCH, (s + 1) * BATCH) % len(y)
        trainer.global_step = s
        trainer.step(Batch(Xs[rows], Xd[rows], y[rows]) if trainer.rank0 else None, BATCH)
    trainer.global_step = stop


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("how", ["grow", "shrink"])
def test_optimizer_state_survives_a_change_of_rank_count(optimizer, how):
    first = max(COMM.size - 1, 1) if how == "grow" else COMM.size
    second = COMM.size if how == "grow" else 1
    d = shared_dir("mpinn-ckpt-")
    # the uninterrupted run on `second` ranks
    ref = None
    sub = COMM.Split(0 if COMM.rank < second else 1, COMM.rank)
    if COMM.rank < second:
        t = trainer_on(sub, optimizer)
        t.start()
        steps(t, 0, TOTAL)
        ref = t.model.params.copy()
        t.release_()
    sub.Free()
    # FIRST steps on `first` ranks, a checkpoint
    sub = COMM.Split(0 if COMM.rank < first else 1, COMM.rank)
    if COMM.rank < first:
        t = trainer_on(sub, optimizer)
        t.start()
        steps(t, 0, FIRST)
        write_checkpoint(t, os.path.join(d, "a"))
        t.release_()
    sub.Free()
    # restored on `second` ranks: the state is the saved one, bit for bit; then the rest of the steps
    sub = COMM.Split(0 if COMM.rank < second else 1, COMM.rank)
    if COMM.rank < second:
        t = trainer_on(sub, optimizer)
        restore_then_start(t, d, optimizer)
        steps(t, FIRST, TOTAL)
        got = t.model.params.copy()
        everyone = sub.allgather(got)
        assert all(np.array_equal(p, everyone[0]) for p in everyone)
        assert np.max(np.abs(got - ref)) < 1e-10, np.max(np.abs(got - ref))
        t.release_()
    sub.Free()
    agree(True)
    if COMM.rank == 0:
        shutil.rmtree(d)


def test_the_node_holds_one_copy_of_the_optimizer_state():
    """With several ranks on a node, each state array is the node's shared window (held by node rank
    0; the others allocate nothing), not a private copy per rank."""
    t = trainer_on(COMM, "adam")
    t.start()
    steps(t, 0, 2)
    if COMM.size > 1:
        sh = t.comm.shared
        arrays = t.optimizer.arrays
        agree(t.shared_params and len(sh.state_wins) == len(arrays) == 3)       # m, v, t_row
        for win, arr in zip(sh.state_wins, arrays.values()):
            mem, _ = win.Shared_query(0)
            agree(np.frombuffer(mem, dtype=np.uint8).ctypes.data == arr.ctypes.data, "not the window")
            agree(len(win.Shared_query(COMM.rank)[0]) == (arr.nbytes if COMM.rank == 0 else 0))
    t.release_()
