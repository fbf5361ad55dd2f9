"""Per-column statistics of numeric inputs in one streaming pass, with the same bits whatever the chunking."""
import numpy as np

from mpinn.core.errors import MpinnError

BLOCK = 4096        # rows per block: the unit the statistics are folded in, counted from the first row
FIELDS = ("count", "missing", "mean", "std", "min", "max", "skew", "log_mean", "log_std", "log_skew", "quantiles")
QUANTILES = 64      # "quantiles": each column's values at 0, 1/64, ..., 1 (bin edges are picked from them)
SAMPLE_VALUES = 1 << 22     # the quantiles' sample holds at most this many values (32 MB), and 4096 to 65536 rows


def _block_moments(X, shift):
    """(count, mean, M2, M3) of each column's finite values, for the values and for log1p(max(x, 0)),
    each less its column's shift (means of values far from zero compared with their spread stay exact),
    and min, max: arrays of shape (d,). Sums run along contiguous rows (numpy's pairwise summation)."""
    Xt = np.ascontiguousarray(X.T, dtype=np.float64)
    finite = np.isfinite(Xt)
    n = finite.sum(axis=1).astype(np.float64)
    out = []
    logs = np.log1p(np.maximum(Xt, 0.0, where=finite, out=np.zeros_like(Xt)))
    for V, k in ((Xt, shift[0]), (logs, shift[1])):
        V = np.where(finite, V - k[:, None], 0.0)
        mean = np.divide(V.sum(axis=1), n, out=np.zeros_like(n), where=n > 0)
        dev = np.where(finite, V - mean[:, None], 0.0)
        sq = dev * dev
        out.append(np.stack([n, mean, sq.sum(axis=1), (sq * dev).sum(axis=1)]))
    lo = np.where(finite, Xt, np.inf).min(axis=1, initial=np.inf)
    hi = np.where(finite, Xt, -np.inf).max(axis=1, initial=-np.inf)
    return out[0], out[1], lo, hi


