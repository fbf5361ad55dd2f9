"""CSV and Parquet tables (and the embedded click log) read chunk by chunk, hashed into a Dataset."""
import os
from dataclasses import replace

import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data.formats import csvtext, kinds
from mpinn.data.base import CHUNK_ROWS, Dataset
from mpinn.data.fit.chunks import TablePass
from mpinn.data.formats.clicklog import DEFAULT_CARDS, DEFAULT_NUMERIC, iter_clicklog
from mpinn.data.fit.labels import MISSING_TEXT, missing_labels
from mpinn.data.formats.part import Part, take_part  # noqa: F401 - Part: the readers' chunk, made here and in clicktext
from mpinn.data.progress import tick
from mpinn.data.spec import DataSpec, split_names
from mpinn.hashing import HashSpec, arrow_available, csr_from_indices


# numeric cells that mean "missing" (imputed and flagged by the transform), after stripping spaces;
# pyarrow's reader is given the same list, and any other text is an error
MISSING_NUMBERS = MISSING_TEXT
_MISSING = frozenset(MISSING_NUMBERS)


def _number(s):
    """float of a numeric cell; NaN for a missing one; ValueError for text."""
    t = s.strip()
    return float("nan") if t in _MISSING else float(t)


def _is_float(s):
    try:
        _number(s)
        return True
    except ValueError:
        return False


