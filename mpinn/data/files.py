"""The files a data option names, expanded once into a FileSet: each file's path, format, compression and state
(size, time, identity), and the rows the set holds about, asked of it everywhere instead of decided again.

Many data files are read as one: a directory, a glob or several paths, in a stated order. Paths listed keep their
order; a directory's files and a glob's matches go by name, numbers compared as numbers (day_2 before day_10),
which is time order for day and hour files."""
import glob
import os
import re
import zlib
from dataclasses import dataclass
from functools import cached_property

from mpinn.core.errors import MpinnError
from mpinn.data.formats.clicktext import is_click_log
from mpinn.data.formats.names import FORMATS, TABLES, extension, gzipped

STREAM_FROM = 1_000_000     # --stream auto streams table files of more (estimated) rows than this

GLOB_CHARS = "*?["


def natural_key(path):
    """Sort key of a file name: its digit runs compared as numbers, the rest as text."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", os.path.basename(path))] + [path]


def is_many(data):
    """Does `data` (a path, or several) name more than one file, or a directory or a glob?"""
    if isinstance(data, (list, tuple)):
        return len(data) != 1 or is_many(data[0])
    return isinstance(data, str) and (os.path.isdir(data) or any(c in data for c in GLOB_CHARS))


def expand(data):
    """The files `data` names, in order: a file; a directory's files (not hidden, not in subdirectories) by
    name; a glob's matches by name; or a list of any of these, in the order listed. One line naming the entry
    when one names nothing."""
    if isinstance(data, (list, tuple)):
        out = []
        for d in data:
            out.extend(expand(d))
        return out
    if os.path.isdir(data):
        found = [os.path.join(data, n) for n in os.listdir(data)
                 if not n.startswith(".") and os.path.isfile(os.path.join(data, n))]
        if not found:
            raise MpinnError("data directory %s holds no files" % data)
        return sorted(found, key=natural_key)
    if any(c in data for c in GLOB_CHARS):
        found = [p for p in glob.glob(data) if os.path.isfile(p)]
        if not found:
            raise MpinnError("no data file matches %s" % data)
        return sorted(found, key=natural_key)
    if not os.path.exists(data):
        raise MpinnError("data file %s does not exist" % data)
    return [data]


def named(options):
    """(option, path) of every path the input options name, options being (option, given) pairs (given: a file, a
    directory, a glob or a list of them; None: nothing): each given path that exists, and the files it expands
    to. For outputs.check_apart; a missing input is the reader's to report."""
    out = []
    for what, given in options:
        items = list(given) if isinstance(given, (list, tuple)) else [given] if given is not None else []
        items = [g for g in items if isinstance(g, (str, os.PathLike))]        # arrays (the API's) are no file
        try:
            found = expand(items) if items else []
        except MpinnError:
            found = []
        out += [(what, str(g)) for g in items if os.path.exists(str(g))] + [(what, f) for f in found]
    return out


