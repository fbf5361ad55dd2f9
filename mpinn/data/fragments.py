"""Fragments: the pieces a run's readers read (as pyarrow's Fragment, Ray Data's read tasks). A fragment is a table
file whole, or a byte range of a plain click-log text file (the lines that begin in it). The files a data option
names are fragments (fragments_of); a stream's K readers each get theirs from one rule (split), which the input
plan asks too (mpinn.settings.input_plan.plan_input), so what the plan says and what the readers read cannot differ;
and fragments read one after another are one table (mpinn.data.many.ChainedSource)."""
from dataclasses import dataclass, replace

from mpinn.data import base
from mpinn.data.files import DataFile
from mpinn.data.formats.clicktext import ClickTextSource
from mpinn.data.formats.tables import TableSource


@dataclass(frozen=True)
class Fragment:
    """One piece a reader can read: `file` (a DataFile) whole, or with `span` (lo, hi) the lines that begin in
    those bytes of it, piece part[0] of part[1] (a plain click-log text file shared by part[1] readers). `index`:
    its file's place in the FileSet it came from (a stream notes its held-out rows by file)."""
    file: DataFile
    span: tuple = None
    part: tuple = None
    index: int = 0

    @property
    def path(self):
        return self.file.path

    @property
    def splittable(self):
        """A plain click-log text file read whole: its lines can be read in byte ranges, each by one reader (a gzip,
        CSV or Parquet file is read whole by one)."""
        return self.span is None and self.file.format == "criteo" and not self.file.gzip

    def pieces(self, k):
        """The k byte ranges of this splittable fragment, the r-th [size*r//k, size*(r+1)//k), its size as the FileSet
        found the file (one not found: none; its reader names the problem when it opens it)."""
        size = self.file.state[0] if self.file.state else 0
        return [replace(self, span=(size * r // k, size * (r + 1) // k), part=(r, k)) for r in range(k)]

    def describe(self):
        """The stream line's words for it: the path, and which part of it where it is a byte range."""
        return self.path if self.part is None else "%s (part %d of %d)" % (self.path, self.part[0] + 1, self.part[1])

    def open(self, spec, chunk_rows=None):
        """Its table source (a TableSource, or a ClickTextSource, read in chunks of chunk_rows rows; default: the
        readers'), with spec's columns, checked as it is read against the file as the FileSet found it (its `seen`;
        mpinn.data.files.unchanged_parts)."""
        chunk_rows = chunk_rows or base.CHUNK_ROWS      # read when called (a test sets it small)
        if self.file.format == "criteo":
            source = ClickTextSource(self.path, spec.label, spec.categorical, spec.numeric, spec.require_label,
                                     chunk_rows, spec.exclude)
        else:
            source = TableSource(self.path, spec.label, spec.categorical, spec.numeric, spec.require_label,
                                 exclude=spec.exclude, chunk_rows=chunk_rows,
                                 drop_unlabelled=spec.missing_labels == "drop")
        source.seen = (self.file.path, self.file.state)
        return source.spanned(*self.span) if self.span is not None else source


def fragments_of(files):
    """The fragments of FileSet `files`: each file whole, in order."""
    return [Fragment(f, index=i) for i, f in enumerate(files)]


def split(fragments, k):
    """For each of k readers its fragments, in their order: of every splittable fragment (a plain click-log text
    file) its r-th of k byte ranges, and of the others (gzip, CSV, Parquet: read whole) those of place r, r + k, ...
    among them (file i to reader i mod k). With fewer such files than readers and nothing to split, some readers
    get none."""
    out, n_whole = [[] for _ in range(k)], 0
    for f in fragments:
        if f.splittable:
            for r, piece in enumerate(f.pieces(k)):
                out[r].append(piece)
        else:
            out[n_whole % k].append(f)
            n_whole += 1
    return out


def reading(fragments, k):
    """The readers (of k) that split() gives a fragment to read."""
    return [r for r, mine in enumerate(split(fragments, k)) if mine]
