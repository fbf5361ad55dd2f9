"""Dates and times as the readers give them (text, or a Parquet file's values): recognised, and read as seconds
so that a time holdout holds out the truly last rows (`1/10/2017` after `1/7/2017`, which text order reverses)."""
import datetime as dt
import re

import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data.fit.labels import MISSING_TEXT

MISSING = frozenset(MISSING_TEXT)
READ = "ISO 2026-11-25 or 2026-11-25T13:45:00Z, YYYY/MM/DD, M/D/YYYY (or D/M/YYYY), D.M.YYYY, epoch seconds"
_EPOCH = dt.date(1970, 1, 1).toordinal()
_CLOCK = r"(?:[T ]\s*(\d{1,2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?)?"
_ZONE = r"\s*(Z|[+-]\d{2}(?::?\d{2})?)?"
_AMPM = r"\s*([AaPp][Mm])?"
# each format: its name, and a pattern whose groups are the date's three parts as written, then the clock
# (hours, minutes, seconds, fraction) and the zone or AM/PM
_FORMATS = (
    ("ISO", re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})" + _CLOCK + _ZONE + "$")),
    ("YYYY/MM/DD", re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2})" + _CLOCK + _ZONE + "$")),
    ("M/D/YYYY", re.compile(r"(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})" + _CLOCK + _AMPM + "$")),
    ("D.M.YYYY", re.compile(r"(\d{1,2})\.(\d{1,2})\.(\d{4})" + _CLOCK + "()$")),
)


class NotTime(ValueError):
    """A value, or a column, that is not dates or times in one format (the message says which and why)."""


def _fields(text):
    """(format name, its regex groups) of one text value, or None."""
    for name, pattern in _FORMATS:
        m = pattern.match(text)
        if m:
            return name, m.groups()
    return None


def _year(y):
    """A two-digit year as strptime's %y reads it: 69-99 are 1969-1999, 00-68 are 2000-2068."""
    return int(y) + (0 if len(y) == 4 else 1900 if int(y) >= 69 else 2000)


def _seconds(fmt, g, day_first):
    """Seconds since 1970-01-01 UTC (a value without a zone taken as UTC) of one value's groups."""
    a, b, c, hh, mm, ss, frac, tail = g
    if fmt in ("ISO", "YYYY/MM/DD"):
        y, mo, d = int(a), int(b), int(c)
    elif day_first:
        y, mo, d = _year(c), int(b), int(a)
    else:
        y, mo, d = _year(c), int(a), int(b)
    hour, minute, sec = int(hh or 0), int(mm or 0), int(ss or 0)
    if tail and tail[0] in "AaPp":          # 12 AM is midnight, 12 PM noon
        if not 1 <= hour <= 12:
            raise ValueError("hour %d with %s" % (hour, tail))
        hour = hour % 12 + (12 if tail[0] in "Pp" else 0)
    day = dt.date(y, mo, d).toordinal()         # refuses 2/30, month 13
    dt.time(hour, minute, sec)                  # refuses 24:00, 13:61
    out = (day - _EPOCH) * 86400.0 + hour * 3600 + minute * 60 + sec + (float("0." + frac) if frac else 0.0)
    if tail and tail[0] in "+-":
        digits = tail[1:].replace(":", "")
        offset = int(digits[:2]) * 3600 + int(digits[2:4] or 0) * 60
        out -= offset if tail[0] == "+" else -offset
    return out


def _object_seconds(v):
    """Seconds of a Parquet value: a datetime (naive taken as UTC) or a date; None for anything else."""
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            return v.timestamp()
        return (v.toordinal() - _EPOCH) * 86400.0 + v.hour * 3600 + v.minute * 60 + v.second + v.microsecond / 1e6
    if isinstance(v, dt.date):
        return (v.toordinal() - _EPOCH) * 86400.0
    return None


def _number(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def seconds(values):
    """(keys, format): every value as seconds since 1970 UTC (-inf where missing; numbers, such as epoch seconds,
    as they are) and the format read ('numbers', 'ISO', 'M/D/YYYY', 'D/M/YYYY', ...). Raises NotTime for a value
    that is none of them, a column that mixes formats, or slashed dates that read day first in one row and month
    first in another."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iufb":
        keys = values.astype(np.float64)
        keys[np.isnan(keys)] = -np.inf
        return keys, "numbers"
    cache, keys, kinds, first = {}, np.empty(len(values), np.float64), {}, {}
    parsed = []                 # (row, (format, groups)) of the dates written as text, read once the order is known
    for i, v in enumerate(values):
        if v is None or isinstance(v, str) and v.strip().lstrip("\x00") in MISSING:
            keys[i] = -np.inf
            continue
        s = _object_seconds(v)
        if s is not None:
            keys[i], kind = s, "dates"
        elif (s := _number(v)) is not None:
            if s != s:                  # NaN: a missing number
                keys[i] = -np.inf
                continue
            keys[i], kind = s, "numbers"
        else:
            text = str(v).strip().lstrip("\x00")
            got = cache.get(text)
            if got is None:
                got = cache[text] = _fields(text) or ("", None)
            if got[1] is None:
                raise NotTime("%r (data row %d) is not a date or time" % (str(v), i + 1))
            kind = got[0]
            parsed.append((i, got))
        kinds[kind] = kinds.get(kind, 0) + 1
        first.setdefault(kind, v)
    if len(kinds) > 1:
        (k1, _), (k2, _) = sorted(kinds.items(), key=lambda kv: -kv[1])[:2]
        raise NotTime("it mixes formats: %r (%s) and %r (%s)" % (str(first[k1]), k1, str(first[k2]), k2))
    fmt = next(iter(kinds), "numbers")
    day_first = fmt == "D.M.YYYY"
    if fmt == "M/D/YYYY":
        over_first = next((g for _, (_, g) in parsed if int(g[0]) > 12), None)
        over_second = next((g for _, (_, g) in parsed if int(g[1]) > 12), None)
        if over_first and over_second:
            raise NotTime("%s reads day first and %s month first" % ("/".join(over_first[:3]),
                                                                      "/".join(over_second[:3])))
        day_first = over_first is not None
        fmt = "D/M/YYYY" if day_first else fmt
    done = {}
    for i, (_, g) in parsed:
        s = done.get(g)
        if s is None:
            try:
                s = done[g] = _seconds(fmt, g, day_first)
            except ValueError:
                raise NotTime("%r (data row %d) is not a date or time" % (str(values[i]), i + 1))
        keys[i] = s
    return keys, fmt


def sort_keys(values, column=None):
    """Comparable keys of a --holdout-by time column (see seconds()); a column that is not times in one format is
    one line naming it (MpinnError)."""
    try:
        return seconds(values)[0]
    except NotTime as e:
        where = "--holdout-by time:%s" % column if column else "the --holdout-by time column"
        raise MpinnError("%s: %s; mpinn reads %s" % (where, e, READ)) from None


def detect(values):
    """The format of a sampled text column whose every present value is a date or time (never plain numbers:
    those are told apart by name, see mpinn.data.formats.kinds), else None."""
    present = [v for v in values if v.strip().lstrip("\x00") not in MISSING]
    if not present:
        return None
    try:
        _, fmt = seconds(present)
    except NotTime:
        return None
    return None if fmt == "numbers" else fmt


def in_epoch_range(nums):
    """Every number reads as epoch seconds (1973 to 2096) or milliseconds (the same years)."""
    lo, hi = min(nums), max(nums)
    return 1e8 <= lo and hi <= 4e9 or 1e11 <= lo and hi <= 4e12
