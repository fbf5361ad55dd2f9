"""A plan's communicator and step, built together (mpinn.settings.plan decided them): the communicator the plan
names, the model's buffers where the plan keeps them, the optimizer's state allocated where the step keeps it.
Nothing here decides, and no part is changed after it is built. A new way of taking a step: a branch of the plan
(choose_step) and one line here."""
from mpinn.comm import create_communicator
from mpinn.device.backend import get_backend
from mpinn.training.faults import Faults
from mpinn.training.graph_step import GraphStep
from mpinn.training.sharded import ShardedStep
from mpinn.training.stale import StaleShardedStep
from mpinn.training.steps import LocalSGDStep, OverlapStep, ReduceStep, SharedStep
from mpinn.training.timeline import Timeline


def communicator(plan, comm=None, backend=None, dup=True):
    """The plan's communicator over a duplicate of comm (an mpi4py communicator; default MPI_COMM_WORLD; dup=False:
    over comm itself, a job's own duplicate); backend: the array backend its buffers live on (default: the plan's
    device's, bound by the probe)."""
    if backend is None:
        backend = get_backend("cupy" if plan.device == "gpu" else "numpy")
    return create_communicator(plan.reduce, comm, plan.transport, plan.sparse_threshold, plan.cfg.compress,
                               plan.topology, backend, dup)


def build_step(plan, comm, model, optimizer, faults=None, timeline=None, hot=()):
    """The plan's step over communicator comm (made by communicator(plan)), for model and optimizer (made, its
    state not yet allocated); faults: the test hooks (MPINN_FAULT); timeline: where its phases go (default: kept
    for --timeline, its phase boundaries taken on the model's device); hot: a sharded table's hot rows
    (training.hot.pick_hot). Collective."""
    cfg = plan.cfg
    timeline = timeline or Timeline(keep=bool(cfg.timeline), backend=model.backend)
    kw = dict(faults=faults or Faults(), timeline=timeline, grad_accum=cfg.grad_accum, towers=cfg.towers)
    if plan.step == "sharded" and cfg.stale_rows:
        return StaleShardedStep(model, optimizer.allocate_(dtype=model.dtype), comm, plan.topology, plan.exchange,
                                plan.exchange_why, hot, wire=cfg.wire_rows, progress=plan.stale_progress,
                                depth=cfg.stale_rows, **kw)
    if plan.step == "sharded":
        return ShardedStep(model, optimizer.allocate_(dtype=model.dtype), comm, plan.topology, plan.exchange,
                           plan.exchange_why, hot, wire=cfg.wire_rows, **kw)
    comm.adopt_(model)          # e.g. the gradients in a slot of the node's shared-memory window
    if plan.step == "local-sgd":
        return LocalSGDStep(model, optimizer.allocate_(dtype=model.dtype), comm, average_every=cfg.average_every,
                            **kw)
    if plan.step == "overlap":
        return OverlapStep(model, optimizer.allocate_(dtype=model.dtype), comm, **kw)
    if plan.step == "graph" and not kw["faults"].rules:   # the test hooks poison a step on the host: eager
        return GraphStep(model, optimizer.allocate_(dtype=model.dtype), comm, model.backend.graph_ops(), **kw)
    if plan.step == "shared":   # one copy of the parameters and the optimizer state for the node
        shared = comm.shared
        model.use_param_buffer(shared.share(model.params))
        optimizer.allocate_(shared.zeros, model.dtype, writes_state=shared.rank == 0)
        return SharedStep(model, optimizer, comm, shared, **kw)
    return ReduceStep(model, optimizer.allocate_(dtype=model.dtype), comm, **kw)
