"""How a run's rows are read, decided once: input_files expands and probes what --data and --valid name (on the rank
that reads), and plan_input, a pure function of the configuration, those FileSets and the job, makes the
InputPlan (mpinn.data.plan) the input stage reads: where the rows live, who reads them, how rows are held out,
each with its reason. What it refuses (a stream of files that cannot stream, more readers than ranks) is one line
raised on every rank alike."""
from dataclasses import dataclass
from typing import Callable

from mpinn.core.errors import MpinnError
from mpinn.data.base import Rows
from mpinn.data import fragments
from mpinn.data.files import FileSet
from mpinn.data.fit.labels import binary_classes
from mpinn.data.plan import Holdout, InputPlan
from mpinn.data.spec import DataSpec
from mpinn.host.memory import memory_for_job
from mpinn.settings.options import split_holdout_by

IN_RUNS = 65536        # --shuffle-block from which a file read from disk is read in runs long enough


def input_files(cfg):
    """(the training FileSet, the --valid FileSet), None where none is named (the embedded data, the API's rows):
    each file's format and state decided here, once. On the rank that reads."""
    data = None if cfg.data is None or isinstance(cfg.data, Rows) else FileSet.of(cfg.data, cfg.format)
    valid = FileSet.of(cfg.valid, cfg.format) if cfg.valid else None
    return data, valid


def reader_count(readers, size):
    """How many ranks read a stream: --readers 1, all (every rank) or K (INPUT_RULES keeps K within the ranks)."""
    return size if readers == "all" else int(readers)


def choose_reading(cfg, size):
    """(who reads, readers): local where --input local (every rank reads its slice of a packed file: the rules keep
    it from a stream), readers where --readers is all or K (a stream's K readers; all at 1 rank is one reader of its
    own, which shuffles as --readers 1 does not), else rank0 (rank 0 reads and scatters each batch). The one place
    who reads is decided."""
    if cfg.input == "local":
        return "local", 1
    if cfg.readers != "1":
        return "readers", reader_count(cfg.readers, size)
    return "rank0", 1


def given_classes(cfg):
    """DataSpec's task and classes where --classes names them (two: binary, the positive class last), else {}."""
    if not cfg.classes:
        return {}
    classes = cfg.classes.split(",")
    task = cfg.task if cfg.task != "auto" else "binary" if len(classes) == 2 else "multiclass"
    return {"task": task, "classes": binary_classes(classes, cfg.positive_class) if task == "binary" else classes}


