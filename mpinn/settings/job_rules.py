"""The jobs that are refused, each written once, as a table: rules on the options and the job's topology
(mpinn.comm.topology.probe: its nodes, memory, shared memory, GPUs), checked when the job is probed (before any
data is read) and again by the plan (mpinn.settings.plan), with the model's shape (spec) where it matters. The
options' own rules are mpinn.settings.rules."""
from dataclasses import dataclass
from typing import Callable

from mpinn.core.errors import MpinnError


@dataclass(frozen=True)
class JobRule:
    name: str
    options: tuple                  # the options it involves
    broken: Callable                # (RunConfig, Topology, ModelSpec or None) -> True when refused
    message: Callable               # (RunConfig, Topology, ModelSpec) -> the one line the user sees
    example: str                    # the job that breaks it, in words (docs/options.md)


GPU_TRANSPORTS = ("nccl", "cuda-aware", "staged")


def _no_gpu(t):
    return next((r for r, d in enumerate(t.devices) if d[0] is None), None)


def slot_bytes(spec):
    """A rank's gradient slot in the node's shared-memory window: the parameters and the loss slot, in bytes."""
    return (spec.n_params + 1) * (4 if spec.dtype == "float32" else 8)


def _shm_short(c, t, s):
    return s is not None and c.comm == "shm" and c.table != "sharded" and bool(t.shm_short(slot_bytes(s)))


def _shm_message(c, t, s):
    return ("--comm shm: the gradient slots need %.0f MiB of /dev/shm on each node and %d node(s) have less (here "
            "%.0f MiB free); give the job more shared memory (docker: --shm-size) or use --comm mpi"
            % (t.shm_need(0, slot_bytes(s)) / 2**20, len(t.shm_short(slot_bytes(s))), (t.shm_room[0] or 0) / 2**20))


def _hot_k(c):
    return int(c.hot_rows) if c.hot_rows not in ("auto", "off") else 0


def _model_bytes(s):
    """The least memory a model takes anywhere: its parameters once, and one gradient of them."""
    return 2 * s.n_params * (4 if s.dtype == "float32" else 8)


def _model_too_big(c, t, s):
    """The host's memory (a GPU run holds its model on the GPUs, and is not judged by it)."""
    return s is not None and (c is None or c.device != "gpu") and _model_bytes(s) > t.nodes * t.mem_available


def _address_space_short(c, t, s):
    """A rank's address space (ulimit -v) below the model and a gradient of it: every rank maps both whole (a sharded
    table's other rows too, never touched: RLIMIT_AS counts what is mapped, not what is in memory)."""
    return s is not None and (c is None or c.device != "gpu") and _model_bytes(s) > t.address_space


def _readers(c, t):
    return t.size if c.readers == "all" else int(c.readers)


MODEL_MEMORY = JobRule(
    "model-memory", ("hash_bits", "hidden"), _model_too_big,
    lambda c, t, s: "the model has %d parameters: they and a gradient of them take %.1f GiB, more than the %.1f GiB "
                    "available on the job's %d node(s); give a smaller --hash-bits or --hidden, or more nodes" % (
                        s.n_params, _model_bytes(s) / 2**30, t.nodes * t.mem_available / 2**30, t.nodes),
    "--hash-bits 30 on a node with less than 2^30 times the first layer's width x 8 bytes of memory")

ADDRESS_SPACE = JobRule(
    "model-address-space", ("hash_bits", "hidden"), _address_space_short,
    lambda c, t, s: "the model has %d parameters: they and a gradient of them take %.1f GiB, more than the %.1f GiB "
                    "of address space a rank may use (ulimit -v, RLIMIT_AS); give a smaller --hash-bits or --hidden, "
                    "or raise the limit (ulimit -v unlimited)" % (
                        s.n_params, _model_bytes(s) / 2**30, t.address_space / 2**30),
    "--hash-bits 24 under ulimit -v 1000000 (1 GiB a process)")


