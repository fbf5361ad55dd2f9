"""Training: the loop and what it is made of.

    trainer    Trainer: start, fit (the loop), checkpoints, summary
    steps      one strategy object per way of taking a step (reduce, overlap, shared, local SGD)
    step_base  what the strategies share (Step): gradient, verdict, the parameters' way in and out
    sharded    --table sharded: the hashed table split by rows over the ranks (ShardedStep, choose_table)
    feed       the epoch's row order and the feed that reads, scatters and prefetches batches
    staging    the feed's stand-in on a GPU (pinned buffers, a copy stream)
    evaluate   held-out metrics, data parallel or towers
    timeline   the phases of every step, the Chrome trace, the progress bar
    faults     MPINN_FAULT: fault injection for the failure-path tests
"""
from mpinn.training.faults import Faults  # noqa: F401
from mpinn.training.trainer import Trainer  # noqa: F401
