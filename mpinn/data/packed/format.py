"""Packed datasets: hashed rows in one binary file at fixed offsets, read by row through a memory map
(written by mpinn.data.packed.writing)."""
import json
import mmap
import os

import numpy as np
import scipy.sparse as sp
import xxhash

from mpinn.core.errors import MpinnError
from mpinn.data.base import Rows
from mpinn.data.packed.meta import check_meta, verify_rows
from mpinn.data.spec import DataSpec
from mpinn.hashing import HashSpec, check_contract

MAGIC = b"MPINNPK1"
FORMAT = "mpinn-packed-1"
PAGE = 4096                 # sections start on page boundaries
RELEASE_BYTES = 256 << 20   # after this much has been read, drop the mapped pages from this process


# ---------------------------------------------------------------- the layout
#
#   [0, 8)            MAGIC
#   [8, 16)           H, the header's length in bytes (uint64, little-endian)
#   [16, 16 + H)      the header: UTF-8 JSON, padded with spaces
#   then, each at the offset the header gives (a multiple of PAGE), in this order:
#   indptr   int64    (n_rows + 1,)     row i's entries are [indptr[i], indptr[i+1])
#   indices  int32    (nnz,)            input columns, rows one after another, features in order
#   data     float32  (nnz,)            their values
#   y        int64 (multiclass ids) or float64 (binary 0/1, regression)   (n_rows,)
#   dense    float64  (n_rows, n_dense) C order
#
# indptr, indices and data are absent without categorical columns, dense without numeric ones.
# The header holds n_rows, n_columns, nnz, row_nnz (entries per row when every row has the same count),
# n_dense, meta (task, classes, hashing contract, source columns: what Dataset.meta holds), meta_xxh64 (its
# checksum: mpinn.data.packed.meta; absent from files written before it, which are read unchecked), every
# section's offset, dtype, shape, byte count and xxh64, and file_size.

def _section_specs(n_rows, nnz, n_dense, y_dtype, sparse):
    specs = []
    if sparse:
        specs += [("indptr", "<i8", [n_rows + 1]), ("indices", "<i4", [nnz]), ("data", "<f4", [nnz])]
    specs.append(("y", np.dtype(y_dtype).newbyteorder("<").str, [n_rows]))
    if n_dense:
        specs.append(("dense", "<f8", [n_rows, n_dense]))
    return specs


def _nbytes(dtype, shape):
    return int(np.dtype(dtype).itemsize * np.prod(shape, dtype=np.int64))


