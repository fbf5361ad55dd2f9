"""Data sources read on rank 0: the embedded click log, CSV and Parquet in chunks, .npz, .mat, packed files."""
import csv
import math
import os
from dataclasses import dataclass, field

import numpy as np

from mpinn.config import MpinnError
from mpinn.hashing import (ContractFitter, check_contract, csr_from_indices, encode_indices, factorize,
                           make_contract, parse_buckets)
from mpinn.model import Batch

TASKS = ("multiclass", "binary", "regression")
CHUNK_ROWS = 262_144        # rows per chunk when reading tables: bounds memory while streaming


@dataclass
class Layout:
    """What every rank must know to receive a batch: input widths and dtypes."""
    n_sparse: int
    n_dense: int
    dtype: str
    y_dtype: str


class Rows:
    """What the trainer uses of a data set, whether its rows are in memory (Dataset) or in a packed
    file (mpinn.packed.PackedDataset): len(), meta, task, layout(dtype), take(rows, dtype) -> Batch,
    subset(rows), split(holdout, seed), y, n_sparse, n_dense, sparse_fan_in."""

    @property
    def task(self):
        return self.meta["task"]

    def layout(self, dtype):
        return Layout(self.n_sparse, self.n_dense, dtype, "int64" if self.task == "multiclass" else dtype)

    def batch(self, Xs, Xd, y, dtype=None):
        """A Batch of rows already read, cast to the model dtype (labels stay ids for multiclass)."""
        if dtype is not None:
            if Xs is not None and Xs.dtype != dtype:
                Xs = Xs.astype(dtype)
            if Xd is not None:
                Xd = np.ascontiguousarray(Xd, dtype=dtype)
            if self.task != "multiclass":
                y = y.astype(dtype, copy=False)
        return Batch(Xs, Xd, y)

    def split(self, holdout, seed):
        """(train, valid): a seeded random share `holdout` of the rows is held out."""
        n = len(self)
        n_valid = int(round(n * holdout))
        if holdout <= 0 or n_valid == 0:
            return self, None
        if n_valid >= n:
            raise MpinnError("--holdout %.3g leaves no training rows" % holdout)
        perm = np.random.default_rng([seed, 7]).permutation(n)
        return self.subset(np.sort(perm[n_valid:])), self.subset(np.sort(perm[:n_valid]))


@dataclass
class Dataset(Rows):
    """Rows held in memory on rank 0: hashed CSR input, dense input and encoded labels."""
    Xs: object                      # CSR (n, n_columns) or None
    Xd: object                      # (n, d) C-contiguous or None
    y: np.ndarray                   # int64 class ids (multiclass), float 0/1 (binary) or float values
    meta: dict = field(default_factory=dict)   # task, classes, columns, hashing contract, source

    def __len__(self):
        return int(self.y.shape[0])

    @property
    def n_sparse(self):
        return self.Xs.shape[1] if self.Xs is not None else 0

    @property
    def n_dense(self):
        return self.Xd.shape[1] if self.Xd is not None else 0

    @property
    def sparse_fan_in(self):
        """Mean non-zeros per row of the sparse input (the first layer's effective fan-in)."""
        return float(self.Xs.getnnz() / max(len(self), 1)) if self.Xs is not None else 1.0

    def take(self, rows, dtype=None):
        """The batch of the given rows (in that order), cast to the model dtype."""
        Xs = self.Xs[rows] if self.Xs is not None else None
        Xd = self.Xd[rows] if self.Xd is not None else None
        return self.batch(Xs, Xd, self.y[rows], dtype)

    def subset(self, rows):
        b = self.take(rows)
        return Dataset(b.Xs, b.Xd, b.y, self.meta)


