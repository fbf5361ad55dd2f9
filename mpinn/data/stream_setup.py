"""Which training data is streamed (--stream), and how: the files, the sample, the held-out rows (a share of the
sample, the last files, or --valid), and with --readers all each rank's own stream of its share of the files."""
from dataclasses import replace

import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data.files import describe as describe_files, file_state
from mpinn.data.progress import expect

TABLES = ("csv", "parquet", "criteo")


def _why_not(args, paths, formats):
    """Why these options and files cannot stream (one phrase), or None."""
    odd = next((p for p, f in zip(paths, formats) if f not in TABLES), None)
    by = args.holdout_by.partition(":")[0]
    if odd:
        return "%s is not a table file (CSV, Parquet, click-log text)" % odd
    if args.input == "local":
        return "--input local reads a packed file"
    if not args.valid and args.holdout > 0 and (by in ("time", "group") or (by == "last" and len(paths) < 2)):
        return ("--holdout-by %s needs every row in memory: a stream holds out a share of its sample (--holdout-by "
                "random), its last files (last, with several files) or --valid" % args.holdout_by)
    return None


def stream_input(args, spec, hashing):
    """(Stream, held-out Dataset or None, how they were held out) when the training data is streamed (--stream;
    see mpinn.data.stream), else None (every row read into memory). On the rank that reads."""
    from mpinn.data import data_format, files
    from mpinn.data.stream import STREAM_FROM, estimate_rows, open_stream
    if args.stream == "off" or args.data is None:
        if args.readers != "1":
            raise MpinnError("--readers %s reads table files as a stream: not with --stream off" % args.readers)
        return None
    on = args.stream == "on"
    paths = files.expand(args.data)
    formats = [data_format(p, spec.format) for p in paths]
    why_not = _why_not(args, paths, formats)
    n_estimate = estimate_rows(paths, formats) if not why_not else 0
    if why_not or (not on and n_estimate <= STREAM_FROM):
        if on or args.readers != "1":
            raise MpinnError("%s: %s" % ("--stream on" if on else "--readers %s" % args.readers, why_not or
                                         "the data is read into memory (about %d rows): add --stream on" % n_estimate))
        return None
    if formats[0] != "criteo" and not spec.label:
        raise MpinnError("%s: a %s file needs --label COLUMN" % (paths[0], formats[0].upper()))
    held_files = []
    if args.holdout_by == "last" and not args.valid and args.holdout > 0:     # a log's last files
        k = min(max(1, int(round(args.holdout * len(paths)))), len(paths) - 1)
        paths, held_files, formats = paths[:-k], paths[-k:], formats[:-k]
        n_estimate = estimate_rows(paths, formats)
    expect(min(args.sample_rows, n_estimate))
    recipe = Recipe(paths, formats, spec)
    stream, valid = open_stream(recipe.first_sources, spec, hashing, args.sample_rows,
                                0 if args.valid or held_files else args.holdout, args.seed, n_estimate,
                                args.shuffle_window)
    stream.make_sources = recipe.sources()
    stream.recipe = recipe
    stream.meta["streamed"] = {"sample_rows": stream.meta.pop("sample_rows"), "shuffle_window": args.shuffle_window}
    if len(paths) > 1:
        stream.meta["files"] = list(paths)
    held = ""
    if args.valid or held_files:
        valid = held_out_files(args.valid, held_files, replace(recipe.named, task=stream.task,
                               classes=stream.meta.get("classes")), hashing.using(stream.meta.get("hashing")), on)
        if held_files:
            held = " (the last %s)" % ("file, %s" % held_files[0] if len(held_files) == 1 else
                                       describe_files(held_files))
    elif valid is not None:
        held = " (a random %g%% of the first %d rows)" % (100 * args.holdout, stream.meta["streamed"]["sample_rows"])
    return stream, valid, held


def held_out_files(valid, held_files, spec, hashing, on):
    """A streamed run's held-out rows from files (--valid, or the last files), read as its training files are: in
    memory, or, as table files of more than STREAM_FROM rows (or any, with --stream on), a block at a time at each
    evaluation (mpinn.data.many.RowsInBlocks), so that rank 0 holds no more of them than of the training rows."""
    from mpinn.data import data_format, files, load_data
    from mpinn.data.many import RowsInBlocks
    from mpinn.data.stream import STREAM_FROM, estimate_rows
    paths = files.expand(valid) if valid else held_files
    formats = [data_format(p, spec.format) for p in paths]
    n_estimate = estimate_rows(paths, formats) if all(f in TABLES for f in formats) else 0
    if n_estimate and (on or n_estimate > STREAM_FROM):
        return RowsInBlocks(paths, formats, spec, hashing, n_estimate)
    return load_data(valid or (held_files if len(held_files) > 1 else held_files[0]), spec, hashing)


