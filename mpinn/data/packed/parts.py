"""Multi-part packed datasets (what `mpirun -np N python -m mpinn.prepare` writes): a small manifest under the name
given (X.mpinn) and packed files X.mpinn.parts/part-00000.mpinn, ..., one per rank that packed rows, read as one
dataset: the parts' rows one after another, in the input files' order, under the manifest's meta.

The manifest is MANIFEST_MAGIC, a newline and UTF-8 JSON: {"format", "n_rows", "meta" (the whole dataset's, as
one prepared file's: task, classes, hashing contract, numeric statistics and transform), "parts": [{"path"
(relative to the manifest's folder), "n_rows", "file_size", "xxh64" (each section's checksum)}], "meta_xxh64" (the
meta's checksum: mpinn.data.packed.meta)}. A part that does not match its entry (replaced, truncated, from another
run), or a meta that is not the one written or not its parts', is one error line when the dataset is opened."""
import json
import os

import numpy as np
import scipy.sparse as sp

from mpinn.core.errors import MpinnError
from mpinn.data.base import Rows
from mpinn.data.packed.format import Columns, PackedDataset, check_packed
from mpinn.data.packed.meta import PREPARE_AGAIN, check_meta, meta_digest
from mpinn.data.spec import DataSpec
from mpinn.hashing import HashSpec

MANIFEST_MAGIC = b"MPINNPARTS1"
FORMAT = "mpinn-parts-1"


def parts_dir(out):
    """The folder of a multi-part dataset's parts, beside its manifest `out`."""
    return out + ".parts"


def part_name(i):
    return "part-%05d.mpinn" % i


def is_manifest(path):
    """Is `path` a multi-part dataset's manifest (not a packed file)?"""
    try:
        with open(path, "rb") as f:
            return f.read(len(MANIFEST_MAGIC)) == MANIFEST_MAGIC
    except OSError:
        return False


def manifest_bytes(meta, parts):
    """The manifest of parts [(relative path, PackedDataset of it)] under the whole dataset's meta."""
    entries = [{"path": rel, "n_rows": len(p), "file_size": p._file.header["file_size"],
                "xxh64": {k: s["xxh64"] for k, s in p._file.header["sections"].items()}} for rel, p in parts]
    body = {"format": FORMAT, "n_rows": sum(e["n_rows"] for e in entries), "meta": meta,
            "meta_xxh64": meta_digest(meta), "parts": entries}
    return MANIFEST_MAGIC + b"\n" + json.dumps(body, separators=(",", ":")).encode("utf-8") + b"\n"