# ---------------------------------------------------------------- labels
def encode_labels(raw, task="auto", classes=None):
    """(y, task, classes). Multiclass labels become ids 0..k-1 in the order of `classes`."""
    raw = np.asarray(raw).ravel()
    numeric = raw.dtype.kind in "iufb"
    if not numeric:
        try:
            raw_num = raw.astype(np.float64)
            numeric, raw = True, raw_num
        except (ValueError, TypeError):
            pass
    if classes is None:
        if task == "auto":
            if not numeric:
                task = "multiclass"
            else:
                distinct = np.unique(raw)
                integral = np.all(np.mod(distinct, 1) == 0)
                if len(distinct) == 2 and set(distinct.tolist()) <= {0.0, 1.0}:
                    task = "binary"
                elif integral and len(distinct) <= 1000:
                    task = "multiclass"
                else:
                    task = "regression"
        if task == "regression":
            if not numeric:
                raise MpinnError("regression needs numeric labels")
            return raw.astype(np.float64), task, None
        classes = [_label_str(c) for c in np.unique(raw)]
        if task == "binary" and len(classes) != 2:
            raise MpinnError("binary task needs exactly 2 label values, found %d" % len(classes))
    if task == "regression":
        if not numeric:
            raise MpinnError("regression needs numeric labels")
        return raw.astype(np.float64), task, None
    # each distinct label is looked up once, then rows are mapped through the codes
    if numeric:
        uniques, codes = np.unique(raw, return_inverse=True)
        keys = [_label_str(u) for u in uniques.tolist()]
        codes = codes.ravel()
    else:
        codes, keys = factorize(raw)
        keys = [str(k) for k in keys]
    lookup = {c: i for i, c in enumerate(classes)}
    bad = [k for k in keys if k not in lookup]
    if bad:
        raise MpinnError("label %r is not one of the model's classes %s" % (bad[0], classes[:10]))
    ids = np.array([lookup[k] for k in keys], dtype=np.int64)[codes] if len(keys) else np.zeros(0, np.int64)
    if task == "binary":
        return ids.astype(np.float64), task, classes
    return ids, task, classes


def _label_str(v):
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


class LabelScan:
    """The task and classes of labels seen chunk by chunk (what encode_labels decides on all of them
    at once), keeping only their distinct values."""
    MAX_NUMBERS = 1001      # more distinct numbers than this: regression, whatever else comes
    MAX_TEXTS = 100_000

    def __init__(self, task="auto"):
        self.task, self.numeric = task, True
        self.numbers, self.texts = set(), set()
        self.many_numbers = self.many_texts = False

    def update(self, raw):
        raw = np.asarray(raw).ravel()
        if not self.many_texts:
            _, keys = factorize(raw) if raw.dtype.kind not in "iufb" else (None, [])
            self.texts.update(str(k) for k in keys)
            self.many_texts = len(self.texts) > self.MAX_TEXTS
        if self.numeric:
            try:
                nums = raw.astype(np.float64)
            except (ValueError, TypeError):
                self.numeric = False
                return
            if not self.many_numbers:
                self.numbers.update(np.unique(nums).tolist())
                self.many_numbers = len(self.numbers) > self.MAX_NUMBERS

    def result(self):
        """(task, classes)."""
        if self.numeric:
            if self.many_numbers:
                if self.task not in ("auto", "regression"):
                    raise MpinnError("--task %s: the labels hold more than %d distinct numbers"
                                     % (self.task, self.MAX_NUMBERS - 1))
                return "regression", None
            _, task, classes = encode_labels(np.array(sorted(self.numbers), dtype=np.float64), self.task)
            return task, classes
        if self.many_texts:
            raise MpinnError("the labels hold more than %d distinct values" % self.MAX_TEXTS)
        _, task, classes = encode_labels(np.array(sorted(self.texts), dtype=object), self.task)
        return task, classes


# ---------------------------------------------------------------- the embedded click log
DEFAULT_CARDS = (2, 3, 4, 7, 10, 12, 24, 31, 50, 100, 300, 1000, 3000, 10000, 20000, 50000,
                 100000, 100000, 200000, 300000)   # 20 categorical features, Zipf-distributed values
