"""The step plan (mpinn.training.graph_plan, GraphStep) on the fake device, whose capture mode records a captured
step's operations and refuses any host wait, host read or host-to-device copy while it captures (CUDA's capture
refuses them too). The plan run eagerly equals today's step (ReduceStep at one rank) bit for bit on W1-, W2- and
W4-shaped models for SGD and Adam; replayed graphs equal eager steps under a schedule that changes the rate every
step; padding changes no bit; a non-finite step changes nothing and is reported; a checkpoint taken after graph
steps resumes bit for bit. (The kernels' CUDA are checked against mpinn.device.ops on a GPU:
tests/comm/test_cuda_ops.py.)"""
import numpy as np
import pytest
from mpi4py import MPI

from fake_device import CaptureError, FakeBackend, messy_csr
from mpinn.comm import create_communicator
from mpinn.core.batch import Batch
from mpinn.core.spec import ModelSpec
from mpinn.device.ops import RING
from mpinn.model.mlp import MLP
from mpinn.optim import create_optimizer
from mpinn.optim.schedule import make_schedule
from mpinn.training.faults import Faults
from mpinn.settings.plan import graph_refusal
from mpinn.training import graph_plan, graph_step
from mpinn.training.graph_plan import BatchSlot, nnz_class
from mpinn.training.graph_step import GraphStep
from mpinn.training.steps import ReduceStep
from mpinn.training.timeline import Timeline

# the workloads' layers (mpinn.bench.workloads), the hashed tables smaller (2^16 rows, not 2^18 and 2^20)
SHAPES = {"w1": (ModelSpec(0, 784, (256, 256), 10, "relu", "softmax", "float32"), 256),
          "w2": (ModelSpec(1 << 16, 0, (64,), 1, "relu", "sigmoid", "float32", sparse_fan_in=20), 1024),
          "w4": (ModelSpec(1 << 16, 26, (64,), 1, "relu", "sigmoid", "float32", sparse_fan_in=26), 1024)}


