"""Data sources, read on rank 0 (or on every rank, for a packed file): load_data picks the reader by extension.

    base       Rows (what the trainer uses of a data set) and Dataset (rows in memory)
    labels     the task and the classes from raw labels
    tables     CSV and Parquet in chunks, hashed (and the embedded click log through the same path)
    clicktext  the Criteo logs' text format (label, I1..I13, C1..C26, tab-separated, maybe gzip), through tables
    clicklog   the embedded synthetic click log
    dense      .npz and .mat files, in-memory arrays
    packed     packed files (python -m mpinn.prepare), read by row through a memory map; packing writes them
    parts      multi-part packed datasets (mpirun -np N python -m mpinn.prepare) read as one; pack_parts writes them
    stats      per-column statistics of numeric inputs in one streaming pass (the same bits however chunked)
    transform  the numeric transform fitted from them (log1p, standardise, impute and flag), in the model file
    spec       DataSpec: which columns are what and what the label means (the readers take it, and a HashSpec)
    chunks     TablePass: a table hashed chunk by chunk (the contract, the task and classes, the statistics),
               what load_table and prepare share
    inputs     what training reads: labels checked, the transform fitted and set, the shapes every rank needs
"""
import os

from mpinn.core.errors import MpinnError
from mpinn.data import files
from mpinn.data.base import CHUNK_ROWS, TASKS, Dataset, Rows  # noqa: F401
from mpinn.data.formats.clicktext import is_click_log, load_click_text
from mpinn.data.formats.dense import load_mat, load_npz
from mpinn.data.packed.format import load_packed  # noqa: F401 - one packed file (load_data also opens a manifest)
from mpinn.data.spec import DataSpec, split_names  # noqa: F401
from mpinn.data.formats.tables import load_csv, load_default, load_parquet  # noqa: F401
from mpinn.hashing import HashSpec  # noqa: F401

TABLE_EXTS = (".csv", ".txt", ".tsv", ".tab", ".parquet", ".pq")
FORMATS = {".csv": "csv", ".txt": "csv", ".tsv": "csv", ".tab": "csv", ".parquet": "parquet", ".pq": "parquet",
           ".npz": "npz", ".mat": "mat", ".mpinn": "mpinn"}      # tab-separated values read as CSV (csvtext.separator)


def extension(path):
    """A data file's extension, lower case; a gzip-compressed CSV's (.csv.gz, .txt.gz) is its inner one."""
    base, ext = os.path.splitext(path.lower())
    if ext == ".gz" and os.path.splitext(base)[1] in (".csv", ".txt", ".tsv", ".tab"):
        return os.path.splitext(base)[1]
    return ext


def data_format(path, fmt="auto"):
    """The format of a data file: `fmt` when given, else its extension's, with click-log text (the Criteo
    logs' format) told from a CSV by its first line."""
    if fmt not in (None, "", "auto"):
        return fmt
    if is_click_log(path):
        return "criteo"
    return FORMATS.get(extension(path), os.path.splitext(path)[1].lower())


def load_data(path=None, spec=DataSpec(), hashing=HashSpec(), default_rows=200_000, default_seed=0):
    """Dispatch on the format (data_format, or spec.format); several files (a directory, a glob, a list: see
    mpinn.data.files) are read as one table (mpinn.data.many); no path means the embedded click log (of
    `default_rows` rows drawn with `default_seed`). spec: which columns are what and what the label means;
    hashing: how categorical columns are hashed (a given contract, a model's, is used as it is)."""
    if path is None:
        return load_default(default_rows, default_seed, hashing)
    if files.is_many(path):
        paths = files.expand(path)
        if len(paths) > 1:
            from mpinn.data.many import load_many
            formats = [data_format(p, spec.format) for p in paths]
            _expect(paths, formats)
            return load_many(paths, formats, spec, hashing)
        path = paths[0]
    if not os.path.exists(path):
        raise MpinnError("data file %s does not exist" % path)
    _expect([path], [data_format(path, spec.format)])
    ext = extension(path)
    if data_format(path, spec.format) == "criteo":
        return load_click_text(path, spec, hashing)
    if ext in TABLE_EXTS:
        if not spec.label and (spec.require_label or not (spec.categorical or spec.numeric)):
            # (a model's own columns, read for predictions alone, need none: an estimator's from a DataFrame)
            raise MpinnError("a %s file needs --label COLUMN" % ext.lstrip(".").upper())
        load = load_parquet if ext in (".parquet", ".pq") else load_csv
        return load(path, spec, hashing)
    if ext == ".npz":
        return load_npz(path, spec)
    if ext == ".mat":
        return load_mat(path, spec)
    if ext == ".mpinn":     # a packed file, or a multi-part dataset's manifest
        from mpinn.data.packed.parts import open_packed
        return open_packed(path, spec, hashing)
    raise MpinnError("%s: unknown data format %r (use .csv or .csv.gz, .tsv, .parquet, .npz, .mat, .mpinn, or "
                     "click-log text: 40 tab-separated fields a line, maybe .gz)" % (path, ext))


def _expect(paths, formats):
    """The rows a progress display (mpinn.data.progress) may expect of table files."""
    from mpinn.data import progress
    if progress._current is not None and all(f in ("csv", "parquet", "criteo") for f in formats):
        from mpinn.data.stream import estimate_rows
        progress.expect(estimate_rows(paths, formats))