DEFAULT_NUMERIC = 4


def make_clicklog(n_rows=200_000, seed=0):
    """A deterministic synthetic click log: (categorical codes (n, 20) int64, numeric (n, 4), y 0/1).
    A logistic teacher over the categorical values and the numeric columns makes it learnable."""
    rng = np.random.default_rng([seed, 2024])
    teacher = [rng.standard_normal(c) * (1.5 / math.sqrt(len(DEFAULT_CARDS))) for c in DEFAULT_CARDS]
    codes = np.empty((n_rows, len(DEFAULT_CARDS)), dtype=np.int64)
    for j, c in enumerate(DEFAULT_CARDS):
        p = 1.0 / np.arange(1, c + 1, dtype=np.float64) ** 1.1
        cdf = np.cumsum(p)
        cdf /= cdf[-1]
        codes[:, j] = np.minimum(np.searchsorted(cdf, rng.random(n_rows), side="right"), c - 1)
    numeric = rng.standard_normal((n_rows, DEFAULT_NUMERIC))
    logit = numeric @ np.array([0.8, -0.5, 0.3, 0.0]) - 0.4
    for j in range(len(DEFAULT_CARDS)):
        logit += teacher[j][codes[:, j]]
    y = (rng.random(n_rows) < 1 / (1 + np.exp(-logit))).astype(np.float64)
    return codes, numeric, y


def iter_clicklog(n_rows=200_000, seed=0, chunk_rows=CHUNK_ROWS):
    """make_clicklog(n_rows, seed) in chunks of rows, equal to its slices, in bounded memory.
    make_clicklog draws each feature's n uniforms, then 4n normals, then n uniforms for y, from one
    stream; a chunk jumps to its place in each block (PCG64.advance: one step per uniform), and the
    normals (a variable number of steps each) are drawn in order by their own copy of the stream."""
    rng = np.random.default_rng([seed, 2024])
    teacher = [rng.standard_normal(c) * (1.5 / math.sqrt(len(DEFAULT_CARDS))) for c in DEFAULT_CARDS]
    after_teacher = rng.bit_generator.state
    cdfs = []
    for c in DEFAULT_CARDS:
        cdf = np.cumsum(1.0 / np.arange(1, c + 1, dtype=np.float64) ** 1.1)
        cdfs.append(cdf / cdf[-1])

    def stream(steps):
        bg = np.random.PCG64()
        bg.state = after_teacher
        bg.advance(steps)
        return np.random.Generator(bg)
    F = len(DEFAULT_CARDS)
    normals = stream(F * n_rows)
    skip = stream(F * n_rows)               # where y's uniforms start: after all the normals
    for s in range(0, n_rows, chunk_rows):
        skip.standard_normal((min(chunk_rows, n_rows - s), DEFAULT_NUMERIC))
    labels = skip
    w = np.array([0.8, -0.5, 0.3, 0.0])
    for s in range(0, n_rows, chunk_rows):
        m = min(chunk_rows, n_rows - s)
        codes = np.empty((m, F), dtype=np.int64)
        for j, c in enumerate(DEFAULT_CARDS):
            u = stream(j * n_rows + s).random(m)
            codes[:, j] = np.minimum(np.searchsorted(cdfs[j], u, side="right"), c - 1)
        numeric = normals.standard_normal((m, DEFAULT_NUMERIC))
        logit = numeric @ w - 0.4
        for j in range(F):
            logit += teacher[j][codes[:, j]]
        y = (labels.random(m) < 1 / (1 + np.exp(-logit))).astype(np.float64)
        yield codes, numeric, y


# ---------------------------------------------------------------- tables read in chunks
def _split_names(s):
    if isinstance(s, (list, tuple)):
        return [str(c) for c in s]
    return [c.strip() for c in s.split(",") if c.strip()] if s else []


