"""Running out of memory is one line that says what was being allocated, the limit in force and what to do, exit 2:
a model that cannot fit a rank's address space (ulimit -v) is refused before it is allocated (the job rule
model-address-space, as model-memory refuses one the machine cannot hold), and an allocation that fails later is
reported in the same words."""
import sys

import pytest

from conftest import run
from launch import launch
from mpinn.comm.topology import Topology
from mpinn.core.spec import ModelSpec
from mpinn.settings import fixed
from mpinn.settings.job_rules import ADDRESS_SPACE

GIB = 1 << 30
WIDE = ModelSpec(1 << 22, 4, (64,), 1, "relu", "sigmoid", "float32")     # 2 GiB with its gradient
TRAIN = ["-m", "mpinn.train", "--default-rows", "400", "--hidden", "6", "--epochs", "1", "--ensemble", "1", "--quiet"]


def test_a_model_beyond_a_ranks_address_space_is_refused_whatever_the_table():
    """Every rank maps the whole model and its gradient (a sharded table's other rows are mapped, never touched)."""
    limited = Topology.of_nodes([0, 0], address_space=GIB)
    for table in ("replicated", "sharded", "auto"):
        assert ADDRESS_SPACE.broken(fixed(64, table=table), limited, WIDE)
    assert not ADDRESS_SPACE.broken(fixed(64), Topology.of_nodes([0, 0]), WIDE)        # no limit
    assert not ADDRESS_SPACE.broken(fixed(64, device="gpu"), limited, WIDE)            # on the GPUs
    assert ADDRESS_SPACE.message(fixed(64), limited, WIDE) == (
        "the model has %d parameters: they and a gradient of them take 2.0 GiB, more than the 1.0 GiB of address "
        "space a rank may use (ulimit -v, RLIMIT_AS); give a smaller --hash-bits or --hidden, or raise the limit "
        "(ulimit -v unlimited)" % WIDE.n_params)


def test_an_allocation_that_fails_is_one_line_with_the_limits(monkeypatch, tmp_path):
    """Before: a traceback ending in MemoryError or OSError [Errno 12], exit 1."""
    import mpinn.training.run

    def short(*args, **kwargs):
        raise MemoryError("Unable to allocate 3.00 GiB for an array with shape (805306368,) and data type float32")
    monkeypatch.setattr(mpinn.training.run, "MLP", short)
    r = run([sys.executable] + TRAIN + ["--hash-bits", "8", "--model-out", str(tmp_path / "m.npz")])
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert r.stderr.startswith("mpinn: error: out of memory (Unable to allocate 3.00 GiB for an array with shape "
                               "(805306368,) and data type float32): ") and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.rstrip().endswith("give a smaller --hash-bits, --hidden or --batch-size, or more memory")
    assert "the machine has" in r.stderr or "cgroup" in r.stderr
    assert not (tmp_path / "m.npz").exists()


@pytest.mark.launch
@pytest.mark.parametrize("bits,said", [
    (26, "mpinn: error: the model has 469762090 parameters: they and a gradient of them take 3.5 GiB, more than the "
         "1.0 GiB of address space a rank may use (ulimit -v, RLIMIT_AS)"),
    (24, "mpinn: error: out of memory (Unable to allocate "),      # fits the rule; not with Python, numpy and MPI
])
def test_under_ulimit_v_the_line_names_the_limit(tmp_path, bits, said):
    """The issue's case, a real process under `ulimit -v` (1 GiB): before, `OSError: [Errno 12] Cannot allocate
    memory` after a traceback, exit 1, no word of the size needed."""
    cmd = " ".join([sys.executable] + TRAIN + ["--hash-bits", str(bits), "--model-out", str(tmp_path / "m.npz")])
    r = launch(["sh", "-c", "ulimit -v %d && exec %s" % (GIB // 1024, cmd)], timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert r.stderr.startswith(said) and r.stderr.count("\n") == 1, r.stderr[-2000:]
    assert "ulimit -v" in r.stderr and "1.0 GiB" in r.stderr
    assert not (tmp_path / "m.npz").exists()
