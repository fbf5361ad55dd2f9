"""A large packed file made quickly: a small packed file's rows written `times` times over, one after another.

The larger-than-memory test needs a file three times its memory limit, not 2.4 million distinct rows: W4's
generator takes about 30 s per million rows here (drawing and hashing them), while copying rows that are already
packed runs at the disk's speed. The copy is a packed file like any other (its own header, offsets and xxh64
sums, written by mpinn's PackedWriter); its meta is the small file's with the row counts of the numeric
statistics multiplied, as the statistics of the repeated rows are (means, spreads, extremes and quantiles stay).

    python -m scripts.bench.larger_than_memory.tile small.mpinn big.mpinn 10
"""
import argparse
import copy

import numpy as np

from mpinn.data.packed.format import _PackedFile
from mpinn.data.packed.writing import PackedWriter

CHUNK_ROWS = 1 << 18


def tile(src, out, times):
    """Write `src`'s rows `times` times into a new packed file `out`; returns its row count."""
    if times < 1:
        raise ValueError("times must be at least 1")
    f = _PackedFile(src)
    a, n = f.arrays, f.n_rows
    meta = copy.deepcopy(f.meta)
    stats = meta.get("numeric_stats")
    if stats:
        stats["rows"] = stats["rows"] * times
        for key in ("count", "missing"):
            stats[key] = [c * times for c in stats[key]]
    sparse = f.n_columns > 0
    with PackedWriter(out, n * times, f.n_columns, f.nnz * times, f.n_dense, a["y"].dtype, meta,
                      row_nnz=f.row_nnz) as w:
        for _ in range(times):
            for lo in range(0, n, CHUNK_ROWS):
                hi = min(lo + CHUNK_ROWS, n)
                indices = data = lengths = None
                if sparse:
                    ip = a["indptr"]
                    indices, data = a["indices"][ip[lo]:ip[hi]], a["data"][ip[lo]:ip[hi]]
                    lengths = np.diff(ip[lo:hi + 1])
                w.append(indices, lengths, a["y"][lo:hi], a["dense"][lo:hi] if f.n_dense else None, data=data)
    return n * times


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", help="a packed file (.mpinn)")
    p.add_argument("out", help="the packed file to write")
    p.add_argument("times", type=int, help="how many copies of src's rows, one after another")
    args = p.parse_args(argv)
    print("wrote %d rows to %s" % (tile(args.src, args.out, args.times), args.out))


if __name__ == "__main__":
    main()