def _align(x):
    return -(-x // PAGE) * PAGE


def _int(v):
    """A header number: an int and nothing else (a damaged header can hold anything)."""
    if type(v) is not int:
        raise ValueError("%r is not an integer" % (v,))
    return v


class _PackedFile:
    """An opened, validated packed file: header, the memory map and a read-only array per section."""

    def __init__(self, path, verify=False):
        self.path = path
        try:
            size = os.path.getsize(path)
            f = open(path, "rb")
        except OSError as e:
            raise MpinnError("cannot read %s: %s" % (path, e.strerror))
        with f:
            head = f.read(16)
            if len(head) < 16 or head[:8] != MAGIC:
                raise MpinnError("%s is not an mpinn packed file (make one with python -m mpinn.prepare)" % path)
            hlen = int.from_bytes(head[8:16], "little")
            if 16 + hlen > size:
                raise MpinnError("%s is truncated: %d bytes, its header alone needs %d" % (path, size, 16 + hlen))
            try:
                self.header = h = json.loads(f.read(hlen).decode("utf-8"))
                if h.get("format") != FORMAT:
                    raise MpinnError("%s: unknown packed format %r (this mpinn reads %s)"
                                     % (path, h.get("format"), FORMAT))
                self.n_rows, self.n_columns, self.nnz = _int(h["n_rows"]), _int(h["n_columns"]), _int(h["nnz"])
                self.n_dense = _int(h["n_dense"])
                self.row_nnz = None if h.get("row_nnz") is None else _int(h["row_nnz"])
                sections, meta = h["sections"], h["meta"]
                expected = _section_specs(self.n_rows, self.nnz, self.n_dense, sections["y"]["dtype"],
                                          self.n_columns > 0)
                if sorted(sections) != sorted(n for n, _, _ in expected) or not isinstance(meta, dict):
                    raise ValueError("sections %s" % sorted(sections))
                for name, dtype, shape in expected:
                    s = sections[name]
                    if s["dtype"] != dtype or list(s["shape"]) != shape or _int(s["nbytes"]) != _nbytes(dtype, shape) \
                            or _int(s["offset"]) % PAGE or s["offset"] < 16 + hlen \
                            or not isinstance(s["xxh64"], str):
                        raise ValueError("section %s" % name)
                    s["shape"] = shape          # the expected shape itself: [3.0] == [3] but cannot reshape
                if meta.get("task") not in ("binary", "multiclass", "regression") \
                        or not isinstance(meta.get("classes"), (list, type(None))) \
                        or (meta["task"] == "multiclass" and not meta["classes"]) \
                        or not isinstance(meta.get("hashing"), (dict, type(None))):
                    raise ValueError("meta")
                file_size = _int(h["file_size"])
                contract = meta.get("hashing")
                if self.n_columns > 2**31 - 1 or (isinstance(contract, dict)
                                                  and contract.get("n_columns") != self.n_columns):
                    raise ValueError("n_columns")
                if min(self.n_rows, self.nnz, self.n_dense, self.n_columns) < 0 or (
                        self.row_nnz is not None and self.row_nnz * self.n_rows != self.nnz):
                    raise ValueError("sizes")
            except MpinnError:
                raise
            except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
                raise MpinnError("%s: damaged header (%s: %s)" % (path, type(e).__name__, e))
            if size != file_size:
                raise MpinnError("%s is %s: %d bytes, its header says %d" % (
                    path, "truncated" if size < file_size else "damaged", size, file_size))
            for name, s in sections.items():
                if s["offset"] + s["nbytes"] > size:
                    raise MpinnError("%s is truncated: section %s ends past the end of the file" % (path, name))
            check_meta(path, meta, h.get("meta_xxh64"), self.n_rows, self.n_columns, self.n_dense, self.row_nnz)
            self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.meta = meta
        self.arrays = {name: np.frombuffer(self.mm, dtype=s["dtype"], count=int(np.prod(s["shape"])),
                                           offset=s["offset"]).reshape(s["shape"])
                       for name, s in sections.items()}
        if self.n_columns:
            ip = self.arrays["indptr"]
            if ip[0] != 0 or ip[-1] != self.nnz or (self.row_nnz is not None and ip[1] != self.row_nnz):
                raise MpinnError("%s: damaged row index (indptr)" % path)
        if verify:
            self.verify()
        self.unread = 0

    def verify(self):
        """Every section's xxh64 against the header (reads the whole file)."""
        for name, s in self.header["sections"].items():
            h = xxhash.xxh64()
            step = 64 << 20
            for a in range(s["offset"], s["offset"] + s["nbytes"], step):
                h.update(self.mm[a:min(a + step, s["offset"] + s["nbytes"])])
            if h.hexdigest() != s["xxh64"]:
                raise MpinnError("%s: section %s does not match its checksum (damaged file)" % (self.path, name))
        verify_rows(self.path, self.arrays, self.meta, self.row_nnz)
        self.release()

    def touched(self, nbytes):
        """Pages read through the map count in this process's resident memory until dropped: drop them
        every RELEASE_BYTES, so a pass over a file bigger than memory keeps the RSS flat."""
        self.unread += nbytes
        if self.unread > RELEASE_BYTES:
            self.release()

    def release(self):
        self.unread = 0
        if hasattr(self.mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
            self.mm.madvise(mmap.MADV_DONTNEED)


class Columns:
    """Stands for a packed dataset's CSR or dense input where code asks only its shape, dtype or entry count
    (.shape, .nnz, .getnnz()); [rows] reads those rows: a scipy CSR matrix, or a dense array in memory.
    PackedDataset and the multi-part dataset (mpinn.data.packed.parts) hand these out."""

    def __init__(self, data, width, dtype, sparse):
        self._data, self.shape, self.dtype, self._sparse = data, (len(data), width), np.dtype(dtype), sparse

    @property
    def nnz(self):
        return self._data._nnz()

    def getnnz(self):
        return self.nnz

    def __getitem__(self, rows):
        b = self._data.take(rows)
        return b.Xs if self._sparse else b.Xd


def _as_range(rows):
    """(lo, hi) when rows are lo, lo+1, ..., hi-1, else None."""
    m = rows.shape[0]
    if m and int(rows[-1]) - int(rows[0]) == m - 1 and (m == 1 or bool(np.all(np.diff(rows) == 1))):
        return int(rows[0]), int(rows[-1]) + 1
    return None


class PackedDataset(Rows):
    """The rows of a packed file, read on demand through a memory map: the same interface as
    data.Dataset (len, meta, task, layout, take, subset, split, y, n_sparse, n_dense), so the trainer
    does not care which it holds. subset() and split() give views that share the open file."""

    def __init__(self, path, verify=False, _file=None, _rows=None):
        self._file = _file or _PackedFile(path, verify)
        self.path = path
        self._rows = _rows                      # None: every row of the file; else file row ids
        self.meta = dict(self._file.meta)

    @property
    def n_rows(self):
        """Rows in this (view of the) file."""
        return len(self)

    def __len__(self):
        return self._file.n_rows if self._rows is None else int(self._rows.shape[0])

    @property
    def n_sparse(self):
        return self._file.n_columns

    @property
    def raw_dense(self):
        return self._file.n_dense

    def dense_rows(self, lo, hi):
        d = self._file.arrays["dense"]
        out = np.array(d[lo:hi]) if self._rows is None else d[self._rows[lo:hi]]
        self._file.touched(out.nbytes)
        return out

    @property
    def Xs(self):
        return Columns(self, self._file.n_columns, np.float32, True) if self._file.n_columns else None

    @property
    def Xd(self):
        return Columns(self, self._file.n_dense, np.float64, False) if self._file.n_dense else None

    @property
    def y(self):
        y = self._file.arrays["y"]
        return y if self._rows is None else y[self._rows]

    def _nnz(self):
        f = self._file
        if self._rows is None:
            return f.nnz
        if f.row_nnz is not None:
            return f.row_nnz * len(self)
        ip = f.arrays["indptr"]
        return int((ip[self._rows + 1] - ip[self._rows]).sum())

    @property
    def sparse_fan_in(self):
        return self._nnz() / max(len(self), 1) if self._file.n_columns else 1.0

    def verify(self):
        self._file.verify()

    def subset(self, rows):
        rows = np.asarray(rows, dtype=np.int64).ravel()
        if self._rows is not None:
            rows = self._rows[rows]
        # the row map is the one per-row cost a view has in memory: int32 where it fits
        small = self._file.n_rows < 2**31
        view = PackedDataset(self.path, _file=self._file, _rows=rows.astype(np.int32) if small else rows)
        view.transform, view.meta = self.transform, self.meta     # the view reads as its file is read
        return view

    def _file_rows(self, rows):
        rows = np.asarray(rows).ravel()
        if rows.dtype.kind not in "iu":
            rows = rows.astype(np.int64)
        n = len(self)
        if rows.shape[0] and (int(rows.min()) < -n or int(rows.max()) >= n):
            raise IndexError("row index out of range for %d rows" % n)
        rows = np.where(rows < 0, rows + n, rows) if rows.shape[0] and rows.min() < 0 else rows
        return (self._rows[rows] if self._rows is not None else rows).astype(np.int64, copy=False)

    def _sparse(self, rows, span):
        f = self._file
        ip, ind, dat = f.arrays["indptr"], f.arrays["indices"], f.arrays["data"]
        m = rows.shape[0]
        if span is not None:                    # a row range: three slices
            lo, hi = span
            indptr = ip[lo:hi + 1].copy()
            a, b = int(indptr[0]), int(indptr[-1])
            if not 0 <= a <= b <= f.nnz or (m > 1 and np.any(np.diff(indptr) < 0)):
                self._damaged("row offsets (indptr) of rows %d..%d" % (lo, hi - 1))
            indptr -= a
            indices, data = np.array(ind[a:b]), np.array(dat[a:b])
        elif f.row_nnz:                         # every row has r entries: gather whole rows
            r = f.row_nnz
            indices = np.take(ind.reshape(-1, r), rows, axis=0).reshape(-1)
            data = np.take(dat.reshape(-1, r), rows, axis=0).reshape(-1)
            indptr = np.arange(0, m * r + 1, r, dtype=np.int64)
        else:
            starts = ip[rows]
            ends = ip[rows + 1]
            if m and (starts.min() < 0 or ends.max() > f.nnz or np.any(ends < starts)):
                self._damaged("row offsets (indptr)")
            lengths = ends - starts
            indptr = np.zeros(m + 1, dtype=np.int64)
            np.cumsum(lengths, out=indptr[1:])
            pos = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1])
            indices, data = ind[pos], dat[pos]
        # a damaged byte must not become a column id outside the model (checksums catch the rest: verify)
        if indices.shape[0] and (indices.min() < 0 or indices.max() >= f.n_columns):
            self._damaged("column ids")
        return sp.csr_matrix((data, indices, indptr), shape=(m, f.n_columns))

    def _damaged(self, what):
        raise MpinnError("%s is damaged: %s out of range; prepare it again (prepare --verify checks every byte)"
                         % (self.path, what))

    def take(self, rows, dtype=None):
        """The batch of the given rows (in that order, sorted or not), cast to the model dtype;
        a run of consecutive rows is read as slices."""
        f = self._file
        rows = self._file_rows(rows)
        span = _as_range(rows)
        Xs = self._sparse(rows, span) if f.n_columns else None
        Xd = None
        if f.n_dense:
            d = f.arrays["dense"]
            Xd = np.array(d[span[0]:span[1]]) if span is not None else d[rows]
        y = f.arrays["y"]
        y = np.array(y[span[0]:span[1]]) if span is not None else y[rows]
        if self.task == "multiclass" and y.shape[0] and (y.min() < 0 or y.max() >= len(self.meta["classes"])):
            self._damaged("class ids")
        # a scattered row costs at least a page of each section it is read from
        per_row = 0 if span is not None else PAGE * ((3 if Xs is not None else 0) + (Xd is not None) + 1)
        f.touched((Xs.nnz * 8 if Xs is not None else 0) + (Xd.nbytes if Xd is not None else 0) + y.nbytes
                  + per_row * rows.shape[0])
        return self.batch(Xs, Xd, y, dtype)

    def release(self):
        """Drop the pages read so far from this process's memory (they stay in the page cache)."""
        self._file.release()