class TableSource:
    """A table read chunk by chunk as Parts: a CSV or Parquet file, or the embedded click log (path None).
    Columns are resolved (and a CSV's header read) when it is made; parts() reads the rows."""

    def __init__(self, path=None, label=None, categorical=(), numeric=(), require_label=True,
                 default_rows=200_000, default_seed=0, chunk_rows=CHUNK_ROWS, engine="auto", exclude=(),
                 drop_unlabelled=False):
        """drop_unlabelled: parts() leaves out the rows whose label is missing (--missing-labels drop), counting
        them in self.dropped."""
        self.path, self.chunk_rows, self.engine = path, max(1, int(chunk_rows)), engine
        self.drop_unlabelled, self.dropped = drop_unlabelled, 0
        categorical, numeric = split_names(categorical), split_names(numeric)
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
        col = {h: i for i, h in enumerate(header)}
        twice = [h for h in col if header.count(h) > 1] if len(col) < len(header) else []
        for name in categorical + numeric + ([label] if require_label else []):
            if name not in col:
                raise MpinnError("%s has no column %r (columns: %s)%s" % (path, name, kinds.names_shown(header, 20),
                                                                           csvtext.other_separator(header)))
        for name in dict.fromkeys(categorical + numeric + ([label] if label else [])):
            if name in twice:
                raise MpinnError("%s: %d columns are named %r: rename them so that the name says which"
                                 % (path, header.count(name), name))
        if self.kind == "parquet":
            self._check_scalar_columns(categorical + numeric + ([label] if label in col else []))
        sample = (kinds.sample_csv(path, header, getattr(self, "header_lines", 1)) if self.kind == "csv"
                  else self._damaged_parquet_is_one_line(lambda: kinds.sample_parquet(self._parquet(), header)))
        self.kinds_note = None
        if not categorical and not numeric:     # none named: chosen from the values
            nested = self._nested_columns([h for h in col if h not in twice]) if self.kind == "parquet" else []
            categorical, numeric, self.kinds_note = kinds.infer(
                [h for h in col if h not in exclude and h not in nested and h not in twice], sample, label, _MISSING)
            if nested:
                self.kinds_note += "; left out, nested (lists, structs, maps): %s" % kinds.names_shown(nested)
            if twice:
                self.kinds_note += "; left out, two columns of the same name: %s" % kinds.names_shown(twice)
        if label in col:
            kinds.check_not_label(sample, label, categorical + numeric, path)
        self.header, self.col = header, col
        self.label, self.has_label = label, label in col
        self.categorical, self.numeric = categorical, numeric
        self.meta = {"source": self.kind, "label": label, "categorical": categorical, "numeric": numeric}
        if self.kinds_note:
            self.meta["columns_chosen"] = self.kinds_note

    # ---- CSV
    def _read_header(self):
        with csvtext.open_text(self.path) as f:
            reader = csvtext.reader(f, self.path)
            try:
                header = next(reader)
            except StopIteration:
                raise MpinnError("%s is empty (no header row)" % self.path)
            except csvtext.READ_ERRORS as e:
                raise csvtext.text_error(self.path, reader.line_num + 1, e)
            self.header_lines = reader.line_num
        return [h.strip() for h in header]

    def _wanted(self):
        """Column indices of the categorical, numeric and label columns."""
        return ([self.col[c] for c in self.categorical], [self.col[c] for c in self.numeric],
                self.col[self.label] if self.has_label else None)

    def _csv_rows(self, skip=0):
        """Chunks of (rows as lists of str, their line numbers), after `skip` data rows."""
        path, width = self.path, len(self.header)
        with csvtext.open_text(path) as f:
            reader = csvtext.reader(f, path)
            rows, lines = [], []
            try:
                next(reader)
                end = reader.line_num
                for row in reader:
                    start, end = end + 1, reader.line_num       # a quoted field may hold line breaks
                    if not row:
                        continue
                    if skip:
                        skip -= 1
                        continue
                    if len(row) != width:
                        raise MpinnError("%s line %d: %d fields, the header has %d" % (path, end, len(row), width)
                                         if start == end else "%s lines %d to %d are one row of %d fields (the "
                                         "header has %d): is a quote opened on line %d never closed?"
                                         % (path, start, end, len(row), width, start))
                    rows.append(row)
                    lines.append(reader.line_num)
                    if len(rows) == self.chunk_rows:
                        yield rows, lines
                        rows, lines = [], []
            except csvtext.READ_ERRORS as e:
                raise csvtext.text_error(path, reader.line_num, e)
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
        """(m, d) float64 of numeric columns of str, NaN where a cell is missing (MISSING_NUMBERS); the
        first cell holding text (by row, then column) is an error naming its line."""
        m = len(lines)
        out = np.empty((m, len(cols)), dtype=np.float64)
        first_bad = None
        for k, c in enumerate(cols):
            try:
                out[:, k] = np.fromiter(map(float, c), dtype=np.float64, count=m)
            except ValueError:
                try:
                    out[:, k] = np.fromiter(map(_number, c), dtype=np.float64, count=m)
                except ValueError:
                    i = next(i for i, s in enumerate(c) if not _is_float(s))
                    if first_bad is None or i < first_bad[0]:
                        first_bad = (i, k)
        if first_bad is not None:
            i, k = first_bad
            raise MpinnError("%s line %d: column %r is not a number: %r"
                             % (self.path, lines[i], self.numeric[k], cols[k][i]))
        return out

    def _csv_arrow_parts(self):
        """The fast path (pyarrow's C++ reader): any problem in a chunk, a parse error or a cell that
        does not convert, sends that chunk and the rest to the csv-module reader, which gives the same
        values and the error with its line number."""
        import pyarrow as pa  # optional: pyarrow
        import pyarrow.csv as pacsv  # optional: pyarrow
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
                # arrow's reader reads up to 32 blocks ahead of the rows taken: 2 MiB blocks bound that to 64 MiB
                # of text (a stream's memory; the chunk's 16 MiB: 512); a longer line goes to the csv module
                read_options=pacsv.ReadOptions(column_names=names, skip_rows=self.header_lines, block_size=2 << 20),
                parse_options=pacsv.ParseOptions(delimiter=csvtext.separator(self.path), newlines_in_values=True),
                convert_options=pacsv.ConvertOptions(column_types=types, include_columns=include,
                                                     null_values=list(MISSING_NUMBERS),
                                                     strings_can_be_null=False, quoted_strings_can_be_null=False))
            for batch in reader:
                for s in range(0, batch.num_rows, self.chunk_rows):
                    b = batch.slice(s, self.chunk_rows)
                    cols = [b.column(names[i]) for i in num_i]
                    Xd = np.column_stack([c.to_numpy(zero_copy_only=False) for c in cols]).astype(np.float64) \
                        if num_i else None      # a null (missing) cell comes out as NaN
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
            import pyarrow.parquet as pq  # optional: pyarrow
        except ImportError:
            raise MpinnError("reading %s needs pyarrow: pip install 'mpinn[parquet]'" % self.path)
        try:
            return pq.ParquetFile(self.path, read_dictionary=read_dictionary)
        except Exception as e:      # pyarrow raises several types for a file that is not Parquet
            raise MpinnError("cannot read %s as Parquet: %s" % (self.path, (str(e).splitlines() or [""])[0]))

    def _damaged_parquet_is_one_line(self, read):
        """read() of a Parquet file; what pyarrow raises on a damaged or truncated one is one line."""
        import pyarrow as pa  # optional: pyarrow
        try:
            return read()
        except (OSError, pa.ArrowException) as e:
            raise MpinnError("cannot read %s: %s" % (self.path, (str(e).splitlines() or [type(e).__name__])[0]))

    def _parquet_schema(self):
        pf = self._parquet()
        self.n_rows = pf.metadata.num_rows
        return list(pf.schema_arrow.names)

    def _nested_columns(self, names):
        """The columns among `names` whose values are nested (lists, structs, maps): not inputs mpinn can read."""
        import pyarrow as pa  # optional: pyarrow
        schema = self._parquet().schema_arrow
        out = []
        for name in dict.fromkeys(names):
            t = schema.field(name).type
            if pa.types.is_dictionary(t):
                t = t.value_type
            if pa.types.is_nested(t):
                out.append(name)
        return out

    def _check_scalar_columns(self, names):
        """A Parquet column mpinn reads holds one value per row: a nested one (a list, a struct, a map) named as an
        input or the label is one clear error, not a failure deep in the hashing (one mpinn chooses is left out)."""
        for name in self._nested_columns(names)[:1]:
            raise MpinnError("%s: column %r holds %s values (nested); mpinn reads columns of one number or text per "
                             "row" % (self.path, name, self._parquet().schema_arrow.field(name).type))

    def _parquet_parts(self):
        import pyarrow as pa  # optional: pyarrow
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
                            # an integer too large for a float64's 53 bits is rounded, as a CSV's number is
                            Xd[:, k] = c.cast(pa.float64(), safe=not pa.types.is_integer(c.type)).to_numpy(
                                zero_copy_only=False)
                        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                            raise MpinnError("%s: column %r is not numeric (%s)" % (self.path, name, c.type))
                labels = None
                if self.has_label:
                    c = b.column(self.label)        # a null label: refused with every reader's message
                    if pa.types.is_dictionary(c.type):
                        c = c.dictionary_decode()
                    labels = c.to_numpy(zero_copy_only=False)
                yield Part([b.column(name) for name in self.categorical], Xd, labels, b.num_rows)
                start += b.num_rows
        except (OSError, pa.ArrowException) as e:
            raise MpinnError("cannot read %s: %s" % (self.path, (str(e).splitlines() or [type(e).__name__])[0]))

    # ---- the embedded click log
    def _default_parts(self):
        for codes, numeric, y in iter_clicklog(self.default_rows, self.default_seed, self.chunk_rows):
            yield Part([codes[:, j] for j in range(codes.shape[1])], numeric, y, len(y))

    def parts(self):
        """Every row (with drop_unlabelled, every row with a label), as Parts of at most chunk_rows rows."""
        if self.kind == "default":
            return self._default_parts()
        if self.kind == "parquet":
            parts = self._parquet_parts()
        else:
            engine = self.engine
            if engine == "auto":
                # a header spanning lines (a quoted newline) is left to the csv module: arrow skips rows, not lines
                engine = "arrow" if arrow_available() and self.header_lines == 1 else "python"
            parts = self._csv_arrow_parts() if engine == "arrow" else self._csv_python_parts()
        return self._labelled(parts) if self.drop_unlabelled and self.has_label else parts

    def _labelled(self, parts):
        self.dropped = 0
        for part in parts:
            missing = missing_labels(part.labels)
            if missing.any():
                self.dropped += int(missing.sum())
                part = take_part(part, np.flatnonzero(~missing))
            yield part
        self.meta["dropped_unlabelled"] = self.dropped


