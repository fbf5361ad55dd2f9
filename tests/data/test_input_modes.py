"""Input modes train to the same parameters: (a) rank 0 reads + hashes + scatters, (b) rank 0
scatters rows of a packed file, (c) every rank reads its own rows of it; with and without prefetch."""
import sys

import numpy as np
import pytest

from conftest import mpirun, run

COMMON = ["--epochs", "2", "--batch-size", "300", "--hidden", "8", "--dtype", "float64", "--no-progress"]


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    path = tmp_path_factory.mktemp("packed") / "d.mpinn"
    r = run([sys.executable, "-m", "mpinn.prepare", "--default-rows", "5000", "--hash-bits", "12",
             "--out", str(path), "--quiet"])
    assert r.returncode == 0, r.stderr
    return str(path)


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
def test_every_input_mode_gives_the_same_parameters(tmp_path, packed, n, launcher):
    runs = {
        "a: read+hash+scatter": ["--default-rows", "5000", "--hash-bits", "12"],
        "a without prefetch": ["--default-rows", "5000", "--hash-bits", "12", "--no-prefetch"],
        "b: packed, scatter": [packed],
        "c: packed, every rank reads": [packed, "--input", "local"],
        "c without prefetch": [packed, "--input", "local", "--no-prefetch"],
    }
    params = {}
    for name, args in runs.items():
        out = str(tmp_path / "m.npz")
        r = mpirun(n, ["-m", "mpinn.train"] + args + COMMON + ["--model-out", out])
        assert r.returncode == 0, (name, r.stderr)
        assert "ms/step" in r.stdout
        with np.load(out) as z:
            params[name] = z["params"]
    ref = params["a: read+hash+scatter"]
    for name, p in params.items():
        assert np.array_equal(p, ref), name          # bitwise: the same rows reach the same ranks


@pytest.mark.mpi
def test_local_input_needs_a_packed_file(tmp_path, launcher):
    r = mpirun(2, ["-m", "mpinn.train", "--input", "local", "--no-progress"])
    assert r.returncode == 2 and "--input local needs a packed file" in r.stderr


def test_block_shuffle_is_a_permutation_of_whole_blocks():
    from mpinn.training.feed import epoch_order
    lazy = epoch_order(101, 3, 2, 8)
    order = np.asarray(lazy)
    assert sorted(order) == list(range(101))
    for B in (1, 5, 8, 13, 100):     # made a slice at a time, it is the same order
        assert all(np.array_equal(lazy[s:s + B], order[s:s + B]) for s in range(0, 101, B))
    runs = np.split(order, np.flatnonzero(np.diff(order) != 1) + 1)
    assert all(r[0] % 8 == 0 and (len(r) % 8 == 0 or r[-1] == 100) for r in runs)
    assert not np.array_equal(order, np.arange(101))
    rows = epoch_order(101, 3, 2, 1)
    assert np.array_equal(rows, np.random.default_rng([3, 2]).permutation(101))   # the default is unchanged


@pytest.mark.mpi
def test_block_shuffle_gives_the_same_parameters_in_every_mode(tmp_path, packed, launcher):
    params = []
    for args in (["--default-rows", "5000", "--hash-bits", "12"], [packed], [packed, "--input", "local"]):
        out = str(tmp_path / "m.npz")
        r = mpirun(2, ["-m", "mpinn.train"] + args + COMMON + ["--shuffle-block", "16", "--model-out", out])
        assert r.returncode == 0, r.stderr
        with np.load(out) as z:
            params.append(z["params"])
    assert all(np.array_equal(p, params[0]) for p in params)
