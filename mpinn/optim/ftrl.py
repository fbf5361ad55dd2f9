"""FTRL-Proximal (McMahan et al. 2013, Algorithm 1), per coordinate."""
import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.optim import fused
from mpinn.optim.base import Optimizer


class FTRL(Optimizer):
    """Per coordinate, with alpha = the step's learning rate and 1/eta = (beta + sqrt(n)) / alpha:
        sigma = 1/eta_new - 1/eta_old;  z += g - sigma w;  n += g^2
        w = 0 where |z| <= l1, else -(z - sign(z) l1) / ((beta + sqrt(n)) / alpha + l2)
    l1 and l2 act on the weights (the biases get 0 and 0); l1 makes weights exactly zero.

    A learning-rate schedule changes alpha from step to step. sigma is then still the growth of 1/eta
    since the coordinate's previous step (McMahan et al.: sigma_1 + ... + sigma_t = 1/eta_t), now with
    that step's alpha in 1/eta_old: sigma = (sqrt(n_new) - sqrt(n_old)) / alpha + (beta + sqrt(n_old))
    (1/alpha - 1/alpha_prev). With l1 = l2 = 0 this is online gradient descent with the per-coordinate
    rate eta_new (w_new = w - eta_new g), so the schedule scales the steps and never the weights. With
    a constant rate the second term is zero (and the kernels skip it). The dense elements keep the
    previous step's 1/alpha ("inv_alpha_prev"); each row of the hashed block keeps the 1/alpha of the
    last step that touched it ("inv_alpha_row"; 0: not touched yet).

    A network starts from random weights w0, not from FTRL's w = 0: z starts where the formula gives
    w0 back, z = -((beta / alpha + l2) w0 + l1 sign(w0)) (with w0 = 0, FTRL's own z = 0), so the
    regularisers act on what the gradients do from there: l1 is the dead zone |z| <= l1 that holds a
    weight the gradients have pushed to zero exactly at zero. z is set for the dense elements at the
    first step, for a row of the hashed block the first time a step touches it. An untouched row has
    g = 0 and does not move, so at a constant rate the lazy update of the hashed block equals the
    dense one.

    The state keeps sqrt(n) ("sqrt_n"), not n: a step then takes one square root, not two,
    sqrt(n + g^2) = sqrt(sqrt_n^2 + g^2) (the same to rounding)."""

    name = "ftrl"
    kernel = "ftrl"
    element_state = ("z", "sqrt_n")
    lazy_row_state = ("inv_alpha_row",)     # 1 / the alpha of the row's last step; 0: z not started
    row_state_dtype = np.float64
    scalar_state = ("inv_alpha_prev",)      # 1 / the alpha of the dense elements' last step

    def __init__(self, size, xp, l1=0.0, l2=0.0, beta=1.0, **kw):
        super().__init__(size, xp, **kw)
        self.l1, self.l2, self.beta = float(l1), float(l2), float(beta)
        self.weights_matter = bool(self.l1 or self.l2)      # l1 and l2 act on the weights only
        self.inv_alpha_prev = 0.0
        self._fresh = False

    def first_step_(self, params):
        self._fresh = True

    def step_(self, params, grads, rows=None, lo=0, hi=None, regions=None, *, lr):
        if not float(lr) > 0:
            raise MpinnError("ftrl's alpha (the learning rate) must be > 0, not %s" % lr)
        super().step_(params, grads, rows, lo, hi, regions, lr=lr)

    def end_step_(self, lr):
        self.inv_alpha_prev = 1.0 / lr
        self._fresh = False

    def _dense_prev(self, lr):
        """1 / the previous alpha for the dense elements (this step's at the first step: no change)."""
        return 1.0 / lr if self._fresh else self.inv_alpha_prev

    def consts(self, weight, rows, lr):
        l1, l2 = self._l1_l2(weight)
        return fused.consts("ftrl", inv_alpha=1.0 / lr, inv_alpha_prev=0.0 if rows else self._dense_prev(lr),
                            beta=self.beta, l1=l1, l2=l2, start=-(self.beta / lr + l2),
                            wd=self.weight_decay if rows else 0.0)

    def fused_dense_(self, lib, p, g, st, weight, lr):
        if self._fresh:
            self._start_z(p, st["z"], *self._l1_l2(weight), lr)
        super().fused_dense_(lib, p, g, st, weight, lr)

    def _l1_l2(self, weight):
        """The regularisers of weights; biases get none."""
        return (self.l1, self.l2) if weight else (0.0, 0.0)

    def _start_z(self, w, z, l1, l2, lr):
        xp = self.xp
        xp.multiply(w, w.dtype.type(-(self.beta / lr + l2)), out=z)
        if l1:
            z -= w.dtype.type(l1) * xp.sign(w)

    def update_(self, p, g, st, weight, row_st, lr):
        xp, f = self.xp, p.dtype.type
        z, q = st["z"], st["sqrt_n"]
        l1, l2 = self._l1_l2(weight)
        ainv = 1.0 / lr
        if row_st is not None:
            prev = row_st["inv_alpha_row"]
            new = xp.flatnonzero(prev == 0)
            if new.shape[0]:
                zn = z[new]
                self._start_z(p[new], zn, l1, l2, lr)
                z[new] = zn
                prev[new] = ainv                    # no change of rate at a row's first step
            dinv = f(ainv) - prev.astype(p.dtype)
            changed = bool((dinv != 0).any())
            dinv = dinv[:, None]
            prev[...] = ainv
        else:
            if self._fresh:
                self._start_z(p, z, l1, l2, lr)
            dinv = f(ainv) - f(self._dense_prev(lr))
            changed = bool(dinv != 0)
        s = self.scratch("ftrl", p.shape, p.dtype)
        z += g                              # z += g - sigma w, in two halves
        xp.multiply(g, g, out=g)            # g is scratch: now g^2
        xp.multiply(q, q, out=s)            # n
        s += g                              # n + g^2
        xp.sqrt(s, out=s)                   # sqrt(n) after the step
        xp.subtract(s, q, out=g)
        g *= f(ainv)                        # sigma at a constant rate
        if changed:                         # + (beta + sqrt(n_old)) (1/alpha - 1/alpha_prev)
            e = self.scratch("ftrl_rate", p.shape, p.dtype)
            xp.add(q, f(self.beta), out=e)
            e *= dinv
            g += e
        q[...] = s
        g *= p                              # sigma w
        z -= g
        xp.add(s, f(self.beta), out=g)      # -((beta + sqrt(n)) / alpha + l2)
        g *= f(-ainv)
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
