"""Command-line plumbing shared by the entry points: the parser that speaks on rank 0 only and exits 2 with
one line, and the argument types. The training options themselves are a table: mpinn.settings."""
import argparse
import difflib

from mpinn.core.errors import MpinnError
from mpinn.data.fit import bins
from mpinn.host.launch import launched_ranks
from mpinn.model import periodic


def _files(given):
    """Files given one after another: none None, one its path, several a tuple (read as one, in order)."""
    return None if not given else given[0] if len(given) == 1 else tuple(given)


class Parser(argparse.ArgumentParser):
    """argparse that speaks on rank 0 only and exits 2 on every rank for a bad option. An option is its whole
    name (--epoch is not --epochs, as in a --config file): a prefix would change meaning as options are added."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _print_message(self, message, file=None):
        if launched_ranks()[0] == 0:
            super()._print_message(message, file)

    raise_errors = False    # the Python API wants an exception, not an exit

    def parse_known_args(self, args=None, namespace=None):
        """The data file may be given as --data FILE (the documented form, as in predict and prepare)
        or as the first positional argument (several positional files are read as one, in that order: a
        tuple): one `data` either way, and both at once is an error."""
        ns, rest = super().parse_known_args(args, namespace)
        for name in ("data", "valid"):      # --data a.csv b.csv (nargs="+")
            if isinstance(getattr(ns, name, None), list):
                setattr(ns, name, _files(getattr(ns, name)))
        unknown = [a.split("=", 1)[0] for a in rest if a.startswith("-") and a not in ("-", "--")]
        if unknown:     # named before anything else: its value may have been taken for the data file
            close = difflib.get_close_matches(unknown[0], [o for o in self._option_string_actions
                                                           if o.startswith("--")], n=1, cutoff=0.75)
            self.error("unknown option %s%s" % (unknown[0], " (did you mean %s?)" % close[0] if close else ""))
        if hasattr(ns, "data_positional"):
            given = ns.__dict__.pop("data_positional")
            if isinstance(given, list):
                given = _files(given)
            if given is not None:
                if getattr(ns, "data", None) is not None and ns.data != given:
                    self.error("the data file is given twice (%s and --data %s): give one" % (given, ns.data))
                ns.data = given
        return ns, rest

    def error(self, message):
        """One line, not a usage wall."""
        if self.raise_errors:
            raise MpinnError("%s (see %s --help)" % (message, self.prog))
        self.exit(2, "mpinn: error: %s (see %s --help)\n" % (message, self.prog))


def _number(kind, s, wanted):
    """int(s) or float(s), text that is neither refused in the words of the range wanted."""
    try:
        return kind(s)
    except ValueError:
        raise argparse.ArgumentTypeError("%s, not %s" % (wanted, s))


def positive_int(s):
    v = _number(int, s, "must be a positive integer")
    if v <= 0:
        raise argparse.ArgumentTypeError("must be a positive integer, not %s" % s)
    return v


def nonneg_int(s):
    v = _number(int, s, "must be >= 0")
    if v < 0:
        raise argparse.ArgumentTypeError("must be >= 0, not %s" % s)
    return v


def stale_depth(s):
    """--stale-rows: 0, 1 or 2."""
    if str(s).strip() not in ("0", "1", "2"):
        raise argparse.ArgumentTypeError("must be 0, 1 or 2, not %s" % s)
    return int(s)


def hash_seed(s):
    """--hash-seed: xxh64's seed, an unsigned 64-bit number (xxhash takes any integer modulo 2^64, so -1 and 2^64 - 1
    would be one seed under two names)."""
    v = _number(int, s, "must be in 0..2^64-1")
    if not 0 <= v < 1 << 64:
        raise argparse.ArgumentTypeError("must be in 0..2^64-1, not %s" % s)
    return v


def hot_rows_spec(s):
    """--hot-rows: auto, off, or a number of rows (0 is off)."""
    if s in ("auto", "off"):
        return s
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError("must be auto, off or a number of rows, not %s" % s)
    if v < 0:
        raise argparse.ArgumentTypeError("must be auto, off or a number of rows >= 0, not %s" % s)
    return "off" if v == 0 else str(v)


def positive_float(s):
    v = _number(float, s, "must be a positive number")
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number, not %s" % s)
    return v


def nonneg_float(s):
    v = _number(float, s, "must be >= 0")
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError("must be >= 0, not %s" % s)
    return v


def hidden_sizes(s):
    """Comma-separated positive widths ('64,32'); '' (or blanks) for none, a linear model. An empty width
    between commas ('64,,32', '64,') is refused rather than dropped: the model would not be the one typed."""
    if not s.strip():
        return ()
    try:
        sizes = tuple(int(x) for x in s.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma-separated widths such as 64,32 ('' for a linear model), "
                                         "not %r" % s)
    if any(h <= 0 for h in sizes):
        raise argparse.ArgumentTypeError("layer widths must be positive")
    return sizes


def split_holdout_by(s):
    """(kind, column) of a --holdout-by value (random, last, time:COLUMN, group:COLUMN): the one place it is read."""
    kind, _, column = s.partition(":")
    return kind, column.strip()


def holdout_by(s):
    """random, last, time:COLUMN or group:COLUMN."""
    kind, column = split_holdout_by(s)
    if s in ("random", "last") or (kind in ("time", "group") and column):
        return s if s in ("random", "last") else "%s:%s" % (kind, column)
    raise argparse.ArgumentTypeError("expected random, last, time:COLUMN or group:COLUMN, not %r" % s)


def class_list(s):
    """--classes: two or more distinct labels, comma-separated, normalised ('a, b,c' -> 'a,b,c')."""
    names = [c.strip() for c in s.split(",")]
    if len(names) < 2 or "" in names:
        raise argparse.ArgumentTypeError("wants two or more labels, comma-separated, not %r" % (s,))
    twice = sorted({c for c in names if names.count(c) > 1})
    if twice:
        raise argparse.ArgumentTypeError("names %s twice" % ", ".join(twice))
    return ",".join(names)


def numeric_embedding(s):
    """--numeric-embedding: auto, off, periodic or periodic:SIGMA (a positive number), normalised."""
    choice = periodic.parse(s)
    if choice is None:
        raise argparse.ArgumentTypeError("wants auto, off, periodic or periodic:SIGMA (a positive number), not %r"
                                         % (s,))
    return choice


def readers_value(s):
    """--readers: 1, all or a number of readers; kept as the text given (a number as its digits)."""
    if s == "all":
        return s
    try:
        k = int(s)
    except ValueError:
        k = 0
    if k < 1:
        raise argparse.ArgumentTypeError("wants 1, all or a number of reading ranks, not %r" % s)
    return str(k)


def numeric_bins(s):
    """--numeric-bins: auto, off or 2..64 bins per column; kept as the text given."""
    try:
        return str(bins.parse(s))
    except MpinnError as e:
        raise argparse.ArgumentTypeError(str(e).replace("--numeric-bins ", "", 1))


def add_data_argument(group, help):
    """--data FILE, the documented form, and the same file as an optional first positional argument
    (Parser.parse_known_args makes them one `data`)."""
    group.add_argument("--data", metavar="FILE", nargs="+", help=help + "; several files, a directory or a quoted "
                       "glob: read as one, in order")
    group.add_argument("data_positional", nargs="*", metavar="FILE", help="the same as --data FILE")
