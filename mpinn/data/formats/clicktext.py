"""The click-log text format of the Criteo logs (Kaggle's train.txt, the 1TB log's day_N): one row a line, no
header, 40 tab-separated fields: the 0/1 label, 13 integer counts I1..I13, 26 categorical values C1..C26 given
as 8-hex-digit hashes; an empty field is missing. A file without labels (a test file) has 39 fields.
Plain or gzip-compressed (a name ending in .gz), read in chunks like the other tables (a TableSource's Parts):
pyarrow's reader when it is installed, checked cell by cell; any problem sends the rest to the plain reader,
which names the line."""
import copy
import csv
import gzip
import io
import os
import zlib

import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data.base import CHUNK_ROWS
from mpinn.data.formats.csvtext import bounded_lines
from mpinn.data.formats.names import gzipped
from mpinn.data.formats.part import Part
from mpinn.data.formats.tables import load_table
from mpinn.data.spec import DataSpec
from mpinn.hashing import HashSpec

N_INT, N_CAT = 13, 26
INT_NAMES = ["I%d" % (j + 1) for j in range(N_INT)]
CAT_NAMES = ["C%d" % (j + 1) for j in range(N_CAT)]
LABEL = "label"
HEX = frozenset("0123456789abcdefABCDEF")
SNIFF_EXTS = ("", ".txt", ".tsv", ".gz")       # files whose first line decides whether they are click-log text


def _open_text(path):
    try:
        if gzipped(path):
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="ascii", newline="")
        return open(path, encoding="ascii", newline="")
    except OSError as e:
        raise MpinnError("cannot read %s: %s" % (path, e.strerror))


def first_line_fields(path):
    """The number of tab-separated fields of the first line and the line (None if it cannot be read)."""
    try:
        with _open_text(path) as f:
            line = f.readline(1 << 16).rstrip("\r\n")
    except (OSError, EOFError, UnicodeDecodeError, MpinnError, zlib.error):     # damaged gzip: not click-log text
        return None, None
    return line.count("\t") + 1, line


def is_click_text(path):
    """Whether a file's first line looks like the click-log text format (used by --format auto)."""
    n, line = first_line_fields(path)
    if n == 1 + N_INT + N_CAT:
        return line.split("\t", 1)[0] in ("0", "1")
    return n == N_INT + N_CAT and "," not in line


def is_click_log(path):
    """Is `path` click-log text as --format auto tells it: a name that may be one (SNIFF_EXTS) and its first line?"""
    return os.path.splitext(path)[1].lower() in SNIFF_EXTS and is_click_text(path)


