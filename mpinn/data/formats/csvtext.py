"""The text of a CSV file (or of tab-separated values: separator): opened as UTF-8 (a byte-order mark skipped),
read a line at a time with each line bounded to MAX_LINE characters (a header line of a gigabyte is one error, not
a gigabyte of fields in memory), and a byte that is not UTF-8 named at its own line (the decoder reads ahead in
blocks, so the line the csv module is on when it fails can be an earlier one)."""
import csv
import gzip
import zlib

from mpinn.core.errors import MpinnError
from mpinn.data.formats.names import gzipped

MAX_LINE = 1 << 24      # characters in one line of a CSV file (16 Mi): the header, and every data line
ENCODING = "utf-8-sig"  # UTF-8; a byte-order mark at the start is not part of the first column's name


class LineTooLong(MpinnError):
    """A line longer than MAX_LINE characters."""


# what reading a gzip-compressed CSV raises when the file is damaged or truncated (besides the csv module's)
READ_ERRORS = (csv.Error, UnicodeDecodeError, OSError, EOFError, zlib.error)


def _open(path, mode, **kwargs):
    return gzip.open(path, mode if mode.endswith("b") else mode + "t", **kwargs) if gzipped(path) \
        else open(path, mode, **kwargs)


def open_text(path):
    """A CSV file (or a gzip-compressed one, .csv.gz) as text, for the csv module (newline="" keeps quoted
    newlines inside their fields)."""
    try:
        return _open(path, "r", newline="", encoding=ENCODING)
    except OSError as e:
        raise MpinnError("cannot read %s: %s" % (path, e.strerror))


def bounded_lines(f, path, limit=MAX_LINE):
    """The lines of text file f, each at most `limit` characters; a longer one raises LineTooLong naming it."""
    number = 0
    while True:
        line = f.readline(limit + 1)
        if not line:
            return
        number += 1
        if len(line) > limit:
            raise LineTooLong("%s line %d is longer than %d characters, the most a line of a text data file may "
                              "hold (a CSV file's header included)" % (path, number, limit))
        yield line


TAB_EXTS = (".tsv", ".tab")      # tab-separated values, with a header as a CSV file's


def separator(path):
    """A table file's separator: a tab for .tsv and .tab files (maybe .gz), and for a file whose first line holds
    tabs and no comma (tab-separated values named .csv or .txt); else a comma."""
    name = path.lower()[:-3] if gzipped(path) else path.lower()
    if name.endswith(TAB_EXTS):
        return "\t"
    try:
        with _open(path, "rb") as f:
            first = f.readline(1 << 20)
    except (OSError, EOFError, zlib.error):
        return ","          # the reader says what is wrong with the file
    return "\t" if b"\t" in first and b"," not in first else ","


def reader(f, path, **kwargs):
    """csv.reader over bounded_lines(f), with the file's separator unless one is given."""
    kwargs.setdefault("delimiter", separator(path))
    return csv.reader(bounded_lines(f, path), **kwargs)


def text_error(path, line, e):
    """The MpinnError for an error the csv module or the decoder raised at (or after) `line`: a byte that is
    not UTF-8 is named at the line that holds it."""
    if isinstance(e, (OSError, EOFError, zlib.error)) and not isinstance(e, UnicodeDecodeError):
        return MpinnError("%s line %d: the file cannot be read past here (%s)"
                          % (path, line, str(e) or type(e).__name__))
    if isinstance(e, UnicodeDecodeError):
        packed = compressed_as(path)
        if packed:
            return MpinnError("%s is %s, not text: %s" % (path, packed[0], packed[1]))
        found = undecodable_line(path)
        if found is not None:
            line, column, byte = found
            return MpinnError("%s line %d: byte 0x%02x (character %d of the line) is not UTF-8 text; save the file "
                              "as UTF-8" % (path, line, byte, column))
    return MpinnError("%s line %d: %s" % (path, line, e))


# a compressed file's first bytes, and what to do with it
MAGIC = ((b"\x1f\x8b", "gzip-compressed", "name it .csv.gz (or .tsv.gz)"),
         (b"PK\x03\x04", "a zip archive", "unzip it and give the file inside"),
         (b"\x28\xb5\x2f\xfd", "zstd-compressed", "decompress it (zstd -d)"),
         (b"BZh", "bzip2-compressed", "decompress it (bunzip2)"),
         (b"\xfd7zXZ\x00", "xz-compressed", "decompress it (unxz)"))


def compressed_as(path):
    """(what, what to do) when the file under a plain text name starts as a compressed file does, else None."""
    if gzipped(path):
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return None
    return next(((what, fix) for magic, what, fix in MAGIC if head.startswith(magic)), None)


def undecodable_line(path, limit=MAX_LINE):
    """(line, character, byte) of the first byte of `path` that is not UTF-8, or None: read a line at a time, in
    bytes (each bounded as the text's are)."""
    with _open(path, "rb") as f:
        number = 0
        while True:
            try:
                raw = f.readline(4 * limit + 4)
            except (OSError, EOFError, zlib.error):
                return None
            if not raw:
                return None
            number += 1
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return number, len(raw[:e.start].decode("utf-8")) + 1, raw[e.start]


def other_separator(header):
    """A hint where a CSV's header reads as one column holding another separator (a semicolon-separated export, bars);
    '' otherwise."""
    if len(header) == 1:
        for sep, name in ((";", "semicolons"), ("|", "bars")):
            if sep in header[0]:
                return ": its header is one column holding %s; mpinn reads values separated by commas, or by " \
                       "tabs" % name
    return ""
