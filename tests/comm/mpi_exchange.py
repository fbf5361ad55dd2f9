"""Shared-memory and reduced-precision exchange, local SGD and the timeline against the plain dense path."""
import json
import os
import tempfile

import numpy as np
import pytest

from ranks import COMM, agree, make_trainer, toy_data
from mpinn.core.spec import ModelSpec
from mpinn.core.batch import Layout
from mpinn.data import Dataset
from mpinn.core.batch import Batch
from mpinn.model.mlp import MLP
from mpinn.optim import create_optimizer
from mpinn.training import Faults, Hooks
from mpinn.training.timeline import PHASES


def make(dtype="float64", optimizer="sgd", threshold=0.25, compress=None, average_every=0,
         timeline=False, faults=None, transport="auto"):
    spec = ModelSpec(64, 3, (8, 6), 3, "tanh", "softmax", dtype, sparse_fan_in=2.5)
    model = MLP(spec).init_(0)
    opt = create_optimizer(optimizer, model.size, np, 0.0, model.weight_slices)
    t = make_trainer(model, opt, Layout(64, 3, dtype, "int64"), 12, average_every=average_every,
                     timeline="trace.json" if timeline else None, hooks=Hooks(faults=faults),
                     sparse_threshold=threshold, compress=compress, comm=transport)
    t.start()
    return t


def run(t, batch, steps, first=0):
    Xs, Xd, y = toy_data()
    oks = []
    for s in range(first, first + steps):
        rows = np.arange(s * batch, (s + 1) * batch) % len(y)
        _, ok = t.step(Batch(Xs[rows], Xd[rows].astype(t.model.dtype), y[rows]) if t.rank0 else None, len(rows))
        t.global_step += 1
        oks.append(ok)
    return t.model.params.copy(), oks


# relative distance from the plain path, ||p16 - p|| / ||p - p0||, after 6 steps: the rounding of
# each gradient element (2^-11 fp16, 2^-8 bf16, nearest even) barely moves a trajectory this short
TOLERANCE = {"fp16": 1e-3, "bf16": 8e-3}   # measured at most 1.6e-4 and 1.5e-3 (np 1-3)


