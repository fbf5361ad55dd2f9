"""mpinn: MPI data-parallel training of neural networks on wide sparse and dense tabular data."""

__version__ = "0.1.0"

from mpinn.core.errors import MpinnError  # noqa: E402,F401
from mpinn.core.spec import ModelSpec  # noqa: E402,F401
