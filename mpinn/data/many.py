"""Several table files (CSV, Parquet, click-log text; plain or .gz) read as one table, in order: the first file's
columns (named, or chosen from its values) are every file's, and the rows follow each other as if the files were
one. Hashed, labelled and counted through the same TablePass as one file, so the result equals one file holding
them all, bit for bit."""
import os
from dataclasses import replace

import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data import progress
from mpinn.data.base import Dataset
from mpinn.data.files import describe, unchanged_parts
from mpinn.data.fit.chunks import TablePass
from mpinn.data.fit.labels import missing_labels
from mpinn.data.fragments import fragments_of
from mpinn.data.formats import clicktext, csvtext
from mpinn.data.formats.tables import TableSource, load_table
from mpinn.data.spec import DataSpec
from mpinn.data.stream import concat_rows
from mpinn.hashing import HashSpec, csr_from_indices


class ChainedSource:
    """Fragments (mpinn.data.fragments) read one after another as one table (see the module): the union every reader
    of several pieces reads (a stream and each of its readers, a load of several files, predict's blocks, prepare's
    parts). `sources`: each fragment's table source, the first made with the columns as given, the others with the
    first's columns named."""

    def __init__(self, sources, fragments=None):
        first = sources[0]
        self.sources, self.fragments = sources, fragments
        self.kind = first.kind
        self.path = describe([s.path for s in sources])
        self.label, self.has_label = first.label, first.has_label
        self.categorical, self.numeric = first.categorical, first.numeric
        self.kinds_note = getattr(first, "kinds_note", None)
        self.n_rows = None
        for s in sources[1:]:
            if s.has_label != first.has_label:
                raise MpinnError("%s has %s label column and %s %s" % (
                    s.path, "a" if s.has_label else "no", first.path, "has" if first.has_label else "has not"))
        self.meta = dict(first.meta, files=[s.path for s in sources])

    @classmethod
    def of(cls, fragments, spec, chunk_rows=None):
        """The ChainedSource of `fragments` (their files' formats: csv, parquet or criteo, one family), read in
        chunks of chunk_rows rows (default: the readers'): the first opened with spec's columns, the others with the
        first's named. Each fragment's parts are checked to come from its file as the FileSet found it
        (mpinn.data.files.unchanged_parts)."""
        fragments = list(fragments)
        formats = [f.file.format for f in fragments]
        criteo = formats[0] == "criteo"
        if any((f == "criteo") != criteo for f in formats):
            odd = fragments[formats.index("criteo" if not criteo else formats[1])]
            raise MpinnError("%s and %s: click-log text and CSV or Parquet files cannot be read as one table"
                             % (fragments[0].path, odd.path))
        first = fragments[0].open(spec, chunk_rows)
        named = replace(spec, categorical=first.categorical, numeric=first.numeric)
        return cls([first] + [f.open(named, chunk_rows) for f in fragments[1:]], fragments)

    def parts(self):
        for s in self.sources:
            yield from unchanged_parts(s)       # checked against the file as first seen, where that was noted
        if self.dropped:
            self.meta["dropped_unlabelled"] = self.dropped

    @property
    def dropped(self):
        return sum(getattr(s, "dropped", 0) for s in self.sources)


def chained_source(files, spec, chunk_rows=None):
    """The ChainedSource (ChainedSource.of) of the table files of FileSet `files`, each read whole."""
    return ChainedSource.of(fragments_of(files), spec, chunk_rows)


def check_formats(files):
    """Table files read as one are each csv, parquet or criteo (mpinn.data.files.data_format): else one line naming
    one."""
    odd = files.odd()
    if odd is not None:
        raise MpinnError("%s: several data files are read as one table when they are CSV, Parquet or click-log text "
                         "(maybe .gz), not %s" % (odd, files.formats[files.paths.index(odd)] or
                                                  "a file of no known extension"))


def load_many(files, spec=DataSpec(), hashing=HashSpec()):
    """The table files of FileSet `files` in memory as one Dataset, read in their order."""
    check_formats(files)
    if files[0].format != "criteo" and not spec.label:
        raise MpinnError("%s: a %s file needs --label COLUMN" % (files[0].path, files[0].format.upper()))
    return load_table(chained_source(files, spec), spec, hashing)


def read_column_of(data, name, purpose="for --holdout-by", label=None):
    """Every data row's raw value of column `name`, file after file (data: a path or the files read as one);
    label: only the rows whose label (that column) is not missing, as --missing-labels drop reads them."""
    paths = [data] if isinstance(data, str) else list(data)
    values = [read_column(p, name, purpose, label) for p in paths]
    return values[0] if len(values) == 1 else np.concatenate([np.asarray(v, dtype=object) for v in values])