def load_packed(path, spec=DataSpec(), hashing=HashSpec()):
    """A file written by `python -m mpinn.prepare`: rows stay in the file (memory map). Its hashing contract,
    task, classes and positive class must be those given (spec, hashing), where they are given."""
    return check_packed(PackedDataset(path), path, spec, hashing)


def check_packed(data, path, spec=DataSpec(), hashing=HashSpec()):
    """`data` (packed rows: a file, or a multi-part dataset's, mpinn.data.packed.parts) when its hashing contract, task,
    classes and positive class are those given (spec, hashing), where they are given; else one line."""
    task, classes, positive, contract = spec.task, spec.classes, spec.positive, hashing.contract
    if positive not in (None, "") and data.task == "binary" and data.meta["classes"][1] != str(positive):
        raise MpinnError("%s was prepared with positive class %s; prepare it with --positive-class %s"
                         % (path, data.meta["classes"][1], positive))
    if contract is not None:
        if data.meta.get("hashing") is None:
            raise MpinnError("%s has no hashed columns, the model has" % path)
        check_contract(contract, data.meta["hashing"])
    if classes is not None and data.meta.get("classes") not in (None, list(classes)):
        raise MpinnError("%s has classes %s, expected %s" % (path, data.meta.get("classes"), list(classes)))
    if task not in ("auto", data.task):
        raise MpinnError("%s holds a %s task, expected %s" % (path, data.task, task))
    return data