@dataclass
class Part:
    """Consecutive rows of a table: categorical columns (list, numpy or arrow arrays, in feature
    order), dense numbers (m, d) float64 or None, raw labels (m,) or None."""
    cats: list
    Xd: object
    labels: object
    n: int


def _is_float(s):
    try:
        float(s)
        return True
    except ValueError:
        return False


class TableSource:
    """A table read chunk by chunk as Parts: a CSV or Parquet file, or the embedded click log (path None).
    Columns are resolved (and a CSV's header read) when it is made; parts() reads the rows."""

    def __init__(self, path=None, label=None, categorical=(), numeric=(), require_label=True,
                 default_rows=200_000, default_seed=0, chunk_rows=CHUNK_ROWS, engine="auto"):
        self.path, self.chunk_rows, self.engine = path, max(1, int(chunk_rows)), engine
        categorical, numeric = _split_names(categorical), _split_names(numeric)
        self.n_rows = None
        if path is None:
            self.kind = "default"
            self.default_rows, self.default_seed = int(default_rows), int(default_seed)
            self.categorical = ["c%d" % j for j in range(len(DEFAULT_CARDS))]
            self.numeric = ["n%d" % j for j in range(DEFAULT_NUMERIC)]
            self.label, self.has_label, self.n_rows = "click", True, self.default_rows
            self.meta = {"source": "default", "default_rows": self.default_rows, "default_seed": self.default_seed,
                         "categorical": self.categorical, "numeric": self.numeric, "label": "click"}
            return
        ext = os.path.splitext(path)[1].lower()
        self.kind = "parquet" if ext in (".parquet", ".pq") else "csv"
        header = self._read_header() if self.kind == "csv" else self._parquet_schema()
        if not categorical and not numeric:     # default: every other column is hashed
            categorical = [h for h in header if h != label]
        col = {h: i for i, h in enumerate(header)}
        for name in categorical + numeric + ([label] if require_label else []):
            if name not in col:
                raise MpinnError("%s has no column %r (columns: %s)" % (path, name, ", ".join(header)))
        self.header, self.col = header, col
        self.label, self.has_label = label, label in col
        self.categorical, self.numeric = categorical, numeric
        self.meta = {"source": self.kind, "label": label, "categorical": categorical, "numeric": numeric}

    # ---- CSV
    def _open(self):
        try:
            return open(self.path, newline="", encoding="utf-8")
        except OSError as e:
            raise MpinnError("cannot read %s: %s" % (self.path, e.strerror))

    def _read_header(self):
        with self._open() as f:
            reader = csv.reader(f)
            try:
                header = next(reader)
            except StopIteration:
                raise MpinnError("%s is empty (no header row)" % self.path)
            except (csv.Error, UnicodeDecodeError) as e:
                raise MpinnError("%s line 1: %s" % (self.path, e))
            self.header_lines = reader.line_num
        return [h.strip() for h in header]

    def _wanted(self):
        """Column indices of the categorical, numeric and label columns."""
        return ([self.col[c] for c in self.categorical], [self.col[c] for c in self.numeric],
                self.col[self.label] if self.has_label else None)

    def _csv_rows(self, skip=0):
        """Chunks of (rows as lists of str, their line numbers), after `skip` data rows."""
        path, width = self.path, len(self.header)
        with self._open() as f:
            reader = csv.reader(f)
            rows, lines = [], []
            try:
                next(reader)
                for row in reader:
                    if not row:
                        continue
                    if skip:
                        skip -= 1
                        continue
                    if len(row) != width:
                        raise MpinnError("%s line %d: %d fields, the header has %d"
                                         % (path, reader.line_num, len(row), width))
                    rows.append(row)
                    lines.append(reader.line_num)
                    if len(rows) == self.chunk_rows:
                        yield rows, lines
                        rows, lines = [], []
            except (csv.Error, UnicodeDecodeError) as e:
                raise MpinnError("%s line %d: %s" % (path, reader.line_num, e))
            if rows:
                yield rows, lines

    def _csv_python_parts(self, skip=0):
        cat_i, num_i, lab_i = self._wanted()
        for rows, lines in self._csv_rows(skip):
            cats = [[r[i] for r in rows] for i in cat_i]
            Xd = None
            if num_i:
                Xd = self._numbers([[r[i] for r in rows] for i in num_i], lines)
            labels = np.array([r[lab_i].strip() for r in rows], dtype=object) if lab_i is not None else None
            yield Part(cats, Xd, labels, len(rows))

    def _numbers(self, cols, lines):
        """(m, d) float64 of numeric columns of str; the first bad cell (by row, then column) is an error
        naming its line."""
        m = len(lines)
        out = np.empty((m, len(cols)), dtype=np.float64)
        first_bad = None
        for k, c in enumerate(cols):
            try:
                out[:, k] = np.fromiter(map(float, c), dtype=np.float64, count=m)
            except ValueError:
                i = next(i for i, s in enumerate(c) if not _is_float(s))
                if first_bad is None or i < first_bad[0]:
                    first_bad = (i, k)
        if first_bad is not None:
            i, k = first_bad
            raise MpinnError("%s line %d: column %r is not a number: %r"
                             % (self.path, lines[i], self.numeric[k], cols[k][i]))
        bad = ~np.isfinite(out)
        if bad.any():
            i, k = np.argwhere(bad)[0]
            raise MpinnError("%s line %d: column %r is not finite: %r"
                             % (self.path, lines[i], self.numeric[k], cols[k][i]))
        return out

    def _csv_arrow_parts(self):
        """The fast path (pyarrow's C++ reader): any problem in a chunk, a parse error or a cell that
        does not convert, sends that chunk and the rest to the csv-module reader, which gives the same
        values and the error with its line number."""
        import pyarrow as pa
        import pyarrow.csv as pacsv
        cat_i, num_i, lab_i = self._wanted()
        names = ["f%d" % i for i in range(len(self.header))]
        types = {names[i]: pa.string() for i in cat_i}
        types.update({names[i]: pa.float64() for i in num_i})
        if lab_i is not None:
            types[names[lab_i]] = pa.string()
        include = list(dict.fromkeys(names[i] for i in cat_i + num_i + ([lab_i] if lab_i is not None else [])))
        done = 0
        try:
            reader = pacsv.open_csv(
                self.path,
                read_options=pacsv.ReadOptions(column_names=names, skip_rows=self.header_lines,
                                               block_size=max(1 << 20, min(64 << 20, self.chunk_rows * 64))),
                parse_options=pacsv.ParseOptions(newlines_in_values=True),
                convert_options=pacsv.ConvertOptions(column_types=types, include_columns=include,
                                                     strings_can_be_null=False, quoted_strings_can_be_null=False))
            for batch in reader:
                for s in range(0, batch.num_rows, self.chunk_rows):
                    b = batch.slice(s, self.chunk_rows)
                    cols = [b.column(names[i]) for i in num_i]
                    if any(c.null_count for c in cols):
                        raise ValueError("empty number")
                    Xd = np.column_stack([c.to_numpy() for c in cols]).astype(np.float64) if num_i else None
                    if Xd is not None and not np.isfinite(Xd).all():
                        raise ValueError("not finite")
                    labels = None
                    if lab_i is not None:
                        labels = b.column(names[lab_i]).to_numpy(zero_copy_only=False)
                        labels = np.array([v.strip() for v in labels], dtype=object)
                    yield Part([b.column(names[i]) for i in cat_i], Xd, labels, b.num_rows)
                    done += b.num_rows
        except (pa.ArrowException, ValueError, OSError):
            yield from self._csv_python_parts(skip=done)

    # ---- Parquet
    def _parquet(self, read_dictionary=None):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise MpinnError("reading %s needs pyarrow: pip install 'mpinn[parquet]'" % self.path)
        try:
            return pq.ParquetFile(self.path, read_dictionary=read_dictionary)
        except Exception as e:      # pyarrow raises several types for a file that is not Parquet
            raise MpinnError("cannot read %s as Parquet: %s" % (self.path, (str(e).splitlines() or [""])[0]))

    def _parquet_schema(self):
        pf = self._parquet()
        self.n_rows = pf.metadata.num_rows
        return list(pf.schema_arrow.names)

    def _parquet_parts(self):
        import pyarrow as pa
        schema = self._parquet().schema_arrow
        textual = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary)
        # string columns come back dictionary-encoded: each batch's dictionary is hashed, not its cells
        pf = self._parquet([c for c in self.categorical if any(t(schema.field(c).type) for t in textual)])
        want = list(dict.fromkeys(self.categorical + self.numeric + ([self.label] if self.has_label else [])))
        start = 0
        try:
            for b in pf.iter_batches(batch_size=self.chunk_rows, columns=want):
                Xd = None
                if self.numeric:
                    Xd = np.empty((b.num_rows, len(self.numeric)), dtype=np.float64)
                    for k, name in enumerate(self.numeric):
                        c = b.column(name)
                        try:
                            Xd[:, k] = c.cast(pa.float64()).to_numpy(zero_copy_only=False)
                        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                            raise MpinnError("%s: column %r is not numeric (%s)" % (self.path, name, c.type))
                    bad = ~np.isfinite(Xd)
                    if bad.any():
                        i, k = np.argwhere(bad)[0]
                        raise MpinnError("%s row %d: column %r is missing or not finite"
                                         % (self.path, start + i + 1, self.numeric[k]))
                labels = None
                if self.has_label:
                    c = b.column(self.label)
                    if c.null_count:
                        i = int(np.flatnonzero(c.is_null().to_numpy(zero_copy_only=False))[0])
                        raise MpinnError("%s row %d: the label is missing" % (self.path, start + i + 1))
                    if pa.types.is_dictionary(c.type):
                        c = c.dictionary_decode()
                    labels = c.to_numpy(zero_copy_only=False)
                yield Part([b.column(name) for name in self.categorical], Xd, labels, b.num_rows)
                start += b.num_rows
        except OSError as e:
            raise MpinnError("cannot read %s: %s" % (self.path, str(e).splitlines()[0]))

    # ---- the embedded click log
    def _default_parts(self):
        for codes, numeric, y in iter_clicklog(self.default_rows, self.default_seed, self.chunk_rows):
            yield Part([codes[:, j] for j in range(codes.shape[1])], numeric, y, len(y))

    def parts(self):
        """Every row, as Parts of at most chunk_rows rows."""
        if self.kind == "default":
            return self._default_parts()
        if self.kind == "parquet":
            return self._parquet_parts()
        engine = self.engine
        if engine == "auto":
            from mpinn.hashing import _arrow_available
            # a header spanning lines (a quoted newline) is left to the csv module: arrow skips rows, not lines
            engine = "arrow" if _arrow_available() and self.header_lines == 1 else "python"
        return self._csv_arrow_parts() if engine == "arrow" else self._csv_python_parts()


