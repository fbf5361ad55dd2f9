"""Labels: the task (binary, multiclass, regression) and the classes, from raw label values."""
import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.hashing import factorize

# cells that mean "missing" (after stripping spaces): a numeric input's are imputed and flagged, a label's
# are refused; pyarrow's CSV reader is given the same list
MISSING_TEXT = ("", "NA", "N/A", "n/a", "na", "NaN", "nan", "-NaN", "-nan", "NULL", "null", "None", "none",
                "#N/A", "?")
_MISSING = frozenset(MISSING_TEXT)
# a regression label beyond this magnitude is refused: the model learns the labels standardised and is scored on
# their squared errors, and beyond it their moments overflow float64 (1e300: "std inf", "rmse inf")
MAX_REGRESSION_LABEL = 1e100


def missing_labels(raw):
    """A mask of the labels that are missing (a missing cell, None, NaN) or not finite."""
    raw = np.asarray(raw).ravel()
    if raw.dtype.kind in "iub":
        return np.zeros(raw.shape[0], bool)
    if raw.dtype.kind == "f":
        return ~np.isfinite(raw)
    # text or mixed: each distinct value is looked at once (factorize's tokens: None and NaN are '', a number its
    # text), then rows are mapped through the codes; a loop over the rows took 0.32 s for 2M labels, this 0.06
    codes, keys = factorize(raw)
    bad = np.array([k.strip() in _MISSING or k.strip().lower() in ("inf", "-inf", "+inf") for k in keys], bool)
    return bad[codes]


def check_labels_present(raw, offset=0):
    """Refuse a label that is missing or not finite: it cannot be imputed, and it must never change the
    task (one NaN among 0/1 would make a regression, one empty cell a third class). offset: the row number
    of raw[0] in the file."""
    bad = missing_labels(raw)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        value = np.asarray(raw).ravel()[first]
        value = value.item() if isinstance(value, np.generic) else value
        raise MpinnError("the label is missing or not a number in %d of %d rows (the first is data row %d, "
                         "value %r): remove those rows or fill their labels (of a CSV, Parquet, .npz or .mat file, mpinn.train "
                         "--missing-labels drop leaves them out)" % (
                             int(bad.sum()), bad.shape[0], offset + first + 1, value))


def plain_labels(raw):
    """Raw labels as numbers or text: bytes (a .npz's S array, a Parquet binary column) decoded as UTF-8; complex
    numbers refused."""
    raw = np.asarray(raw).ravel()
    if raw.dtype.kind == "c":
        raise MpinnError("the labels are complex numbers (%s); a label is a real number or text" % raw.dtype)
    if raw.dtype.kind == "S" or (raw.dtype == object and any(isinstance(v, bytes) for v in raw)):
        raw = np.array([v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in raw], dtype=object)
    return raw


def regression_labels(raw):
    """Numeric labels as a regression's float64 targets, each at most MAX_REGRESSION_LABEL in magnitude."""
    y = raw.astype(np.float64)
    big = np.abs(y) > MAX_REGRESSION_LABEL
    if big.any():
        raise MpinnError("the label reaches %g (%d rows beyond %g): a regression label is at most %g in magnitude; "
                         "rescale it (a log, or another unit)" % (
                             y[np.argmax(np.abs(y))], int(big.sum()), MAX_REGRESSION_LABEL, MAX_REGRESSION_LABEL))
    return y


def binary_classes(classes, positive=None):
    """The two classes in the order [negative, positive]: the positive class is `positive` when given
    (--positive-class), else the larger of the two (1 of 0/1, yes of no/yes, '>50K' of '<=50K'/'>50K')."""
    classes = list(classes)
    if positive is None or positive == "":
        return classes
    positive = _label_str(positive)
    if positive not in classes:
        raise MpinnError("--positive-class %s is not one of the two labels %s" % (positive, classes))
    return [c for c in classes if c != positive] + [positive]


