"""Writing packed datasets (the format is described in mpinn.data.packed.format)."""
import errno
import json
import os
import tempfile

import numpy as np
import xxhash

from mpinn import __version__
from mpinn.core.errors import MpinnError
from mpinn.host.launch import follow_umask
from mpinn.data.packed.format import FORMAT, MAGIC, _align, _nbytes, _section_specs
from mpinn.data.packed.meta import meta_digest


def _pwrite_all(fd, buf, offset):
    view = memoryview(buf).cast("B")
    while len(view):
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def _layout(n_rows, n_columns, nnz, n_dense, y_dtype, meta, row_nnz):
    """(header, header_len) of a packed file of these sizes: every section's offset, dtype, shape and byte
    count, with placeholders of the final widths for the checksums (the header's length does not change
    when they are filled in). Both writers lay a file out with it, so the same rows give the same bytes."""
    sparse = n_columns > 0
    specs = _section_specs(n_rows, nnz, int(n_dense), y_dtype, sparse)
    header = {"format": FORMAT, "mpinn": __version__, "n_rows": n_rows, "n_columns": int(n_columns),
              "nnz": nnz if sparse else 0, "row_nnz": row_nnz, "n_dense": int(n_dense),
              "meta": meta, "meta_xxh64": "0" * 16, "sections": {}, "file_size": 0}
    for name, dtype, shape in specs:
        header["sections"][name] = {"offset": 0, "dtype": dtype, "shape": shape,
                                    "nbytes": _nbytes(dtype, shape), "xxh64": "0" * 16}
    # offsets depend on the header's length, which depends on the offsets' digits: iterate
    for _ in range(4):
        head = _json(header)
        pos = _align(16 + len(head) + 64)
        for s in header["sections"].values():
            pos = _align(pos)
            s["offset"] = pos
            pos += s["nbytes"]
        header["file_size"] = pos
    return header, header["sections"][specs[0][0]]["offset"] - 16


def _json(header):
    return json.dumps(header, separators=(",", ":")).encode("utf-8")


def _padded(header, header_len):
    header["meta_xxh64"] = meta_digest(header["meta"])     # the meta as written: checked on every open
    b = _json(header)
    if len(b) > header_len:
        raise RuntimeError("packed header grew while writing")
    return MAGIC + header_len.to_bytes(8, "little") + b + b" " * (header_len - len(b))


class _Sections:
    """append(): one chunk of rows into the sections, through self._write(name, array)."""

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

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            try:
                self.close()
            except BaseException:
                self.abort()        # a file that could not be completed leaves nothing behind
                raise
        else:
            self.abort()


class PackedWriter(_Sections):
    """Writes a packed file of a size fixed up front (n_rows, nnz known): append() fills the sections
    in row order, close() writes the checksums into the header; the file appears under its name
    (rename) only once complete, so a reader never sees half of one.

        with PackedWriter(path, n_rows, n_columns, nnz, n_dense, "float64", meta) as w:
            w.append(indices, row_lengths, y, Xd)
    """

    def __init__(self, path, n_rows, n_columns, nnz, n_dense, y_dtype, meta, row_nnz=None):
        self.path, self.n_rows, self.nnz, self.n_dense = path, int(n_rows), int(nnz), int(n_dense)
        self.sparse = n_columns > 0
        self.header, self.header_len = _layout(self.n_rows, n_columns, self.nnz, n_dense, y_dtype, meta, row_nnz)
        names = list(self.header["sections"])
        self._cursor = {name: 0 for name in names}
        self._hash = {name: xxhash.xxh64() for name in names}
        self._rows = self._entries = 0
        self._ones = np.ones(1 << 20, np.float32)
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        self._fd, self._tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".mpinn", dir=d)
        follow_umask(self._fd)
        os.ftruncate(self._fd, self.header["file_size"])
        if self.sparse:
            self._write("indptr", np.zeros(1, dtype=np.int64))

    def _write(self, name, arr):
        s = self.header["sections"][name]
        arr = np.ascontiguousarray(arr, dtype=s["dtype"])
        if self._cursor[name] + arr.nbytes > s["nbytes"]:
            raise MpinnError("%s: more rows than the %d announced" % (self.path, self.n_rows))
        _pwrite_all(self._fd, arr, s["offset"] + self._cursor[name])
        self._hash[name].update(memoryview(arr).cast("B"))
        self._cursor[name] += arr.nbytes

    def close(self):
        for name, s in self.header["sections"].items():
            if self._cursor[name] != s["nbytes"]:
                raise MpinnError("%s: %d rows written, %d announced" % (self.path, self._rows, self.n_rows))
            s["xxh64"] = self._hash[name].hexdigest()
        _pwrite_all(self._fd, _padded(self.header, self.header_len), 0)
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


_COPY_UNSUPPORTED = {getattr(errno, n) for n in ("EXDEV", "ENOSYS", "EINVAL", "EOPNOTSUPP", "ENOTSUP")
                     if hasattr(errno, n)}


