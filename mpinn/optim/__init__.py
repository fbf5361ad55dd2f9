"""Optimizers on the flat parameter buffer, each in its own module, and the learning-rate schedule.

    base      Optimizer: state arrays, regions of the flat buffer, L2 decay, the lazy row update
    sgd       sgd, momentum
    adam      adam (lazy on the hashed block, or exact dense)
    adagrad   adagrad (element-wise, or row-wise on the hashed block)
    ftrl      ftrl (FTRL-Proximal)
    schedule  Schedule: scaling with the global batch, warm-up, decay
    fused     the one-pass update kernels in C (fused.c), with the numpy passes as the fallback

An optimizer holds no learning rate: every step is given the schedule's (Optimizer.step_(..., lr=)).
A new optimizer: a module with an Optimizer subclass (update_, consts, its state's names) and one line
in REGISTRY below; the command line, the defaults and the API read it from there."""
from dataclasses import dataclass
from importlib import import_module

from mpinn.core.errors import MpinnError


@dataclass(frozen=True)
class OptimizerInfo:
    name: str
    where: str          # "module:Class"
    lr: float           # the learning rate when the optimizer is named without --lr (tuned on the click log)
    help: str           # one line for --help
    options: tuple = ()     # the options that only this optimizer reads (given with another: refused)


REGISTRY = {o.name: o for o in (
    OptimizerInfo("sgd", "mpinn.optim.sgd:SGD", 0.3, "p -= lr g"),
    OptimizerInfo("momentum", "mpinn.optim.sgd:Momentum", 0.03,
                  "heavy ball: v = mu v + g, p -= lr v (--momentum mu)", ("momentum",)),
    OptimizerInfo("adam", "mpinn.optim.adam:Adam", 0.002,
                  "Kingma and Ba (on the hashed block lazy: a row's m and v advance only on the steps that "
                  "touch it, and its bias correction counts those steps)"),
    OptimizerInfo("adagrad", "mpinn.optim.adagrad:Adagrad", 0.01,
                  "Duchi et al., per element (--adagrad-rowwise: one accumulator per hashed row)",
                  ("adagrad_rowwise",)),
    OptimizerInfo("ftrl", "mpinn.optim.ftrl:FTRL", 1.0,
                  "FTRL-Proximal per coordinate (McMahan et al. 2013; --lr is its alpha, --ftrl-beta, --l1, "
                  "--l2), the classic click-through-rate optimizer; --l1 keeps weights the gradients push to "
                  "zero at exactly zero", ("l1", "l2", "ftrl_beta")),
)}
OPTIMIZERS = tuple(REGISTRY)


def optimizer_help():
    """--optimizer's help: one line per optimizer, from the registry (its own rate, which the wide shape's adagrad
    does not use: that one runs at the shape's 0.05)."""
    return "; ".join("%s: %s (lr %g when named without --lr; the model shape's default optimizer comes with the "
                     "shape's rate, see the epilog)" % (o.name, o.help, o.lr) if o.name == "adagrad" else
                     "%s: %s (lr %g when named without --lr)" % (o.name, o.help, o.lr) for o in REGISTRY.values())


def create_optimizer(name, size, xp, weight_decay=0.0, weight_slices=(), table=(0, 0), hashed_update="lazy",
                     momentum=0.9, adagrad_rowwise=False, l1=0.0, l2=0.0, ftrl_beta=1.0):
    """The optimizer `name` for a flat buffer of `size` elements whose first table[0] x table[1]
    elements are the hashed block (see Optimizer for hashed_update); each optimizer takes its own
    options (REGISTRY's `options`) and ignores the others'."""
    info = REGISTRY.get(name)
    if info is None:
        raise MpinnError("optimizer must be one of %s, not %r" % (", ".join(OPTIMIZERS), name))
    module, cls = info.where.split(":")
    own = {"momentum": {"momentum": momentum}, "adagrad": {"rowwise": adagrad_rowwise},
           "ftrl": {"l1": l1, "l2": l2, "beta": ftrl_beta}}.get(name, {})
    return getattr(import_module(module), cls)(size, xp, weight_decay=weight_decay, weight_slices=weight_slices,
                                               table=table, hashed_update=hashed_update, **own)
