"""How a run is distributed, decided once: make_plan, a pure function from the resolved configuration, the job's
topology (mpinn.comm.topology.probe) and the model's shape to a frozen Plan: the device, how gradients travel,
the step, the table, its exchange and hot rows, whether the node shares one copy of the parameters; each with
the one-line reason the start-up prints. The communicator and the step are built from it (mpinn.training.build);
nothing decides these again. A combination the job refuses is a rule of the rule table (rules.JOB_RULES)."""
from dataclasses import dataclass, replace
from types import MappingProxyType

import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.settings.job_rules import check_job, slot_bytes
from mpinn.settings.rules import check, not_with_sharded
from mpinn.settings.table import DATA

NODE_FROM = 4       # --shard-exchange auto: the node exchange from this many nodes on (see choose_exchange)
# --stale-rows 1: MPICH moves a posted Ialltoallv only inside MPI calls; "thread": a thread calls Test while the rank
# computes (mpinn.comm.progress.Progress), "none": no thread (the rows move inside the held batch's own collectives,
# or in MPICH's progress thread under MPIR_CVAR_ASYNC_PROGRESS=1). none, measured: W2 sharded here, medians of 5,
# 1.23x / 1.14x sync's samples/s at np 2 / 3 against the thread's 1.13x / 0.97x (its polling doubled the compute) and
# MPICH's thread's 0.35x / 0.19x (scripts/results/stale-rows-2026-12-02.json, docs/scale.md)
STALE_PROGRESS = "none"


@dataclass(frozen=True)
class Plan:
    """One run's distribution (make_plan), the same on every rank."""
    cfg: object                 # the configuration with the plan's choices recorded (--device, --table)
    topology: object            # mpinn.comm.topology.Topology
    device: str                 # cpu | gpu
    device_note: str            # the start-up line's 'device:' (where each rank computes, and why)
    reduce: str                 # the communicator: allreduce | gather | null | tower
    transport: str              # how gradients travel: mpi | shm (CPU); nccl | cuda-aware | staged (GPU); none
    transport_note: str         # the start-up line's 'gradients:' ('' where nothing is said)
    step: str                   # reduce | overlap | shared | local-sgd | sharded
    step_why: str
    shared_params: bool         # one copy of the parameters and optimizer state per node (step 'shared')
    sparse_threshold: float     # the density rule of the hashed block's row exchange (inf: always rows)
    table: str                  # replicated | sharded
    table_why: str
    exchange: str = None        # a sharded table's exchange: flat | node
    exchange_why: str = ""
    hot_rows: str = "off"       # a sharded table's hot rows: off, auto (counted at start-up), or a number
    hot_why: str = ""           # why off (for the start-up line), when off
    stale_progress: str = STALE_PROGRESS    # --stale-rows 1 or 2: who drives MPI on what is in flight (see there)

    @property
    def ranks(self):
        return self.topology.size

    def summary(self):
        """The decisions, as a dict (every rank's plan must be the same: mpinn.training.run checks it)."""
        return {k: getattr(self, k) for k in ("device", "reduce", "transport", "step", "shared_params",
                                               "sparse_threshold", "table", "exchange", "hot_rows")}

    @property
    def needs_counts(self):
        """Must the training rows' ids be counted at start-up to pick the hot rows?"""
        return self.table == "sharded" and self.hot_rows != "off"

    def lines(self, n_sparse):
        """The start-up lines that say how the gradients travel (none for one rank)."""
        if self.ranks == 1:
            return []
        if self.table == "sharded":
            return ["gradients: hashed table sharded by rows over %d ranks (%s): each batch's rows fetched from their "
                    "owners and its gradient rows sent back (Alltoallv), each rank stepping its own rows; dense layers "
                    "MPI_Allreduce" % (self.ranks, self.table_why)]
        if not self.transport_note:
            return []
        return ["gradients: %s" % self.transport_note + (
            "; parameters and optimizer state: one copy per node, each rank steps its part" if self.shared_params
            else "") + ("; table replicated (%s)" % self.table_why if n_sparse and self.reduce != "tower" else "")]

    def hot_line(self, hot, counted):
        """The sharded table's line once its hot rows were picked (hot: how many; counted: rows counted)."""
        if hot:
            note = "%d hot rows on every rank (--hot-rows %s: counted over %d rows)" % (hot, self.cfg.hot_rows, counted)
        else:
            note = "no hot rows (--hot-rows %s%s)" % (self.cfg.hot_rows, self.hot_why or (
                "" if self.cfg.hot_rows == "off" else ": none expected 4 times in a rank's share"))
        stale = {0: "", 1: "; rows fetched a step ahead (--stale-rows 1: one update late)",
                 2: "; rows fetched a step ahead, gradient rows sent on while the next batch computes (--stale-rows "
                    "2: every update a step late, the rows two)"}[self.cfg.stale_rows]
        return "sharded table: %s exchange (%s); %s%s" % (self.exchange, self.exchange_why, note, stale)