def _copy_into(src, dst, count, offset, chunk=8 << 20):
    """The first `count` bytes of file src into file dst at `offset` (both file descriptors): copy_file_range
    (in the kernel, a reflink where the file system shares blocks), else pread/pwrite in chunks."""
    done = 0
    if hasattr(os, "copy_file_range"):
        try:
            while done < count:
                n = os.copy_file_range(src, dst, min(count - done, 1 << 30), done, offset + done)
                if n == 0:
                    raise MpinnError("a section's temporary file is shorter than written (%d of %d bytes)"
                                     % (done, count))
                done += n
            return
        except OSError as e:
            if e.errno not in _COPY_UNSUPPORTED:
                raise
    while done < count:
        buf = os.pread(src, min(chunk, count - done), done)
        if not buf:
            raise MpinnError("a section's temporary file is shorter than written (%d of %d bytes)" % (done, count))
        _pwrite_all(dst, buf, offset + done)
        done += len(buf)


class StreamingPackedWriter(_Sections):
    """Writes a packed file whose row count is not known up front, in one pass: append() streams each
    section into its own temporary file in the destination's directory (checksummed on the way);
    close(meta) lays the file out as PackedWriter does for the rows written (the same bytes), writes the
    header, copies the sections to their offsets (copy_file_range) and renames the file into place. The
    temporary files go on success and on error (abort), so an interrupted pass leaves nothing behind.
    Disk: the sections' size again while close() copies (each temporary file goes once copied).

        with StreamingPackedWriter(path, n_columns, n_dense, "float64", row_nnz) as w:
            w.append(indices, row_lengths, y, Xd)
            w.close(meta)       # meta may be completed while rows were appended
    """

    def __init__(self, path, n_columns, n_dense, y_dtype, row_nnz=None):
        self.path, self.n_columns, self.n_dense, self.y_dtype, self.row_nnz = \
            path, int(n_columns), int(n_dense), y_dtype, row_nnz
        self.sparse = self.n_columns > 0
        self._dtype = {name: dtype for name, dtype, _ in _section_specs(0, 0, self.n_dense, y_dtype, self.sparse)}
        self._cursor = {name: 0 for name in self._dtype}
        self._hash = {name: xxhash.xxh64() for name in self._dtype}
        self._rows = self._entries = 0
        self._ones = np.ones(1 << 20, np.float32)
        self._dir = os.path.dirname(os.path.abspath(path))
        os.makedirs(self._dir, exist_ok=True)
        self._fds, self._tmps, self._out, self._closed = {}, [], None, False
        try:
            for name in self._dtype:
                fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix="." + name, dir=self._dir)
                self._fds[name] = fd
                self._tmps.append(tmp)
            if self.sparse:
                self._write("indptr", np.zeros(1, dtype=np.int64))
        except BaseException:
            self.abort()
            raise

    def _write(self, name, arr):
        arr = np.ascontiguousarray(arr, dtype=self._dtype[name])
        view = memoryview(arr).cast("B")
        fd = self._fds[name]
        while len(view):
            view = view[os.write(fd, view):]
        self._hash[name].update(memoryview(arr).cast("B"))
        self._cursor[name] += arr.nbytes

    def close(self, meta=None):
        """Lay out, copy and rename; meta: the file's (given here, once rows are written)."""
        if self._closed:
            return
        if meta is None:
            raise ValueError("StreamingPackedWriter.close(meta): the meta is written at close")
        try:
            nnz = self._entries if self.sparse else 0
            header, header_len = _layout(self._rows, self.n_columns, nnz, self.n_dense, self.y_dtype, meta,
                                         self.row_nnz)
            for name, s in header["sections"].items():
                if self._cursor[name] != s["nbytes"]:
                    raise MpinnError("%s: section %s holds %d bytes, %d rows need %d" % (
                        self.path, name, self._cursor[name], self._rows, s["nbytes"]))
                s["xxh64"] = self._hash[name].hexdigest()
            fd, self._out = tempfile.mkstemp(prefix=".tmp-", suffix=".mpinn", dir=self._dir)
            self._fds["out"] = fd
            follow_umask(fd)
            os.ftruncate(fd, header["file_size"])
            _pwrite_all(fd, _padded(header, header_len), 0)
            for name, tmp in zip(list(self._dtype), list(self._tmps)):
                s = header["sections"][name]
                _copy_into(self._fds[name], fd, s["nbytes"], s["offset"])
                os.close(self._fds.pop(name))
                os.unlink(tmp)          # the disk the section held goes as soon as it is copied
                self._tmps.remove(tmp)
            os.fsync(fd)
            os.close(self._fds.pop("out"))
            os.replace(self._out, self.path)
            self._out, self._closed = None, True
            self.header = header
        except BaseException:
            self.abort()
            raise

    def abort(self):
        for name in list(self._fds):
            os.close(self._fds.pop(name))
        for tmp in self._tmps + ([self._out] if self._out else []):
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        self._tmps, self._out = [], None

    def __exit__(self, kind, value, tb):
        if kind is None and not self._closed:
            self.abort()
            raise RuntimeError("StreamingPackedWriter: leave the with block after close(meta)")
        if kind is not None:
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
