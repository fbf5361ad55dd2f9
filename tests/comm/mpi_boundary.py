"""Buffers at the MPI boundary: the Fortran-order pitfall, the checks, collectives in closed form."""
import numpy as np
import pytest
import scipy.io

from ranks import COMM, agree
from mpinn.comm import check_buffer, create_communicator
from mpinn.core.errors import MpinnError
from mpinn.data import load_mat


def test_allreduce_closed_form():
    c = create_communicator("allreduce")
    buf = np.full(5, float(c.rank))
    c.Allreduce_sum_(buf)
    agree(np.all(buf == c.size * (c.size - 1) / 2))


def test_fortran_order_pitfall(tmp_path_factory):
    """A Fortran-ordered array sent raw arrives scrambled; mpinn's loading path sends it right."""
    c = create_communicator("allreduce")
    X = np.arange(12, dtype=np.float64).reshape(3, 4)
    path = None
    if c.rank == 0:
        path = str(tmp_path_factory.mktemp("mat") / "ex.mat")
        scipy.io.savemat(path, {"X": X, "y": np.array([[1], [2], [10]])})
    path = COMM.bcast(path)
    raw = scipy.io.loadmat(path)["X"]
    agree(raw.flags.f_contiguous and not raw.flags.c_contiguous, "loadmat gives Fortran order")
    # the raw way: rank 0 sends loadmat's array as it is; receivers lay the bytes out in C order
    buf = raw if c.rank == 0 else np.empty((3, 4))
    c.comm.Bcast(buf, root=0)
    if c.size > 1 and c.rank > 0:
        agree(not np.array_equal(buf, X) and np.array_equal(buf, X.T.reshape(3, 4)), "scrambled")
    else:
        agree(True)
    # mpinn refuses to send it ...
    with pytest.raises(ValueError, match="C-contiguous"):
        check_buffer(raw, np.float64, 12, "X")
    # ... and its loader converts it where it enters
    X_loaded = load_mat(path).Xd if c.rank == 0 else np.empty((3, 4))
    c.Bcast_(X_loaded, root=0)
    agree(np.array_equal(X_loaded, X))


def test_boundary_check_dtype_and_length():
    with pytest.raises(ValueError, match="dtype"):
        check_buffer(np.zeros(3, np.float32), np.float64, 3)
    with pytest.raises(ValueError, match="elements"):
        check_buffer(np.zeros(3), np.float64, 4)
    with pytest.raises(ValueError, match="C-contiguous"):
        check_buffer(np.zeros((4, 4))[:, ::2], np.float64, 8)


def test_signature_mismatch_names_the_rank():
    c = create_communicator("allreduce")
    c.check_signature({"mpinn": "x", "size": 10})             # all equal: passes
    if c.size == 1:
        return
    sig = {"mpinn": "x", "size": 10 + (c.rank == c.size - 1)}
    with pytest.raises(MpinnError, match="rank %d does not match rank 0" % (c.size - 1)) as e:
        c.check_signature(sig)
    agree(e.value.collective)
