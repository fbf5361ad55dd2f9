"""The launch-cost probe of issue 62: a GPU rank's step eager against the same step plan captured as a CUDA graph
and replayed (mpinn.training.graph_step.GraphStep), at the workloads' shapes (W1 784-256-256-10 batch 256; W2 CSR
2^18 -> 64 -> 1 batch 1024, 20 ids a row; W4 CSR 2^20 + 26 dense -> 64 -> 1 batch 1024, 26 ids a row), on
synthetic batches of those shapes (the step's cost does not depend on the values). For each: microseconds a step
(host clock over `--steps` steps, the device drained before and after), the host's waits inside the steps (the
backend's count), and whether the two runs' parameters and optimizer state are equal bit for bit. Needs cupy and
a GPU; prints a table and writes JSON.

    python -m scripts.lab.graph_probe [--steps 300] [--optimizers sgd,adam] [--out graph-probe.json]
"""
import argparse
import json
import sys
import time

import numpy as np
import scipy.sparse as sp

from mpi4py import MPI

from mpinn.comm import create_communicator
from mpinn.core.batch import Batch
from mpinn.core.spec import ModelSpec
from mpinn.model.mlp import MLP
from mpinn.optim import create_optimizer
from mpinn.training.faults import Faults
from mpinn.training.graph_step import GraphStep
from mpinn.training.timeline import Timeline

SHAPES = {"w1": (ModelSpec(0, 784, (256, 256), 10, "relu", "softmax", "float32"), 256, 0),
          "w2": (ModelSpec(1 << 18, 0, (64,), 1, "relu", "sigmoid", "float32", sparse_fan_in=20), 1024, 20),
          "w4": (ModelSpec(1 << 20, 26, (64,), 1, "relu", "sigmoid", "float32", sparse_fan_in=26), 1024, 26)}


def batches(spec, n, per_row, count, seed=0):
    """count batches of n rows of spec's shape: per_row Zipf-distributed ids a row (a row may hold one twice)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        Xs = None
        if spec.n_sparse:
            ids = (rng.zipf(1.2, n * per_row) * 2654435761 % spec.n_sparse).astype(np.int32)
            Xs = sp.csr_matrix((np.ones(n * per_row, spec.dtype), ids, np.arange(0, n * per_row + 1, per_row)),
                               shape=(n, spec.n_sparse))
        Xd = rng.standard_normal((n, spec.n_dense)).astype(spec.dtype) if spec.n_dense else None
        y = rng.integers(0, spec.n_out, n) if spec.loss == "softmax" else rng.integers(0, 2, n).astype(spec.dtype)
        out.append(Batch(Xs, Xd, y))
    return out


def one(backend, shape, optimizer, capture, data):
    """(seconds a step, host waits in the steps, the final state) of one run of GraphStep on backend."""
    spec = SHAPES[shape][0]
    model = MLP(spec, backend).init_(0)
    opt = create_optimizer(optimizer, model.size, model.xp, table=model.table).allocate_(dtype=model.dtype)
    comm = create_communicator("allreduce", MPI.COMM_SELF, "none", backend=backend)     # one rank: nothing moves
    step = GraphStep(model, opt, comm, backend.graph_ops(), capture=capture, faults=Faults(),
                     timeline=Timeline(keep=False))
    warm = 5
    for s, b in enumerate(data[:warm]):
        step(b, b.n, s + 1, 0.05)
    step.outcomes(None, flush=True)
    syncs0, t0 = backend.syncs, time.perf_counter()
    waits = 0
    for s, b in enumerate(data[warm:], warm):
        before = backend.syncs
        step(b, b.n, s + 1, 0.05 * (1 - s / len(data)))
        waits += backend.syncs - before
        step.outcomes((None, None, b.n, s + 1))         # the ring read when full: a log point, not a step's
    step.outcomes(None, flush=True)
    seconds = (time.perf_counter() - t0) / (len(data) - warm)
    state = [backend.asnumpy(model.params)] + [backend.asnumpy(a) for a in opt.arrays.values()] + [np.array(opt.t)]
    return seconds, waits, state, backend.syncs - syncs0


def probe(backend, shapes, optimizers, steps):
    rows = []
    for shape in shapes:
        spec, n, per_row = SHAPES[shape]
        data = batches(spec, n, per_row, steps)
        for optimizer in optimizers:
            eager = one(backend, shape, optimizer, False, data)
            graph = one(backend, shape, optimizer, True, data)
            same = all(np.array_equal(a, b) for a, b in zip(eager[2], graph[2]))
            rows.append({"workload": shape, "optimizer": optimizer, "steps": steps,
                         "eager_us": eager[0] * 1e6, "graph_us": graph[0] * 1e6,
                         "speedup": eager[0] / graph[0], "graph_host_waits_in_steps": graph[1],
                         "eager_host_waits_in_steps": eager[1], "bitwise_equal": same,
                         "samples_per_s_graph": n / graph[0]})
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--workloads", default="w1,w2,w4")
    p.add_argument("--optimizers", default="sgd,adam")
    p.add_argument("--out", default="graph-probe.json")
    args = p.parse_args(argv)
    from mpinn.device.backend import get_backend, gpu_probe
    count, why = gpu_probe()
    if not count:
        print("graph_probe: needs cupy and a GPU: %s" % why, file=sys.stderr)
        return 2
    backend = get_backend("cupy")
    rows = probe(backend, args.workloads.split(","), args.optimizers.split(","), args.steps)
    print("%-4s %-5s %10s %10s %8s %6s %s" % ("", "opt", "eager us", "graph us", "x", "waits", "bitwise"))
    for r in rows:
        print("%-4s %-5s %10.1f %10.1f %8.2f %6d %s" % (r["workload"], r["optimizer"], r["eager_us"], r["graph_us"],
                                                       r["speedup"], r["graph_host_waits_in_steps"],
                                                       r["bitwise_equal"]))
    with open(args.out, "w") as f:
        json.dump({"gpu": backend.describe(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows": rows}, f, indent=1)
    return 0 if all(r["bitwise_equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
