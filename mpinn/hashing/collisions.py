"""How many distinct values share their whole code: measured, and expected under uniform hashing."""
import math

import numpy as np

from mpinn.hashing.columns import _digests, _trick_tokens, split_slices
from mpinn.hashing.tokens import _ordered, factorize


# ---------------------------------------------------------------- collisions
def expected_colliding(distinct, cells):
    """Values expected to share their whole code with at least one other value when `distinct` values
    fall uniformly into `cells` codes (the birthday bound): D * (1 - (1 - 1/M)**(D - 1)), ~ D^2/M."""
    d, m = float(distinct), float(cells)
    if d < 2 or m <= 0:
        return 0.0
    return d * -math.expm1((d - 1) * math.log1p(-1.0 / m)) if m > 1 else d


def _report_row(feature, distinct, colliding, expected, buckets, k):
    return {"feature": feature, "distinct": int(distinct), "colliding": int(colliding),
            "expected": round(float(expected), 3), "buckets": int(buckets), "k": int(k)}


def _colliding_rows(codes2d):
    """How many rows of codes2d equal another row."""
    if len(codes2d) < 2:
        return 0
    _, counts = np.unique(codes2d, axis=0, return_counts=True)
    return int(counts[counts > 1].sum())


def _collisions_of_digests(contract, j, digests):
    f = contract["features"][j]
    if contract["mode"] == "trick":
        codes = (digests & np.uint64((1 << contract["bits"]) - 1)).reshape(-1, 1)
        cells, b, k = float(1 << contract["bits"]), 1 << contract["bits"], 1
    else:
        k, b = contract["k"], contract["buckets"][j]
        codes = split_slices(digests, k, b)
        cells = float(b) ** k
    return _report_row(f, len(digests), _colliding_rows(codes), expected_colliding(len(digests), cells), b, k)


def collision_report(columns, contract):
    """Per feature: distinct values, how many of them share ALL their columns with another value of the
    same feature (k of k for split, the one column for trick; 0 for onehot), and the number expected
    under the birthday bound for uniform hashing (expected_colliding with M = buckets**k, or 2**bits)."""
    out = []
    for j, col in enumerate(_ordered(columns, contract["features"])):
        _, tokens = factorize(col)
        f = contract["features"][j]
        if contract["mode"] == "onehot":
            out.append(_report_row(f, len(tokens), 0, 0.0, len(contract["vocab"][j]) + 1, 1))
            continue
        seed = contract["seed"] if contract["mode"] == "trick" else contract["feature_seeds"][j]
        toks = _trick_tokens(contract, j, tokens) if contract["mode"] == "trick" else tokens
        out.append(_collisions_of_digests(contract, j, _digests(toks, seed)))
    return out


def format_report(rows):
    lines = ["%-16s %10s %10s %10s %8s" % ("feature", "distinct", "colliding", "expected", "buckets")]
    for r in rows:
        lines.append("%-16s %10d %10d %10.1f %8s" % (r["feature"][:16], r["distinct"], r["colliding"],
                                                      r["expected"], "%dx%d" % (r["k"], r["buckets"])
                                                      if r["k"] > 1 else r["buckets"]))
    return "\n".join(lines)
