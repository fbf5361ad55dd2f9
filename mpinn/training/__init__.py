"""Training: the loop and what it is made of.

    run        Run: one run, started one way (the plan, the parts built from it, hot rows, restore, start,
               fit, finish), for the API, the benchmark and the doctor (on mpinn.comm.topology.open_job's job)
    build      the plan's communicator and step, built together
    trainer    Trainer: the loop (fit), evaluation, the best epoch, summary; Hooks
    checkpoints  where checkpoints go, a run resumed from one, the stop a signal asks for
    steps      one strategy object per way of taking a step (reduce, overlap, shared, local SGD)
    step_base  what the strategies share (Step): gradient (micro-batches), verdict, the parameters' way in and out
    sharded    --table sharded: the hashed table split by rows over the ranks (ShardedStep)
    hot        --hot-rows: the rows every rank of a sharded table holds
    feed       the epoch's row order and the feed that reads, scatters and prefetches batches
    staging    the feed's stand-in on a GPU (pinned buffers, a copy stream)
    evaluate   held-out metrics, data parallel or towers
    towers     tower mode: fitting the mixture weights of the towers' predictions
    timeline   the phases of every step, the Chrome trace, the progress bar
    faults     MPINN_FAULT: fault injection for the failure-path tests
"""
from importlib import import_module

_LAZY = {"Faults": "mpinn.training.faults", "Hooks": "mpinn.training.trainer", "Trainer": "mpinn.training.trainer",
         "Run": "mpinn.training.run", "open_job": "mpinn.comm.topology"}


def __getattr__(name):
    """The names above, imported on first use: `mpinn.training.towers` (predict mixes towers with it) then
    loads without the trainer and its communicator (no MPI in a one-process predict)."""
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(name)