def read_manifest(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise MpinnError("cannot read %s: %s" % (path, e.strerror))
    try:
        body = json.loads(raw[len(MANIFEST_MAGIC):].decode("utf-8"))
        if body.get("format") != FORMAT:
            raise MpinnError("%s: unknown multi-part format %r (this mpinn reads %s)" % (path, body.get("format"),
                                                                                         FORMAT))
        if not isinstance(body["meta"], dict) or not body["parts"] or \
                sum(int(e["n_rows"]) for e in body["parts"]) != body["n_rows"]:
            raise ValueError("sizes")
    except MpinnError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
        raise MpinnError("%s: damaged multi-part manifest (%s: %s)" % (path, type(e).__name__, e))
    return body


def open_part(path, entry, manifest):
    """A part, checked against its manifest entry."""
    if not os.path.exists(path):
        raise MpinnError("%s: its part %s is missing (move the manifest with its %s folder)"
                         % (manifest, path, os.path.basename(os.path.dirname(path))))
    p = PackedDataset(path)
    head = p._file.header
    if len(p) != entry["n_rows"] or head["file_size"] != entry["file_size"] or \
            {k: s["xxh64"] for k, s in head["sections"].items()} != entry["xxh64"]:
        raise MpinnError("%s: its part %s is not the one it was written with (prepare the data again)"
                         % (manifest, path))
    return p


class PartsDataset(Rows):
    """The rows of a multi-part dataset's parts (PackedDataset each) as one: global row i is row i - starts[k]
    of part k. The same interface as PackedDataset (take, subset, split, y, dense_rows, ...): subset() gives
    views that share the open parts."""

    def __init__(self, path, parts, meta, _rows=None):
        self.path, self.parts, self.meta = path, parts, dict(meta)
        self.starts = np.cumsum([0] + [len(p) for p in parts]).astype(np.int64)
        self._rows = _rows              # None: every row; else global row ids
        self._y = None
        first = parts[0]
        self.n_sparse, self.raw_dense = first.n_sparse, first.raw_dense
        for p in parts[1:]:
            if (p.n_sparse, p.raw_dense, p._file.arrays["y"].dtype) != (
                    self.n_sparse, self.raw_dense, first._file.arrays["y"].dtype):
                raise MpinnError("%s: part %s has another layout than %s" % (path, p.path, first.path))

    def __len__(self):
        return int(self.starts[-1]) if self._rows is None else int(self._rows.shape[0])

    @property
    def n_rows(self):
        return len(self)

    @property
    def Xs(self):
        return Columns(self, self.n_sparse, np.float32, True) if self.n_sparse else None

    @property
    def Xd(self):
        return Columns(self, self.raw_dense, np.float64, False) if self.raw_dense else None

    @property
    def y(self):
        if self._y is None:
            y = np.concatenate([p._file.arrays["y"] for p in self.parts])
            self._y = y if self._rows is None else y[self._rows]
        return self._y

    @property
    def sparse_fan_in(self):
        return self._nnz() / max(len(self), 1) if self.n_sparse else 1.0

    def _nnz(self):
        if self._rows is None:
            return sum(p._file.nnz for p in self.parts)
        total = 0
        for k, local, *_ in self._by_part(self._rows):
            total += self.parts[k].subset(local)._nnz()
        return total

    def _global(self, rows):
        rows = np.asarray(rows).ravel()
        rows = rows.astype(np.int64) if rows.dtype.kind not in "iu" else rows.astype(np.int64, copy=False)
        n = len(self)
        if rows.shape[0] and (int(rows.min()) < -n or int(rows.max()) >= n):
            raise IndexError("row index out of range for %d rows" % n)
        rows = np.where(rows < 0, rows + n, rows)
        return self._rows[rows].astype(np.int64) if self._rows is not None else rows

    def _by_part(self, rows):
        """[(part, its local rows, their places in `rows`)] of global rows, parts in order; places None when
        the rows' parts are in order already (concatenating the parts' rows gives `rows`' order)."""
        which = np.searchsorted(self.starts, rows, side="right") - 1
        out = []
        if rows.shape[0] == 0 or bool(np.all(which[1:] >= which[:-1])):
            for k in np.unique(which):
                lo, hi = np.searchsorted(which, [k, k + 1])
                out.append((int(k), rows[lo:hi] - self.starts[k]))
            return out
        for k in np.unique(which):
            places = np.flatnonzero(which == k)
            out.append((int(k), rows[places] - self.starts[k], places))
        return out

    def dense_rows(self, lo, hi):
        return self.raw_rows(np.arange(lo, hi))[1]

    def raw_rows(self, rows):
        """(Xs, Xd, y) of the given rows (in that order) as stored: each part reads its rows (a run of
        consecutive rows as slices), put back in the order asked."""
        rows = self._global(rows)
        pieces = self._by_part(rows)
        got = [self.parts[k].take(local) for k, local, *_ in pieces]   # the parts have no transform: rows as stored
        if not got:
            return (sp.csr_matrix((0, self.n_sparse), dtype=np.float32) if self.n_sparse else None,
                    np.zeros((0, self.raw_dense)) if self.raw_dense else None, self.parts[0]._file.arrays["y"][:0])
        if len(got) == 1:
            return got[0].Xs, got[0].Xd, got[0].y
        Xs = sp.vstack([b.Xs for b in got], format="csr") if self.n_sparse else None
        Xd = np.concatenate([b.Xd for b in got]) if self.raw_dense else None
        y = np.concatenate([b.y for b in got])
        if len(pieces[0]) == 3:         # rows from parts out of order: back in the order asked
            order = np.argsort(np.concatenate([p[2] for p in pieces]), kind="stable")
            Xs = Xs[order] if Xs is not None else None
            Xd = Xd[order] if Xd is not None else None
            y = y[order]
        return Xs, Xd, y

    def take(self, rows, dtype=None):
        """The batch of the given rows (in that order), through the transform, cast to the model dtype."""
        return self.batch(*self.raw_rows(rows), dtype)

    def subset(self, rows):
        rows = np.asarray(rows, dtype=np.int64).ravel()
        if self._rows is not None:
            rows = self._rows[rows]
        view = PartsDataset(self.path, self.parts, self.meta,
                            _rows=rows.astype(np.int32) if int(self.starts[-1]) < 2**31 else rows)
        view.transform, view.meta = self.transform, self.meta
        return view

    def verify(self):
        for p in self.parts:
            p.verify()

    def release(self):
        for p in self.parts:
            p.release()


def open_parts(path):
    """The PartsDataset of manifest `path`."""
    body = read_manifest(path)
    here = os.path.dirname(os.path.abspath(path))
    parts = [open_part(os.path.join(here, e["path"]), e, path) for e in body["parts"]]
    meta, first = body["meta"], parts[0]._file
    check_meta(path, meta, body.get("meta_xxh64"), body["n_rows"], first.n_columns, first.n_dense, first.row_nnz)
    for p in parts:         # every part was packed under the whole's task, classes and contract
        for key in ("task", "classes", "hashing"):
            if p.meta.get(key) != meta.get(key):
                raise MpinnError("%s: its meta's %s (%s) is not that of its part %s (%s); %s" % (
                    path, key, str(meta.get(key))[:60], p.path, str(p.meta.get(key))[:60], PREPARE_AGAIN))
    return PartsDataset(path, parts, meta)


def open_packed(path, spec=DataSpec(), hashing=HashSpec()):
    """A packed file or a multi-part dataset's manifest (both .mpinn), checked as load_packed checks a file."""
    if is_manifest(path):
        return check_packed(open_parts(path), path, spec, hashing)
    return check_packed(PackedDataset(path), path, spec, hashing)