def hashing_fitter(source, hash_mode="trick", hash_bits=18, hash_seed=0, hash_k=4, buckets=None):
    return ContractFitter(source.categorical, hash_mode, hash_k, hash_bits, hash_seed, parse_buckets(buckets))


def load_table(source, task="auto", classes=None, hash_mode="trick", hash_bits=18, hash_seed=0, hash_k=4,
               buckets=None, contract=None, threads=1):
    """All of a TableSource in memory as a Dataset. The hashing contract is `contract` when given
    (predicting, validating), else fitted to these rows."""
    if buckets not in (None, "") and hash_mode != "split":
        raise MpinnError("--buckets is for --hash-mode split (this is %s)" % hash_mode)
    parts = list(source.parts())
    n = sum(p.n for p in parts)
    if n == 0:
        raise MpinnError("%s has a header but no rows" % source.path)
    meta = dict(source.meta)
    Xs = None
    if source.categorical:
        if contract is None:
            if hash_mode == "trick":
                contract = make_contract(source.categorical, hash_bits, hash_seed)
            else:
                fitter = hashing_fitter(source, hash_mode, hash_bits, hash_seed, hash_k, buckets)
                for p in parts:
                    fitter.update(p.cats, threads)
                contract = fitter.contract()
        elif contract.get("features") != source.categorical:
            raise MpinnError("the hashing contract is for categorical columns %s, the data names %s"
                             % (contract.get("features"), source.categorical))
        idx = [encode_indices(p.cats, contract, threads) for p in parts]
        for p in parts:
            p.cats = None       # the raw columns can go once hashed
        Xs = csr_from_indices(idx[0] if len(idx) == 1 else np.concatenate(idx), contract["n_columns"])
        del idx
    meta["hashing"] = contract if source.categorical else None
    Xd = None
    if source.numeric:
        Xd = parts[0].Xd if len(parts) == 1 else np.concatenate([p.Xd for p in parts])
        Xd = np.ascontiguousarray(Xd, dtype=np.float64)
    if source.has_label:
        raw = parts[0].labels if len(parts) == 1 else np.concatenate([np.asarray(p.labels) for p in parts])
        y, task, classes = encode_labels(raw, task, classes)
    else:
        y = np.zeros(n)
    meta.update(task=task, classes=classes, has_label=source.has_label)
    return Dataset(Xs, Xd, y, meta)


