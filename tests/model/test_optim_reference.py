"""Every optimizer, with every learning-rate schedule, with and without weight decay, against the plain
float64 reference written from its published update rule (tests/reference.py): 30 steps of a tiny model
with hashed and numeric inputs, mpinn's update (the C kernels and the numpy passes alike) equal to the
reference to 1e-12 of the parameters' scale. The schedule itself against the reference formulas."""
import numpy as np
import pytest
import scipy.sparse as sp

from reference import Reference, lr_at
from mpinn.core.batch import Batch, densify_
from mpinn.core.spec import ModelSpec
from mpinn.model.mlp import MLP
from mpinn.optim import create_optimizer
from mpinn.optim.schedule import make_schedule

STEPS, BATCH, N_SPARSE = 30, 6, 40
SPEC = ModelSpec(N_SPARSE, 3, (5,), 2, "tanh", "softmax", "float64", sparse_fan_in=2.0)

# name -> (optimizer, create_optimizer's keywords, Reference's keywords, the base learning rate)
VARIANTS = {
    "sgd": ("sgd", {}, {}, 0.3),
    "momentum": ("momentum", {"momentum": 0.8}, {"momentum": 0.8}, 0.1),
    "adam": ("adam", {}, {}, 0.02),
    "adam-dense": ("adam", {"hashed_update": "dense"}, {"lazy": False}, 0.02),
    "adagrad": ("adagrad", {}, {}, 0.1),
    "adagrad-rowwise": ("adagrad", {"adagrad_rowwise": True}, {"rowwise": True}, 0.1),
    "ftrl": ("ftrl", {"l1": 0.002, "l2": 0.01, "ftrl_beta": 0.5}, {"l1": 0.002, "l2": 0.01, "beta": 0.5}, 0.5),
}
# name -> make_schedule's keywords (the run's total is STEPS) and the reference's
SCHEDULES = {
    "constant": {},
    "warmup": {"warmup_steps": 10},
    "cosine": {"warmup_steps": 5, "decay": "cosine"},
    "step": {"decay": "step"},
    "linear-scaling": {"scaling": "linear", "base_batch": 2, "warmup_steps": 5},
}


