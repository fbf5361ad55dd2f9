"""Adagrad: element-wise, or one accumulator per row of the hashed block (rowwise, as FBGEMM's)."""
import numpy as np

from mpinn.optim import fused
from mpinn.optim.base import Optimizer


class Adagrad(Optimizer):
    """acc += g^2;  p -= lr * g / (sqrt(acc) + eps)   (Duchi et al. 2011), accumulators starting at
    `initial` (0, as PyTorch). An untouched row has zero gradient and does not move, so the lazy
    update of the hashed block is exactly the dense one.

    rowwise=True: one accumulator per row of the hashed block, acc_row += mean over the row of g^2,
    and p_row -= lr * g_row / (sqrt(acc_row) + eps) (FBGEMM's row-wise Adagrad): 1/width of the
    state; the other elements keep element-wise accumulators."""

    name = "adagrad"
    kernel = "adagrad"
    element_state = ("acc",)

    def __init__(self, size, xp, eps=1e-10, initial=0.0, rowwise=False, **kw):
        super().__init__(size, xp, **kw)
        self.eps, self.initial, self.rowwise = float(eps), float(initial), bool(rowwise)
        self.lazy_row_state = ("acc_row",) if self.rowwise else ()
        self.fused_rows = not self.rowwise      # the row-wise mean is numpy's pairwise sum: not fused
        if self.rowwise and not self.sparse_ok:     # the rule table refuses it on the command line (rowwise-lazy)
            raise ValueError("row-wise Adagrad updates the touched rows of the hashed block: it needs "
                             "hashed_update='lazy'")

    def allocate_(self, zeros=None, dtype=np.float64, writes_state=True):
        super().allocate_(zeros, dtype, writes_state)
        if self.initial and self.writes_state:
            for k in ("acc",) + self.row_state:
                self.arrays[k][...] = self.initial
        return self

    def consts(self, weight, rows, lr):
        return fused.consts("adagrad", lr=lr, eps=self.eps, wd=self.weight_decay if rows else 0.0)

    def update_(self, p, g, st, weight, row_st, lr):
        xp, f = self.xp, p.dtype.type
        tmp = self.scratch("adagrad", p.shape, p.dtype)
        if row_st is not None and self.rowwise:
            acc = row_st["acc_row"]
            xp.multiply(g, g, out=tmp)
            acc += tmp.mean(axis=1)
            denom = xp.sqrt(acc)
            denom += f(self.eps)
            xp.divide(g, denom[:, None], out=tmp)
        else:
            acc = st["acc"]
            xp.multiply(g, g, out=tmp)
            acc += tmp
            xp.sqrt(acc, out=tmp)
            tmp += f(self.eps)
            xp.divide(g, tmp, out=tmp)
        tmp *= f(lr)
        p -= tmp
