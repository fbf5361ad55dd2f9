"""The trainer with a graph step (GraphStep) on the fake device at one rank, as the plan makes it for a GPU: two
epochs with held-out evaluations, a skipped step and a checkpoint equal the eager step's run (--graph off) bit for
bit, the results read when they settle (the ring, evaluations, epoch ends)."""
import numpy as np
import pytest

from fake_device import FakeBackend
from ranks import make_trainer, toy_data
from mpinn.comm.gpu import DeviceAllreduceCommunicator
from mpinn.comm.topology import Topology
from mpinn.core.batch import Layout
from mpinn.core.spec import ModelSpec
from mpinn.data import Dataset
from mpinn.model.mlp import MLP
from mpinn.optim import create_optimizer
from mpinn.training.graph_step import GraphStep
from mpinn.training.steps import ReduceStep

SPEC = ModelSpec(64, 3, (8, 6), 3, "tanh", "softmax", "float64", sparse_fan_in=2.5)
CLOCK = ("seconds", "elapsed", "eval_seconds", "time")
ONE_GPU = Topology.of_nodes([0], devices=(("cupy", "gpu 0", ("h", "bus0"), None),), cuda_aware=((False, "test"),))


def fit(graph, optimizer, epochs=2, poison=None, **options):
    fake = FakeBackend()
    model = MLP(SPEC, fake).init_(0)
    opt = create_optimizer(optimizer, model.size, model.xp, table=model.table)
    t = make_trainer(model, opt, Layout(64, 3, "float64", "int64"), 12, device="gpu", graph=graph,
                     topology=ONE_GPU, communicator=lambda plan: DeviceAllreduceCommunicator(
                         None, fake, "none", sparse_threshold=plan.sparse_threshold), **options)
    t.start()
    Xs, Xd, y = toy_data(n=100)
    if poison is not None:
        Xd[poison] = np.nan
    logged = []
    t.log = logged.append
    history = t.fit(Dataset(Xs, Xd, y, {"task": "multiclass"}), Dataset(Xs, Xd, y, {"task": "multiclass"}), epochs,
                    progress=False)
    return model.params.copy(), history, t, logged


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_graph_run_is_the_eager_run_bit_for_bit(optimizer):
    p_graph, h_graph, t_graph, log_graph = fit("auto", optimizer, eval_every=3, poison=[17])
    p_eager, h_eager, t_eager, log_eager = fit("off", optimizer, eval_every=3, poison=[17])
    assert isinstance(t_graph.stepper, GraphStep) and type(t_eager.stepper) is ReduceStep
    assert t_graph.plan.device_note.endswith("step: one captured CUDA graph a step (--graph auto)")
    np.testing.assert_array_equal(p_graph, p_eager)
    strip = [{k: v for k, v in r.items() if k not in CLOCK} for r in h_graph]
    assert strip == [{k: v for k, v in r.items() if k not in CLOCK} for r in h_eager]
    skipped = [line for line in log_graph if "skipped" in line]
    assert skipped and skipped == [line for line in log_eager if "skipped" in line]
    assert t_graph.skipped == t_eager.skipped > 0 and t_graph.optimizer.t == t_eager.optimizer.t
    assert t_graph.stepper.captured == 2
    # the timeline's count of the host's waits on the device inside each step: none after the first (it makes the
    # plan); the eager step waits for its verdict every step
    waits = t_graph.timeline.syncs
    assert waits and max(n for s, n in waits.items() if s > 1) == 0, waits
    assert min(n for s, n in t_eager.timeline.syncs.items() if s > 1) >= 1, t_eager.timeline.syncs
