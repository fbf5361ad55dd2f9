"""A streamed run's training data (the InputPlan's residency 'streamed'; see mpinn.data.stream): the files, the
sample, the held-out share of the sample, and with --readers all or K each reader's own stream of its share of the
files."""
from dataclasses import replace

import numpy as np

from mpinn.data import progress
from mpinn.data.fit.chunks import TablePass
from mpinn.data.fragments import fragments_of, split
from mpinn.data.many import ChainedSource, chained_source
from mpinn.data.spec import read_like
from mpinn.data.stream import Stream, open_stream
from mpinn.hashing import HashSpec


def open_streamed(plan):
    """(Stream, the held-out share of its sample or None) of the InputPlan's training files, on the rank that reads.
    Held-out files (plan.holdout.files) are the input stage's to read (mpinn.data.inputs.held_out_rows)."""
    files, holdout = plan.files, plan.holdout
    progress.expect(min(plan.sample_rows, files.n_estimate))
    recipe = Recipe(files, plan.spec)
    stream, valid = open_stream(recipe.first_sources, plan.spec, plan.hashing, plan.sample_rows,
                                holdout.share if holdout.kind == "random" else 0, plan.seed, files.n_estimate,
                                plan.window)
    stream.make_sources = recipe.sources()
    stream.recipe = recipe
    stream.meta["streamed"] = {"sample_rows": stream.meta.pop("sample_rows"), "shuffle_window": plan.window}
    if len(files) > 1:
        stream.meta["files"] = files.paths
    return stream, valid


class Recipe:
    """How a stream's files (a FileSet) are opened, as fragments (mpinn.data.fragments) read as one
    (mpinn.data.many.ChainedSource): the first time with the columns as given (or chosen from the first file's
    values), then with those columns named."""

    def __init__(self, files, spec):
        self.files = files
        self.first = chained_source(files, spec)
        self.named = replace(spec, categorical=self.first.categorical, numeric=self.first.numeric)

    def first_sources(self):
        return list(enumerate(self.first.sources))

    def sources(self, indices=None):
        """make_sources() of the files `indices` (default: all), in order (mpinn.data.stream.Stream); each checked
        against the file as the FileSet found it as it is read."""
        fragments = fragments_of(self.files)
        return self.fragment_sources([fragments[i] for i in (range(len(fragments)) if indices is None else indices)])

    def fragment_sources(self, fragments):
        """make_sources() of `fragments`: [(its file's index, its table source)], the sources made afresh each time
        as one ChainedSource with the columns named."""
        def make():
            if not fragments:
                return []
            return [(f.index, s) for f, s in zip(fragments, ChainedSource.of(fragments, self.named).sources)]
        return make

    def reader_sources(self, rank, size):
        """make_sources() of reader `rank` of `size` (--readers all): its fragments by the one rule
        (mpinn.data.fragments.split: a 1/size byte range of every plain click-log text file, the other files whole,
        file i to reader i mod size). Returns (make, what it reads)."""
        mine = split(fragments_of(self.files), size)[rank]
        return self.fragment_sources(mine), [f.describe() for f in mine]

    def __getstate__(self):         # sent to the other readers: the files and the columns, not rank 0's sources
        return {"files": self.files, "named": self.named}

    def __setstate__(self, state):
        self.__dict__.update(state, first=None)
        self.files = self.files.here()      # this host's files (another host may hold its own copy)


def reading_group(rank, size, readers):
    """The reader (0 .. readers-1) whose group of consecutive ranks holds `rank`: reader g's group is the ranks from
    g*size//readers up to (g+1)*size//readers, and its first rank reads."""
    return next(g for g in range(readers) if (g + 1) * size // readers > rank)


def reader_streams(stream, comm, transform, readers):
    """--readers all or K: each reader's own Stream (rank 0's too) of its share of the files
    (Recipe.reader_sources), with the sample's contract, task and classes, held-out rows and numeric transform,
    its windows shuffled by (seed, epoch, window, reader + 1). Collective: `stream` on rank 0 (None elsewhere).
    Returns this rank's: a reader's (the first rank of its group, reading_group), None on the other ranks."""
    shared = comm.bcast_obj((stream.recipe, stream.meta, stream.held, len(stream), stream.fan_in, stream.window)
                            if comm.rank == 0 else None)
    recipe, meta, held, n_estimate, fan_in, window = shared
    g = reading_group(comm.rank, comm.size, readers)
    if comm.rank != g * comm.size // readers:
        return None
    make, files = recipe.reader_sources(g, readers)
    probe = recipe.sources([0])()[0][1]         # the columns every source has
    table = TablePass(probe, *read_like(meta, recipe.named, HashSpec()))
    table.learnt = True         # the statistics were fitted on rank 0's sample
    y = stream.y if stream is not None else np.zeros(0)
    own = Stream(make, table, meta, held, n_estimate, fan_in, y, window, salt=(g + 1,))
    own.transform = transform
    own.files = files
    return own