def data(seed=3):
    """A stream of mini-batches: hashed columns drawn from a skewed distribution (some rows touched often,
    some rarely), 3 numeric columns, 2 classes."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(STEPS):
        nnz = rng.integers(1, 4, BATCH)
        indptr = np.r_[0, np.cumsum(nnz)]
        cols = np.minimum(rng.geometric(0.12, indptr[-1]) - 1, N_SPARSE - 1)
        Xs = sp.csr_matrix((rng.random(indptr[-1]) + 0.5, cols, indptr), shape=(BATCH, N_SPARSE))
        Xs.sum_duplicates()
        out.append(Batch(Xs, rng.standard_normal((BATCH, 3)), rng.integers(0, 2, BATCH)))
    return out


def schedule_kw(name):
    kw = dict(SCHEDULES[name])
    ref = {"warmup": kw.get("warmup_steps", 0), "decay": kw.get("decay", "none"), "total": STEPS,
           "scaling": kw.get("scaling", "none"), "ratio": BATCH / kw["base_batch"] if "base_batch" in kw else 1.0}
    return dict(kw, total_steps=STEPS, global_batch=BATCH), ref


def train_mpinn(variant, schedule, weight_decay, fused=True):
    name, kw, _, lr = VARIANTS[variant]
    model = MLP(SPEC).init_(0)
    opt = create_optimizer(name, model.size, np, weight_decay, model.weight_slices, table=model.table, **kw)
    if not fused:
        opt.fused_library = lambda dtype: None
    sched_kw, _ = schedule_kw(schedule)
    rate = make_schedule(lr, **sched_kw)
    for s, batch in enumerate(data()):
        rows = model.loss_grad_(batch, 1.0 / BATCH, sparse_grad=True)
        if not opt.sparse_ok:
            model.densify_(rows)
            rows = None
        opt.step_(model.params, model.grads, rows, lr=rate(s))
    return model.params.copy()


def train_reference(variant, schedule, weight_decay):
    name, _, ref_kw, lr = VARIANTS[variant]
    model = MLP(SPEC).init_(0)            # the gradient of the reference's own parameters (model.py's, checked
    weights = np.zeros(model.size, bool)  # against finite differences in test_model.py)
    for a, b in model.weight_slices:
        weights[a:b] = True
    ref = Reference(name, model.size, weights, *model.table, weight_decay=weight_decay, **ref_kw)
    _, sched = schedule_kw(schedule)
    for s, batch in enumerate(data()):
        model.loss_grad_(batch, 1.0 / BATCH)
        touched = np.unique(batch.Xs.indices)
        ref.step(model.params, model.grads.copy(), touched, lr_at(s, lr, **sched))
    return model.params.copy()


def assert_close(got, want, what):
    scale = np.max(np.abs(want))
    err = np.max(np.abs(got - want)) / scale
    assert err < 1e-12, "%s: max difference %.3g of the parameters' scale %.3g" % (what, err, scale)


@pytest.mark.parametrize("fused", [True, False], ids=["kernels", "numpy"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01], ids=["no-decay", "decay"])
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_optimizer_follows_its_published_rule_at_every_rate(variant, schedule, weight_decay, fused):
    got = train_mpinn(variant, schedule, weight_decay, fused)
    want = train_reference(variant, schedule, weight_decay)
    assert_close(got, want, "%s, %s schedule, decay %g" % (variant, schedule, weight_decay))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_optimizer_moves_with_the_schedule(variant):
    """A schedule changes where training ends (what an optimizer that folded its rate in at construction
    would not do): cosine decay and warm-up each end elsewhere than the constant rate."""
    constant = train_mpinn(variant, "constant", 0.0)
    for schedule in ("cosine", "warmup"):
        moved = np.max(np.abs(train_mpinn(variant, schedule, 0.0) - constant))
        assert moved > 1e-4, "%s with %s ends %.3g from the constant rate" % (variant, schedule, moved)


def test_ftrl_at_a_changing_rate_is_gradient_descent_at_the_per_coordinate_rate():
    """With l1 = l2 = 0, FTRL-Proximal is online gradient descent with the per-coordinate rate
    eta = alpha / (beta + sqrt(n)) (McMahan et al. 2013, section 3.1): at any schedule of alpha, each step
    is w -= eta g, never a rescaling of the weights themselves."""
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal(20)
    opt = create_optimizer("ftrl", 20, np, ftrl_beta=0.5)
    w, q, n = w0.copy(), w0.copy(), np.zeros(20)
    for s in range(STEPS):
        alpha = lr_at(s, 0.4, warmup=6, decay="cosine", total=STEPS)
        g = rng.standard_normal(20)
        opt.step_(w, g.copy(), lr=alpha)
        n += g * g
        q -= alpha / (0.5 + np.sqrt(n)) * g
    np.testing.assert_allclose(w, q, rtol=1e-11)


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_the_schedule_is_the_reference_formula(schedule):
    kw, ref = schedule_kw(schedule)
    rate = make_schedule(0.1, **kw)
    got = [rate(s) for s in range(STEPS + 5)]
    want = [lr_at(s, 0.1, **ref) for s in range(STEPS + 5)]
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)


def test_the_schedules_at_their_landmarks():
    """Values read off the definitions: linear scaling x4 with a 10-step warm-up from the base rate,
    cosine at half-way is half the target, step decay /10 at half-way and /100 at three quarters."""
    cos = make_schedule(0.1, 512, 128, "linear", 10, "cosine", 110)
    assert cos(0) == 0.1 and cos(5) == pytest.approx(0.25) and cos(10) == pytest.approx(0.4)
    assert cos(60) == pytest.approx(0.2) and cos(110) == pytest.approx(0, abs=1e-12)
    step = make_schedule(0.1, 512, 128, "linear", 10, "step", 110)
    assert step(59) == pytest.approx(0.4) and step(60) == pytest.approx(0.04) and step(85) == pytest.approx(0.004)
    sqrt = make_schedule(0.1, 1024, 256, "sqrt")
    assert sqrt(0) == pytest.approx(0.2) and sqrt.constant
    ramp = make_schedule(0.1, warmup_steps=4)
    assert [ramp(s) for s in range(5)] == pytest.approx([0.025, 0.04375, 0.0625, 0.08125, 0.1])


def test_lazy_rows_differ_from_dense_only_where_the_definition_says():
    """Sanity of the harness: the lazy Adam reference and the dense one differ (untouched rows' moments
    decay only in the dense one), and mpinn's lazy Adam is not its dense Adam."""
    lazy, dense = train_reference("adam", "constant", 0.0), train_reference("adam-dense", "constant", 0.0)
    assert np.max(np.abs(lazy - dense)) > 1e-4
    assert np.max(np.abs(train_mpinn("adam", "constant", 0.0) - dense)) > 1e-4


def test_the_dense_reference_sees_the_whole_gradient():
    """The reference is given the dense gradient; mpinn's lazy path the rows: they are the same numbers."""
    model = MLP(SPEC).init_(0)
    batch = data()[0]
    rows = model.loss_grad_(batch, 1.0, sparse_grad=True)
    buf = model.grad_buffer.copy()
    densify_(buf, rows)
    model.loss_grad_(batch, 1.0)
    np.testing.assert_array_equal(buf[:-1], model.grad_buffer[:-1])
