"""The defaults that depend on what the model looks like: one table, one function (the optimizer issue's
optimizers slot in here)."""
import math

# model shape -> the training defaults for it (what --help lists); measured on real data sets, see
# the README's "Your data" and scripts/real_data.py
DEFAULTS = {
    # hashed categorical inputs (a wide first layer, most rows untouched by a batch): SGD updates only
    # the rows a batch touches, so a step costs the batch, not the 2^18-row table
    "wide": {"optimizer": "sgd", "lr": 0.3, "batch_size": "auto", "epochs": 30, "lr_decay": "none",
             "early_stop": 3},
    # numeric inputs only
    "dense": {"optimizer": "adam", "lr": 0.001, "batch_size": "auto", "epochs": 30, "lr_decay": "none",
              "early_stop": 3},
    # a regression head (on the standardised target), any inputs
    "regression": {"optimizer": "adam", "lr": 0.003, "batch_size": "auto", "epochs": 30, "lr_decay": "none",
                   "early_stop": 3},
}
# the learning rate of an optimizer chosen by name without --lr (api passes mpinn.optim.DEFAULT_LR)
LR_OF = {"sgd": 0.3, "momentum": 0.03, "adam": 0.002}


def model_shape(n_sparse, task):
    """wide (hashed inputs), dense (numeric inputs only) or regression."""
    if task == "regression":
        return "regression"
    return "wide" if n_sparse else "dense"


def default_optimizer(shape):
    """The defaults of a model shape: optimizer, lr, batch_size, epochs, lr_decay, early_stop."""
    return dict(DEFAULTS[shape])


def auto_batch(n_train):
    """The global batch for n training rows: about 250 steps an epoch (small data sets need steps more
    than big batches), rounded down to a power of two, between 128 and 1024."""
    return int(min(1024, max(128, 2 ** int(math.floor(math.log2(max(n_train, 1) / 250.0))))))


def resolve(args, shape, n_train, lr_of=None):
    """Fill the options left unset (None) with the shape's defaults; an optimizer named without --lr
    gets that optimizer's rate. Returns the names of the options filled in."""
    d = default_optimizer(shape)
    filled = []
    if args.optimizer is None:
        args.optimizer = d["optimizer"]
        filled.append("optimizer")
    if args.lr is None:     # the shape's rate goes with the shape's optimizer, not with one named
        args.lr = d["lr"] if "optimizer" in filled else (lr_of or LR_OF)[args.optimizer]
        filled.append("lr")
    if args.batch_size is None and not args.batch_per_rank:
        args.batch_size = auto_batch(n_train) if d["batch_size"] == "auto" else d["batch_size"]
        filled.append("batch_size")
    for key in ("epochs", "lr_decay", "early_stop"):
        if getattr(args, key) is None:
            setattr(args, key, d[key])
            filled.append(key)
    return filled


def help_table():
    """The defaults per shape, for --help."""
    return "; ".join("%s: %s lr %g, %d epochs at most, --lr-decay %s, --early-stop %d" % (
        shape, d["optimizer"], d["lr"], d["epochs"], d["lr_decay"], d["early_stop"])
        for shape, d in DEFAULTS.items()) + "; every shape: global batch n/250 rounded down to a power of " \
        "two, between 128 and 1024 (about 250 steps an epoch), --keep best, --stop-metric logloss (rmse)"