def read_column(path, name, purpose="for --holdout-by", label=None):
    """Every data row's raw value of one column of a CSV, Parquet or click-log text file, in the readers' row order
    (the values --holdout-by splits on, predict's ids; one more pass over the file); label: see read_column_of."""
    if clicktext.is_click_log(path):        # every row labelled: `label` drops none
        return clicktext.read_column(path, name, purpose)
    names = [name] + ([label] if label else [])
    if os.path.splitext(path)[1].lower() in (".parquet", ".pq"):
        source = TableSource.__new__(TableSource)
        source.path = path
        pf = source._parquet()
        for n in names:
            if n not in pf.schema_arrow.names:
                raise MpinnError("%s has no column %r %s" % (path, n, purpose))
        table = pf.read(columns=list(dict.fromkeys(names)))
        columns = [["" if v is None else v for v in table.column(n).to_pylist()] for n in names]
    else:
        columns = [[] for _ in names]
        with csvtext.open_text(path) as f:
            reader = csvtext.reader(f, path)
            try:
                header = [h.strip() for h in next(reader)]
                for n in names:
                    if n not in header:
                        raise MpinnError("%s has no column %r %s" % (path, n, purpose))
                at = [header.index(n) for n in names]
                for row in reader:
                    if row:                     # the readers skip empty lines too
                        for out, j in zip(columns, at):
                            out.append(row[j] if j < len(row) else "")
            except csvtext.READ_ERRORS + (StopIteration,) as e:
                raise csvtext.text_error(path, reader.line_num, e)
    if not label:
        return columns[0]
    keep = ~missing_labels(np.array(columns[1], dtype=object))
    return [v for v, k in zip(columns[0], keep) if k]


def chunks_of(files, spec, hashing, chunk_rows=None):
    """The table files of FileSet `files` read as one, a chunk at a time: Datasets of the raw numbers (no transform)
    and the rows hashed under hashing's contract, known up front (a model's), with spec's task and classes. What
    predict streams: its memory holds a chunk, whatever the number of rows. The files must still be as the FileSet
    found them as they are read (mpinn.data.files.unchanged_parts)."""
    source = chained_source(files, spec, chunk_rows)
    table = TablePass(source, spec, hashing)
    if table.contract is None and source.categorical:
        raise MpinnError("%s: its categorical columns need a hashing contract to be read a chunk at a time"
                         % source.path)
    table.learnt = True         # the statistics are the model's: none gathered here
    meta = dict(source.meta, hashing=table.contract, task=spec.task, classes=spec.classes,
                has_label=source.has_label)
    for part in source.parts():
        if part.n == 0:
            continue
        idx, y = table.chunk(part)
        progress.tick(part.n)
        Xs = csr_from_indices(idx, table.contract["n_columns"]) if idx is not None else None
        Xd = np.ascontiguousarray(part.Xd, dtype=np.float64) if source.numeric else None
        yield Dataset(Xs, Xd, y, meta)


def blocks_of(files, spec, hashing, block):
    """chunks_of's rows cut into Datasets of `block` rows (the last shorter), across the files' ends: the blocks
    reading the rows whole and taking them `block` at a time would give, so products over them have the same
    shapes, and the same bits."""
    have, n = [], 0
    for rows in chunks_of(files, spec, hashing, chunk_rows=block):
        have.append(rows)
        n += len(rows)
        if n >= block:
            whole, cut = concat_rows(have, rows.meta), n - n % block
            for at in range(0, cut, block):
                yield whole.subset(slice(at, at + block))
            have, n = ([whole.subset(slice(cut, n))] if n > cut else []), n - cut
    if n:
        yield concat_rows(have, have[0].meta)


class RowsInBlocks:
    """Held-out table files too large to hold (a streamed run's --valid, or its last files): read a block at a time
    at each evaluation (blocks()), as the training data was read (its columns, task, classes and contract), through
    the training's transform. len() is an estimate from the files' sizes."""

    streamed = True
    transform = None

    def __init__(self, files, spec, hashing):
        self.files, self.spec, self.hashing = files, spec, hashing      # read again at each evaluation: as found
        self.n_estimate = int(files.n_estimate)
        self.meta = {"task": spec.task, "classes": spec.classes, "numeric": list(spec.numeric or ()),
                     "hashing": hashing.contract, "files": files.paths, "path": files.describe()}

    def __len__(self):
        return self.n_estimate

    @property
    def raw_dense(self):
        return len(self.meta["numeric"])

    @property
    def numeric_names(self):
        return self.meta["numeric"]

    def known_length(self):
        """None: the files' rows are counted by reading them (len() is an estimate)."""
        return None

    def first_rows(self, limit, chunk=65536):
        """The hashed input (CSR) of the first `limit` rows, in file order, a block of `chunk` rows at a time."""
        n = 0
        for rows in self.blocks(chunk):
            if n >= limit or rows.Xs is None:
                return
            take = rows.Xs[:limit - n]
            n += take.shape[0]
            yield take

    def in_order(self, chunk, dtype=None):
        """Every row, in file order, as Batches of `chunk` rows (the last one shorter), through the training's
        transform, cast to dtype: a block read at a time."""
        for rows in self.blocks(chunk):
            yield rows.take(np.arange(len(rows)), dtype)

    def blocks(self, block):
        for rows in blocks_of(self.files, self.spec, self.hashing, block):
            rows.transform = self.transform
            yield rows