# integer labels: up to this many distinct values are classes whatever they are (ratings 1-5, digits 0-9)
FEW_CLASSES = 10
MAX_CLASSES = 1000
# beyond FEW_CLASSES, values far apart (filling less than half of their range) are codes when each repeats: on
# average in at least this many rows (a product category 101, 205, 310; not a price in whole dollars)
CODE_ROWS = 20
# ... and when there are at most this many of them: more, far apart and repeating, are amounts in brackets or
# rounded (the General Social Survey's incomes, 483 to 201,640 dollars: 210 values in 12,373 rows), not classes
MAX_CODES = 100


def integer_task(distinct, rows):
    """multiclass or regression for labels that are integers, of more than two sorted `distinct` values over
    `rows` rows. Classes: a few values; ids from 0 or 1 (0..k-1 or 1..k, a tenth of them at most absent); codes
    far apart, each in many rows, up to MAX_CODES of them. Numbers: a score, a count or an amount whose values fill
    most of their range (inspection scores 66..100, disease progression 25..346), values far apart that hardly
    repeat (prices), or more than MAX_CODES of them (incomes in brackets)."""
    k = len(distinct)
    if k <= FEW_CLASSES:
        return "multiclass"
    if k > MAX_CLASSES:
        return "regression"
    low, high = float(distinct[0]), float(distinct[-1])
    if low in (0.0, 1.0) and k >= 0.9 * (high - low + 1):      # ids from 0 or 1, a few perhaps absent here
        return "multiclass"
    if k >= 0.5 * (high - low + 1):
        return "regression"
    return "multiclass" if k <= MAX_CODES and rows >= CODE_ROWS * k else "regression"


def task_note(task, classes, y=None):
    """What the start-up line adds where --task auto decided integer labels of more than FEW_CLASSES values
    (a doubtful call either way); '' otherwise. y: the regression's labels, when in memory."""
    if task == "multiclass" and len(classes) > FEW_CLASSES and all(c.lstrip("-").isdigit() for c in classes):
        return " (%d integer labels taken as classes: --task regression for numbers)" % len(classes)
    if task == "regression" and y is not None and len(y):
        distinct = np.unique(y)
        if len(distinct) <= MAX_CLASSES and np.all(np.mod(distinct, 1) == 0):
            return " (%d integer labels, %s to %s, taken as numbers: --task multiclass for classes)" % (
                len(distinct), _label_str(distinct[0]), _label_str(distinct[-1]))
    return ""


def labelled(y):
    """The rows of encoded labels y that have one (unlabelled=True reads a missing label as NaN, or as -1 for a
    multiclass id)."""
    y = np.asarray(y)
    return ~np.isnan(y) if y.dtype.kind == "f" else y >= 0


