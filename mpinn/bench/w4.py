"""W4: a click log shaped like the Criteo 1TB log (the MLPerf DLRM data), generated, deterministic from a seed.

Each row: a 0/1 label, 13 integer counts I1..I13 (long-tailed, often missing) and 26 categorical values C1..C26
given as 8-hex-digit hashes (Zipf-distributed, often missing), written tab-separated with no header, as the
real log is (python -m mpinn.train --format criteo reads it), or straight to a packed file.

The label comes from a hidden logistic model: a per-value effect for every categorical value, an effect of
each count's logarithm (not of the count itself), an effect of a count being missing, and a few pairwise
interactions between categorical columns; the bias is set for the chosen positive rate. A model that learns
more of it gets a better AUC, and the hidden model's own probability (--truth) is the ceiling.

Nothing is stored per value: a value's effect and its hex string are functions of (column, value id) through
a 64-bit mixer, so the full cardinalities (40 million values in a column) cost no memory. Rows come in
blocks of BLOCK, each drawn from its own seeded stream, so rows [s, s + n) are the same whatever s, n and
the chunking.

    python -m mpinn.bench.w4 --rows 1000000 --scale 100 --out w4-train.tsv.gz --truth w4-train-p.npy
    python -m mpinn.bench.w4 --rows 100000 --start 1000000 --scale 100 --out w4-test.tsv.gz
"""
import argparse
import gzip
import math
import os
import sys
import time

import numpy as np

from mpinn.data import DataSpec, HashSpec
from mpinn.data.formats.tables import Part
from mpinn.data.packed.packer import Progress, prepare
from mpinn.settings.options import Parser, nonneg_int, positive_float, positive_int
from mpinn.settings.table import trick_bits

# The 26 categorical columns' numbers of distinct values in the Criteo 1TB log, as the MLPerf DLRM reference
# configurations list them (capped at 40M there).
CARDS_1TB = (39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951, 2953546, 403346, 10, 2208,
             11938, 155, 4, 976, 14, 39979771, 25641295, 39664984, 585935, 12972, 108, 36)
N_INT, N_CAT = 13, 26
INT_NAMES = ["I%d" % (j + 1) for j in range(N_INT)]
CAT_NAMES = ["C%d" % (j + 1) for j in range(N_CAT)]
BLOCK = 1 << 16                 # rows per seeded block
MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def mix64(x):
    """splitmix64's finaliser on uint64 arrays (wrapping arithmetic): a different, well-spread 64-bit value
    for every input."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def keyed(key, ids):
    """mix64 of (key, id): the same id under another key (column, pair, purpose) gives an unrelated value."""
    with np.errstate(over="ignore"):
        return mix64(np.asarray(ids, dtype=np.int64).astype(np.uint64) + mix64(np.uint64(key)))


def normal_of(bits):
    """A standard normal from 64 random bits (Box-Muller on the two 32-bit halves)."""
    u1 = ((bits >> np.uint64(32)).astype(np.float64) + 0.5) / 2.0 ** 32
    u2 = ((bits & np.uint64(0xFFFFFFFF)).astype(np.float64) + 0.5) / 2.0 ** 32
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def zipf_ranks(u, n, s):
    """Ranks 0..n-1 with P(rank r) roughly proportional to (r + 1)^-s: the inverse of the continuous power
    law's distribution function on [1, n + 1), so no table of n entries is needed."""
    if abs(s - 1.0) < 1e-9:
        r = np.exp(u * math.log(n + 1.0))
    else:
        a = 1.0 - s
        r = ((math.pow(n + 1.0, a) - 1.0) * u + 1.0) ** (1.0 / a)
    return np.minimum(np.floor(r).astype(np.int64) - 1, n - 1)