def file_state(path):
    """What says a file is the one seen before: its size, modification time and identity (os.stat); None if it
    cannot be seen (its reader names the problem)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino


def check_unchanged(path, state):
    """One line naming `path` and what changed, when it is not the file file_state() saw (state; None: nothing to
    compare): a stream's rows are those of its files as the run found them, read again each epoch (and held-out
    files at each evaluation)."""
    now = file_state(path)
    if state is None or now == state:
        return
    size = state[0]
    what = ("it was deleted" if now is None else "it was replaced by another file" if now[2:] != state[2:] else
            "it was cut short from %d to %d bytes" % (size, now[0]) if now[0] < size else
            "it grew from %d to %d bytes (rows appended)" % (size, now[0]) if now[0] > size else
            "it was rewritten (same size, modified at another time)")
    raise MpinnError("data file %s changed while it was being read: %s; keep the files a run reads unchanged "
                     "until it ends (copy a growing log, and use the copy)" % (path, what))


def unchanged_parts(source):
    """source.parts(), each checked to come from the file as it was found (source.seen: (path, file_state); none:
    unchecked), and at the end: a file cut short, grown, rewritten or deleted while it is read is one line
    (check_unchanged), before a row read from it after the change is used."""
    seen = getattr(source, "seen", None)

    def check():
        if seen is not None:
            check_unchanged(*seen)
    try:
        for part in source.parts():
            check()
            yield part
    except MpinnError:      # a short last line, a missing file: the change, where that is what happened
        check()
        raise
    check()


def describe(files):
    """'4 files, day_0.tsv.gz .. day_3.tsv.gz' for the start-up line (the first and last, in the order read)."""
    if len(files) == 1:
        return files[0]
    return "%d files, %s .. %s" % (len(files), files[0], files[-1])


def data_format(path, fmt="auto"):
    """The format of a data file: `fmt` when given, else its extension's, with click-log text (the Criteo
    logs' format) told from a CSV by its first line. The one place a file's format is decided."""
    if fmt not in (None, "", "auto"):
        return fmt
    if is_click_log(path):
        return "criteo"
    return FORMATS.get(extension(path), os.path.splitext(path)[1].lower())


@dataclass(frozen=True)
class DataFile:
    """One data file as the run found it: its format (data_format), whether it is gzip-compressed (its name), and
    its state (file_state: size, time, identity; None where it cannot be seen)."""
    path: str
    format: str
    gzip: bool
    state: tuple

    @classmethod
    def of(cls, path, fmt="auto"):
        return cls(path, data_format(path, fmt), gzipped(path), file_state(path))

    @property
    def table(self):
        """Read as a table, in chunks (CSV, Parquet, click-log text): what can be streamed."""
        return self.format in TABLES


class FileSet:
    """The files a data option names (a file, a directory, a glob, a list: expand), in the order read, each a
    DataFile decided once; `given` is what the option said."""

    def __init__(self, files, given=None):
        self.files = list(files)
        self.given = given if given is not None else [f.path for f in self.files]

    @classmethod
    def of(cls, given, fmt="auto"):
        return cls([DataFile.of(p, fmt) for p in expand(given)], given)

    def __len__(self):
        return len(self.files)

    def __iter__(self):
        return iter(self.files)

    def __getitem__(self, i):
        return FileSet(self.files[i]) if isinstance(i, slice) else self.files[i]

    def pick(self, indices):
        """The FileSet of files `indices`, in that order."""
        return FileSet([self.files[i] for i in indices])

    def here(self):
        """The same files as this host finds them (their state now: another host may hold its own copy)."""
        return FileSet([DataFile.of(f.path, f.format) for f in self.files], self.given)

    @property
    def paths(self):
        return [f.path for f in self.files]

    @property
    def formats(self):
        return [f.format for f in self.files]

    @property
    def many(self):
        """Several files (or a directory or a glob, which may name one): read as one table."""
        return len(self.files) > 1 or is_many(self.given)

    def odd(self):
        """The first file that is not a table file (no stream, no reading with others), or None."""
        return next((f.path for f in self.files if not f.table), None)

    @cached_property
    def n_estimate(self):
        """About how many rows the files hold (estimate_rows), estimated once."""
        return estimate_rows(self.paths, self.formats)

    def streams(self, choice):
        """Are these table files streamed (--stream on, off or auto: more than STREAM_FROM estimated rows)? The one
        place the residency of table files is decided."""
        return choice == "on" or (choice != "off" and self.n_estimate > STREAM_FROM)

    def describe(self):
        return describe(self.paths)


def estimate_rows(paths, formats, probe=1 << 20):
    """About how many rows the files hold, without reading them: a Parquet file's metadata; a text file's size
    over the bytes a line takes in its first `probe` bytes (a .gz file's through its compression ratio there)."""
    total = 0.0
    for path, fmt in zip(paths, formats):
        if fmt == "parquet":
            import pyarrow.parquet as pq     # optional: pyarrow reads Parquet alone
            try:
                total += pq.ParquetFile(path).metadata.num_rows
            except Exception:   # noqa: BLE001 - a damaged file: its reader names the problem in one line
                pass
            continue
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read(probe)
        if gzipped(path):
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                text = d.decompress(raw, 4 * probe)
            except zlib.error:      # damaged: its reader names the problem in one line
                text = b""
            used = len(raw) - len(d.unconsumed_tail) - len(d.unused_data)
            size = size * len(text) / max(used, 1)
        else:
            text = raw
        lines = text.count(b"\n")
        if lines == 0:
            total += 1
            continue
        total += max(size / (len(text[:text.rfind(b"\n") + 1]) / lines) - (fmt == "csv"), 0)
    return int(round(total))
