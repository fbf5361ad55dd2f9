"""SGD and momentum."""
import numpy as np

from mpinn.optim import fused
from mpinn.optim.base import Optimizer


class SGD(Optimizer):
    """p -= lr * g. Lazy on the hashed block without decay is exactly the dense update."""

    name = "sgd"
    kernel = "sgd"

    def consts(self, weight, rows, lr):
        return fused.consts("sgd", lr=lr, wd=self.weight_decay if rows else 0.0)

    def update_(self, p, g, st, weight, row_st, lr):
        g *= p.dtype.type(lr)           # the gradient is scratch: scaled in place (no temporary)
        p -= g


class Momentum(Optimizer):
    """v = mu v + g; p -= lr v (heavy ball, as PyTorch's SGD with momentum: the rate multiplies the
    velocity, so a schedule changes the step at once). Lazy on the hashed block: a row's velocity
    decays and moves it only on the steps that touch it."""

    name = "momentum"
    kernel = "momentum"
    element_state = ("v",)

    def __init__(self, size, xp, momentum=0.9, **kw):
        super().__init__(size, xp, **kw)
        self.mu = float(momentum)

    def consts(self, weight, rows, lr):
        return fused.consts("momentum", lr=lr, mu=self.mu, wd=self.weight_decay if rows else 0.0)

    def update_(self, p, g, st, weight, row_st, lr):
        v = st["v"]
        v *= p.dtype.type(self.mu)
        v += g
        g[...] = v                      # g is scratch
        g *= p.dtype.type(lr)
        p -= g
