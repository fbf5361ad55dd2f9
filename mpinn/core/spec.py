"""The model specification: the shape a model file records and every model is built from."""
from dataclasses import asdict, dataclass, field

from mpinn.core.errors import MpinnError

ACTIVATIONS = ("sigmoid", "relu", "tanh")
LOSSES = ("softmax", "sigmoid", "squared")
DTYPES = ("float32", "float64")


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
    wide: bool = False            # wide and deep: the inputs also feed the output directly (a linear model
                                  # beside the hidden layers, trained jointly; Cheng et al. 2016)
    periodic: dict = None         # periodic embeddings of the first `columns` dense inputs (mpinn.model.periodic): their
                                  # m*d outputs are the first layer's last inputs; None: none

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
        p = self.periodic
        if p is not None:
            if not isinstance(p, dict) or set(p) != {"columns", "frequencies", "width", "sigma"} or not all(
                    isinstance(p[k], int) and p[k] > 0 for k in ("columns", "frequencies", "width")):
                raise MpinnError("periodic embeddings want positive columns, frequencies and width and a sigma, "
                                 "not %r" % (p,))
            if p["columns"] > self.n_dense:
                raise MpinnError("periodic embeddings of %d columns asked for, with %d dense inputs"
                                 % (p["columns"], self.n_dense))

    @property
    def layer_sizes(self):
        return (self.n_sparse + self.n_dense + self.periodic_width,) + self.hidden + (self.n_out,)

    @property
    def periodic_width(self):
        """The first layer's inputs that the periodic embeddings add (0 without them)."""
        p = self.periodic
        return int(p["columns"]) * int(p["width"]) if p else 0

    @property
    def periodic_size(self):
        """The periodic embeddings' parameters (0 without them): per column, k frequencies, W (2k, d), b (d)."""
        p = self.periodic
        if not p:
            return 0
        k, d = int(p["frequencies"]), int(p["width"])
        return int(p["columns"]) * (k + (2 * k + 1) * d)

    @property
    def first_width(self):
        """The first layer's output columns: the first hidden layer's, then (wide) the n_out columns of the
        linear part, which go straight to the output. Also the hashed table's row width."""
        return self.layer_sizes[1] + (self.n_out if self.has_wide else 0)

    @property
    def n_params(self):
        """The parameters' count: every layer's weights and biases (the MLP's flat buffer, mpinn.model.mlp)."""
        sizes = self.layer_sizes
        outs = (self.first_width,) + sizes[2:]
        return sum(fin * fout + fout for fin, fout in zip(sizes[:-1], outs)) + self.periodic_size

    @property
    def has_wide(self):
        """Is there a linear part beside hidden layers? (Without hidden layers the model is linear already.)"""
        return bool(self.wide and self.hidden)

    def to_dict(self):
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        return d

    @classmethod
    def from_dict(cls, d):
        return cls(**d)         # a model file from before the wide path has no "wide": False