JOB_RULES = (
    JobRule("gpu-present", ("device",), lambda c, t, s: _no_gpu(t) is not None,
            lambda c, t, s: "--device gpu: no usable GPU on rank %d: %s" % (_no_gpu(t), t.devices[_no_gpu(t)][1]),
            "--device gpu where a rank finds no GPU"),
    JobRule("gpu-transport-on-cpu", ("comm", "device"),
            lambda c, t, s: c.comm in GPU_TRANSPORTS and c.device == "auto" and (
                not t.all_gpus or c.reduce != "allreduce" or c.parallel == "tower" or bool(c.compress)),
            lambda c, t, s: "--comm %s moves GPU buffers, but this run computes on the CPU (--device auto: %s)" % (
                c.comm, "a rank found no GPU" if not t.all_gpus else "only --reduce allreduce runs on a GPU"),
            "--device auto --comm nccl where a rank finds no GPU"),
    JobRule("cuda-aware-mpi", ("comm",),
            lambda c, t, s: c.comm == "cuda-aware" and t.all_gpus and not all(a for a, _ in t.cuda_aware),
            lambda c, t, s: "--comm cuda-aware: this MPI library is not CUDA-aware (%s); use --comm staged or "
                            "--comm nccl" % "; ".join(sorted({h for _, h in t.cuda_aware})),
            "--device gpu --comm cuda-aware with an MPI library built without CUDA"),
    JobRule("nccl-library", ("comm",),
            lambda c, t, s: c.comm == "nccl" and t.all_gpus and any(d[3] for d in t.devices),
            lambda c, t, s: "--comm nccl: NCCL is not available on rank %d (%s); use --comm staged" % next(
                (r, d[3]) for r, d in enumerate(t.devices) if d[3]),
            "--device gpu --comm nccl where cupy finds no NCCL library"),
    JobRule("nccl-one-gpu-a-rank", ("comm",),
            lambda c, t, s: c.comm == "nccl" and t.all_gpus and bool(t.gpus_shared()),
            lambda c, t, s: "--comm nccl: ranks %d and %d share GPU %s on %s, and NCCL refuses two ranks of one "
                            "communicator on one GPU; run at most one rank per GPU, or use --comm staged" % (
                                t.gpus_shared()[0][0] + t.gpus_shared()[0][1][::-1]),
            "--device gpu --comm nccl with more ranks than GPUs on a node"),
    JobRule("shm-room", ("comm",), _shm_short, _shm_message,
            "--comm shm where a node's /dev/shm has less room than its ranks' gradient slots"),
    JobRule("node-exchange-even", ("shard_exchange", "table"),
            lambda c, t, s: c.table == "sharded" and c.shard_exchange == "node" and t.size > 1 and bool(t.uneven),
            lambda c, t, s: "--shard-exchange node: %s; give --shard-exchange flat" % t.uneven,
            "--table sharded --shard-exchange node on nodes with different numbers of ranks"),
    MODEL_MEMORY,
    ADDRESS_SPACE,
    JobRule("readers-batch", ("readers", "batch_size"),
            lambda c, t, s: c.readers != "1" and 0 < c.batch < _readers(c, t) <= t.size,
            lambda c, t, s: "--readers %s: each of the %d readers takes its share of every global batch, and %d rows "
                            "leave some none: give --batch-size %d or more" % (
                                c.readers, _readers(c, t), c.batch, _readers(c, t)),
            "--readers all --batch-size 2 on 3 ranks"),
    JobRule("hot-rows-table", ("hot_rows", "table"),
            lambda c, t, s: s is not None and c.table == "sharded" and _hot_k(c) > s.n_sparse,
            lambda c, t, s: "--hot-rows %d: the table has %d rows" % (_hot_k(c), s.n_sparse),
            "--table sharded --hot-rows K with K more than the hashed table's rows"),
)


def check_job(cfg, topo, spec=None, rules=JOB_RULES):
    """Raise MpinnError (one line, the same on every rank) for the first job rule broken."""
    for r in rules:
        if r.broken(cfg, topo, spec):
            raise MpinnError(r.message(cfg, topo, spec), collective=True)
