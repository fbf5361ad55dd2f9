"""Adam, with the lazy variant for the hashed block."""
import numpy as np

from mpinn.optim import fused
from mpinn.optim.base import Optimizer


class Adam(Optimizer):
    """m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
    p -= lr_t * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)   (Kingma and Ba 2015, the efficient
    form of section 2), lr_t the step's rate (the schedule's).

    Lazy on the hashed block (the default): a step moves only the rows it touched, and their m and v;
    a row's bias correction uses its own step count t_row, the number of steps that have touched it
    (kept per row, in the checkpoint), so each row follows exactly the Adam of the steps that saw it,
    at the rates of those steps. Every other element is touched by every step: t is the global step.
    hashed_update="dense" is the exact dense Adam: every row's m and v decay every step.

    The state is kept scaled, which saves two passes over the elements per step: "m_scaled" holds
    m / (1 - b1) and "v_scaled" holds v / (1 - b2) (named so that no checkpoint of plain m and v is
    read as them), so m~ = b1 m~ + g and v~ = b2 v~ + g^2, and the step folds the factors back in:
    p -= lr_t c(t) * m~ / (sqrt(v~) + eps / sqrt(1 - b2)) with c(t) = (1 - b1) / sqrt(1 - b2) *
    sqrt(1 - b2^t) / (1 - b1^t), the same formula to rounding. c(t) does not depend on the rate: it is
    tabulated once (float64), and the rate multiplies it at every step."""

    name = "adam"
    kernel = "adam"
    element_state = ("m_scaled", "v_scaled")
    lazy_row_state = ("t_row",)         # steps that touched the row
    row_state_dtype = np.int64

    def __init__(self, size, xp, beta1=0.9, beta2=0.999, eps=1e-8, **kw):
        super().__init__(size, xp, **kw)
        self.b1, self.b2, self.eps = float(beta1), float(beta2), float(eps)
        self.eps_scaled = self.eps / np.sqrt(1 - self.b2)
        self._table = None

    def factor(self, t):
        """c(t): the step factor at count t, without the rate (float64; t may be an array)."""
        return (1 - self.b1) / np.sqrt(1 - self.b2) * np.sqrt(1 - self.b2 ** t) / (1 - self.b1 ** t)

    def consts(self, weight, rows, lr):
        return fused.consts("adam", lr=lr, b1=self.b1, b2=self.b2, eps=self.eps_scaled,
                            step=0.0 if rows else lr * self.factor(self.t), wd=self.weight_decay if rows else 0.0)

    def row_steps(self):
        """c(t) for t = 0..(at least) the global step count (index 0 unused; a row's count is at most
        the global count), on the host, kept and grown as needed."""
        if self._table is None or self._table.shape[0] <= self.t:
            t = np.arange(max(2 * self.t, 1024), dtype=np.float64)
            t[0] = 1
            self._table = self.factor(t)
        return self._table

    def update_(self, p, g, st, weight, row_st, lr):
        """Ten passes, no scratch: g (scratch) is overwritten once m has it."""
        xp, f = self.xp, p.dtype.type
        m, v = st["m_scaled"], st["v_scaled"]
        if row_st is None:
            step = f(lr * self.factor(self.t))
        else:
            t = row_st["t_row"]
            t += 1
            step = (lr * xp.asarray(self.row_steps())[t]).astype(p.dtype)[:, None]   # the kernel's rounding
        m *= f(self.b1)
        m += g
        v *= f(self.b2)
        xp.multiply(g, g, out=g)
        v += g
        xp.sqrt(v, out=g)
        g += f(self.eps_scaled)
        xp.divide(m, g, out=g)
        g *= step
        p -= g
