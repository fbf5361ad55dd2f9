"""Optimizers on the flat parameter buffer, each in its own module, and the learning-rate schedule.

    base      Optimizer: state arrays, regions of the flat buffer, L2 decay, the lazy row update
    sgd       sgd, momentum
    adam      adam (lazy on the hashed block, or exact dense)
    adagrad   adagrad (element-wise, or row-wise on the hashed block)
    ftrl      ftrl (FTRL-Proximal)
    schedule  lr_schedule: scaling with the global batch, warm-up

A new optimizer: a module with an Optimizer subclass (update_, and its state's names), added to
OPTIMIZERS and DEFAULT_LR here and to --optimizer's help in mpinn/options.py."""
from mpinn.config import MpinnError
from mpinn.optim.base import HASHED_UPDATES, Optimizer  # noqa: F401
from mpinn.optim.schedule import lr_schedule  # noqa: F401

OPTIMIZERS = ("sgd", "momentum", "adam", "adagrad", "ftrl")
DEFAULT_LR = {"sgd": 0.3, "momentum": 0.03, "adam": 0.002, "adagrad": 0.01, "ftrl": 1.0}   # tuned on the click log


def create_optimizer(name, size, xp, lr, weight_decay=0.0, weight_slices=(), momentum=0.9, table=(0, 0),
                     hashed_update="lazy", adagrad_rowwise=False, l1=0.0, l2=0.0, ftrl_beta=1.0):
    """The optimizer `name` for a flat buffer of `size` elements whose first table[0] x table[1]
    elements are the hashed block (see Optimizer for hashed_update)."""
    kw = dict(weight_decay=weight_decay, weight_slices=weight_slices, table=table, hashed_update=hashed_update)
    if name == "sgd":
        from mpinn.optim.sgd import SGD
        return SGD(size, xp, lr, **kw)
    if name == "momentum":
        from mpinn.optim.sgd import Momentum
        return Momentum(size, xp, lr, momentum=momentum, **kw)
    if name == "adam":
        from mpinn.optim.adam import Adam
        return Adam(size, xp, lr, **kw)
    if name == "adagrad":
        from mpinn.optim.adagrad import Adagrad
        return Adagrad(size, xp, lr, rowwise=adagrad_rowwise, **kw)
    if name == "ftrl":
        from mpinn.optim.ftrl import FTRL
        return FTRL(size, xp, lr, l1=l1, l2=l2, beta=ftrl_beta, **kw)
    raise MpinnError("optimizer must be one of %s, not %r" % (", ".join(OPTIMIZERS), name))