def load_default(n_rows=200_000, seed=0, hash_bits=18, hash_seed=0, hash_mode="trick", hash_k=4,
                 buckets=None, contract=None):
    source = TableSource(None, default_rows=n_rows, default_seed=seed, chunk_rows=max(1, n_rows))
    return load_table(source, "binary", ["0", "1"], hash_mode, hash_bits, hash_seed, hash_k, buckets, contract)


def load_csv(path, label, categorical=(), numeric=(), hash_bits=18, hash_seed=0, task="auto",
             classes=None, require_label=True, hash_mode="trick", hash_k=4, buckets=None, contract=None,
             chunk_rows=CHUNK_ROWS, engine="auto"):
    """A CSV file with a header row, read in chunks. Categorical columns are hashed; numeric ones go
    in as dense features; an empty categorical cell is its own token, an empty numeric cell is an error."""
    source = TableSource(path, label, categorical, numeric, require_label, chunk_rows=chunk_rows, engine=engine)
    return load_table(source, task, classes, hash_mode, hash_bits, hash_seed, hash_k, buckets, contract)


def load_parquet(path, label, categorical=(), numeric=(), hash_bits=18, hash_seed=0, task="auto",
                 classes=None, require_label=True, hash_mode="trick", hash_k=4, buckets=None, contract=None,
                 chunk_rows=CHUNK_ROWS):
    """A Parquet file read in record batches (pyarrow); dictionary-encoded string columns are hashed
    through their dictionaries."""
    source = TableSource(path, label, categorical, numeric, require_label, chunk_rows=chunk_rows)
    return load_table(source, task, classes, hash_mode, hash_bits, hash_seed, hash_k, buckets, contract)


