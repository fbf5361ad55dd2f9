"""Adam, with the lazy variant for the hashed block."""
import numpy as np

from mpinn.optim.base import Optimizer


class Adam(Optimizer):
    """m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
    p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)   (Kingma and Ba's efficient form).

    Lazy on the hashed block (the default): a step moves only the rows it touched, and their m and v;
    a row's bias correction uses its own step count t_row, the number of steps that have touched it
    (kept per row, in the checkpoint), so each row follows exactly the Adam of the steps that saw it.
    Every other element is touched by every step: t is the global step. hashed_update="dense" is the
    exact dense Adam: every row's m and v decay every step.

    The state is kept scaled, which saves two passes over the elements per step: "m_scaled" holds
    m / (1 - b1) and "v_scaled" holds v / (1 - b2) (named so that no checkpoint of plain m and v is
    read as them), so m~ = b1 m~ + g and v~ = b2 v~ + g^2, and the
    step folds the factors back in: p -= lr c_t (1 - b1) / sqrt(1 - b2) * m~ / (sqrt(v~) + eps /
    sqrt(1 - b2)), the same formula to rounding."""

    name = "adam"
    kernel = "adam"
    element_state = ("m_scaled", "v_scaled")
    lazy_row_state = ("t_row",)         # steps that touched the row
    row_state_dtype = np.int64

    def __init__(self, size, xp, lr, beta1=0.9, beta2=0.999, eps=1e-8, **kw):
        super().__init__(size, xp, lr, **kw)
        self.b1, self.b2, self.eps = float(beta1), float(beta2), float(eps)
        self.scale = self.lr * (1 - self.b1) / np.sqrt(1 - self.b2)     # folds the state's scaling back
        self.eps_scaled = self.eps / np.sqrt(1 - self.b2)

    def consts(self, weight, rows):
        return (self.b1, self.b2, self.eps_scaled, 0.0 if rows else self._step(self.t),
                self.weight_decay if rows else 0.0)

    def row_steps(self, dtype):
        return self._steps(self.t, dtype)       # a row's count is at most the global step count

    def _step(self, t):
        return self.scale * np.sqrt(1 - self.b2 ** t) / (1 - self.b1 ** t)

    def _steps(self, t_max, dtype):
        """The step factor for t = 0..t_max (index 0 unused), kept and grown as needed."""
        c = getattr(self, "_table", None)
        if c is None or c.shape[0] <= t_max or c.dtype != dtype:
            t = np.arange(max(2 * t_max, 1024), dtype=np.float64)
            t[0] = 1
            c = self._table = self.xp.asarray(self._step(t).astype(dtype))
        return c

    def update_(self, p, g, st, weight, row_st):
        """Ten passes, no scratch: g (scratch) is overwritten once m has it."""
        xp, f = self.xp, p.dtype.type
        m, v = st["m_scaled"], st["v_scaled"]
        if row_st is None:
            step = f(self._step(self.t))
        else:
            t = row_st["t_row"]
            t += 1
            step = self._steps(int(t.max()), p.dtype)[t][:, None]
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
