"""How the sharded table's exchanges put rows on the wire (--wire-rows): fp32, the table's own values; bf16: every
row a rank uses (fetched from its owner, or its replica of a hot row) rounded to bfloat16, and every gradient row
rounded once by the rank that computed it, half the bytes each; int8: each row as 8-bit integers and one float32
scale of its own (the row's largest magnitude / 127; each element / the scale rounded to nearest even), 68 bytes
a 64-wide row instead of 256; bf16-int8: the rows as bf16 and the gradient rows as int8. With any of them, the ids
go as int32 where the table has fewer than 2^31 rows. The rounding is the row's alone, so it is the same whichever
rank owns or relays a row: P ranks compute what one process computes with each rank's share of the batch as a
micro-batch whose rows are rounded as the rank rounds them (tests/training/mpi_sharded.py). The table and its
optimizer state stay in their own precision: only what travels is rounded."""
import numpy as np

from mpinn.comm.compress import from_bf16, to_bf16

FORMATS = ("fp32", "bf16", "int8")                 # a Wire's
WIRES = FORMATS + ("bf16-int8", "int8-bf16")     # --wire-rows' (ROWS-GRADS: rows as ROWS, gradient rows as GRADS)
SCALE = 4               # bytes of an int8 row's float32 scale, after its values
LEVELS = np.float32(127)


def wires(name, n_rows=0, codecs=None):
    """(the rows' Wire, the gradient rows' Wire) of --wire-rows `name`, each with its codec from codecs (a {format:
    codec} map, e.g. mpinn.optim.fused.CODECS)."""
    if name not in WIRES:
        raise ValueError("rows go on the wire as %s, not %r" % (" or ".join(WIRES), name))   # the option's choices
    rows, grads = name.split("-") if "-" in name else (name, name)
    codecs = codecs or {}
    return Wire(rows, n_rows, codecs.get(rows)), Wire(grads, n_rows, codecs.get(grads))


class Wire:
    """The rows' and ids' format on the wire for a table of n_rows rows (see the module docstring). codec: the
    casts by compiled kernels (mpinn.optim.fused.CODECS[name], given by the step: this layer does not import the
    kernels), each returning None where it does not run; numpy's casts otherwise, with the same bits."""

    def __init__(self, name="fp32", n_rows=0, codec=None):
        if name not in FORMATS:
            raise ValueError("a wire format is fp32, bf16 or int8, not %r" % name)
        self.name = name
        self.half, self.int8 = name == "bf16", name == "int8"
        self.ids = np.int32 if name != "fp32" and n_rows < 2 ** 31 else np.int64
        self.id_bytes = np.dtype(self.ids).itemsize
        self.codec = codec if name != "fp32" else None

    def items(self, width):
        """Items a row of width elements takes in a wire buffer (an int8 row: its values, then its scale's bytes)."""
        return width + SCALE if self.int8 else width

    def itemsize(self, dtype):
        """Bytes an item of a wire buffer takes."""
        return 1 if self.int8 else 2 if self.half else np.dtype(dtype).itemsize

    def row_bytes(self, width, dtype):
        """Bytes a row of width elements takes on the wire."""
        return self.items(width) * self.itemsize(dtype)

    def out(self, rows):
        """Rows (k, width) as they are sent."""
        if self.name == "fp32":
            return np.ascontiguousarray(rows)
        buf = self.buffer(rows.shape[0], rows.shape[1], rows.dtype)
        got = self.codec.encode(rows, buf) if self.codec is not None else None
        if got is not None:
            return got
        return to_int8(rows, buf) if self.int8 else to_bf16(rows, buf)

    def take(self, table, ids):
        """Rows ids of the (n, width) table as they are sent (an owner's answer: gathered and cast in one pass
        where the codec runs)."""
        if self.codec is not None:
            got = self.codec.take(table, ids, self.buffer(ids.shape[0], table.shape[1], table.dtype))
            if got is not None:
                return got
        return self.out(np.take(table, ids, axis=0))

    def buffer(self, k, width, dtype):
        """A receive buffer for k rows."""
        if self.int8:
            return np.empty((k, width + SCALE), np.uint8)
        return np.empty((k, width), np.uint16 if self.half else dtype)

    def back(self, got, dtype):
        """Received rows in the table's dtype."""
        if self.name == "fp32":
            return got
        rows = self.codec.decode(got) if self.codec is not None else None
        if rows is None:
            rows = from_int8(got) if self.int8 else from_bf16(got)
        return rows.astype(dtype, copy=False)

    def round(self, rows):
        """Rows as a receiver sees them after the trip (a hot row's replica: no trip, the same rounding)."""
        return self.back(self.out(rows), rows.dtype) if self.name != "fp32" else rows


def to_int8(rows, out=None):
    """Rows (k, w) (float32; float64 is rounded to float32 first) as (k, w + SCALE) bytes (into out, if given): each row's w values as
    int8, q = the value / s rounded to nearest even (at most 127 in magnitude), then s = the row's largest magnitude
    / 127 as a float32, all in float32 arithmetic. A row of zeros has s = 0 and q = 0; a row holding a NaN or an Inf
    has a NaN or Inf s and q = 0, so that it arrives as NaN (0 x Inf) and the step is refused as non-finite."""
    x = np.ascontiguousarray(rows, dtype=np.float32)
    k, w = x.shape
    out = np.empty((k, w + SCALE), np.uint8) if out is None else out
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.abs(x).max(axis=1) / LEVELS if w else np.zeros(k, np.float32)
        ok = np.isfinite(s) & (s > 0)
        q = np.rint(x / np.where(ok, s, np.float32(1))[:, None])
    q[~ok] = 0
    np.clip(q, -127, 127, out=q)
    out[:, :w] = q.astype(np.int8).view(np.uint8)
    out[:, w:] = s.astype(np.float32).view(np.uint8).reshape(k, SCALE)
    return out


def from_int8(got):
    """to_int8's bytes (k, w + SCALE) as float32 rows (k, w): q x s, one float32 product each."""
    w = got.shape[1] - SCALE
    s = np.ascontiguousarray(got[:, w:]).view(np.float32).reshape(-1)
    with np.errstate(invalid="ignore"):
        return got[:, :w].view(np.int8).astype(np.float32) * s[:, None]