class ClickTextSource:
    """A click-log text file as a table source: columns label, I1..I13, C1..C26. categorical / numeric: the
    columns to use (default: all 26 categorical and all 13 counts but those in `exclude`, e.g. the --holdout-by
    column)."""
    kind = "criteo"

    def __init__(self, path, label=None, categorical=(), numeric=(), require_label=True, chunk_rows=CHUNK_ROWS,
                 exclude=()):
        self.path, self.chunk_rows, self.n_rows = path, max(1, int(chunk_rows)), None
        self.file, self.span = path, None      # what is opened; (lo, hi): only the lines that begin in those bytes
        n, _ = first_line_fields(path)
        if n is None:
            raise MpinnError("%s is empty or not text (a click-log text file has 40 tab-separated fields a line)"
                             % path)
        if n not in (1 + N_INT + N_CAT, N_INT + N_CAT):
            raise MpinnError("%s line 1: %d tab-separated fields; a click-log text line has 40 (the label, 13 counts "
                             "I1..I13, 26 categorical C1..C26), or 39 without the label" % (path, n))
        self.has_label = n == 1 + N_INT + N_CAT
        if label not in (None, "", LABEL):
            raise MpinnError("a click-log text file's label column is %r (the first field), not %r" % (LABEL, label))
        if require_label and not self.has_label:
            raise MpinnError("%s has 39 fields a line: no label column (a test file?); training needs the label"
                             % path)
        self.header = ([LABEL] if self.has_label else []) + INT_NAMES + CAT_NAMES
        self.label = LABEL
        categorical, numeric = list(categorical), list(numeric)
        for name in categorical + numeric:
            if name not in INT_NAMES + CAT_NAMES:
                raise MpinnError("a click-log text file has no column %r (it has I1..I13, C1..C26)" % name)
        if not categorical and not numeric:
            categorical = [c for c in CAT_NAMES if c not in exclude]
            numeric = [c for c in INT_NAMES if c not in exclude]
        self.categorical, self.numeric = categorical, numeric
        self.kinds_note = None
        self.meta = {"source": "criteo", "label": LABEL, "categorical": categorical, "numeric": numeric}

    def spanned(self, lo, hi):
        """This source, reading only the lines that begin in bytes [lo, hi) of its (plain) file: byte ranges of
        one file read by several readers, each line by exactly one. Errors name the range's lines."""
        part = copy.copy(self)
        part.span = (lo, hi)
        part.path = "%s (the lines from byte %d)" % (self.file, lo) if lo else self.file
        return part

    def rows_before(self):
        """Rows of the file before this source's first line (0 unless spanned)."""
        if self.span is None or self.span[0] == 0:
            return 0
        start, n = LineSpan(self.file, *self.span).start, 0
        with open(self.file, "rb") as f:
            while f.tell() < start:
                n += f.read(min(1 << 24, start - f.tell())).count(b"\n")
        return n

    def _open(self):
        if self.span is None:
            return _open_text(self.file)
        return io.TextIOWrapper(io.BufferedReader(LineSpan(self.file, *self.span)), encoding="ascii", newline="")

    # ---- the plain reader: every cell checked, the line named
    def _python_parts(self, skip=0):
        width = len(self.header)
        col = {h: i for i, h in enumerate(self.header)}
        cat_i, num_i = [col[c] for c in self.categorical], [col[c] for c in self.numeric]
        off = 1 if self.has_label else 0
        with self._open() as f:
            reader = csv.reader(bounded_lines(f, self.path), delimiter="\t", quoting=csv.QUOTE_NONE)
            rows = []
            line = 0
            try:
                for row in reader:
                    line += 1
                    if line <= skip:
                        continue
                    if len(row) != width:
                        raise MpinnError("%s line %d: %d fields; the lines of this file have %d" % (
                            self.path, line, len(row), width))
                    self._check_row(row, line, off)
                    rows.append(row)
                    if len(rows) == self.chunk_rows:
                        yield self._part(rows, cat_i, num_i)
                        rows = []
            except (csv.Error, UnicodeDecodeError, EOFError, OSError, zlib.error) as e:     # gzip: truncated, not gzip
                raise MpinnError("%s line %d: %s" % (self.path, line + 1, e))
            if rows:
                yield self._part(rows, cat_i, num_i)

    def _check_row(self, row, line, off):
        if off and row[0] not in ("0", "1"):
            raise MpinnError("%s line %d: the label is %r; a click-log label is 0 or 1" % (self.path, line, row[0]))
        for k in range(N_INT):
            v = row[off + k]
            if v and not (v.lstrip("-").isdigit() and v.count("-") <= 1 and v[0] in "-0123456789"):
                raise MpinnError("%s line %d: %s is %r, not an integer" % (self.path, line, INT_NAMES[k], v))
        for k in range(N_CAT):
            v = row[off + N_INT + k]
            if v and (len(v) != 8 or not HEX.issuperset(v)):
                raise MpinnError("%s line %d: %s is %r, not an 8-hex-digit value" % (self.path, line, CAT_NAMES[k], v))

    def _part(self, rows, cat_i, num_i):
        Xd = None
        if num_i:
            Xd = np.array([[float(r[i]) if r[i] else np.nan for i in num_i] for r in rows], dtype=np.float64)
        labels = np.array([float(r[0]) for r in rows]) if self.has_label else None
        return Part([[r[i] for r in rows] for i in cat_i], Xd, labels, len(rows))

    # ---- the fast path
    def _arrow_parts(self):
        import pyarrow as pa  # optional: pyarrow
        import pyarrow.compute as pc  # optional: pyarrow
        import pyarrow.csv as pacsv  # optional: pyarrow
        types = {name: pa.int64() for name in INT_NAMES}
        types.update({name: pa.string() for name in CAT_NAMES})
        if self.has_label:
            types[LABEL] = pa.int64()
        include = ([LABEL] if self.has_label else []) + self.numeric + self.categorical
        done = 0
        try:
            stream = pa.input_stream(self.file, compression="detect") if self.span is None else \
                LineSpan(self.file, *self.span)
            reader = pacsv.open_csv(
                stream,
                # arrow's reader reads up to 32 blocks ahead of the rows taken: 1 MiB blocks (~4k rows) bound that
                # to 32 MiB of text, and parse faster than 4 MiB ones (W4 text, 800k rows: rank 0's peak 336 MiB
                # streaming, 418 with 4 MiB blocks); a longer line goes to the plain reader
                read_options=pacsv.ReadOptions(column_names=self.header, block_size=1 << 20),
                parse_options=pacsv.ParseOptions(delimiter="\t", quote_char=False),
                convert_options=pacsv.ConvertOptions(column_types=types, include_columns=include,
                                                     null_values=[""], strings_can_be_null=False))
            for batch in reader:
                for s in range(0, batch.num_rows, self.chunk_rows):
                    b = batch.slice(s, self.chunk_rows)
                    labels = None
                    if self.has_label:
                        lab = b.column(LABEL)
                        if lab.null_count or not pc.all(pc.is_in(lab, pa.array([0, 1]))).as_py():
                            raise ValueError("a label that is not 0 or 1")
                        labels = lab.to_numpy().astype(np.float64)
                    for name in self.categorical:
                        if not _hex8_or_empty(b.column(name)):
                            raise ValueError("a categorical value that is not 8 hex digits")
                    Xd = None
                    if self.numeric:
                        Xd = np.column_stack([b.column(n).to_numpy(zero_copy_only=False).astype(np.float64)
                                              for n in self.numeric])   # a null (missing) count: NaN
                    yield Part([b.column(name) for name in self.categorical], Xd, labels, b.num_rows)
                    done += b.num_rows
        except (pa.ArrowException, ValueError, OSError, EOFError, zlib.error):
            yield from self._python_parts(skip=done)       # names the line, or reads what arrow would not

    def parts(self):
        try:
            import pyarrow  # noqa: F401 - optional: pyarrow
        except ImportError:
            return self._python_parts()
        return self._arrow_parts()


