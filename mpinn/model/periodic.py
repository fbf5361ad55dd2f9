"""Periodic embeddings of the numeric inputs (Gorishniy et al., NeurIPS 2022, "On Embeddings for Numerical Features
in Tabular Deep Learning", their PLR): for numeric column j of a row, with value x (standardised),

    v_j = [cos(2 pi c_j1 x), ..., cos(2 pi c_jk x), sin(2 pi c_j1 x), ..., sin(2 pi c_jk x)]
    h_j = relu(v_j W_j + b_j)                     (d outputs)

k frequencies c_j per column, first drawn from N(0, sigma^2), and W_j (2k, d), b_j (d) per column, all trained with
the rest. The m columns' h_j (m * d inputs) enter the first layer beside the other inputs. Parameters live in a
slice of the model's flat buffer; no ranks here."""
import math

import numpy as np

TWO_PI = 2 * math.pi
DEFAULT = {"frequencies": 48, "width": 16, "sigma": 10.0}
EVAL_ROWS = 4096        # rows embedded at once when nothing is kept for a backward pass (predict, evaluation)


def parse(choice):
    """"auto", "off", "periodic" or "periodic:SIGMA" (SIGMA a positive number) as a normalised text; None if not
    one."""
    s = str(choice).strip().lower()
    if s in ("auto", "off", "periodic"):
        return s
    if s.startswith("periodic:"):
        try:
            sigma = float(s.split(":", 1)[1])
        except ValueError:
            return None
        if math.isfinite(sigma) and sigma > 0:
            return "periodic:%g" % sigma
    return None


def sigma_of(choice):
    """SIGMA of a parsed "periodic[:SIGMA]" (None: the default)."""
    return float(choice.split(":", 1)[1]) if ":" in choice else None


def spec_of(columns, sigma=None):
    """The ModelSpec entry for m numeric columns (None for none)."""
    if columns <= 0:
        return None
    return {"columns": int(columns), "frequencies": DEFAULT["frequencies"], "width": DEFAULT["width"],
            "sigma": float(DEFAULT["sigma"] if sigma is None else sigma)}


class Periodic:
    """The embedding's shapes, initialisation, forward and backward over a flat slice of parameters."""

    def __init__(self, spec, xp, dtype):
        self.m, self.k, self.d = int(spec["columns"]), int(spec["frequencies"]), int(spec["width"])
        self.sigma = float(spec["sigma"])
        self.xp, self.dtype = xp, np.dtype(dtype)
        self.shapes = [(self.m, self.k), (self.m, 2 * self.k, self.d), (self.m, self.d)]
        self.size = sum(math.prod(s) for s in self.shapes)

    @property
    def width(self):
        """The first layer's inputs it adds."""
        return self.m * self.d

    def views(self, flat):
        """(c, W, b) of a flat slice of self.size values."""
        out, at = [], 0
        for s in self.shapes:
            n = math.prod(s)
            out.append(flat[at:at + n].reshape(s))
            at += n
        return out

    def init_(self, flat, seed):
        """c ~ N(0, sigma^2); W, b ~ U(-1/sqrt(2k), 1/sqrt(2k)); drawn in float64 from its own stream of seed (the
        layers' draws are those of a model without it)."""
        rng = np.random.default_rng([int(seed), 0x9E37])
        c, W, b = self.views(flat)
        bound = 1.0 / math.sqrt(2 * self.k)
        c[...] = self.xp.asarray((rng.standard_normal(c.shape) * self.sigma).astype(self.dtype))
        W[...] = self.xp.asarray(rng.uniform(-bound, bound, W.shape).astype(self.dtype))
        b[...] = self.xp.asarray(rng.uniform(-bound, bound, b.shape).astype(self.dtype))

    def forward(self, flat, x, keep=False):
        """x (n, m) -> H (n, m*d); keep: also what backward needs (else the rows go EVAL_ROWS at a time)."""
        xp = self.xp
        if not keep and x.shape[0] > EVAL_ROWS:
            return xp.concatenate([self.forward(flat, x[i:i + EVAL_ROWS])[0]
                                   for i in range(0, x.shape[0], EVAL_ROWS)], axis=0), None
        c, W, b = self.views(flat)
        z = x.T[:, :, None] * (c * self.dtype.type(TWO_PI))[:, None, :]      # (m, n, k)
        v = xp.concatenate([xp.cos(z), xp.sin(z)], axis=2)                    # (m, n, 2k)
        h = xp.matmul(v, W)                                                   # (m, n, d)
        h += b[:, None, :]
        xp.maximum(h, 0, out=h)
        H = xp.ascontiguousarray(h.transpose(1, 0, 2)).reshape(x.shape[0], self.width)
        return H, ((x, v, h) if keep else None)

    def backward_(self, flat, grad, kept, dH):
        """Write d(loss)/d(c, W, b) into the flat slice grad, given dH = d(loss)/dH (n, m*d)."""
        xp = self.xp
        x, v, h = kept
        c, W, _ = self.views(flat)
        gc, gW, gb = self.views(grad)
        dh = xp.ascontiguousarray(dH.reshape(x.shape[0], self.m, self.d).transpose(1, 0, 2))     # (m, n, d)
        dh *= (h > 0)
        xp.matmul(v.transpose(0, 2, 1), dh, out=gW)
        xp.sum(dh, axis=1, out=gb)
        dv = xp.matmul(dh, W.transpose(0, 2, 1))                              # (m, n, 2k)
        cos, sin = v[:, :, :self.k], v[:, :, self.k:]                         # the forward's: d cos = -sin, d sin = cos
        dz = dv[:, :, self.k:] * cos
        dz -= dv[:, :, :self.k] * sin
        dz *= x.T[:, :, None]
        xp.sum(dz, axis=1, out=gc)
        gc *= self.dtype.type(TWO_PI)