class Recipe:
    """How a stream's files are opened: the first time with the columns as given (or chosen from the first file's
    values), then with those columns named."""

    def __init__(self, paths, formats, spec):
        from mpinn.data.many import chained_source
        self.paths, self.formats = paths, formats
        self.states = [file_state(p) for p in paths]        # the files as the run found them: read so each epoch
        self.first = chained_source(paths, formats, spec)
        self.named = replace(spec, categorical=self.first.categorical, numeric=self.first.numeric)

    def first_sources(self):
        return list(enumerate(self.first.sources))

    def sources(self, indices=None):
        """make_sources() of the files `indices` (default: all), in order (mpinn.data.stream.Stream)."""
        from mpinn.data.many import chained_source
        indices = list(range(len(self.paths)) if indices is None else indices)

        def make():
            if not indices:
                return []
            got = chained_source([self.paths[i] for i in indices], [self.formats[i] for i in indices], self.named)
            for i, source in zip(indices, got.sources):
                source.seen = (self.paths[i], self.states[i])     # checked as it is read (mpinn.data.stream)
            return list(zip(indices, got.sources))
        return make

    def reader_sources(self, rank, size):
        """make_sources() of reader `rank` of `size` (--readers all): a 1/size byte range of every plain click-log
        text file (the lines that begin in it; mpinn.data.formats.clicktext.LineSpan), and of the other files (gzip,
        CSV, Parquet: read whole) those of index rank, rank + size, ... Returns (make, what it reads)."""
        import os
        split = self.shared_files()
        whole = [i for i in range(len(self.paths)) if i not in split]
        mine = sorted(split + whole[rank::size])
        make_all = self.sources(mine)

        def make():
            out = []
            for i, source in make_all():
                if i in split:
                    n = os.path.getsize(self.paths[i])
                    source = source.spanned(n * rank // size, n * (rank + 1) // size)
                out.append((i, source))
            return out
        return make, ["%s%s" % (self.paths[i], " (part %d of %d)" % (rank + 1, size) if i in split else "")
                      for i in mine]

    def shared_files(self):
        """The indices of the plain click-log text files: every reader reads a byte range of each (the others, gzip,
        CSV, Parquet, are read whole by one reader)."""
        return [i for i, (p, f) in enumerate(zip(self.paths, self.formats)) if f == "criteo" and not _gzip(p)]

    def reading(self, count):
        """The readers (of `count`) that have rows to read: every one where a file is shared in byte ranges; else
        those given a file whole (reader_sources), which with fewer files than readers is not all."""
        return list(range(count if self.shared_files() else min(count, len(self.paths))))

    def __getstate__(self):         # sent to the other readers: the files and the columns, not rank 0's sources
        return {"paths": self.paths, "formats": self.formats, "named": self.named}

    def __setstate__(self, state):
        self.__dict__.update(state, first=None)
        self.states = [file_state(p) for p in self.paths]   # this host's files (another host may hold its own copy)


def reader_count(readers, size):
    """How many ranks read a stream: --readers 1, all (every rank) or K (at most the ranks)."""
    k = size if readers == "all" else int(readers)
    if k > size:
        raise MpinnError("--readers %d: more readers than the job's %d ranks" % (k, size), collective=True)
    return k


def reading_group(rank, size, readers):
    """The reader (0 .. readers-1) whose group of consecutive ranks holds `rank`: reader g's group is the ranks from
    g*size//readers up to (g+1)*size//readers, and its first rank reads."""
    return next(g for g in range(readers) if (g + 1) * size // readers > rank)


def reader_streams(stream, comm, transform, readers):
    """--readers all or K: each reader's own Stream (rank 0's too) of its share of the files
    (Recipe.reader_sources), with the sample's contract, task and classes, held-out rows and numeric transform,
    its windows shuffled by (seed, epoch, window, reader + 1). Collective: `stream` on rank 0 (None elsewhere).
    Returns this rank's: a reader's (the first rank of its group, reading_group), None on the other ranks."""
    from mpinn.data.fit.chunks import TablePass
    from mpinn.data.stream import Stream
    from mpinn.hashing import HashSpec
    shared = comm.bcast_obj((stream.recipe, stream.meta, stream.held, len(stream), stream.fan_in, stream.window)
                            if comm.rank == 0 else None)
    recipe, meta, held, n_estimate, fan_in, window = shared
    g = reading_group(comm.rank, comm.size, readers)
    if comm.rank != g * comm.size // readers:
        return None
    make, files = recipe.reader_sources(g, readers)
    probe = recipe.sources([0])()[0][1]         # the columns every source has
    spec = replace(recipe.named, task=meta["task"], classes=meta.get("classes"))
    table = TablePass(probe, spec, HashSpec().using(meta.get("hashing")))
    table.learnt = True         # the statistics were fitted on rank 0's sample
    y = stream.y if stream is not None else np.zeros(0)
    own = Stream(make, table, meta, held, n_estimate, fan_in, y, window, salt=(g + 1,))
    own.transform = transform
    own.files = files
    return own


def _gzip(path):
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"