def encode_labels(raw, task="auto", classes=None, positive=None, rows=None, unlabelled=False):
    """(y, task, classes). Multiclass labels become ids 0..k-1 in the order of `classes`; binary ones
    0/1, 1 for classes[1] (the positive class). Any two distinct values make a binary task; integers, see
    integer_task (rows: how many labels `raw` stands for, when it is only their distinct values). A missing
    or non-finite label is refused; with unlabelled=True and the task known (the classes given, or a regression),
    it is read as unknown: NaN, or -1 for a multiclass id (labelled() tells them)."""
    raw = plain_labels(raw)
    if unlabelled and (classes is not None or task == "regression"):
        missing = missing_labels(raw)
        if missing.any():
            y, task, classes = encode_labels(raw[~missing], task, classes, positive)
            out = np.full(raw.shape[0], -1 if y.dtype.kind == "i" else np.nan, dtype=y.dtype)
            out[~missing] = y
            return out, task, classes
    check_labels_present(raw)
    numeric = raw.dtype.kind in "iufb"
    if not numeric:
        try:
            raw_num = raw.astype(np.float64)
            numeric, raw = True, raw_num
        except (ValueError, TypeError):
            pass
    if classes is None:
        if task == "auto":
            if numeric:
                distinct = np.unique(raw)
                # an integer past 2^53 cannot be told from a float's rounding: 1e300s are not classes
                with np.errstate(invalid="ignore"):       # an inf label: refused below, in one line
                    integral = np.all(np.mod(distinct, 1) == 0) and np.all(np.abs(distinct) < 2.0 ** 53)
                task = "binary" if len(distinct) == 2 else integer_task(distinct, rows or raw.shape[0]) \
                    if integral else "regression"
        if task == "regression":
            if not numeric:
                raise MpinnError("regression needs numeric labels")
            return regression_labels(raw), task, None
        if task == "auto":      # text labels: two values are a binary task, more a multiclass one
            task = "binary" if len(np.unique(raw)) == 2 else "multiclass"
        classes = [_label_str(c) for c in np.unique(raw)]
        if task == "binary":
            if len(classes) != 2:
                raise MpinnError("binary task needs exactly 2 label values, found %d" % len(classes))
            classes = binary_classes(classes, positive)
    if task == "regression":
        if not numeric:
            raise MpinnError("regression needs numeric labels")
        return regression_labels(raw), task, None
    # each distinct label is looked up once, then rows are mapped through the codes
    if numeric:
        uniques, codes = np.unique(raw, return_inverse=True)
        keys = [_label_str(u) for u in uniques.tolist()]
        codes = codes.ravel()
    else:
        codes, keys = factorize(raw)
        keys = [str(k) for k in keys]
    lookup = {c: i for i, c in enumerate(classes)}
    bad = [k for k in keys if k not in lookup]
    if bad:
        raise MpinnError("label %r is not one of the model's classes %s" % (bad[0], classes[:10]))
    ids = np.array([lookup[k] for k in keys], dtype=np.int64)[codes] if len(keys) else np.zeros(0, np.int64)
    if task == "binary":
        return ids.astype(np.float64), task, classes
    return ids, task, classes


def _label_str(v):
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


class LabelScan:
    """The task and classes of labels seen chunk by chunk (what encode_labels decides on all of them
    at once), keeping only their distinct values."""
    MAX_NUMBERS = MAX_CLASSES + 1       # more distinct numbers than this: regression, whatever else comes
    MAX_TEXTS = 100_000

    def __init__(self, task="auto", positive=None):
        self.task, self.numeric, self.positive = task, True, positive
        self.numbers, self.texts = set(), set()
        self.many_numbers = self.many_texts = False
        self.seen = 0       # labels seen

    def update(self, raw):
        raw = plain_labels(raw)
        check_labels_present(raw, self.seen)
        self.seen += raw.shape[0]
        if not self.many_texts:
            _, keys = factorize(raw) if raw.dtype.kind not in "iufb" else (None, [])
            self.texts.update(str(k) for k in keys)
            self.many_texts = len(self.texts) > self.MAX_TEXTS
        if self.numeric:
            try:
                nums = raw.astype(np.float64)
            except (ValueError, TypeError):
                self.numeric = False
                return
            if not self.many_numbers:
                self.numbers.update(np.unique(nums).tolist())
                self.many_numbers = len(self.numbers) > self.MAX_NUMBERS

    def result(self):
        """(task, classes)."""
        if self.numeric:
            if self.many_numbers:
                if self.task not in ("auto", "regression"):
                    raise MpinnError("--task %s: the labels hold more than %d distinct numbers"
                                     % (self.task, self.MAX_NUMBERS - 1))
                return "regression", None
            _, task, classes = encode_labels(np.array(sorted(self.numbers), dtype=np.float64), self.task,
                                             positive=self.positive, rows=self.seen)
            return task, classes
        if self.many_texts:
            raise MpinnError("the labels hold more than %d distinct values" % self.MAX_TEXTS)
        _, task, classes = encode_labels(np.array(sorted(self.texts), dtype=object), self.task,
                                         positive=self.positive)
        return task, classes
