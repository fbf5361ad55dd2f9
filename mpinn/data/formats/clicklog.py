"""The embedded synthetic click log: 20 Zipf-distributed categorical features, 4 numeric, a logistic teacher."""
import math

import numpy as np

from mpinn.data.base import CHUNK_ROWS


DEFAULT_CARDS = (2, 3, 4, 7, 10, 12, 24, 31, 50, 100, 300, 1000, 3000, 10000, 20000, 50000,
                 100000, 100000, 200000, 300000)   # 20 categorical features, Zipf-distributed values
DEFAULT_NUMERIC = 4


def make_clicklog(n_rows=200_000, seed=0):
    """A deterministic synthetic click log: (categorical codes (n, 20) int64, numeric (n, 4), y 0/1).
    A logistic teacher over the categorical values and the numeric columns makes it learnable."""
    rng = np.random.default_rng([seed, 2024])
    teacher = [rng.standard_normal(c) * (1.5 / math.sqrt(len(DEFAULT_CARDS))) for c in DEFAULT_CARDS]
    codes = np.empty((n_rows, len(DEFAULT_CARDS)), dtype=np.int64)
    for j, c in enumerate(DEFAULT_CARDS):
        p = 1.0 / np.arange(1, c + 1, dtype=np.float64) ** 1.1
        cdf = np.cumsum(p)
        cdf /= cdf[-1]
        codes[:, j] = np.minimum(np.searchsorted(cdf, rng.random(n_rows), side="right"), c - 1)
    numeric = rng.standard_normal((n_rows, DEFAULT_NUMERIC))
    logit = numeric @ np.array([0.8, -0.5, 0.3, 0.0]) - 0.4
    for j in range(len(DEFAULT_CARDS)):
        logit += teacher[j][codes[:, j]]
    y = (rng.random(n_rows) < 1 / (1 + np.exp(-logit))).astype(np.float64)
    return codes, numeric, y


def iter_clicklog(n_rows=200_000, seed=0, chunk_rows=CHUNK_ROWS):
    """make_clicklog(n_rows, seed) in chunks of rows, equal to its slices, in bounded memory.
    make_clicklog draws each feature's n uniforms, then 4n normals, then n uniforms for y, from one
    stream; a chunk jumps to its place in each block (PCG64.advance: one step per uniform), and the
    normals (a variable number of steps each) are drawn in order by their own copy of the stream."""
    rng = np.random.default_rng([seed, 2024])
    teacher = [rng.standard_normal(c) * (1.5 / math.sqrt(len(DEFAULT_CARDS))) for c in DEFAULT_CARDS]
    after_teacher = rng.bit_generator.state
    cdfs = []
    for c in DEFAULT_CARDS:
        cdf = np.cumsum(1.0 / np.arange(1, c + 1, dtype=np.float64) ** 1.1)
        cdfs.append(cdf / cdf[-1])

    def stream(steps):
        bg = np.random.PCG64()
        bg.state = after_teacher
        bg.advance(steps)
        return np.random.Generator(bg)
    F = len(DEFAULT_CARDS)
    normals = stream(F * n_rows)
    skip = stream(F * n_rows)               # where y's uniforms start: after all the normals
    for s in range(0, n_rows, chunk_rows):
        skip.standard_normal((min(chunk_rows, n_rows - s), DEFAULT_NUMERIC))
    labels = skip
    w = np.array([0.8, -0.5, 0.3, 0.0])
    for s in range(0, n_rows, chunk_rows):
        m = min(chunk_rows, n_rows - s)
        codes = np.empty((m, F), dtype=np.int64)
        for j, c in enumerate(DEFAULT_CARDS):
            u = stream(j * n_rows + s).random(m)
            codes[:, j] = np.minimum(np.searchsorted(cdfs[j], u, side="right"), c - 1)
        numeric = normals.standard_normal((m, DEFAULT_NUMERIC))
        logit = numeric @ w - 0.4
        for j in range(F):
            logit += teacher[j][codes[:, j]]
        y = (labels.random(m) < 1 / (1 + np.exp(-logit))).astype(np.float64)
        yield codes, numeric, y