class W4:
    """The generator: W4(seed, scale, zipf, positive_rate).rows(start, n) yields blocks of rows."""

    def __init__(self, seed=0, scale=1, zipf=1.1, positive_rate=0.25, interactions=6):
        if scale < 1:
            raise ValueError("scale must be at least 1")
        if not 0.0 < positive_rate < 1.0:
            raise ValueError("positive_rate must be between 0 and 1")
        self.seed, self.scale, self.zipf, self.positive_rate = int(seed), scale, float(zipf), float(positive_rate)
        self.cards = np.array([max(2, int(c // scale)) for c in CARDS_1TB], dtype=np.int64)
        rng = np.random.default_rng([self.seed, 404])
        # categorical columns: how often missing, how strongly their values matter
        self.cat_missing = np.where(rng.random(N_CAT) < 0.35, rng.uniform(0.05, 0.45, N_CAT), 0.0)
        self.cat_strength = rng.uniform(0.15, 0.45, N_CAT)
        # counts: lognormal-shaped long tails, often missing; >= 0, but I2 reaches -2 (the real log's I2 has negatives)
        self.int_mu, self.int_sigma = rng.uniform(0.0, 3.0, N_INT), rng.uniform(0.8, 2.2, N_INT)
        self.int_missing = rng.uniform(0.0, 0.45, N_INT)
        self.int_shift = np.where(np.arange(N_INT) == 1, 2, 0)
        self.int_weight = rng.normal(0.0, 0.35, N_INT)
        self.int_missing_effect = rng.normal(0.0, 0.3, N_INT)
        # pairwise interactions between categorical columns of modest cardinality
        small = [j for j in range(N_CAT) if self.cards[j] <= 20000]
        pick = rng.choice(len(small), size=(interactions, 2), replace=True)
        self.pairs = [(small[a], small[b]) for a, b in pick if small[a] != small[b]]
        self.pair_strength = rng.uniform(0.3, 0.6, len(self.pairs))
        self.bias = 0.0
        self.bias = self._calibrated_bias()

    # ---- the hidden model
    def _logit(self, ids, ints):
        logit = np.full(ids.shape[0], self.bias)
        for j in range(N_CAT):
            logit += self.cat_strength[j] * normal_of(keyed(1000 + j, ids[:, j]))
        for k in range(N_INT):
            v = ints[:, k]
            missing = v == MISSING_INT
            z = (np.log1p(np.maximum(v, 0).astype(np.float64)) - self.int_mu[k]) / self.int_sigma[k]
            logit += np.where(missing, self.int_missing_effect[k], self.int_weight[k] * z)
        for p, (a, b) in enumerate(self.pairs):
            both = ids[:, a] * self.cards[b] + ids[:, b]
            logit += self.pair_strength[p] * normal_of(keyed(5000 + p, both))
        return logit

    def _calibrated_bias(self):
        """The bias at which the mean click probability of the first blocks is the positive rate."""
        ids, ints, _ = self._features(0)
        base = self._logit(ids, ints)
        lo, hi = -20.0, 20.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if np.mean(1.0 / (1.0 + np.exp(-(base + mid)))) < self.positive_rate:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    # ---- a block of rows
    def _features(self, b):
        rng = np.random.default_rng([self.seed, b, 77])
        ids = np.empty((BLOCK, N_CAT), dtype=np.int64)
        for j in range(N_CAT):
            ids[:, j] = zipf_ranks(rng.random(BLOCK), int(self.cards[j]), self.zipf)
            gone = rng.random(BLOCK) < self.cat_missing[j]
            ids[gone, j] = -1                       # missing: a value of its own to the hidden model
        z = rng.standard_normal((BLOCK, N_INT))
        ints = np.floor(np.exp(self.int_mu + self.int_sigma * z)).astype(np.int64) - self.int_shift
        ints[rng.random((BLOCK, N_INT)) < self.int_missing] = MISSING_INT
        return ids, ints, rng

    def block(self, b):
        """Block b: (ids (BLOCK, 26) int64, -1 missing; ints (BLOCK, 13) int64, MISSING_INT missing; y 0/1
        float64; p, the hidden model's click probability)."""
        ids, ints, rng = self._features(b)
        p = 1.0 / (1.0 + np.exp(-self._logit(ids, ints)))
        y = (rng.random(BLOCK) < p).astype(np.float64)
        return ids, ints, y, p

    def rows(self, start, n):
        """Rows [start, start + n) in pieces of at most BLOCK rows: (ids, ints, y, p) each."""
        end = start + n
        for b in range(start // BLOCK, -(-end // BLOCK)):
            lo, hi = max(start, b * BLOCK) - b * BLOCK, min(end, (b + 1) * BLOCK) - b * BLOCK
            if hi > lo:
                yield tuple(a[lo:hi] for a in self.block(b))

    def hex_codes(self, ids):
        """The 8-hex-digit strings of value ids (n, 26) as an (n, 26) array of bytes ('S8'); b'' where missing."""
        out = np.empty(ids.shape, dtype="S8")
        digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
        shifts = np.arange(28, -4, -4, dtype=np.uint64)
        for j in range(N_CAT):
            h = keyed(9000 + j, ids[:, j]) & np.uint64(0xFFFFFFFF)
            chars = digits[((h[:, None] >> shifts) & np.uint64(0xF)).astype(np.intp)]
            out[:, j] = np.ascontiguousarray(chars).view("S8").ravel()
            out[ids[:, j] < 0, j] = b""
        return out

    def describe(self):
        return ("W4 (Criteo 1TB shape): seed %d, cardinalities / %g (largest %d), Zipf %.2f, positive rate %.2f, "
                "%d interactions" % (self.seed, self.scale, int(self.cards.max()), self.zipf, self.positive_rate,
                                     len(self.pairs)))


MISSING_INT = np.iinfo(np.int64).min


# ---------------------------------------------------------------- the text format
def text_lines(gen, ids, ints, y):
    """The rows as the log's text: label, 13 counts, 26 hex values, tab-separated, empty where missing."""
    hexes = gen.hex_codes(ids)
    lines = []
    for i in range(ids.shape[0]):
        counts = "\t".join("" if v == MISSING_INT else str(v) for v in ints[i].tolist())
        cats = b"\t".join(hexes[i].tolist()).decode("ascii")
        lines.append("%d\t%s\t%s\n" % (y[i], counts, cats))
    return "".join(lines)


def open_text(path):
    return gzip.open(path, "wt", compresslevel=3, newline="") if path.endswith(".gz") else open(path, "w", newline="")


def write_text(gen, path, start, n, truth=None, progress=None):
    """Rows [start, start + n) to `path` (gzip when it ends in .gz); their probabilities to `truth` (.npy)."""
    ps = []
    done = 0
    with open_text(path) as f:
        for ids, ints, y, p in gen.rows(start, n):
            f.write(text_lines(gen, ids, ints, y))
            if truth:
                ps.append(p.astype(np.float32))
            done += len(y)
            if progress:
                progress(done)
    if truth:
        np.save(truth, np.concatenate(ps) if ps else np.zeros(0, np.float32))
    return done


# ---------------------------------------------------------------- straight to a packed file
class W4Source:
    """The generated rows as a table source (what mpinn.prepare packs): the columns the text reader names."""
    kind = "w4"

    def __init__(self, gen, start, n, chunk_rows=BLOCK):
        self.gen, self.start, self.n_rows = gen, int(start), int(n)
        self.path = "W4 rows %d..%d" % (start, start + n)
        self.categorical, self.numeric, self.label, self.has_label = list(CAT_NAMES), list(INT_NAMES), "label", True
        self.meta = {"source": "w4", "label": "label", "categorical": self.categorical, "numeric": self.numeric,
                     "w4": {"seed": gen.seed, "scale": gen.scale, "zipf": gen.zipf,
                            "positive_rate": gen.positive_rate, "start": self.start}}

    def parts(self):
        for ids, ints, y, _ in self.gen.rows(self.start, self.n_rows):
            hexes = self.gen.hex_codes(ids)
            Xd = np.where(ints == MISSING_INT, np.nan, ints.astype(np.float64))
            yield Part([hexes[:, j].astype(str) for j in range(N_CAT)], Xd, y, len(y))


# ---------------------------------------------------------------- the command line
def log_file(path):
    """--out: a log's text (.tsv, .txt, maybe .gz) or a packed file (.mpinn), in a directory that exists."""
    if not path.endswith((".mpinn", ".tsv", ".txt", ".tsv.gz", ".txt.gz")):
        raise argparse.ArgumentTypeError("%s: name it .tsv, .txt (either may end in .gz) or .mpinn" % path)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise argparse.ArgumentTypeError("%s: directory %s does not exist" % (path, parent))
    return path


def at_least_one(s):
    v = float(s)
    if not v >= 1 or v == float("inf"):
        raise argparse.ArgumentTypeError("must be at least 1, not %s" % s)
    return v


def share(s):
    v = float(s)
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError("must be between 0 and 1, not %s" % s)
    return v


def build_parser():
    p = Parser(
        prog="python -m mpinn.bench.w4",
        description="Generate W4, a click log shaped like the Criteo 1TB log (label, I1..I13, C1..C26), "
                    "deterministic from --seed: to the log's tab-separated text (.tsv, .txt; gzip if the name "
                    "ends in .gz) or to a packed file (.mpinn).",
        epilog="Train and test as a log is evaluated: the first N rows train, the next M test, e.g. "
               "--rows N --out train.tsv, then --start N --rows M --out test.tsv.")
    p.add_argument("--rows", type=positive_int, required=True, help="rows to write")
    p.add_argument("--start", type=nonneg_int, default=0, help="the first row's number in the log (default 0)")
    p.add_argument("--out", type=log_file, required=True, help="FILE.tsv, FILE.txt, FILE.tsv.gz or FILE.mpinn")
    p.add_argument("--seed", type=int, default=0, help="the log's seed (default 0)")
    p.add_argument("--scale", type=at_least_one, default=1.0,
                   help="divide the 26 cardinalities by this, at least 2 values each (default 1: 40M values)")
    p.add_argument("--zipf", type=positive_float, default=1.1, help="the values' Zipf exponent (default 1.1)")
    p.add_argument("--positive-rate", type=share, default=0.25, help="the share of clicks (default 0.25)")
    p.add_argument("--truth", help="also write the hidden model's click probability of each row (.npy, float32)")
    p.add_argument("--hash-bits", type=trick_bits,     # the option's own type, as training's
                   default=None, help="packed output: hash bits, 1..30 (default: auto)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    packed = args.out.endswith(".mpinn")
    gen = W4(args.seed, args.scale, args.zipf, args.positive_rate)
    say = (lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    say("%s; rows %d..%d -> %s" % (gen.describe(), args.start, args.start + args.rows, args.out))
    t0, last = time.perf_counter(), [0.0]

    def progress(done):
        now = time.perf_counter()
        if now - last[0] > 5 or done == args.rows:
            last[0] = now
            say("  %d of %d rows (%.0f rows/s)" % (done, args.rows, done / max(now - t0, 1e-9)))
    if packed:
        summary = prepare(W4Source(gen, args.start, args.rows), args.out, DataSpec(task="binary"),
                          HashSpec(bits=args.hash_bits), progress=Progress(not args.quiet))
        n = summary["rows"]
        if args.truth:
            np.save(args.truth, np.concatenate([p.astype(np.float32) for *_, p in gen.rows(args.start, args.rows)]))
    else:
        n = write_text(gen, args.out, args.start, args.rows, args.truth, progress)
    seconds = time.perf_counter() - t0
    say("wrote %d rows to %s (%.1f MB) in %.1f s (%.0f rows/s)" % (
        n, args.out, os.path.getsize(args.out) / 1e6, seconds, n / max(seconds, 1e-9)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
