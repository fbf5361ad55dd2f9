"""FTRL-Proximal (McMahan et al. 2013, Algorithm 1), per coordinate."""
import numpy as np

from mpinn.optim.base import Optimizer


class FTRL(Optimizer):
    """Per coordinate, with alpha = the learning rate:
        sigma = (sqrt(n + g^2) - sqrt(n)) / alpha;  z += g - sigma w;  n += g^2
        w = 0 where |z| <= l1, else -(z - sign(z) l1) / ((beta + sqrt(n)) / alpha + l2)
    l1 and l2 act on the weights (the biases get 0 and 0); l1 makes weights exactly zero.

    A network starts from random weights w0, not from FTRL's w = 0: z starts where the formula gives
    w0 back, z = -((beta / alpha + l2) w0 + l1 sign(w0)) (with w0 = 0, FTRL's own z = 0), so the
    regularisers act on what the gradients do from there: l1 is the dead zone |z| <= l1 that holds a
    weight the gradients have pushed to zero exactly at zero. z is set for the dense elements at the
    first step, for a row of the hashed block the first time a step touches it (a flag per row). An
    untouched row has g = 0, so neither z nor n changes and its w stays w0: the lazy update of the
    hashed block equals the dense one.

    The state keeps sqrt(n) ("sqrt_n"), not n: a step then takes one square root, not two,
    sqrt(n + g^2) = sqrt(sqrt_n^2 + g^2) (the same to rounding)."""

    name = "ftrl"
    kernel = "ftrl"
    element_state = ("z", "sqrt_n")
    lazy_row_state = ("started",)       # has z been set from the row's weights?
    row_state_dtype = np.int8

    def __init__(self, size, xp, lr, l1=0.0, l2=0.0, beta=1.0, **kw):
        super().__init__(size, xp, lr, **kw)
        self.l1, self.l2, self.beta = float(l1), float(l2), float(beta)
        self.weights_matter = bool(self.l1 or self.l2)      # l1 and l2 act on the weights only
        self._fresh = False

    def first_step_(self, params):
        self._fresh = True

    def step_(self, params, grads, rows=None, lo=0, hi=None, regions=None):
        super().step_(params, grads, rows, lo, hi, regions)
        self._fresh = False

    def consts(self, weight, rows):
        l1, l2 = self._l1_l2(weight)
        return (1.0 / self.lr, -1.0 / self.lr, self.beta, l1, l2, -(self.beta / self.lr + l2),
                self.weight_decay if rows else 0.0)

    def fused_dense_(self, lib, p, g, st, weight):
        if self._fresh:
            self._start_z(p, st["z"], *self._l1_l2(weight))
        super().fused_dense_(lib, p, g, st, weight)

    def _l1_l2(self, weight):
        """The regularisers of weights; biases get none."""
        return (self.l1, self.l2) if weight else (0.0, 0.0)

    def _start_z(self, w, z, l1, l2):
        xp = self.xp
        xp.multiply(w, w.dtype.type(-(self.beta / self.lr + l2)), out=z)
        if l1:
            z -= w.dtype.type(l1) * xp.sign(w)

    def update_(self, p, g, st, weight, row_st):
        xp, f = self.xp, p.dtype.type
        z = st["z"]
        l1, l2 = self._l1_l2(weight)
        if row_st is not None:
            new = xp.flatnonzero(row_st["started"] == 0)
            if new.shape[0]:
                zn = z[new]
                self._start_z(p[new], zn, l1, l2)
                z[new] = zn
                row_st["started"][...] = 1
        elif self._fresh:
            self._start_z(p, z, l1, l2)
        q = st["sqrt_n"]
        s = self.scratch("ftrl", p.shape, p.dtype)
        z += g                              # z += g - sigma w, in two halves
        xp.multiply(g, g, out=g)            # g is scratch: now g^2
        xp.multiply(q, q, out=s)            # n
        s += g                              # n + g^2
        xp.sqrt(s, out=s)                   # sqrt(n) after the step
        xp.subtract(s, q, out=g)
        q[...] = s
        g *= f(1.0 / self.lr)               # sigma
        g *= p                              # sigma w
        z -= g
        xp.add(s, f(self.beta), out=g)      # -((beta + sqrt(n)) / alpha + l2)
        g *= f(-1.0 / self.lr)
        if l2:
            g -= f(l2)
        if l1:                              # sign(z) max(|z| - l1, 0); with l1 = 0, z itself
            xp.abs(z, out=s)
            s -= f(l1)
            xp.maximum(s, f(0), out=s)
            xp.copysign(s, z, out=s)
            xp.divide(s, g, out=p)
        else:
            xp.divide(z, g, out=p)
