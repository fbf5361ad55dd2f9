"""Data sources, read on rank 0 (or on every rank, for a packed file): load_data picks the reader by extension.

    base       Rows (what the trainer uses of a data set) and Dataset (rows in memory)
    labels     the task and the classes from raw labels
    tables     CSV and Parquet in chunks, hashed (and the embedded click log through the same path)
    clicktext  the Criteo logs' text format (label, I1..I13, C1..C26, tab-separated, maybe gzip), through tables
    clicklog   the embedded synthetic click log
    dense      .npz and .mat files, in-memory arrays
    packed     packed files (python -m mpinn.prepare), read by row through a memory map; packing writes them
    stats      per-column statistics of numeric inputs in one streaming pass (the same bits however chunked)
    transform  the numeric transform fitted from them (log1p, standardise, impute and flag), in the model file
    inputs     what training reads: labels checked, the transform fitted and set, the shapes every rank needs
"""
import os

from mpinn.config import MpinnError
from mpinn.data.base import CHUNK_ROWS, TASKS, Dataset, Rows  # noqa: F401
from mpinn.data.clicktext import SNIFF_EXTS, is_click_text, load_click_text
from mpinn.data.dense import load_mat, load_npz
from mpinn.data.packed import load_packed
from mpinn.data.tables import _split_names, load_csv, load_default, load_parquet  # noqa: F401

TABLE_EXTS = (".csv", ".txt", ".parquet", ".pq")


def data_format(path, fmt="auto"):
    """The format of a data file: `fmt` when given, else its extension's, with click-log text (the Criteo
    logs' format) told from a CSV by its first line."""
    if fmt not in (None, "", "auto"):
        return fmt
    ext = os.path.splitext(path)[1].lower()
    if ext in SNIFF_EXTS and is_click_text(path):
        return "criteo"
    return {".csv": "csv", ".txt": "csv", ".parquet": "parquet", ".pq": "parquet", ".npz": "npz", ".mat": "mat",
            ".mpinn": "mpinn"}.get(ext, ext)


def load_data(path=None, label=None, categorical="", numeric="", hash_bits=18, hash_seed=0,
              task="auto", classes=None, default_rows=200_000, default_seed=0, require_label=True,
              hash_mode="trick", hash_k=4, buckets=None, contract=None, positive=None, exclude=(), fmt="auto"):
    """Dispatch on the format (data_format); no path means the embedded click log. `contract` (a model's
    hashing contract) is used as it is instead of fitting one to the data; `positive` names a binary
    task's positive class (default: the larger label)."""
    if path is None:
        return load_default(default_rows, default_seed, hash_bits, hash_seed, hash_mode, hash_k, buckets,
                            contract)
    if not os.path.exists(path):
        raise MpinnError("data file %s does not exist" % path)
    ext = os.path.splitext(path)[1].lower()
    if data_format(path, fmt) == "criteo":
        return load_click_text(path, label, _split_names(categorical), _split_names(numeric), require_label,
                               task=task, classes=classes, hash_mode=hash_mode, hash_bits=hash_bits,
                               hash_seed=hash_seed, hash_k=hash_k, buckets=buckets, contract=contract,
                               positive=positive)
    if ext in TABLE_EXTS:
        if not label:
            raise MpinnError("a %s file needs --label COLUMN" % ext.lstrip(".").upper())
        load = load_parquet if ext in (".parquet", ".pq") else load_csv
        return load(path, label, _split_names(categorical), _split_names(numeric), hash_bits, hash_seed, task,
                    classes, require_label, hash_mode=hash_mode, hash_k=hash_k, buckets=buckets, contract=contract,
                    positive=positive, exclude=exclude)
    if ext == ".npz":
        return load_npz(path, task, classes, require_label, positive)
    if ext == ".mat":
        return load_mat(path, task, classes, require_label, positive)
    if ext == ".mpinn":
        return load_packed(path, task, classes, contract, positive)
    raise MpinnError("%s: unknown data format %r (use .csv, .parquet, .npz, .mat, .mpinn, or click-log text: "
                     "40 tab-separated fields a line, maybe .gz)" % (path, ext))