def load_table(source, spec=DataSpec(), hashing=HashSpec(), threads=1):
    """All of a table source in memory as a Dataset, read once through the TablePass that prepare packs
    files with: hashed under `hashing`'s contract, or one fitted to these rows; the task and classes of
    `spec`, or decided from every label at once. (The source has resolved spec's columns already.)"""
    table = TablePass(source, spec, hashing, threads)
    parts = []
    for p in source.parts():
        parts.append(p)
        tick(p.n)
    n = sum(p.n for p in parts)
    if n == 0:
        raise MpinnError("%s has a header but no rows%s" % (
            source.path, " with a label (%d without)" % source.dropped if source.dropped else ""))
    for p in parts:
        table.learn(p, labels=False)
    table.settle()
    meta = dict(source.meta)
    Xs = None
    if table.contract is not None:
        idx = []
        for p in parts:
            idx.append(table.hash(p))
            p.cats = None       # the raw columns can go once hashed
        Xs = csr_from_indices(idx[0] if len(idx) == 1 else np.concatenate(idx), table.contract["n_columns"])
        del idx
    meta["hashing"] = table.contract
    Xd = None
    if source.numeric:
        meta["numeric_stats"] = table.numeric_stats()
        Xd = parts[0].Xd if len(parts) == 1 else np.concatenate([p.Xd for p in parts])
        Xd = np.ascontiguousarray(Xd, dtype=np.float64)
    raw = None
    if source.has_label:
        raw = parts[0].labels if len(parts) == 1 else np.concatenate([np.asarray(p.labels) for p in parts])
    y = table.labels(raw, n)
    meta.update(task=table.task, classes=table.classes, has_label=source.has_label)
    return Dataset(Xs, Xd, y, meta)


