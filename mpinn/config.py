"""Leaf module: the user-facing error type and the model specification."""
from dataclasses import asdict, dataclass, field

ACTIVATIONS = ("sigmoid", "relu", "tanh")
LOSSES = ("softmax", "sigmoid", "squared")
DTYPES = ("float32", "float64")


def run_one_process(run, args):
    """The entry point of a one-process command (predict, prepare): a MpinnError is one line on
    stderr and its exit code (2 for bad input), never a traceback."""
    import sys
    try:
        return run(args)
    except MpinnError as e:
        print("mpinn: error: %s" % e, file=sys.stderr)
        return e.code


class MpinnError(Exception):
    """A problem the user can fix (bad input, bad option): reported as one line, exit code 2
    (or `code`, e.g. 4 when training diverged). `collective` means every rank raised it together
    (so the job can end without MPI_Abort)."""

    def __init__(self, message, collective=False, code=2):
        super().__init__(message)
        self.collective = collective
        self.code = code


@dataclass
class ModelSpec:
    n_sparse: int                 # hashed sparse input columns (0: no sparse input)
    n_dense: int                  # dense input features
    hidden: tuple                 # widths of the hidden layers
    n_out: int                    # softmax: classes; sigmoid: 1 (binary) or classes (one-vs-all); squared: targets
    activation: str = "relu"      # hidden activation: sigmoid | relu | tanh
    loss: str = "softmax"         # softmax (cross-entropy) | sigmoid (cross-entropy per output) | squared
    dtype: str = "float32"        # parameter and compute dtype
    sparse_fan_in: float = 1.0    # mean non-zeros per sparse row: the first layer's effective fan-in
    extra: dict = field(default_factory=dict)  # free-form notes kept in the model file

    def __post_init__(self):
        self.hidden = tuple(int(h) for h in self.hidden)
        if self.activation not in ACTIVATIONS:
            raise MpinnError("activation must be one of %s, not %r" % ("|".join(ACTIVATIONS), self.activation))
        if self.loss not in LOSSES:
            raise MpinnError("loss must be one of %s, not %r" % ("|".join(LOSSES), self.loss))
        if self.dtype not in DTYPES:
            raise MpinnError("dtype must be float32 or float64, not %r" % self.dtype)
        if self.n_sparse + self.n_dense <= 0:
            raise MpinnError("the model has no input features")
        if self.n_out <= 0 or any(h <= 0 for h in self.hidden):
            raise MpinnError("layer widths must be positive")

    @property
    def layer_sizes(self):
        return (self.n_sparse + self.n_dense,) + self.hidden + (self.n_out,)

    def to_dict(self):
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        return d

    @classmethod
    def from_dict(cls, d):
        return cls(**d)


# ---------------------------------------------------------------- the process's heap (glibc)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def _mallopt(*settings):
    """glibc's mallopt for each (parameter, value); False where there is no glibc."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        return all(bool(libc.mallopt(p, int(v))) for p, v in settings)
    except (OSError, AttributeError):
        return False


def steady_heap(threshold=1 << 20):
    """Make glibc serve every allocation >= threshold bytes with its own mmap, returned to the OS when
    freed. By default glibc raises that threshold after each large free, after which chunk-sized numpy
    buffers come from a heap that fragments: a process streaming chunks then grows with the row count
    (prepare at 10M rows: +25%). No-op where there is no glibc."""
    return _mallopt((M_MMAP_THRESHOLD, threshold))


def reusing_heap(mmap_threshold=32 << 20, trim_threshold=256 << 20):
    """The opposite trade, for the training loop: serve allocations below 32 MiB from the heap and keep
    up to 256 MiB of freed heap, so that each step's temporaries (activations, gradient rows, received
    batches: the same sizes every step) reuse warm pages. glibc's default maps every allocation of
    128 KiB or more afresh, and frees it back to the OS, until some large free raises that threshold;
    a rank that never freed a large array (every rank but the one that loaded the data) then pays
    page faults for every temporary of every step: on W2 at np 2 that was 0.7 ms of rank 1's 4.4 ms
    step, and the whole job waited for it. No-op where there is no glibc."""
    return _mallopt((M_MMAP_THRESHOLD, mmap_threshold), (M_TRIM_THRESHOLD, trim_threshold))