def make_plan(cfg, topo, spec, optimizer):
    """The Plan of a resolved configuration on a job (topo) for a model (spec: mpinn.core.spec.ModelSpec) stepped by
    `optimizer` (made, not yet allocated: its properties say what state it keeps and whether it needs the
    touched rows). Raises the rule's MpinnError for a combination this job refuses."""
    check_job(cfg, topo, spec)
    device = choose_device(cfg, topo)[0]
    reduce = "tower" if cfg.parallel == "tower" else cfg.reduce
    table, table_why = choose_table(replace(cfg, device=device), topo, spec, optimizer)
    cfg = record(cfg, device=device, table=table, table_why=table_why)
    check(cfg)          # the rules again on what the job chose (a sharded table's options on a replicated one)
    check_job(cfg, topo, spec)
    sharded = table == "sharded"
    if device == "gpu":
        transport, transport_note = choose_gpu_transport(cfg, topo), ""
    elif reduce == "allreduce":
        transport, transport_note = choose_cpu_transport(cfg, topo, spec, sharded)
    else:
        transport, transport_note = "none", ""
    step, step_why = choose_step(cfg, topo, spec, optimizer, transport)
    rows_always = optimizer.needs_touched_rows and not sharded
    note = device_line(cfg, topo) + ("; step: %s" % step_why if step == "graph" else "; step eager (%s)" % step_why
                                     if device == "gpu" and step_why.startswith("--graph") else "")
    plan = Plan(cfg, topo, device, note, reduce, transport, transport_note, step, step_why,
                step == "shared", float("inf") if rows_always else float(cfg.sparse_threshold), table, table_why)
    if sharded:
        exchange, exchange_why = choose_exchange(cfg.shard_exchange, topo)
        hot, hot_why = choose_hot(cfg, topo, spec, optimizer)
        plan = replace(plan, exchange=exchange, exchange_why=exchange_why, hot_rows=hot, hot_why=hot_why)
    return plan


def record(cfg, **values):
    """cfg with the job's choices written in (their origin: decided by the data and the job)."""
    changed = {k: v for k, v in values.items() if getattr(cfg, k) != v}
    origin = dict(cfg.origin)
    origin.update({k: DATA for k in changed if k != "table_why"})
    return replace(cfg, **changed, origin=MappingProxyType(origin)) if changed else cfg


# ---------------------------------------------------------------- the device
def choose_device(cfg, topo):
    """(cpu or gpu, the note) for --device (and a GPU --comm): the probe bound every rank to a GPU where it could
    (topo.devices); auto takes the GPU when every rank has one and the run can use it."""
    if cfg.device == "cpu" and cfg.where("device") != DATA and cfg.comm in ("auto", "shm", "mpi"):
        return "cpu", "cpu (numpy)"         # asked for (resolve_device records auto's answer as the data's)
    names = [d[0] for d in topo.devices]
    notes = [d[1] for d in topo.devices]
    backend, note = names[0], notes[0]
    if backend != "numpy" and "numpy" in names:       # auto, and some rank has no GPU
        r = names.index("numpy")
        backend, note = "numpy", "cpu (numpy): --device auto, but rank %d found no GPU (%s)" % (r, notes[r])
    reduce = "tower" if cfg.parallel == "tower" else cfg.reduce
    if backend != "numpy" and (reduce != "allreduce" or cfg.compress):
        why = "--reduce %s" % reduce if reduce != "allreduce" else "--compress"
        backend, note = "numpy", "cpu (numpy): --device auto, and %s runs on the CPU" % why
    return ("cpu" if backend == "numpy" else "gpu"), note


def device_line(cfg, topo):
    """What the start-up line 'device:' says: where every rank computes, and on a GPU how gradients travel."""
    device, note = choose_device(cfg, topo)
    return gpu_note(note, choose_gpu_transport(cfg, topo), topo) if device == "gpu" else note


def resolve_device(cfg, topo):
    """--device auto decided (cpu or gpu) before the data is read, and the rules checked again."""
    check_job(cfg, topo)
    if cfg.device != "auto":
        return cfg
    out = record(cfg, device=choose_device(cfg, topo)[0])
    check(out)
    return out


def aware_how(topo):
    """(is every rank's MPI CUDA-aware?, how that was found)."""
    return all(a for a, _ in topo.cuda_aware), "; ".join(sorted({h for _, h in topo.cuda_aware}))


