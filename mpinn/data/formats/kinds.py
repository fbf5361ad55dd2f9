"""Which columns of a table are inputs, and of which kind, when the user names none: decided from the first
rows' values. A column whose every value reads as a number is numeric (and, when its values are a few
integers, hashed as categories too: a month, an hour, a rating); an integer column that names things (an id) is
hashed as categories, or both where only its values say so; a column of dates or times is left out (it is for
--holdout-by time:COLUMN); any other is categorical (hashed). The label is never an input, nor is a column that
repeats it."""
import math
import re

import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data.formats import csvtext, times

SAMPLE_ROWS = 10_000     # rows looked at
FEW_INTEGERS = 20        # an integer column with at most this many values is numeric and categorical
REPEATED = 0.25          # an integer column with fewer rows than this share on a value seen twice is a key, not ids
ROUGH = 2.0              # counts this far from their neighbours' (a chi-square per value) are not a smooth density
SMOOTH = 0.25            # ... unless neighbouring values' log-counts correlate at least this much
ID_WORDS = ("id", "ids", "uid", "uuid", "guid")              # a name's first or last word: an id
CODE_WORDS = ("code", "zip", "zipcode", "fips", "postcode")   # ... or ids in all but the name (and a name *id)
TIME_WORDS = ("time", "date", "ts", "timestamp", "datetime", "epoch")


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


def _words(name):
    """A column's name as lowercase words: userId, user_id and USER-ID are ['user', 'id']."""
    return [w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", name)]


def _rough(values, counts):
    """Whether an integer column's counts jump from value to value as ids' do, where a magnitude's follow a
    smooth density (age, a count) or spike at round numbers (hours worked, a scheduled minute)."""
    k = len(counts)
    c = counts.astype(np.float64)
    pad = np.concatenate([[np.nan] * 2, c, [np.nan] * 2])
    near = np.nanmean(np.stack([pad[i:i + k] for i in (0, 1, 3, 4)]), axis=0)    # two neighbours each side
    spread = float(np.mean((c - near) ** 2 / (near + 1)))       # ~1 where counts are a smooth density's, and noise
    logs = np.log(c)
    follow = float(np.corrcoef(logs[:-1], logs[1:])[0, 1]) if logs.std() > 0 else 0.0
    spikes = c > 3 * near + 3 * np.sqrt(near) + 2
    round_ = values % 5 == 0
    at_round = c[spikes & round_].sum() / max(c[spikes].sum(), 1)
    rounded = spikes.any() and at_round >= 0.6 and at_round > round_.mean() + 0.3     # people round amounts
    return spread >= ROUGH and follow < SMOOTH and not rounded


def integer_kind(name, nums):
    """How an integer column of more than FEW_INTEGERS values enters: 'time' (epoch seconds, by name), 'key'
    (values that hardly repeat: numeric, as a category it would never be seen again), 'id' (by name:
    categorical), 'id?' (by its values, or a name that may say id: both), or 'numeric'."""
    words = _words(name)
    if set(words) & set(TIME_WORDS) and times.in_epoch_range(nums):
        return "time"
    values, counts = np.unique(np.asarray(nums), return_counts=True)
    if counts[counts > 1].sum() < REPEATED * len(nums):
        return "key"
    if words and (words[0] in ID_WORDS or words[-1] in ID_WORDS):
        return "id"
    if words and (words[-1] in CODE_WORDS or words[-1].endswith("id")):
        return "id?"
    return "id?" if values[0] >= 0 and _rough(values, counts) else "numeric"


def infer(header, columns, label, missing):
    """(categorical, numeric, notes) for a table whose sampled columns are {name: [raw text]}: every
    column but the label (see the module docstring). notes: one line on what was chosen, the doubtful
    choices said."""
    categorical, numeric, empty = [], [], []
    said = {"both": [], "id": [], "id?": [], "time": [], "key": []}
    for name in header:
        if name == label:
            continue
        ok, nums = _parsed(columns[name], missing)
        if ok and not nums:
            empty.append(name)          # no value at all in the rows looked at: left out
            continue
        if not ok:
            if times.detect(columns[name]):
                said["time"].append(name)
            else:
                categorical.append(name)
            continue
        if not all(math.isfinite(x) and x == math.floor(x) for x in nums):
            numeric.append(name)
            continue
        kind = "both" if len(set(nums)) <= FEW_INTEGERS else integer_kind(name, nums)
        if kind == "time":
            said["time"].append(name)
            continue
        if kind != "id":
            numeric.append(name)
        if kind in ("both", "id", "id?"):
            categorical.append(name)
        if kind in said and (kind != "key" or _says_key(name, nums)):
            said[kind].append(name)
    notes = "columns chosen from the first %d rows' values (name them with --categorical/--numeric): %d " \
            "numeric (%s), %d categorical, hashed (%s)" % (
                min(SAMPLE_ROWS, len(columns[header[0]]) if header else 0), len(numeric), _names(numeric),
                len(categorical), _names(categorical))
    for kind, line in (("both", "%s, a few integers, both"),
                       ("id", "%s: integers taken as ids (categorical)"),
                       ("id?", "%s: integers that may be ids, numeric and categorical (doubtful)"),
                       ("time", "%s: dates or times, left out (for --holdout-by time:%s)"),
                       ("key", "%s: integers that hardly repeat (a row number or key?), numeric (doubtful)")):
        if said[kind]:
            notes += "; " + (line % (_names(said[kind]), said[kind][0]) if kind == "time"
                             else line % _names(said[kind]))
    if empty:
        notes += "; left out, no values: %s" % _names(empty)
    return categorical, numeric, notes


def _says_key(name, nums):
    """Whether a key is worth a word: its name says id, or its values count rows (1, 2, 3, ...)."""
    words = _words(name)
    return bool(words) and (words[0] in ID_WORDS or words[-1] in ID_WORDS) or \
        max(nums) - min(nums) + 1 == len(set(nums)) == len(nums)


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
    import pyarrow as pa  # optional: pyarrow
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