def batches(spec, n, count, seed=0, nnz_scale=1.0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        per_row = max(int(spec.sparse_fan_in * nnz_scale), 2)
        Xs = messy_csr(n, spec.n_sparse, rng, spec.dtype, per_row=per_row) if spec.n_sparse else None
        Xd = rng.standard_normal((n, spec.n_dense)).astype(spec.dtype) if spec.n_dense else None
        y = rng.integers(0, spec.n_out, n) if spec.loss == "softmax" else rng.integers(0, 2, n).astype(spec.dtype)
        out.append(Batch(Xs, Xd, y))
    return out


def make(spec, optimizer, kind="graph", capture=True, seed=1):
    """(step, model, optimizer) on a fresh fake device: kind graph (GraphStep) or today's (ReduceStep)."""
    fake = FakeBackend()
    model = MLP(spec, fake).init_(seed)
    opt = create_optimizer(optimizer, model.size, model.xp, table=model.table).allocate_(dtype=model.dtype)
    comm = create_communicator("allreduce", MPI.COMM_SELF, "none", backend=fake)
    kw = dict(faults=Faults(), timeline=Timeline(keep=False))
    if kind == "graph":
        return GraphStep(model, opt, comm, fake.graph_ops(), capture=capture, **kw), model, opt
    return ReduceStep(model, opt, comm, **kw), model, opt


def train(step, data, schedule=lambda s: 0.05, first=0):
    """Step through data; the (loss, ok) of every step, read as the trainer reads them (Step.outcomes)."""
    out = []
    for s, b in enumerate(data, first):
        loss, ok = step(b, b.n, s + 1, schedule(s))
        out += [(l, k) for l, k, _, _ in step.outcomes((loss, ok, b.n, s + 1))]
    out += [(l, k) for l, k, _, _ in step.outcomes(None, flush=True)]
    return out


def state_of(model, opt):
    return [model.params.copy()] + [a.copy() for a in (opt.arrays or {}).values()] + [np.array(opt.t)]


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_plan_run_eagerly_is_todays_step_bit_for_bit(shape, optimizer):
    spec, n = SHAPES[shape]
    data = batches(spec, n, 4) + batches(spec, n // 3, 1, seed=9)       # a short last batch
    ref, m_ref, o_ref = make(spec, optimizer, "reduce")
    plan, m_plan, o_plan = make(spec, optimizer, capture=False)
    got, want = train(plan, data), train(ref, data)
    assert got == want and all(ok for _, ok in got)
    assert_same(state_of(m_plan, o_plan), state_of(m_ref, o_ref))
    assert plan.captured == 0 and o_plan.t == len(data)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_300_replayed_steps_under_warm_up_and_cosine_decay_equal_300_eager_ones(optimizer):
    """The rate changes every step (warm-up, then cosine decay): a rate frozen into the captured graph would give
    the first captured step's rate to every replay."""
    spec = ModelSpec(1 << 12, 5, (16,), 1, "relu", "sigmoid", "float32", sparse_fan_in=6)
    schedule = make_schedule(0.2, warmup_steps=30, decay="cosine", total_steps=300)
    data = batches(spec, 64, 300, seed=4)
    graph, m_g, o_g = make(spec, optimizer)
    eager, m_e, o_e = make(spec, optimizer, capture=False)
    got, want = train(graph, data, schedule), train(eager, data, schedule)
    assert graph.captured == 2                  # one graph per staging slot, replayed 298 times
    assert got == want
    assert_same(state_of(m_g, o_g), state_of(m_e, o_e))
    ref, m_r, o_r = make(spec, optimizer, "reduce")
    assert train(ref, data[:40], schedule) == want[:40]


def test_no_host_wait_inside_a_step_and_one_read_per_ring():
    spec, n = SHAPES["w4"]
    step, model, _ = make(spec, "adam")
    data = batches(spec, 128, 2 * RING + 3, seed=2)
    fake = model.backend
    reads = 0
    for s, b in enumerate(data):
        before = fake.syncs
        step(b, b.n, s + 1, 0.05)
        assert fake.syncs == before or s == 0, "step %d waited on the device" % (s + 1)   # the first makes the plan
        before = fake.syncs
        settled = step.outcomes((None, None, b.n, s + 1))
        reads += fake.syncs > before
        assert len(settled) in (0, RING)
    assert reads == 2 and len(step.outcomes(None, flush=True)) == 3


def test_a_new_plans_arrays_are_made_before_a_step_uses_them(monkeypatch):
    """The plan's arrays are made and zero-filled on the current stream (a GPU's default stream), which the step's
    non-blocking stream does not wait for: the host waits for those fills after making a plan, before any of the
    step's operations is queued (at the first step and when a larger batch makes a new plan)."""
    spec = ModelSpec(1 << 10, 3, (8,), 1, "relu", "sigmoid", "float32", sparse_fan_in=4)
    step, model, _ = make(spec, "adam")
    log = []
    compute = model.backend.compute
    sync, enqueue = compute.synchronize, compute.enqueue
    monkeypatch.setattr(compute, "synchronize", lambda: (log.append("sync"), sync())[1])
    monkeypatch.setattr(compute, "enqueue", lambda *a, **k: (log.append("op"), enqueue(*a, **k))[1])
    monkeypatch.setattr(graph_step, "StepPlan", lambda *a: (log.append("plan"), graph_plan.StepPlan(*a))[1])
    train(step, batches(spec, 32, 2) + batches(spec, 64, 1, seed=1))
    plans = [i for i, what in enumerate(log) if what == "plan"]
    assert len(plans) == 2
    for at in plans:
        assert log[at + 1] == "sync", log[at:at + 3]


def test_capture_refuses_a_host_wait_a_read_back_and_a_copy():
    fake = FakeBackend()
    ops = fake.graph_ops()
    a, z, bias = np.ones(4), np.ones((2, 2)), np.ones(2)
    event = fake.new_event()
    event.record(fake.new_stream())
    for act in (fake.synchronize, lambda: fake.asnumpy(a), lambda: fake.host_wait(event),
                lambda: fake.copy_to_device_async(a, a.copy(), fake.new_stream())):
        with pytest.raises(CaptureError, match="during graph capture"):
            ops.capture(lambda: (ops.bias_add(z, bias), act()))
    graph = ops.capture(lambda: ops.bias_add(z, bias))
    assert np.array_equal(z, np.ones((2, 2)))   # captured, not run
    graph.replay()
    graph.replay()
    assert np.array_equal(z, np.full((2, 2), 3.0))


def test_padding_past_a_batchs_entries_changes_no_bit():
    """A plan grown for a batch with many entries stages smaller ones in the same capacity, the rest of each
    buffer left as the earlier batch wrote it: the same bits as a plan that never saw the large batch."""
    spec = ModelSpec(1 << 12, 3, (16,), 1, "relu", "sigmoid", "float32", sparse_fan_in=6)
    big, small = batches(spec, 64, 2, seed=5, nnz_scale=4), batches(spec, 64, 6, seed=6)
    grown, m_grown, _ = make(spec, "sgd")
    train(grown, big)
    assert grown.plan.nnz == nnz_class(max(int(b.Xs.indptr[-1]) for b in big))
    plain, m_plain, _ = make(spec, "sgd")
    plain.optimizer.t = grown.optimizer.t
    m_plain.params[...] = m_grown.params
    plain.fresh = True
    assert train(grown, small) == train(plain, small)
    assert plain.plan.nnz < grown.plan.nnz
    np.testing.assert_array_equal(m_grown.params, m_plain.params)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_non_finite_step_changes_nothing_and_is_reported(optimizer):
    spec, n = SHAPES["w4"]
    data = batches(spec, 128, 5, seed=3)
    data[2].Xd[7, 3] = np.nan
    step, model, opt = make(spec, optimizer)
    train(step, data[:2])
    before = state_of(model, opt)
    got = train(step, data[2:3], first=2)
    assert got[0][1] is False
    assert_same(state_of(model, opt), before)           # parameters, m, v, the rows' counts, t
    ref, m_ref, o_ref = make(spec, optimizer, "reduce")
    want = train(ref, data)
    got = train(step, data[3:], first=3)
    assert [ok for _, ok in want] == [True, True, False, True, True] and got == want[3:]
    assert_same(state_of(model, opt), state_of(m_ref, o_ref))


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_checkpoint_taken_after_graph_steps_resumes_bit_for_bit(optimizer):
    spec, n = SHAPES["w4"]
    data = batches(spec, 128, 12, seed=7)
    step, model, opt = make(spec, optimizer)
    train(step, data[:6])
    arrays = {k: np.array(v) for k, v in step.saved_arrays().items()}
    after = train(step, data[6:], first=6)
    resumed, m_res, o_res = make(spec, optimizer, seed=99)      # other initial parameters: the checkpoint's win
    resumed.restore_(arrays, "checkpoint")
    assert train(resumed, data[6:], first=6) == after
    assert_same(state_of(m_res, o_res), state_of(model, opt))


def test_a_slot_holds_a_batch_in_one_buffer():
    spec = ModelSpec(1 << 10, 3, (4,), 1, "relu", "sigmoid", "float32")
    slot = BatchSlot(8, 64, 3, 1 << 10, np.float32, np.float32)
    buf = np.zeros(slot.nbytes, np.uint8)
    views = slot.views(buf)
    assert all(v.ctypes.data % 16 == 0 for v in views.values())
    b = batches(spec, 5, 1)[0]
    n, nnz = slot.fill(views, b, 10, 0.25)
    assert (n, nnz) == (5, int(b.Xs.indptr[-1]))
    assert list(views["scalars"]) == [0.1, 0.25]
    np.testing.assert_array_equal(views["indices"][:nnz], b.Xs.indices)
    np.testing.assert_array_equal(views["Xd"][:5], b.Xd)


@pytest.mark.parametrize("change, reason", [
    (dict(ranks=2), "2 ranks"), (dict(grad_accum=2), "--grad-accum 2"), (dict(optimizer="adagrad"), "adagrad"),
    (dict(wide=True), "--wide"), (dict(weight_decay=1e-4), "--weight-decay")])
def test_what_the_plan_does_not_cover_is_named(change, reason):
    spec = ModelSpec(64, 2, (4,), 1, "relu", "sigmoid", "float32", wide=change.pop("wide", False))
    opt = create_optimizer(change.pop("optimizer", "sgd"), 10, np, weight_decay=change.pop("weight_decay", 0.0))
    assert reason in graph_refusal(spec, opt, **change)
    assert graph_refusal(ModelSpec(64, 2, (4,), 1), create_optimizer("adam", 10, np)) is None


def test_the_gpu_probe_rehearsed_on_the_fake_device():
    """scripts.lab.graph_probe (the launch-cost probe the GPU machine runs) on the fake device: eager and replayed
    runs equal bit for bit, no host wait inside a replayed step."""
    from scripts.lab.graph_probe import probe
    rows = probe(FakeBackend(), ["w1", "w2"], ["sgd", "adam"], steps=12)
    assert len(rows) == 4 and all(r["bitwise_equal"] and r["graph_host_waits_in_steps"] == 0 for r in rows)
