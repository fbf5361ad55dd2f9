"""--overlap (Iallreduce buckets posted during backward) against the plain blocking exchange."""
import numpy as np
import pytest

from ranks import COMM, agree, make_trainer, toy_data
from mpinn.comm import create_communicator
from mpinn.comm.overlap import OverlappedReduce
from mpinn.core.errors import MpinnError
from mpinn.core.spec import ModelSpec
from mpinn.core.batch import Layout
from mpinn.core.batch import Batch
from mpinn.model.mlp import MLP
from mpinn.optim import create_optimizer
from mpinn.training import Faults, Hooks


def make(overlap, optimizer="sgd", threshold=0.25, hidden=(8, 6), n_sparse=64, bucket=1 << 16, faults=None):
    spec = ModelSpec(n_sparse, 3, hidden, 3, "tanh", "softmax", "float64", sparse_fan_in=2.5)
    model = MLP(spec).init_(0)
    opt = create_optimizer(optimizer, model.size, np, 0.0, model.weight_slices)
    t = make_trainer(model, opt, Layout(n_sparse, 3, "float64", "int64"), 12, overlap=overlap,
                     sparse_threshold=threshold, hooks=Hooks(faults=faults))
    t.stepper.bucket = bucket
    t.start()
    return t


def run(t, batch, steps):
    Xs, Xd, y = toy_data()
    if not t.model.spec.n_sparse:
        Xs = None
    oks = []
    for s in range(steps):
        rows = np.arange(s * batch, (s + 1) * batch) % len(y)
        b = Batch(Xs[rows] if Xs is not None else None, Xd[rows], y[rows]) if t.rank0 else None
        _, ok = t.step(b, len(rows))
        t.global_step += 1
        oks.append(ok)
    return t.model.params.copy(), oks


@pytest.mark.parametrize("batch", [2, 7, 12])       # 2 at np = 3: a rank with no rows
@pytest.mark.parametrize("threshold", [0.0, 10.0])  # sparse block dense / as rows
@pytest.mark.parametrize("bucket", [1, 1 << 16])    # a bucket per layer / one for layers >= 1
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_overlap_gives_the_plain_parameters(batch, threshold, bucket, optimizer):
    plain, _ = run(make(False, optimizer, threshold), batch, 6)
    got, oks = run(make(True, optimizer, threshold, bucket=bucket), batch, 6)
    diff = float(np.max(np.abs(got - plain)))
    agree(all(oks) and diff < 1e-12, "max diff %g" % diff)
    everyone = COMM.allgather(got)
    agree(all(np.array_equal(everyone[0], p) for p in everyone), "ranks differ")


@pytest.mark.parametrize("hidden", [(), (5,), (8, 6, 4)])
def test_overlap_dense_models_of_any_depth(hidden):
    plain, _ = run(make(False, hidden=hidden, n_sparse=0), 7, 5)
    got, oks = run(make(True, hidden=hidden, n_sparse=0, bucket=1), 7, 5)
    diff = float(np.max(np.abs(got - plain)))
    agree(all(oks) and diff < 1e-12, "max diff %g" % diff)


def test_buckets_are_planned_from_the_layout_only():
    buf = np.zeros(101)
    c = create_communicator("allreduce")
    plan = OverlappedReduce(c, buf, [0, 40, 70, 90], 15)
    c.comm.Free()
    # from the top: [90, 101) has 11 < 15, merged with [70, 90) -> [70, 101); [40, 70); layer 0 [.., 40)
    agree(plan.buckets == [(70, 101), (40, 70)] and plan.first_end == 40, str(plan.buckets))


def test_a_nan_on_one_rank_skips_the_overlapped_step_everywhere():
    bad = Faults("nan:%d:2" % (COMM.size - 1), COMM.rank)
    got, oks = run(make(True, faults=bad), 12, 3)
    agree(oks == [True, False, True], "verdicts %s" % oks)


def test_overlap_refuses_what_it_cannot_do():
    model = MLP(ModelSpec(0, 3, (4,), 2, "relu", "softmax", "float64")).init_(0)
    opt = create_optimizer("sgd", model.size, np)
    for kw in ({"reduce": "gather"}, {"grad_accum": 2}):
        with pytest.raises(MpinnError, match="--overlap needs"):      # the rule table (mpinn.settings.rules)
            make_trainer(model, opt, Layout(0, 3, "float64", "int64"), 4, overlap=True, **kw)
