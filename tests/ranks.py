"""For the multi-rank tests (mpi_*.py, run only under mpiexec by tests/test_mpi.py): the world
communicator and `agree`, which makes every rank fail a test together so the next test's collectives
stay aligned; toy_data, the small mixed data set they train on; make_optimizer, every optimizer by name. conftest.py silences pytest's output on ranks > 0 in that run."""
import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from mpinn.optim import create_optimizer
from mpinn.optim.schedule import make_schedule
from mpinn.settings import fixed

COMM = MPI.COMM_WORLD


def agree(ok, message=""):
    """Assert on every rank that `ok` holds on every rank."""
    verdicts = COMM.allgather((bool(ok), message))
    bad = [(r, m) for r, (v, m) in enumerate(verdicts) if not v]
    assert not bad, "failed on ranks %s" % bad


def toy_data(n=40, n_sparse=64, n_dense=3, k=3, seed=5):
    """(CSR rows, dense columns, integer labels) of n rows."""
    rng = np.random.default_rng(seed)
    nnz_per_row = rng.integers(1, 5, n)
    indptr = np.r_[0, np.cumsum(nnz_per_row)]
    Xs = sp.csr_matrix((rng.random(indptr[-1]), rng.integers(0, n_sparse, indptr[-1]), indptr),
                       shape=(n, n_sparse))
    Xd = rng.standard_normal((n, n_dense))
    y = rng.integers(0, k, n)
    return Xs, Xd, y


OPTIMIZERS = ["sgd", "momentum", "adam", "adam-dense", "adagrad", "adagrad-rowwise", "ftrl"]


LR = 0.05         # the tests' learning rate (make_trainer's constant schedule)


def make_optimizer(name, model, weight_decay=0.0):
    """An optimizer by test name: adam-dense is --hashed-update dense, adagrad-rowwise --adagrad-rowwise,
    ftrl has some L1 and L2."""
    kw = {"adam-dense": dict(hashed_update="dense"), "adagrad-rowwise": dict(adagrad_rowwise=True),
          "ftrl": dict(l1=1e-3, l2=1e-2)}.get(name, {})
    return create_optimizer(name.split("-")[0], model.size, np, weight_decay, model.weight_slices,
                            table=model.table, **kw)


def make_trainer(model, optimizer, layout, batch, lr=LR, schedule=None, hooks=None, mpi_comm=None, topology=None,
                 hot=(), communicator=None, **options):
    """A Trainer made by hand, as mpinn.training.run makes one: a configuration fixed from the options (keywords of
    mpinn.api.train; quiet), its plan on this job (probed on mpi_comm, default the world; or `topology`, e.g. one
    machine cut into 'nodes'), the communicator (or communicator(plan): the test's own, e.g. a fake device's) and
    the step built from the plan, a constant rate lr (or the given schedule)."""
    from mpinn.comm.topology import probe
    from mpinn.settings import make_plan
    from mpinn.training import Trainer
    from mpinn.training.build import build_step, communicator as plan_communicator
    cfg = fixed(batch, quiet=True, **options)
    topology = topology or probe(mpi_comm or COMM, cfg.device, nccl=cfg.comm == "nccl")
    plan = make_plan(cfg, topology, model.spec, optimizer)
    comm = communicator(plan) if communicator else plan_communicator(plan, mpi_comm, model.backend)
    step = build_step(plan, comm, model, optimizer, hooks.faults if hooks else None, hot=hot)
    trainer = Trainer(plan.cfg, model, optimizer, schedule or make_schedule(lr), step, layout, hooks)
    trainer.plan = plan         # for the tests that look at what was planned
    return trainer


def shared_dir(prefix="mpinn-test-"):
    """A temporary directory rank 0 makes and every rank knows."""
    import tempfile
    d = tempfile.mkdtemp(prefix=prefix) if COMM.rank == 0 else None
    return COMM.bcast(d)


def restore_then_start(trainer, directory, optimizer):
    """Restore trainer from the checkpoint in directory/a, start it, and write a checkpoint at once to
    directory/b: the arrays written must be the ones read, bit for bit (the optimizer's state as well,
    whatever rank count wrote it and however this one holds it)."""
    import os
    from mpinn.files.checkpoint import load_checkpoint
    from mpinn.training.checkpoints import Checkpoints, restore
    loaded = load_checkpoint(os.path.join(directory, "a")) if trainer.rank0 else (None, None)
    restore(trainer, *loaded)
    trainer.checkpoints = Checkpoints(os.path.join(directory, "b"))
    trainer.start()
    trainer.checkpoints.save(trainer, "step")
    if trainer.rank0:
        again, before = load_checkpoint(os.path.join(directory, "b"))[0], loaded[0]
        assert sorted(again) == sorted(before)
        assert any(k.startswith("opt_") and k != "opt_t" for k in before) or optimizer == "sgd"
        for k in before:
            assert np.array_equal(again[k], before[k]), k


def write_checkpoint(trainer, directory):
    """A checkpoint of the trainer's state now, written into directory (the loop's checkpoints do the same)."""
    from mpinn.training.checkpoints import Checkpoints
    trainer.checkpoints = Checkpoints(directory)
    trainer.checkpoints.save(trainer, "step")