def load_click_text(path, spec=DataSpec(), hashing=HashSpec(), chunk_rows=CHUNK_ROWS):
    """A click-log text file in memory as a Dataset, hashed like any table."""
    if not os.path.exists(path):
        raise MpinnError("data file %s does not exist" % path)
    source = ClickTextSource(path, spec.label, spec.categorical, spec.numeric, spec.require_label, chunk_rows,
                             spec.exclude)
    return load_table(source, spec, hashing)


def read_column(path, name, purpose="for --holdout-by"):
    """Every row's raw value of one column (label, I1..I13, C1..C26) of a click-log text file, in file order: the
    values --holdout-by splits on (one more pass over the file; an empty cell is '')."""
    header = ClickTextSource(path, require_label=False).header
    if name not in header:
        raise MpinnError("%s has no column %r %s (a click-log text file has %s)" % (
            path, name, purpose, "label, I1..I13, C1..C26" if LABEL in header else "I1..I13, C1..C26"))
    j = header.index(name)
    with _open_text(path) as f:
        try:
            return [line.rstrip("\r\n").split("\t")[j] for line in f if line.strip("\r\n")]
        except (IndexError, UnicodeDecodeError, EOFError, OSError, zlib.error) as e:
            raise MpinnError("%s: cannot read column %s %s: %s" % (path, name, purpose, e))


_IS_HEX = np.zeros(256, bool)
_IS_HEX[np.frombuffer(b"0123456789abcdefABCDEF", np.uint8)] = True


def _hex8_or_empty(col):
    """Is every value of an arrow string array empty or 8 hex digits? Read off its offsets and bytes (a regex
    over every value took a quarter of the reading)."""
    if col.null_count:
        return False
    offsets = np.frombuffer(col.buffers()[1], dtype=np.int32)[col.offset:col.offset + len(col) + 1]
    lengths = np.diff(offsets)
    if not np.all((lengths == 0) | (lengths == 8)):
        return False
    return bool(_IS_HEX[np.frombuffer(col.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]].all())


class LineSpan(io.RawIOBase):
    """The bytes of the lines of a plain file that begin in [lo, hi) (a line begins at 0 or after a newline): from
    the first line beginning at or after lo to the end of the line holding byte hi - 1. Spans that tile a file
    read each of its lines exactly once."""

    def __init__(self, path, lo, hi):
        self.f = open(path, "rb")
        size = os.fstat(self.f.fileno()).st_size
        self.start, self.end = self._line_start(lo, size), self._line_start(min(hi, size), size)
        self.f.seek(self.start)
        self.left = max(self.end - self.start, 0)

    def _line_start(self, at, size):
        """Where the first line beginning at or after byte `at` begins (size: none does)."""
        if at <= 0:
            return 0
        if at >= size:
            return size
        self.f.seek(at - 1)
        pos = at - 1
        while True:
            block = self.f.read(1 << 16)
            if not block:
                return size
            i = block.find(b"\n")
            if i >= 0:
                return pos + i + 1
            pos += len(block)

    def readable(self):
        return True

    def readinto(self, buf):
        n = min(len(buf), self.left)
        if n <= 0:
            return 0
        got = self.f.readinto(memoryview(buf)[:n])
        self.left -= got
        return got

    def read(self, n=-1):
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.f.read(n) if n > 0 else b""
        self.left -= len(data)
        return data

    def close(self):
        self.f.close()
        super().close()