def choose_gpu_transport(cfg, topo):
    """How GPU gradients reach the other ranks: auto moves nothing for one rank (none: the gradient stays on the
    GPU; staging it through the host was a copy out and back every step for nothing), takes CUDA-aware MPI when
    every rank's library says it is, else stages through pinned host buffers; nccl only when asked for."""
    if cfg.comm == "auto":
        if topo.size == 1:
            return "none"
        return "cuda-aware" if aware_how(topo)[0] else "staged"
    return cfg.comm


def gpu_note(note, transport, topo):
    if transport == "none":
        return "%s; gradients stay on the GPU (one rank: nothing to exchange)" % note
    how = aware_how(topo)[1]
    return "%s; gradients by %s%s" % (note, transport, {
        "nccl": " (NCCL)", "cuda-aware": " (CUDA-aware MPI: %s)" % how,
        "staged": " (through pinned host buffers; CUDA-aware MPI not found: %s)" % how}[transport])


# ---------------------------------------------------------------- how CPU gradients travel
def choose_cpu_transport(cfg, topo, spec, sharded):
    """(mpi or shm, the start-up note) for --comm: shm sums gradients in a shared-memory window on each node (see
    mpinn.comm.shm), mpi is MPI_Allreduce; auto takes shm when every rank is on one node (across nodes MPICH's
    Allreduce is already node-aware and sends the same bytes, measured) and the node's /dev/shm has room for the
    slots (a container's is often 64 MiB; running out there is a SIGBUS, not an error). A sharded table's dense
    layers always take MPI_Allreduce."""
    if sharded:
        return "mpi", "MPI_Allreduce (a sharded table's dense layers)"
    use = cfg.comm == "shm" or (cfg.comm == "auto" and topo.nodes == 1 and topo.size > 1 and not cfg.compress)
    if not use:
        return "mpi", "MPI_Allreduce"
    if topo.shm_short(slot_bytes(spec)):       # auto only: --comm shm without room is a rule (shm-room)
        room = topo.shm_room[0] or 0
        return "mpi", "MPI_Allreduce (/dev/shm has %.0f MiB free on %s, too little for the shared-memory sum's " \
                      "%.0f MiB)" % (room / 2**20, "this node" if topo.nodes == 1 else "some node",
                                     topo.shm_need(0, slot_bytes(spec)) / 2**20)
    if topo.nodes == 1:
        return "shm", "summed in shared memory (every rank on one node; --comm mpi for MPI_Allreduce)"
    return "shm", ("summed in shared memory on each node, then MPI_Allreduce among the %d nodes' first ranks "
                   "(--comm mpi for one flat MPI_Allreduce)" % topo.nodes)


# ---------------------------------------------------------------- the step
def choose_step(cfg, topo, spec, optimizer, transport):
    """(the step strategy, why); mpinn.training.steps and .sharded hold them. One copy of the parameters and of
    the optimizer state per node ('shared'), each rank stepping its part: for models with hashed inputs, whose
    row updates it splits (W2 at np 2: 340k -> 435k samples/s), and for optimizers with state (held once per
    node, updated P ways); it needs the shared-memory sum, more than one rank on every node, and on several
    nodes as many on each. A dense model's SGD update is small, and re-reading the other ranks' freshly stepped
    parameters cost W1 3-4% (measured)."""
    if cfg.table == "sharded":
        return "sharded", "--table sharded"
    if cfg.average_every:
        return "local-sgd", "--average-every %d" % cfg.average_every
    if cfg.overlap:
        return "overlap", "--overlap"
    if transport == "shm" and cfg.parallel != "tower" and (spec.n_sparse > 0 or optimizer.stateful) \
            and min(topo.node_sizes) > 1 and (topo.nodes == 1 or topo.even):
        return "shared", "shared-memory gradients, %s" % ("hashed inputs" if spec.n_sparse else "optimizer state")
    if cfg.graph == "on" and cfg.device != "gpu":
        raise MpinnError("--graph on: a captured CUDA graph needs a GPU; this run computes on the %s" % cfg.device,
                         collective=True)
    if cfg.device == "gpu" and cfg.graph != "off":
        why_not = graph_refusal(spec, optimizer, cfg.grad_accum, cfg.parallel == "tower", topo.size)
        if why_not is None:
            return "graph", "one captured CUDA graph a step (--graph %s)" % cfg.graph
        if cfg.graph == "on":
            raise MpinnError("--graph on: the step plan does not cover this run: %s (--graph auto runs it eagerly)"
                             % why_not, collective=True)
        return "reduce", "--graph auto: not captured, %s" % why_not
    return "reduce", "the communicator's reduction"


