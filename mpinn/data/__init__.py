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
    files      the files a data option names, expanded once into a FileSet (each file's format, compression, state)
    plan       InputPlan: how a run's rows are read, decided once from the options (mpinn.settings.input_plan)
    inputs     what training reads: labels checked, the transform fitted and set, the shapes every rank needs
"""
from mpinn.core.errors import MpinnError
from mpinn.data import progress
from mpinn.data.base import CHUNK_ROWS, TASKS, Dataset, Rows  # noqa: F401
from mpinn.data.files import FileSet
from mpinn.data.formats.clicktext import load_click_text
from mpinn.data.formats.dense import load_mat, load_npz
from mpinn.data.formats.names import extension
from mpinn.data.formats.tables import load_csv, load_default, load_parquet  # noqa: F401
from mpinn.data.many import load_many
from mpinn.data.packed.format import load_packed  # noqa: F401 - one packed file (load_data also opens a manifest)
from mpinn.data.packed.parts import open_packed
from mpinn.data.spec import DataSpec, split_names  # noqa: F401
from mpinn.hashing import HashSpec  # noqa: F401


def load_data(data=None, spec=DataSpec(), hashing=HashSpec(), default_rows=200_000, default_seed=0):
    """Dispatch on the format (a FileSet's, made here from a path with spec.format where a path is given); several
    files (a directory, a glob, a list: see mpinn.data.files) are read as one table (mpinn.data.many); no data means
    the embedded click log (of `default_rows` rows drawn with `default_seed`). spec: which columns are what and what
    the label means; hashing: how categorical columns are hashed (a given contract, a model's, is used as it is)."""
    if data is None:
        return load_default(default_rows, default_seed, hashing)
    files = data if isinstance(data, FileSet) else FileSet.of(data, spec.format)
    if progress.showing() and all(f.table for f in files):     # what a progress display may expect
        progress.expect(files.n_estimate)
    if len(files) > 1:
        return load_many(files, spec, hashing)
    f = files[0]
    if f.format == "criteo":
        return load_click_text(f.path, spec, hashing)
    if f.format in ("csv", "parquet"):
        if not spec.label and (spec.require_label or not (spec.categorical or spec.numeric)):
            # (a model's own columns, read for predictions alone, need none: an estimator's from a DataFrame)
            raise MpinnError("a %s file needs --label COLUMN" % extension(f.path).lstrip(".").upper())
        load = load_parquet if f.format == "parquet" else load_csv
        return load(f.path, spec, hashing)
    if f.format == "npz":
        return load_npz(f.path, spec)
    if f.format == "mat":
        return load_mat(f.path, spec)
    if f.format == "mpinn":     # a packed file, or a multi-part dataset's manifest
        return open_packed(f.path, spec, hashing)
    raise MpinnError("%s: unknown data format %r (use .csv or .csv.gz, .tsv, .parquet, .npz, .mat, .mpinn, or "
                     "click-log text: 40 tab-separated fields a line, maybe .gz)" % (f.path, extension(f.path)))
