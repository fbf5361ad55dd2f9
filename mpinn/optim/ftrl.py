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
    hashed block equals the dense one."""

    name = "ftrl"
    weights_matter = True               # l1 and l2 on the weights only
    element_state = ("z", "n")
    lazy_row_state = ("started",)       # has z been set from the row's weights?
    row_state_dtype = np.int8

    def __init__(self, size, xp, lr, l1=0.0, l2=0.0, beta=1.0, **kw):
        super().__init__(size, xp, lr, **kw)
        self.l1, self.l2, self.beta = float(l1), float(l2), float(beta)
        self._fresh = False

    def first_step_(self, params):
        self._fresh = True

    def step_(self, params, grads, rows=None, lo=0, hi=None, regions=None):
        super().step_(params, grads, rows, lo, hi, regions)
        self._fresh = False

    def _start_z(self, w, z, l1, l2):
        xp = self.xp
        xp.multiply(w, w.dtype.type(-(self.beta / self.lr + l2)), out=z)
        if l1:
            z -= w.dtype.type(l1) * xp.sign(w)

    def update_(self, p, g, st, weight, row_st):
        xp, f = self.xp, p.dtype.type
        z, n = st["z"], st["n"]
        l1, l2 = (self.l1, self.l2) if weight else (0.0, 0.0)
        if row_st is not None:
            new = row_st["started"] == 0
            if new.any():
                zn = z[new]
                self._start_z(p[new], zn, l1, l2)
                z[new] = zn
                row_st["started"][...] = 1
        elif self._fresh:
            self._start_z(p, z, l1, l2)
        s_old = self.scratch("ftrl0", p.shape, p.dtype)
        s_new = self.scratch("ftrl1", p.shape, p.dtype)
        xp.sqrt(n, out=s_old)
        xp.multiply(g, g, out=s_new)
        n += s_new
        xp.sqrt(n, out=s_new)
        xp.subtract(s_new, s_old, out=s_old)
        s_old *= f(1.0 / self.lr)           # sigma
        s_old *= p                          # sigma w
        z += g
        z -= s_old
        s_new += f(self.beta)               # (beta + sqrt(n)) / alpha + l2
        s_new *= f(1.0 / self.lr)
        s_new += f(l2)
        xp.abs(z, out=s_old)                # sign(z) max(|z| - l1, 0)
        s_old -= f(l1)
        xp.maximum(s_old, f(0), out=s_old)
        xp.copysign(s_old, z, out=s_old)
        xp.divide(s_old, s_new, out=s_old)
        xp.negative(s_old, out=p)