@pytest.mark.parametrize("kind", ["fp16", "bf16"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("threshold", [0.0, 10.0])     # dense block / sparse block as rows
@pytest.mark.parametrize("batch", [7, 12])
def test_compressed_exchange_follows_the_plain_path(kind, dtype, threshold, batch):
    p0 = make(dtype).model.params.copy()
    plain, _ = run(make(dtype, threshold=threshold), batch, 6)
    got, oks = run(make(dtype, threshold=threshold, compress=kind), batch, 6)
    rel = np.linalg.norm((got - plain).astype(np.float64)) / np.linalg.norm((plain - p0).astype(np.float64))
    print("%s %s threshold %g batch %d np=%d: relative distance %.2e" % (kind, dtype, threshold, batch,
                                                                         COMM.size, rel))
    agree(all(oks) and 0 < rel < TOLERANCE[kind], "relative distance %g" % rel)
    everyone = COMM.allgather(got)
    agree(all(np.array_equal(everyone[0], p) for p in everyone), "ranks differ")


@pytest.mark.parametrize("kind", ["fp16", "bf16"])
def test_an_overflow_on_one_rank_skips_the_step_on_every_rank(kind):
    # the largest float64 overflows a 16-bit cast on the last rank at step 3
    bad = Faults("huge:%d:3" % (COMM.size - 1), COMM.rank)
    t = make(compress=kind, faults=bad)
    ref = make(compress=kind)
    got, oks = run(t, 12, 3)
    before, _ = run(ref, 12, 2)
    agree(oks == [True, True, False], "verdicts %s" % oks)
    agree(t.comm.compressed.overflows == 1 and np.array_equal(got, before), "step 3 was not skipped")


@pytest.mark.parametrize("batch", [7, 12])          # uneven slices at np = 2 and 3
@pytest.mark.parametrize("threshold", [0.0, 10.0])
def test_local_sgd_every_step_equals_gradient_averaging(batch, threshold):
    """Plain SGD from equal parameters: mean_r(p - lr g_r) = p - lr mean_r(g_r), so averaging the
    parameters after every step is the gradient-averaging step, up to rounding."""
    plain, _ = run(make(threshold=threshold), batch, 6)
    local, oks = run(make(threshold=threshold, average_every=1), batch, 6)
    diff = np.max(np.abs(local - plain))
    agree(all(oks) and diff < 1e-12, "max diff %g" % diff)


def test_local_sgd_averages_every_k_steps():
    t = make(average_every=3, optimizer="momentum")
    for steps in (2, 3):
        got, _ = run(t, 12, 1, 2) if steps == 3 else run(t, 12, 2)   # not yet averaged; then the 3rd step
        everyone = COMM.allgather(got)
        same = all(np.array_equal(everyone[0], p) for p in everyone)
        agree(same if steps == 3 or COMM.size == 1 else not same, "after %d steps: same=%s" % (steps, same))
    if COMM.size == 1:    # one rank: local SGD is plain training
        plain, _ = run(make(optimizer="momentum"), 12, 3)
        agree(np.array_equal(plain, got))


def test_timeline_has_a_track_per_rank_and_the_summary_totals():
    Xs, Xd, y = toy_data()
    t = make(timeline=True)
    t.fit(Dataset(Xs, Xd, y, {"task": "multiclass"}) if t.rank0 else None, None, 2, progress=False)
    path = COMM.bcast(os.path.join(tempfile.mkdtemp(), "trace.json") if t.rank0 else None)
    t.write_timeline(path)
    summary = t.summary()
    if t.rank0:
        doc = json.load(open(path))
        events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
        assert {e["pid"] for e in events} == set(range(COMM.size))
        assert {(e["pid"], e["tid"]) for e in events} == {(r, 0) for r in range(COMM.size)}   # one track each
        assert {e["name"] for e in events} == set(PHASES)
        assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events)
        steps = 2 * int(np.ceil(len(y) / 12))
        for r in range(COMM.size):
            mine = [e for e in events if e["pid"] == r]
            assert {e["args"]["step"] for e in mine} == set(range(1, steps + 1))
            for phase in PHASES:
                total = sum(e["dur"] for e in mine if e["name"] == phase) / 1e6
                assert total == pytest.approx(summary["phase_s_per_rank"][r][phase], rel=1e-9, abs=1e-9)
        os.remove(path)
    COMM.Barrier()


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adagrad", "ftrl"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("threshold", [0.0, 10.0])     # dense block / sparse block as rows (a tail)
@pytest.mark.parametrize("batch", [7, 12])
def test_shared_memory_allreduce_equals_mpi_allreduce(optimizer, dtype, threshold, batch):
    """--comm shm sums the gradients in a shared-memory window (and keeps one copy of the parameters
    and of the optimizer state, each rank stepping a part of them): the same parameters as
    MPI_Allreduce, where every rank steps its own full copy (bitwise
    at np 1-2, where a + b is the only order; at np 3 the sums may be associated differently: a few
    ulps), and the same bits on every rank."""
    shm = make(dtype, optimizer, threshold, transport="shm")
    assert shm.comm.transport == "shm" and shm.comm.shared.holds(shm.model.grad_buffer)
    # a model with hashed inputs: one copy of the parameters (and state) for the node, stepped in parts
    assert shm.shared_params == (COMM.size > 1)
    got, oks = run(shm, batch, 6)
    want, _ = run(make(dtype, optimizer, threshold, transport="mpi"), batch, 6)
    agree(all(oks), "a step was skipped")
    if COMM.size <= 2:
        agree(np.array_equal(got, want), "max diff %g" % np.abs(got - want).max())
    else:
        eps = np.finfo(got.dtype).eps
        agree(np.allclose(got, want, rtol=64 * eps, atol=64 * eps), "max diff %g" % np.abs(got - want).max())
    everyone = COMM.allgather(got)
    agree(all(np.array_equal(everyone[0], p) for p in everyone), "ranks differ")


def test_auto_uses_shared_memory_on_one_node():
    t = make()
    agree(t.comm.transport == ("shm" if COMM.size > 1 else "mpi"), t.comm.transport)
    agree(t.plan.transport_note.startswith("summed in shared memory" if COMM.size > 1 else "MPI_Allreduce"),
          t.plan.transport_note)


def test_too_little_shared_memory_falls_back_or_is_refused(monkeypatch):
    """A small /dev/shm (a container's 64 MiB) would end in a SIGBUS: auto falls back to
    MPI_Allreduce and says why; an explicit --comm shm is one clear error on every rank."""
    import mpinn.comm.topology
    from mpinn.core.errors import MpinnError
    monkeypatch.setattr(mpinn.comm.topology, "shm_room", lambda: 1 << 20)
    t = make(transport="auto")
    agree(t.comm.transport == "mpi" and t.comm.shared is None, t.comm.transport)
    if COMM.size > 1:
        agree("/dev/shm has 1 MiB free" in t.plan.transport_note, t.plan.transport_note)
        with pytest.raises(MpinnError, match="--comm shm: the gradient slots need"):
            make(transport="shm")
    got, _ = run(t, 12, 3)
    want, _ = run(make(transport="mpi"), 12, 3)
    agree(np.array_equal(got, want), "fallback differs from MPI_Allreduce")


def test_trained_model_is_each_ranks_own_after_training():
    """mpinn.api.train hands back a model whose arrays are this rank's alone: the shared-memory
    windows (gradient slots, the node's one copy of the parameters) are copied out and freed."""
    from mpinn.api import train
    for _ in range(2):                      # twice in one process: nothing piles up or aliases
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "m.npz") if COMM.rank == 0 else os.path.join(d, "other.npz")
            r = train(default_rows=3000, epochs=1, hidden=(8,), hash_bits=10, quiet=True,
                      model_out=COMM.bcast(out))
        agree(r.model.params is not None and r.model.params.flags.writeable, "params not writable")
        agree(r.model.params.flags.owndata and r.model.grad_buffer.flags.owndata, "a view of shared memory")
        before = r.model.params.copy()
        r.model.params[0] = 1000 + COMM.rank
        COMM.Barrier()
        agree(r.model.params[0] == 1000 + COMM.rank and np.array_equal(r.model.params[1:], before[1:]),
              "another rank's write reached this rank's model")