# ---------------------------------------------------------------- dense files
def _dense_xy(X, y, path, task, classes, require_label):
    # loadmat returns Fortran-ordered arrays: convert once, here, where they enter
    X = np.ascontiguousarray(np.asarray(X, dtype=np.float64))
    if X.ndim != 2:
        raise MpinnError("%s: X must be 2-D, got shape %s" % (path, X.shape))
    if not np.all(np.isfinite(X)):
        raise MpinnError("%s: X holds inf or nan" % path)
    meta = {"source": os.path.splitext(path)[1].lstrip("."), "n_features": X.shape[1]}
    if y is None:
        if require_label:
            raise MpinnError("%s has no y array" % path)
        meta.update(task=task, classes=classes, has_label=False)
        return Dataset(None, X, np.zeros(X.shape[0]), meta)
    y = np.ascontiguousarray(np.asarray(y)).ravel()
    if y.shape[0] != X.shape[0]:
        raise MpinnError("%s: X has %d rows but y has %d" % (path, X.shape[0], y.shape[0]))
    y, task, classes = encode_labels(y, task, classes)
    meta.update(task=task, classes=classes, has_label=True)
    return Dataset(None, X, y, meta)


def load_npz(path, task="auto", classes=None, require_label=True):
    try:
        with np.load(path, allow_pickle=False) as z:
            if "X" not in z:
                raise MpinnError("%s has no X array (found: %s)" % (path, ", ".join(z.files)))
            X, y = z["X"], (z["y"] if "y" in z else None)
    except ValueError as e:
        raise MpinnError("%s: cannot load without pickle (%s)" % (path, e))
    except (OSError, EOFError) as e:
        raise MpinnError("cannot read %s: %s" % (path, e))
    return _dense_xy(X, y, path, task, classes, require_label)


