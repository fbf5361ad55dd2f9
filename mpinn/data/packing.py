"""Writing packed datasets (the format is described in mpinn.data.packed)."""
import json
import os
import tempfile

import numpy as np
import xxhash

from mpinn import __version__
from mpinn.config import MpinnError
from mpinn.process import follow_umask
from mpinn.data.packed import FORMAT, MAGIC, _align, _nbytes, _section_specs


def _pwrite_all(fd, buf, offset):
    view = memoryview(buf).cast("B")
    while len(view):
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


class PackedWriter:
    """Writes a packed file of a size fixed up front (n_rows, nnz known): append() fills the sections
    in row order, close() writes the checksums into the header; the file appears under its name
    (rename) only once complete, so a reader never sees half of one.

        with PackedWriter(path, n_rows, n_columns, nnz, n_dense, "float64", meta) as w:
            w.append(indices, row_lengths, y, Xd)
    """

    def __init__(self, path, n_rows, n_columns, nnz, n_dense, y_dtype, meta, row_nnz=None):
        self.path, self.n_rows, self.nnz = path, int(n_rows), int(nnz)
        self.sparse = n_columns > 0
        specs = _section_specs(self.n_rows, self.nnz, int(n_dense), y_dtype, self.sparse)
        self.header = {"format": FORMAT, "mpinn": __version__, "n_rows": self.n_rows, "n_columns": int(n_columns),
                       "nnz": self.nnz if self.sparse else 0, "row_nnz": row_nnz, "n_dense": int(n_dense),
                       "meta": meta, "sections": {}, "file_size": 0}
        for name, dtype, shape in specs:
            # placeholders of the final widths: the header's length does not change at close()
            self.header["sections"][name] = {"offset": 0, "dtype": dtype, "shape": shape,
                                             "nbytes": _nbytes(dtype, shape), "xxh64": "0" * 16}
        # offsets depend on the header's length, which depends on the offsets' digits: iterate
        for _ in range(4):
            head = self._header_bytes(pad=False)
            pos = _align(16 + len(head) + 64)
            for s in self.header["sections"].values():
                pos = _align(pos)
                s["offset"] = pos
                pos += s["nbytes"]
            self.header["file_size"] = pos
        self.header_len = self.header["sections"][specs[0][0]]["offset"] - 16
        self._cursor = {name: 0 for name, _, _ in specs}
        self._hash = {name: xxhash.xxh64() for name, _, _ in specs}
        self._rows = self._entries = 0
        self._ones = np.ones(1 << 20, np.float32)
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        self._fd, self._tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".mpinn", dir=d)
        follow_umask(self._fd)
        os.ftruncate(self._fd, self.header["file_size"])
        if self.sparse:
            self._write("indptr", np.zeros(1, dtype=np.int64))

    def _header_bytes(self, pad=True):
        b = json.dumps(self.header, separators=(",", ":")).encode("utf-8")
        if pad:
            if len(b) > self.header_len:
                raise RuntimeError("packed header grew while writing")
            b += b" " * (self.header_len - len(b))
        return b

    def _write(self, name, arr):
        s = self.header["sections"][name]
        arr = np.ascontiguousarray(arr, dtype=s["dtype"])
        if self._cursor[name] + arr.nbytes > s["nbytes"]:
            raise MpinnError("%s: more rows than the %d announced" % (self.path, self.n_rows))
        _pwrite_all(self._fd, arr, s["offset"] + self._cursor[name])
        self._hash[name].update(memoryview(arr).cast("B"))
        self._cursor[name] += arr.nbytes

    def append(self, indices, row_lengths, y, Xd=None, data=None):
        """One chunk of consecutive rows: their entries (indices; data, default 1.0) with row_lengths
        entries per row (an int for all rows, or an array), labels y, dense rows Xd (m, n_dense)."""
        m = int(np.shape(y)[0])
        if self.sparse:
            lengths = np.full(m, row_lengths, dtype=np.int64) if np.ndim(row_lengths) == 0 \
                else np.asarray(row_lengths, dtype=np.int64)
            indices = np.asarray(indices).reshape(-1)
            if lengths.shape[0] != m or int(lengths.sum()) != indices.shape[0]:
                raise ValueError("row lengths do not match the entries")
            self._write("indptr", self._entries + np.cumsum(lengths))
            self._write("indices", indices)
            if data is None:    # the usual case (hashed inputs): ones, from one small buffer used again and again
                for s in range(0, indices.shape[0], self._ones.shape[0]):
                    self._write("data", self._ones[:min(self._ones.shape[0], indices.shape[0] - s)])
            else:
                self._write("data", data)
            self._entries += indices.shape[0]
        self._write("y", y)
        if "dense" in self._cursor:
            self._write("dense", Xd)
        self._rows += m

    def close(self):
        for name, s in self.header["sections"].items():
            if self._cursor[name] != s["nbytes"]:
                raise MpinnError("%s: %d rows written, %d announced" % (self.path, self._rows, self.n_rows))
            s["xxh64"] = self._hash[name].hexdigest()
        _pwrite_all(self._fd, MAGIC + self.header_len.to_bytes(8, "little") + self._header_bytes(), 0)
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None
        os.replace(self._tmp, self.path)

    def abort(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if os.path.exists(self._tmp):
            os.unlink(self._tmp)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            self.close()
        else:
            self.abort()


def write_dataset(path, data):
    """An in-memory Dataset as a packed file (the same bytes prepare writes for the same rows)."""
    Xs = data.Xs
    n = len(data)
    sizes = np.diff(Xs.indptr) if Xs is not None else None
    row_nnz = int(sizes[0]) if sizes is not None and n and np.all(sizes == sizes[0]) else None
    with PackedWriter(path, n, Xs.shape[1] if Xs is not None else 0, Xs.nnz if Xs is not None else 0,
                      data.n_dense, data.y.dtype, data.meta, row_nnz) as w:
        w.append(Xs.indices if Xs is not None else None, sizes if Xs is not None else 0, data.y,
                 data.Xd, Xs.data if Xs is not None else None)