def _row_keys(start, n):
    """splitmix64 of the row numbers start..start+n-1: a fixed pseudo-random key per row, distinct for distinct
    rows (the mix is a bijection), so the rows with the smallest keys are a uniform sample that depends on the
    rows alone, never on how they were chunked."""
    z = np.arange(start, start + n, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class _Sample:
    """The `size` rows of smallest key (_row_keys): every row while there are at most `size`, so the quantiles
    of up to `size` rows are exact, and a uniform sample of that many rows after."""

    def __init__(self, size):
        self.size = size
        self.keys = np.zeros(0, np.uint64)
        self.rows = []
        self._bar = None        # the largest key kept once `size` rows are held: a larger one never enters

    def add(self, start, X):
        self.add_keyed(_row_keys(start, X.shape[0]), X)

    def add_keyed(self, keys, X):
        """Rows X whose keys are given (another sample's, mpinn.data.fit.stats.PartFold)."""
        if self._bar is not None:
            keep = keys < self._bar
            keys, X = keys[keep], X[keep]
        if keys.size:
            self.keys = np.concatenate([self.keys, keys])
            self.rows.append(np.array(X, dtype=np.float64))
            if self.keys.size >= 2 * self.size:
                self._prune()

    def _prune(self):
        X = np.concatenate(self.rows) if len(self.rows) != 1 else self.rows[0]
        order = np.argsort(self.keys, kind="stable")[:self.size]
        self.keys, self.rows = self.keys[order], [X[order]]
        if self.keys.size == self.size:
            self._bar = self.keys[-1]

    def values(self, d):
        """(rows kept, d), in key order."""
        if not self.rows:
            return np.zeros((0, d))
        self._prune()
        return self.rows[0]


def _quantiles(sample, lo, hi):
    """Each column's values at 0, 1/QUANTILES, ..., 1 of the sample's finite values (empirical quantiles:
    values that occur), the ends the column's exact minimum and maximum; None for a column without values."""
    grid = np.linspace(0.0, 1.0, QUANTILES + 1)
    out = []
    for j in range(sample.shape[1]):
        v = sample[:, j]
        v = v[np.isfinite(v)]
        if v.size == 0 or not np.isfinite(lo[j]):
            out.append(None)
            continue
        q = np.quantile(v, grid, method="inverted_cdf")
        q[0], q[-1] = lo[j], hi[j]
        out.append([float(x) for x in np.clip(q, lo[j], hi[j])])
    return out


def _merge(a, b):
    """Chan et al.'s pairwise update of (count, mean, M2, M3) rows; a column empty on one side takes the other's."""
    na, ma, m2a, m3a = a
    nb, mb, m2b, m3b = b
    n = na + nb
    safe = np.where(n > 0, n, 1.0)
    d = mb - ma
    mean = ma + d * nb / safe
    m2 = m2a + m2b + d * d * na * nb / safe
    m3 = m3a + m3b + d ** 3 * na * nb * (na - nb) / (safe * safe) + 3.0 * d * (na * m2b - nb * m2a) / safe
    merged = np.stack([n, mean, m2, m3])
    return np.where(na == 0, b, np.where(nb == 0, a, merged))


class ColumnStats:
    """count, missing, mean, std (population), min, max and skewness of each numeric column, and the
    mean, std and skewness of log1p(max(x, 0)), from rows fed in chunks of any size. Missing and
    non-finite values are counted, not used. "quantiles": each column's quantiles (QUANTILES + 1 values,
    for bin edges) over a uniform sample of the rows that depends on the rows alone (_Sample: every row up
    to 4096..65536 rows, as many as SAMPLE_VALUES allows). Rows are folded a block of BLOCK rows at a time, blocks
    counted from the first row, each block's moments merged into the total in row order: the result
    is the same, bit for bit, however the rows were chunked (CSV reader, prepare, a packed file)."""

    def __init__(self, names):
        self.names = [str(c) for c in names]
        self.rows = 0
        self._held = []             # rows read but not yet a whole block
        self._held_n = 0
        self._acc = None            # (raw moments, log moments, min, max)
        self._sample = _Sample(int(np.clip(SAMPLE_VALUES // max(len(self.names), 1), BLOCK, 16 * BLOCK)))
        self._folded = 0            # rows folded so far: the next block's first row number
        # each column's first finite value (and its log1p), subtracted before the moments are taken
        self._shift = np.full((2, len(self.names)), np.nan)

    def update(self, X):
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != len(self.names):
            raise ValueError("%s rows given for %d columns" % (X.shape, len(self.names)))
        self.rows += X.shape[0]
        start = 0
        if self._held_n:
            take = min(BLOCK - self._held_n, X.shape[0])
            self._held.append(X[:take])
            self._held_n += take
            start = take
            if self._held_n < BLOCK:
                return self
            self._fold(np.concatenate(self._held))
            self._held, self._held_n = [], 0
        whole = start + (X.shape[0] - start) // BLOCK * BLOCK
        for s in range(start, whole, BLOCK):
            self._fold(X[s:s + BLOCK])
        if whole < X.shape[0]:
            self._held, self._held_n = [X[whole:]], X.shape[0] - whole
        return self

    def _fold(self, block):
        self._sample.add(self._folded, block)
        self._folded += block.shape[0]
        _set_shift(self._shift, block)
        self._absorb(_moments(block, self._shift))

    def _absorb(self, moments):
        """A block's moments (_moments) merged into the total, after the blocks before it."""
        if self._acc is None:
            self._acc = moments
            return
        r, lg, l0, h0 = self._acc
        raw, log, lo, hi = moments
        with np.errstate(over="ignore", invalid="ignore"):
            self._acc = (_merge(r, raw), _merge(lg, log), np.minimum(l0, lo), np.maximum(h0, hi))

    def join(self, piece, shift):
        """Go on over a part's rows as its own rank folded them (PartFold.result(), the part starting where the
        rows so far end), with `shift`, every column's first finite value over all the rows (first_finite): the
        same bits as update() with those rows. The head completes the block held here, the part's whole
        blocks are merged in order, and its tail is held for the next part."""
        self.update(piece["head"])
        if piece["blocks"]:
            if self._held_n:
                raise ValueError("a part's whole blocks must start at a block's start")
            unset = np.isnan(self._shift[0])        # the first value comes in this part: the one it used
            self._shift[0, unset] = shift[unset]
            self._shift[1, unset] = np.log1p(np.maximum(shift[unset], 0.0))
            for m in piece["blocks"]:
                self._absorb(m)
            n = BLOCK * len(piece["blocks"])
            self._folded += n
            self.rows += n
            self._sample.add_keyed(piece["keys"], piece["sample"])
        self.update(piece["tail"])
        return self

    def result(self):
        """{"columns": names, "rows": n, and a list per field of FIELDS} (JSON-able)."""
        if self._held_n:
            self._fold(np.concatenate(self._held))
            self._held, self._held_n = [], 0
        d = len(self.names)
        if self._acc is None:
            z = np.zeros((4, d))
            self._acc = (z, z, np.full(d, np.inf), np.full(d, -np.inf))
        raw, log, lo, hi = self._acc
        out = {"columns": list(self.names), "rows": int(self.rows)}
        n = raw[0]
        out["count"] = [int(c) for c in n]
        out["missing"] = [int(self.rows - c) for c in n]
        shift = np.nan_to_num(self._shift)
        for prefix, (_, mean, m2, m3), k in (("", raw, shift[0]), ("log_", log, shift[1])):
            with np.errstate(over="ignore", invalid="ignore"):
                mean = k + mean
                var = np.divide(m2, n, out=np.zeros(d), where=n > 0)
                skew = np.divide(np.sqrt(n) * m3, m2 ** 1.5, out=np.zeros(d), where=m2 > 0)
            out[prefix + "mean"] = [float(v) for v in mean]
            out[prefix + "std"] = [float(v) for v in np.sqrt(var)]
            out[prefix + "skew"] = [float(v) for v in skew]
        out["min"] = [float(v) if np.isfinite(v) else None for v in lo]
        out["max"] = [float(v) if np.isfinite(v) else None for v in hi]
        out["quantiles"] = _quantiles(self._sample.values(d), lo, hi)
        return out


def _set_shift(shift, block):
    """Each column's first finite value (and its log1p), for the columns that had none before this block."""
    unset = np.isnan(shift[0])
    if unset.any():
        finite = np.isfinite(block[:, unset])
        has = finite.any(axis=0)
        first = block[:, unset][finite.argmax(axis=0), np.arange(int(unset.sum()))]
        cols = np.flatnonzero(unset)[has]
        shift[0, cols] = first[has]
        shift[1, cols] = np.log1p(np.maximum(first[has], 0.0))


def _moments(block, shift):
    with np.errstate(over="ignore", invalid="ignore"):     # values near float64's limits: inf moments, which
        return _block_moments(block, np.nan_to_num(shift))      # the transform does without


def first_finite(chunks, d):
    """Each of d columns' first finite value in rows fed as chunks (NaN where there is none); stops reading once
    every column has one."""
    out = np.full(d, np.nan)
    for X in chunks:
        X = np.asarray(X, dtype=np.float64)
        unset = np.isnan(out)
        finite = np.isfinite(X[:, unset])
        has = finite.any(axis=0)
        out[np.flatnonzero(unset)[has]] = X[:, unset][finite.argmax(axis=0), np.arange(int(unset.sum()))][has]
        if not np.isnan(out).any():
            break
    return out


class PartFold(ColumnStats):
    """A later part's share of the statistics, folded by the rank that packed it (prepare in parallel), for
    ColumnStats.join on rank 0: the part starts at row `start` of the whole and `shift` is every column's first
    finite value over all the rows (first_finite). The blocks wholly inside the part are folded here, counted
    from the first row of the whole as ColumnStats counts them (its update() cuts them); the rows before the first
    (the head, which completes the block before) and after the last (the tail) are handed over as they are. About
    1 KB a block for 13 columns (0.03% of their values) and the sample's rows of these blocks go to rank 0."""

    def __init__(self, names, start, shift):
        super().__init__(names)
        self.head_left = (-int(start)) % BLOCK
        self._folded = int(start) + self.head_left      # the first row of the part's first whole block
        self._shift = np.stack([shift, np.log1p(np.maximum(shift, 0.0))]).reshape(2, len(self.names))
        self.head, self.blocks = [], []

    def update(self, X):
        X = np.asarray(X, dtype=np.float64)
        if self.head_left:
            take = min(self.head_left, X.shape[0])
            self.head.append(X[:take])
            self.head_left -= take
            X = X[take:]
        return super().update(X)

    def _fold(self, block):
        """A whole block: its moments kept, in order, under the shift all parts agree on, its rows sampled."""
        self._sample.add(self._folded, block)
        self._folded += block.shape[0]
        self.blocks.append(_moments(block, self._shift))

    def result(self):
        """{head, blocks, tail, keys, sample}: what ColumnStats.join takes."""
        def rows(parts):
            return np.concatenate(parts) if parts else np.zeros((0, len(self.names)))
        sample = self._sample.values(len(self.names))
        return {"head": rows(self.head), "blocks": self.blocks, "tail": rows(self._held), "keys": self._sample.keys,
                "sample": sample}


def column_stats(X, names):
    """ColumnStats of all of X at once (the same bits as any chunking of it)."""
    return ColumnStats(names).update(X).result()


def check_stats(stats, where="the data"):
    """A column with no value at all is an error (one line): nothing to learn from it, nothing to impute."""
    for name, count in zip(stats["columns"], stats["count"]):
        if count == 0:
            raise MpinnError("%s: numeric column %r has no values (all %d rows missing or not finite); "
                             "leave it out of --numeric" % (where, name, stats["rows"]))
