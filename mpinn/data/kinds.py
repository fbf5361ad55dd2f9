"""Which columns of a table are inputs, and of which kind, when the user names none: decided from the first
rows' values. A column whose every value reads as a number is numeric (and, when its values are a few
integers, hashed as categories too: a month, an hour, a rating); any other is categorical (hashed). The
label is never an input, nor is a column that repeats it."""
import math

from mpinn.config import MpinnError
from mpinn.data import csvtext

SAMPLE_ROWS = 10_000     # rows looked at
FEW_INTEGERS = 20        # an integer column with at most this many values is numeric and categorical


def _parsed(values, missing):
    """(every present value is a number, [those numbers])."""
    out = []
    for v in values:
        t = v.strip()
        if t in missing:
            continue
        try:
            x = float(t)
        except ValueError:
            return False, None
        out.append(x)
    return True, out


def infer(header, columns, label, missing):
    """(categorical, numeric, notes) for a table whose sampled columns are {name: [raw text]}: every
    column but the label (see the module docstring). notes: one line on what was chosen."""
    categorical, numeric, both, empty = [], [], [], []
    for name in header:
        if name == label:
            continue
        ok, nums = _parsed(columns[name], missing)
        if ok and not nums:
            empty.append(name)          # no value at all in the rows looked at: left out
            continue
        if not ok:
            categorical.append(name)
            continue
        numeric.append(name)
        if all(math.isfinite(x) and x == math.floor(x) for x in nums) and len(set(nums)) <= FEW_INTEGERS:
            categorical.append(name)
            both.append(name)
    notes = "columns chosen from the first %d rows' values (name them with --categorical/--numeric): %d " \
            "numeric (%s), %d categorical, hashed (%s)" % (
                min(SAMPLE_ROWS, len(columns[header[0]]) if header else 0), len(numeric), _names(numeric),
                len(categorical), _names(categorical))
    if both:
        notes += "; %s, a few integers, both" % _names(both)
    if empty:
        notes += "; left out, no values: %s" % _names(empty)
    return categorical, numeric, notes


def check_not_label(columns, label, inputs, path):
    """Refuse an input that is the label or repeats it on every row looked at (the model would read its
    answer: a held-out AUC of 1.0 that means nothing)."""
    for name in inputs:
        if name == label:
            raise MpinnError("%s: the label column %r is also named as an input: leave it out of "
                             "--categorical/--numeric" % (path, label))
    if label not in columns or not columns[label]:
        return
    target = columns[label]
    for name in dict.fromkeys(inputs):
        if name in columns and columns[name] == target:
            raise MpinnError("%s: the input column %r repeats the label %r on every one of the first %d rows: "
                             "leave it out (a model that reads its answer learns nothing)"
                             % (path, name, label, len(target)))


def sample_csv(path, header, header_lines=1):
    """{name: [raw text of the first SAMPLE_ROWS rows]} of a CSV file (rows with a wrong field count are
    the reader's to refuse; here they are skipped)."""
    columns = {h: [] for h in header}       # a name given twice: its first column's values
    first = {h: header.index(h) for h in columns}
    with csvtext.open_text(path) as f:
        reader = csvtext.reader(f, path)
        try:
            for _ in range(header_lines):
                next(reader)
            rows = 0
            for row in reader:
                if len(row) != len(header):
                    continue
                for h, j in first.items():
                    columns[h].append(row[j])
                rows += 1
                if rows >= SAMPLE_ROWS:
                    break
        except csvtext.READ_ERRORS + (StopIteration, csvtext.LineTooLong):
            pass        # the reader names the line
    return columns


def sample_parquet(pf, header):
    """The same for a Parquet file: its first rows, as text (a null as empty)."""
    import pyarrow as pa
    batch = next(pf.iter_batches(batch_size=SAMPLE_ROWS), None)
    columns = {}
    for h in header:
        if batch is None:
            columns[h] = []
            continue
        col = batch.column(batch.schema.get_field_index(h))
        numeric = pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_boolean(col.type)
        values = col.to_pylist()
        if numeric:
            columns[h] = ["" if v is None else repr(float(v)) for v in values]
        else:
            columns[h] = ["" if v is None else "\x00" + str(v) for v in values]   # never a number
    return columns


def names_shown(names, at_most=6):
    """The first `at_most` names, each cut to 40 characters, and how many more: a bounded part of a message."""
    shown = [n if len(n) <= 40 else n[:37] + "..." for n in names[:at_most]]
    return ", ".join(map(repr, shown)) + (" and %d more" % (len(names) - at_most) if len(names) > at_most else "") \
        if names else "none"


def _names(names, at_most=6):
    return ", ".join(names[:at_most]) + (" and %d more" % (len(names) - at_most) if len(names) > at_most else "") \
        if names else "none"
