"""How the sharded table's exchanges put rows on the wire (--wire-rows): fp32, the table's own values, or bf16: every
row a rank uses (fetched from its owner, or its replica of a hot row) rounded to bfloat16, and every gradient row
rounded once by the rank that computed it, half the bytes each; the ids as int32 where the table has fewer than
2^31 rows. The rounding is the element's alone (to nearest even), so it is the same whichever rank owns or relays a
row: P ranks compute what one process computes with each rank's share of the batch as a micro-batch whose rows
are rounded as the rank rounds them (tests/training/mpi_sharded.py). The table and its optimizer state stay in
their own precision: only what travels is rounded."""
import numpy as np

from mpinn.comm.compress import from_bf16, to_bf16

WIRES = ("fp32", "bf16")


class Wire:
    """The rows' and ids' format on the wire for a table of n_rows rows (see the module docstring). codec: the
    bf16 casts by compiled kernels (mpinn.optim.fused.BF16, given by the step: this layer does not import the
    kernels), each returning None where it does not run; numpy's casts otherwise, with the same bits."""

    def __init__(self, name="fp32", n_rows=0, codec=None):
        if name not in WIRES:
            raise ValueError("rows go on the wire as %s, not %r" % (" or ".join(WIRES), name))   # the option's choices
        self.name = name
        self.half = name == "bf16"
        self.ids = np.int32 if self.half and n_rows < 2 ** 31 else np.int64
        self.id_bytes = np.dtype(self.ids).itemsize
        self.codec = codec

    def itemsize(self, dtype):
        """Bytes a row element takes on the wire."""
        return 2 if self.half else np.dtype(dtype).itemsize

    def out(self, rows):
        """Rows (k, width) as they are sent."""
        if not self.half:
            return np.ascontiguousarray(rows)
        words = np.empty(rows.shape, np.uint16)
        got = self.codec.encode(rows, words) if self.codec is not None else None
        return got if got is not None else to_bf16(rows, words)

    def take(self, table, ids):
        """Rows ids of the (n, width) table as they are sent (an owner's answer: gathered and cast in one pass
        where the codec runs)."""
        if self.half and self.codec is not None:
            got = self.codec.take(table, ids, np.empty((ids.shape[0], table.shape[1]), np.uint16))
            if got is not None:
                return got
        return self.out(np.take(table, ids, axis=0))

    def buffer(self, k, width, dtype):
        """A receive buffer for k rows."""
        return np.empty((k, width), np.uint16 if self.half else dtype)

    def back(self, got, dtype):
        """Received rows in the table's dtype."""
        if not self.half:
            return got
        rows = self.codec.decode(got) if self.codec is not None else None
        return (from_bf16(got) if rows is None else rows).astype(dtype, copy=False)

    def round(self, rows):
        """Rows as a receiver sees them after the trip (a hot row's replica: no trip, the same rounding)."""
        return self.back(self.out(rows), rows.dtype) if self.half else rows