def graph_refusal(spec, optimizer, grad_accum=1, towers=False, ranks=1):
    """Why a GPU run's step cannot be the step plan (mpinn.training.graph_plan: one CUDA graph a step), or None when
    it can: what the plan covers so far."""
    why = ["%d ranks (the exchange is not in the graph yet)" % ranks if ranks != 1 else None,
           "--grad-accum %d" % grad_accum if grad_accum != 1 else None,
           "--parallel tower" if towers else None,
           "periodic embeddings" if spec.periodic else None,
           "--wide" if spec.has_wide else None,
           "a %s head of %d columns" % (spec.loss, spec.n_out) if spec.loss != "softmax" and spec.n_out > 1 else None,
           "a table of 2^31 rows or more" if spec.n_sparse >= 2 ** 31 else None,
           "--optimizer %s (the plan has sgd and adam)" % optimizer.name if optimizer.name not in ("sgd", "adam")
           else None,
           "--weight-decay" if optimizer.weight_decay else None,
           "--hashed-update dense" if spec.n_sparse and not optimizer.sparse_ok else None]
    return next((w for w in why if w), None)


# ---------------------------------------------------------------- the hashed table
def choose_table(cfg, topo, spec, optimizer):
    """("replicated" or "sharded", why) for --table. auto shards a hashed table when the job spans several nodes
    (a replicated table's exchange gathers every rank's gradient rows on every rank, traffic and update work
    growing with the ranks: python -m scripts.bench.cluster_model) or when the node's replicas of the table and its optimizer
    state would take more than half of the memory a node has available."""
    if cfg.table != "auto":
        return cfg.table, "asked for"
    others = not_with_sharded(cfg)
    if not spec.n_sparse or topo.size == 1 or others:
        return "replicated", ("one rank" if topo.size == 1 else "no hashed inputs" if not spec.n_sparse
                              else "auto, with %s" % others[0])
    if topo.nodes > 1:
        return "sharded", "auto: the job spans %d nodes" % topo.nodes
    table_bytes = spec.n_sparse * spec.first_width * np.dtype(spec.dtype).itemsize * (1 + len(optimizer.element_state))
    room = topo.mem_available
    if topo.per_node * table_bytes > room // 2:
        return "sharded", "auto: %d replicas of the table (%.0f MiB each) would take over half of the node's " \
                          "%.0f MiB available" % (topo.per_node, table_bytes / 2**20, room / 2**20)
    return "replicated", "auto: one node, with room for the replicas"


def choose_exchange(kind, topo):
    """(flat or node, why) for --shard-exchange. auto: node-aware from NODE_FROM nodes with more than one rank on
    each, the same number on each; flat below. Its relays cost 1.2 ms a step more than the flat exchange on W2 at
    np 2 here (one node of 2 ranks, every collective of the path run; medians of 5), and the cluster model
    (python -m scripts.bench.cluster_model, lab-measured network, 8 ranks a node) predicts it saves 0.7 ms a step at 2 nodes,
    2.1 ms at 4 and 3.2 ms at 8."""
    if topo.size == 1:
        return "flat", "one rank"
    if kind == "flat":
        return "flat", "asked for"
    if topo.uneven:         # --shard-exchange node on uneven nodes is a rule (node-exchange-even)
        return "flat", "auto: %s" % topo.uneven
    N, R = topo.nodes, topo.per_node
    if kind == "node" and R == 1:      # no node to combine in: the node exchange would be the flat one, slower
        return "flat", "--shard-exchange node with one rank per node is the flat exchange"
    summed = "; gradient rows %s" % ("summed in the node" if topo.unsummable is None else
                                      "unsummed (%s)" % topo.unsummable)
    if kind == "node":
        return "node", "asked for" + summed
    if N >= NODE_FROM and R > 1:
        return "node", "auto: %d nodes of %d ranks%s" % (N, R, summed)
    return "flat", "auto: %s" % ("one node" if N == 1 else "one rank per node" if R == 1 else
                                 "%d nodes, under %d" % (N, NODE_FROM))


def choose_hot(cfg, topo, spec, optimizer):
    """(off, auto or a number of rows; why off) for --hot-rows on a sharded table: auto is off on one node (its
    ranks share memory and the busiest owner's load, which the replica spreads, grows with the nodes) and without
    the lazy update of the table; otherwise the rows are picked from the training rows' counts at start-up
    (mpinn.training.hot.pick_hot)."""
    spec_ = cfg.hot_rows
    if spec_ == "off":
        return "off", ""
    if spec_ == "auto" and topo.nodes == 1:
        return "off", ": one node"
    if spec_ == "auto" and not optimizer.sparse_ok:
        return "off", ": --hashed-update dense steps every row"
    return spec_, ""