def larger_than_memory_note(path, size, available, shuffle_block):
    """A packed file bigger than the memory the job may use is read from disk every epoch through its memory
    map; each page fault reads the disk's read-ahead around it (megabytes), so rows fetched in short shuffled
    runs evict each other (on a 607 MB file under a 300 MiB limit, --shuffle-block 1024 took 87 s against 14 s
    with 65536). The start-up note for that case, or None."""
    if available is None or size <= available or shuffle_block >= IN_RUNS:
        return None
    return ("note: %s (%d MB) is larger than the memory this job may use (%d MB): every epoch reads it from disk, "
            "and rows taken in shuffled runs of %d thrash the page cache; --shuffle-block %d reads them in runs"
            % (path, size // 10**6, available // 10**6, shuffle_block, IN_RUNS))


def _why_not_stream(cfg, files, kind):
    """Why these options and files cannot stream (one phrase), or None."""
    odd = files.odd()
    if odd:
        return "%s is not a table file (CSV, Parquet, click-log text)" % odd
    if cfg.input == "local":
        return "--input local reads a packed file"
    if not cfg.valid and cfg.holdout > 0 and (kind in ("time", "group") or (kind == "last" and len(files) < 2)):
        return ("--holdout-by %s needs every row in memory: a stream holds out a share of its sample (--holdout-by "
                "random), its last files (last, with several files) or --valid" % cfg.holdout_by)
    return None


def choose_residency(cfg, files, kind):
    """(memory | mapped | streamed, why): a stream where --stream on asks, or auto finds table files of more
    estimated rows than mpinn.data.files.STREAM_FROM (FileSet.streams); a packed file through its memory map. What
    cannot be read so was refused before (INPUT_RULES)."""
    if files is None:
        return "memory", "the embedded click log" if cfg.data is None else "the rows given"
    if cfg.stream == "off":
        return _not_streamed(files, "--stream off")
    why_not = _why_not_stream(cfg, files, kind)
    if why_not or not files.streams(cfg.stream):
        return _not_streamed(files, why_not or "about %d rows" % files.n_estimate)
    return "streamed", "--stream on" if cfg.stream == "on" else ("about %d rows, more than read into memory"
                                                                  % files.n_estimate)


def _not_streamed(files, why):
    if files[0].format == "mpinn":
        return "mapped", "a packed file, read through its memory map"
    return "memory", why


@dataclass(frozen=True)
class InputRule:
    """What the input refuses, written once: broken(cfg, files, kind, size) -> True when refused (files: the FileSet,
    None for the embedded data or the API's rows; kind: --holdout-by's); message(...) -> the one line."""
    name: str
    options: tuple
    broken: Callable
    message: Callable
    example: str


def _readers(c):
    return c.readers != "1"


def _streams(c, f, k):
    """Would these files stream but for the options' asking (--stream on or auto, tables that can)?"""
    return f is not None and c.stream != "off" and not _why_not_stream(c, f, k) and f.streams(c.stream)


INPUT_RULES = (
    InputRule("readers-ranks", ("readers",),
              lambda c, f, k, n: _readers(c) and c.readers != "all" and int(c.readers) > n,
              lambda c, f, k, n: "--readers %d: more readers than the job's %d ranks" % (int(c.readers), n),
              "--readers 3 at np 2"),
    InputRule("readers-stream-off", ("readers", "stream"),
              lambda c, f, k, n: _readers(c) and (f is None or c.stream == "off"),
              lambda c, f, k, n: "--readers %s reads table files as a stream: not with --stream off" % c.readers,
              "--readers all --stream off"),
    InputRule("stream-cannot", ("stream", "readers", "data", "input", "holdout-by"),
              lambda c, f, k, n: f is not None and c.stream != "off" and (c.stream == "on" or _readers(c))
              and bool(_why_not_stream(c, f, k)),
              lambda c, f, k, n: "%s: %s" % ("--stream on" if c.stream == "on" else "--readers %s" % c.readers,
                                             _why_not_stream(c, f, k)),
              "--stream on --data x.npz"),
    InputRule("readers-in-memory", ("readers", "stream"),
              lambda c, f, k, n: _readers(c) and f is not None and c.stream == "auto"
              and not _why_not_stream(c, f, k) and not f.streams(c.stream),
              lambda c, f, k, n: "--readers %s: the data is read into memory (about %d rows): add --stream on"
              % (c.readers, f.n_estimate),
              "--readers 2 on a CSV of 3,000 rows"),
    InputRule("stream-label", ("label",),
              lambda c, f, k, n: _streams(c, f, k) and f[0].format != "criteo" and not c.label,
              lambda c, f, k, n: "%s: a %s file needs --label COLUMN" % (f[0].path, f[0].format.upper()),
              "--stream on --data big.csv without --label"),
)


def check_input(cfg, files, kind, size):
    """The first INPUT_RULES rule broken, raised as one line on every rank alike (each makes the same plan)."""
    for rule in INPUT_RULES:
        if rule.broken(cfg, files, kind, size):
            raise MpinnError(rule.message(cfg, files, kind, size), collective=True)


def choose_holdout(cfg, files, valid, kind, column, streamed):
    """The Holdout: --valid's files; a stream's last files (--holdout-by last with several); else a share of the
    rows by kind (a stream's: of its sample)."""
    if valid is not None:
        return Holdout("files", column=column, seed=cfg.seed, files=valid, given=True,
                       streamed=streamed and all(f.table for f in valid) and valid.streams(cfg.stream))
    if cfg.holdout <= 0:
        return Holdout("none", cfg.holdout, column, cfg.seed)
    if streamed and kind == "last":         # a log's last files
        k = min(max(1, int(round(cfg.holdout * len(files)))), len(files) - 1)
        held = files[-k:]
        return Holdout("files", cfg.holdout, column, cfg.seed, held, streamed=held.streams(cfg.stream))
    return Holdout(kind, cfg.holdout, column, cfg.seed)


def who_reads(readers, size, reading=None):
    """The words on who reads (--readers): `reading`, the readers that have files to read (Recipe.reading; None:
    all)."""
    if readers == 1:
        return "rank 0 reads and scatters each batch"
    firsts = [g * size // readers for g in range(readers)]      # each group's first rank (reading_group)
    if reading is not None and len(reading) < readers:      # fewer files than readers, each read whole by one
        n = len(reading)
        return ("only %d of the %d readers %s a file to read (rank%s %s): a gzipped, CSV or Parquet file is read "
                "whole, file i by reader i mod %d, and there %s %d; the others read no rows, and each step trains on "
                "%d/%d of the global batch, the share of the readers that read" % (
                    n, readers, "has" if n == 1 else "have", "" if n == 1 else "s",
                    ", ".join(str(firsts[g]) for g in reading), readers, "is" if n == 1 else "are", n, n, readers))
    if readers == size:
        return "every rank reads its share of the files and trains on its rows"
    return "%d readers (ranks %s) each read their share of the files and scatter it over their group" % (
        readers, ", ".join(map(str, firsts)))


def plan_input(cfg, files, valid, size, available=None):
    """The InputPlan of configuration `cfg` (its data options) over FileSets `files` and `valid` (input_files; the
    same on every rank) on a job of `size` ranks, where the job may use `available` bytes of memory (None:
    unknown)."""
    kind, column = split_holdout_by(cfg.holdout_by)
    check_input(cfg, files, kind, size)
    who, readers = choose_reading(cfg, size)
    residency, why = choose_residency(cfg, files, kind)
    holdout = choose_holdout(cfg, files, valid, kind, column, residency == "streamed")
    if holdout.kind == "files" and not holdout.given:
        files = files[:-len(holdout.files)]     # the training files: the others
    spec = DataSpec(**dict(dict(label=cfg.label, categorical=cfg.categorical, numeric=cfg.numeric, task=cfg.task,
                                format=cfg.format, positive=cfg.positive_class, exclude=[column] if column else [],
                                missing_labels=cfg.missing_labels), **given_classes(cfg)))
    if who == "readers":
        words = who_reads(readers, size, fragments.reading(fragments.fragments_of(files), readers))
    elif who == "local":
        words = "every rank reads its own slice of each batch from the packed file"
    else:
        words = "rank 0 reads and scatters each batch"
    note = None
    if residency == "mapped" and len(files) == 1:
        note = larger_than_memory_note(files.given if isinstance(files.given, str) else files.paths[0],
                                       files[0].state[0], available, cfg.shuffle_block)
    return InputPlan(files, cfg.data if isinstance(cfg.data, Rows) else None, spec, cfg.hashing, residency, why,
                     who, readers, words, holdout, cfg.seed, cfg.default_rows, cfg.sample_rows,
                     cfg.shuffle_window, cfg.numeric_transform, cfg.numeric_bins, cfg.dtype,
                     cfg.task == "auto" and not cfg.classes, note)


def job_input_plan(cfg, job):
    """plan_input on every rank of `job` alike: the files expanded and probed once, by rank 0 (an error there is
    every rank's), and sent to the others."""
    found = job.comm.root_call(lambda: input_files(cfg))
    files, valid = job.comm.bcast_obj(found if job.rank == 0 else None)
    mapped = files is not None and files[0].format == "mpinn"
    return plan_input(cfg, files, valid, job.size, memory_for_job() if mapped else None)
