"""Part: consecutive rows of a table as the readers make them (mpinn.data.formats.tables, mpinn.data.formats.clicktext), and the
rows of one taken by position."""
from dataclasses import dataclass

import numpy as np


@dataclass
class Part:
    """Consecutive rows of a table: categorical columns (list, numpy or arrow arrays, in feature
    order), dense numbers (m, d) float64 or None, raw labels (m,) or None."""
    cats: list
    Xd: object
    labels: object
    n: int


def take_part(part, rows):
    """The rows `rows` (positions within the chunk) of a Part."""

    def pick(c):
        if isinstance(c, np.ndarray):
            return c[rows]
        if isinstance(c, list):
            return [c[i] for i in rows]
        return c.take(rows)     # an arrow array
    return Part([pick(c) for c in part.cats], part.Xd[rows] if part.Xd is not None else None,
                pick(part.labels) if part.labels is not None else None, len(rows))