def load_mat(path, task="auto", classes=None, require_label=True):
    """Andrew Ng's exercise format: X (m, n) and y (m, 1) with labels 1..10 (10 stands for digit 0)."""
    import scipy.io
    try:
        d = scipy.io.loadmat(path)
    except (OSError, ValueError, TypeError) as e:
        raise MpinnError("cannot read %s as a .mat file: %s" % (path, e))
    if "X" not in d:
        raise MpinnError("%s has no X matrix" % path)
    return _dense_xy(d["X"], d.get("y"), path, task, classes, require_label)


def load_packed(path, task="auto", classes=None, contract=None):
    """A file written by `python -m mpinn.prepare`: rows stay in the file (memory map)."""
    from mpinn.packed import PackedDataset
    data = PackedDataset(path)
    if contract is not None:
        if data.meta.get("hashing") is None:
            raise MpinnError("%s has no hashed columns, the model has" % path)
        check_contract(contract, data.meta["hashing"])
    if classes is not None and data.meta.get("classes") not in (None, list(classes)):
        raise MpinnError("%s has classes %s, expected %s" % (path, data.meta.get("classes"), list(classes)))
    if task not in ("auto", data.task):
        raise MpinnError("%s holds a %s task, expected %s" % (path, data.task, task))
    return data


TABLE_EXTS = (".csv", ".txt", ".parquet", ".pq")


def load_data(path=None, label=None, categorical="", numeric="", hash_bits=18, hash_seed=0,
              task="auto", classes=None, default_rows=200_000, default_seed=0, require_label=True,
              hash_mode="trick", hash_k=4, buckets=None, contract=None):
    """Dispatch on the file extension; no path means the embedded click log. `contract` (a model's
    hashing contract) is used as it is instead of fitting one to the data."""
    if path is None:
        return load_default(default_rows, default_seed, hash_bits, hash_seed, hash_mode, hash_k, buckets,
                            contract)
    if not os.path.exists(path):
        raise MpinnError("data file %s does not exist" % path)
    ext = os.path.splitext(path)[1].lower()
    if ext in TABLE_EXTS:
        if not label:
            raise MpinnError("a %s file needs --label COLUMN" % ext.lstrip(".").upper())
        load = load_parquet if ext in (".parquet", ".pq") else load_csv
        return load(path, label, _split_names(categorical), _split_names(numeric), hash_bits, hash_seed, task,
                    classes, require_label, hash_mode=hash_mode, hash_k=hash_k, buckets=buckets, contract=contract)
    if ext == ".npz":
        return load_npz(path, task, classes, require_label)
    if ext == ".mat":
        return load_mat(path, task, classes, require_label)
    if ext == ".mpinn":
        return load_packed(path, task, classes, contract)
    raise MpinnError("%s: unknown data format %r (use .csv, .parquet, .npz, .mat or .mpinn)" % (path, ext))
