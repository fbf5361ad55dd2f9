"""InputPlan: how a run's rows are read, decided once, the same on every rank. mpinn.settings.input_plan makes it,
a pure function of the options, the FileSet (mpinn.data.files) and the job, as mpinn.settings.plan makes the
distribution's Plan: where the rows live (memory, a packed file's memory map, a stream read again each epoch),
who reads them (rank 0 scatters each batch; every rank reads its slice of a packed file; K readers of a stream
by file or byte range), and how rows are held out; each choice with its reason. The input stage
(mpinn.data.inputs) reads this record, never the options."""
from dataclasses import dataclass

from mpinn.data.spec import DataSpec
from mpinn.hashing import HashSpec

RESIDENCIES = ("memory", "mapped", "streamed")
HOLDOUTS = ("none", "random", "last", "time", "group", "files")


@dataclass(frozen=True)
class Holdout:
    """Which rows are held out. kind: none; random (a seeded share; a stream's, of its sample); last (the last share,
    in file order); time and group (by `column`'s values: its latest share, or whole groups); files (held-out files:
    --valid's, given, or a stream's last files)."""
    kind: str = "none"
    share: float = 0.0
    column: str = ""
    seed: int = 0
    files: object = None        # kind files: their FileSet
    given: bool = False         # kind files: --valid's (else the training data's last files)
    streamed: bool = False      # kind files: read a block at a time at each evaluation (mpinn.data.many.RowsInBlocks)

    def how(self, sample_rows=None):
        """The start-up line's words on how the rows were chosen ('' for files given)."""
        share = "%g%%" % (100 * self.share)
        if self.kind == "files":
            if self.given:
                return ""
            files = self.files
            return " (the last %s)" % ("file, %s" % files.paths[0] if len(files) == 1 else files.describe())
        if self.kind == "random" and sample_rows is not None:
            return " (a random %s of the first %d rows)" % (share, sample_rows)
        return {"none": "", "random": " (a random %s)" % share, "last": " (the last %s of the rows, in file order)"
                % share, "time": " (the last %s by %s)" % (share, self.column),
                "group": " (whole groups of %s, about %s)" % (self.column, share)}[self.kind]


@dataclass(frozen=True)
class InputPlan:
    """One run's input (see the module)."""
    files: object               # the FileSet read; None: the embedded click log, or the API's rows
    rows: object                # the API's in-memory rows (mpinn.data.base.Rows), or None
    spec: DataSpec              # the columns, the task and classes, how labels are read
    hashing: HashSpec
    residency: str              # memory | mapped | streamed
    residency_why: str
    reading: str                # who reads: rank0 (and scatters each batch), local (every rank its own slice of a
    #                             packed file) or readers (K readers of a stream, each scattering over its group)
    readers: int                # readers: how many (1 otherwise)
    who_reads: str              # the start-up line's words on who reads
    holdout: Holdout
    seed: int = 0
    default_rows: int = 200_000     # the embedded click log's rows
    sample_rows: int = 0        # a stream's sample, read first (the columns, the task, the statistics)
    window: int = 0             # a stream's shuffle window
    transform: str = "auto"     # the numeric transform's mode and bins (mpinn.data.fit.transform)
    bins: str = "auto"
    dtype: str = "float32"
    task_decided: bool = False  # the task is the labels' call (say a doubtful one)
    memory_note: str = None     # a packed file larger than the job's memory read in short runs

    @property
    def read_local(self):
        return self.reading == "local"

    @property
    def streamed(self):
        return self.residency == "streamed"

    def source_words(self):
        """What the data line says was read."""
        if self.files is not None:
            return self.files.describe() if len(self.files) > 1 else self.files.given if isinstance(
                self.files.given, str) else self.files.paths[0]
        return "embedded click log" if self.rows is None else "in-memory data"

    def label_words(self):
        return "the label column %r" % self.spec.label if self.spec.label else "the label"

    def lines(self):
        """The start-up line that says how the rows are read, and why."""
        return ["input: %s (%s); %s" % (self.residency, self.residency_why, self.who_reads)]
