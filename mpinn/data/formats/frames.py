"""Rows held in memory by name, as the table source mpinn.data.formats.tables.load_table reads (TableSource's
interface, in one part): a pandas DataFrame (FrameSource: the scikit-learn estimators' and the Predictor's) or a list
of row dicts (DictSource: the Predictor's). Categorical columns become text (a missing cell the empty text, as in a
CSV file), numeric ones float64 (a missing cell NaN: imputed and flagged by the numeric transform)."""
import numbers

import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data.fit.labels import MISSING_TEXT
from mpinn.data.formats.part import Part

_MISSING = frozenset(MISSING_TEXT)


def category_text(column):
    """A categorical column as text, a missing cell the empty text (as in a CSV file). A whole number in a float
    column is written as the integer it is: an integer column that gains a missing value becomes float64 in
    pandas, and 94103.0 must be the category 94103 (scikit-learn's encoders take them as one)."""
    text = column.astype("string").fillna("").to_numpy(dtype=object)
    if column.dtype.kind == "f":
        v = column.to_numpy(dtype=np.float64, na_value=np.nan)
        whole = np.flatnonzero(np.isfinite(v) & (v == np.round(v)) & (np.abs(v) < 2.0 ** 53))
        text[whole] = [str(int(x)) for x in v[whole]]
    return text


class _OnePart:
    """What both sources share: their columns, their one part, no label file's rows dropped."""
    dropped = 0

    def __init__(self, path, part, categorical, numeric, labels):
        self.path, self.part = path, part
        self.categorical, self.numeric, self.has_label = categorical, numeric, labels is not None
        self.meta = {"source": "dataframe", "label": None, "categorical": categorical, "numeric": numeric}

    def parts(self):
        return iter([self.part])


class FrameSource(_OnePart):
    """A DataFrame's columns `categorical` and `numeric` (labels: the rows' raw labels, or None)."""

    def __init__(self, X, categorical, numeric, labels=None):
        missing = [c for c in categorical + numeric if c not in X.columns]
        if missing:
            raise MpinnError("the DataFrame has no column %r, which the model reads (columns: %s)"
                             % (missing[0], ", ".join(map(str, X.columns))[:300]))
        cats = [category_text(X[c]) for c in categorical]
        Xd = None
        if numeric:
            for c in numeric:
                if X[c].dtype.kind not in "iufb":
                    try:
                        X[c].to_numpy(dtype=np.float64, na_value=np.nan)
                    except (TypeError, ValueError):
                        raise MpinnError("the DataFrame's column %r holds %s values, not numbers: the model reads "
                                         "it as numeric" % (c, X[c].dtype)) from None
            Xd = X[numeric].to_numpy(dtype=np.float64, na_value=np.nan)
        super().__init__("the DataFrame", Part(cats, Xd, labels, len(X)), categorical, numeric, labels)


def _cell_text(v):
    """One categorical cell as FrameSource writes its column's: None or NaN the empty text, a whole float the
    integer it is."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)):
        return str(int(v))
    if isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)):
        f = float(v)
        if f != f:
            return ""
        # abs() first: round() of an infinity raises; an infinity is 'inf' or '-inf', as in a DataFrame
        return str(int(f)) if abs(f) < 2.0 ** 53 and f == round(f) else str(f)
    return str(v)


def _cell_number(v, i, c):
    """One numeric cell as a float: None, NaN or a missing text NaN; a number; text that reads as one."""
    if v is None:
        return np.nan
    if isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)):
        return float(v)
    if isinstance(v, str):
        t = v.strip()
        if t in _MISSING:
            return np.nan
        try:
            return float(t)
        except ValueError:
            pass
    raise MpinnError("row %d: column %r holds %r (%s), not a number: the model reads it as numeric"
                     % (i + 1, c, v, type(v).__name__))


class DictSource(_OnePart):
    """Rows as dicts of column name to value (a column the model does not read is ignored)."""

    def __init__(self, rows, categorical, numeric):
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise MpinnError("row %d is a %s, not a dict of column to value" % (i + 1, type(row).__name__))
            for c in categorical + numeric:
                if c not in row:
                    raise MpinnError("row %d has no column %r, which the model reads (it has: %s)"
                                     % (i + 1, c, ", ".join(map(str, row))[:300]))
        cats = [np.array([_cell_text(row[c]) for row in rows], dtype=object) for c in categorical]
        Xd = None
        if numeric:
            Xd = np.array([[_cell_number(row[c], i, c) for c in numeric] for i, row in enumerate(rows)],
                          dtype=np.float64).reshape(len(rows), len(numeric))
        super().__init__("the rows", Part(cats, Xd, None, len(rows)), categorical, numeric, None)
