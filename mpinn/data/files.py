"""Many data files read as one: a directory, a glob or several paths, in a stated order. Paths listed keep their
order; a directory's files and a glob's matches go by name, numbers compared as numbers (day_2 before day_10),
which is time order for day and hour files."""
import glob
import os
import re

from mpinn.core.errors import MpinnError

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