def load_default(n_rows=200_000, seed=0, hashing=HashSpec()):
    """The embedded click log (binary, 0/1) in memory."""
    source = TableSource(None, default_rows=n_rows, default_seed=seed, chunk_rows=max(1, n_rows))
    if hashing.contract is None and hashing.bits is None:
        hashing = replace(hashing, bits=18)         # what auto gives for the click log's 10^5+ values
    return load_table(source, DataSpec(task="binary", classes=["0", "1"]), hashing)


def load_csv(path, spec=DataSpec(), hashing=HashSpec(), chunk_rows=CHUNK_ROWS, engine="auto"):
    """A CSV file with a header row, read in chunks. Categorical columns are hashed; numeric ones go
    in as dense features; an empty categorical cell is its own token, an empty numeric cell is missing.
    spec.exclude: columns never chosen as inputs when none are named (e.g. the --holdout-by column)."""
    source = TableSource(path, spec.label, spec.categorical, spec.numeric, spec.require_label, chunk_rows=chunk_rows,
                         engine=engine, exclude=spec.exclude, drop_unlabelled=spec.missing_labels == "drop")
    return load_table(source, spec, hashing)


def load_parquet(path, spec=DataSpec(), hashing=HashSpec(), chunk_rows=CHUNK_ROWS):
    """A Parquet file read in record batches (pyarrow); dictionary-encoded string columns are hashed
    through their dictionaries."""
    source = TableSource(path, spec.label, spec.categorical, spec.numeric, spec.require_label, chunk_rows=chunk_rows,
                         exclude=spec.exclude, drop_unlabelled=spec.missing_labels == "drop")
    return load_table(source, spec, hashing)
