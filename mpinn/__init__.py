"""mpinn: MPI data-parallel training of neural networks on wide sparse and dense tabular data."""

__version__ = "0.1.0"

from mpinn.config import MpinnError, ModelSpec  # noqa: E402,F401
