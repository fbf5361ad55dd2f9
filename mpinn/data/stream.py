"""Table files streamed: rank 0 reads, hashes and batches them chunk by chunk, so its memory holds a sample's
statistics, one shuffle window and a chunk, whatever the number of rows.

What needs a look at the data (the column kinds, the task and classes, the numeric statistics, the hashing
contract) is fitted on the first `sample_rows` rows (the sample pass), kept in the model file as the in-memory
path keeps it. Without --valid, the held-out rows are a seeded share of the sample's rows (the in-memory path's
draw over the sample's positions), held in memory. Each epoch re-reads the files from the start; its order is
the files' rows cut into windows of `window` rows, each window shuffled (window k by (seed, epoch, k), which for
window 0 is the in-memory path's (seed, epoch) draw). When the sample and the first window hold every row, a stream
therefore trains the in-memory path's model, bit for bit."""

import numpy as np
import scipy.sparse as sp

from mpinn.core.errors import MpinnError
from mpinn.data.base import Dataset, Rows
from mpinn.data.fit.chunks import TablePass
from mpinn.data.files import unchanged_parts
from mpinn.data.formats.part import take_part
from mpinn.data.progress import tick
from mpinn.hashing import csr_from_indices, per_feature_nnz

def concat_rows(pieces, meta):
    """One Dataset of several (their rows one after another)."""
    if len(pieces) == 1:
        return pieces[0]
    first = pieces[0]
    Xs = sp.vstack([p.Xs for p in pieces], format="csr") if first.Xs is not None else None
    Xd = np.concatenate([p.Xd for p in pieces]) if first.Xd is not None else None
    return Dataset(Xs, Xd, np.concatenate([p.y for p in pieces]), meta)


class Stream(Rows):
    """Training rows read from table files at each epoch (see the module): what the trainer's stream feed uses
    (batches()) and what the run's start needs (meta, task, layout, the sample's labels as y, an estimate of the
    row count as len()). Made by open_stream, on rank 0."""

    streamed = True

    def __init__(self, make_sources, table, meta, held, n_estimate, fan_in, y_sample, window, salt=()):
        """make_sources(): [(file index, table source)] of the files this stream reads, in order, made afresh;
        held: {file index: sorted positions in that file of the held-out rows}; salt: added to each window's seed
        (a reader's rank, where every rank reads its own files)."""
        self.make_sources, self.table, self.meta, self.held = make_sources, table, meta, held
        self.n_estimate, self.fan_in, self.y, self.window = int(n_estimate), fan_in, y_sample, int(window)
        self.salt = tuple(salt)
        contract = table.contract
        self._n_sparse = contract["n_columns"] if contract is not None else 0
        self._raw_dense = len(meta.get("numeric") or [])

    def __len__(self):
        return self.n_estimate

    @property
    def n_sparse(self):
        return self._n_sparse

    @property
    def raw_dense(self):
        return self._raw_dense

    @property
    def sparse_fan_in(self):
        return self.fan_in

    def numeric_stats(self):
        return self.meta.get("numeric_stats")

    def pieces(self):
        """The training rows in file order, hashed and labelled, as Datasets of a chunk each (the held-out rows
        left out); self.dropped counts the rows left out for a missing label (--missing-labels drop) once the files
        are read."""
        self.dropped = 0
        for i, source in self.make_sources():
            held, pos = self.held.get(i, np.zeros(0, np.int64)), 0
            if held.size and getattr(source, "span", None):      # a byte range of the file: its rows from there
                held = held - source.rows_before()
            for part in unchanged_parts(source):
                lo, pos = pos, pos + part.n
                if part.n == 0:
                    continue
                h = held[(held >= lo) & (held < pos)] - lo
                if h.size:
                    part = take_part(part, np.setdiff1d(np.arange(part.n), h))
                try:
                    idx, y = self.table.chunk(part)
                except MpinnError as e:     # a label the sample did not have
                    raise MpinnError("%s: %s, fitted on the stream's sample: name every class with --classes, or "
                                     "fit on more rows (--sample-rows)" % (source.path, e))
                Xs = csr_from_indices(idx, self._n_sparse) if idx is not None else None
                yield Dataset(Xs, part.Xd if self._raw_dense else None, y, self.meta)
            self.dropped += getattr(source, "dropped", 0)       # rows without a label (--missing-labels drop)

    def windows(self, seed, epoch):
        """(rows, order) of each shuffle window in turn: its rows in file order and the order they go in. Only the
        chunk that straddles a window's end is cut; the window's chunks are joined once."""
        buf, n, k = [], 0, 0
        for piece in self.pieces():
            while piece is not None:
                room = self.window - n
                if len(piece) <= room:
                    buf.append(piece)
                    n, piece = n + len(piece), None
                else:
                    buf.append(piece.subset(slice(0, room)))
                    n, piece = self.window, piece.subset(slice(room, len(piece)))
                if n == self.window:
                    yield concat_rows(buf, self.meta), _window_order(n, seed, epoch, k, self.salt)
                    buf, n, k = [], 0, k + 1
        if n:
            yield concat_rows(buf, self.meta), _window_order(n, seed, epoch, k, self.salt)

    def batches(self, batch, dtype, seed, epoch):
        """This epoch's global batches of `batch` rows (the last one shorter), in the windows' order, through the
        transform, cast to dtype (mpinn.data.base.Rows.batch)."""
        have, n = [], 0
        for rows, order in self.windows(seed, epoch):
            at = 0
            while at < len(order):
                take = order[at:at + batch - n]
                at += len(take)
                have.append(rows.raw_rows(take))
                n += len(take)
                if n == batch:
                    yield self._batch(have, dtype)
                    have, n = [], 0
        if n:
            yield self._batch(have, dtype)

    def _batch(self, parts, dtype):
        if len(parts) == 1:
            return self.batch(*parts[0], dtype)
        Xs = sp.vstack([p[0] for p in parts], format="csr") if parts[0][0] is not None else None
        Xd = np.concatenate([p[1] for p in parts]) if parts[0][1] is not None else None
        return self.batch(Xs, Xd, np.concatenate([p[2] for p in parts]), dtype)

    def known_length(self):
        """None: the stream's end is found by reading it (len() is an estimate)."""
        return None

    def first_rows(self, limit, chunk=None):
        """The first `limit` training rows' hashed input (CSR), in file order, a piece at a time (head; chunk: the
        pieces are the files' chunks)."""
        return self.head(limit)

    def in_order(self, chunk, dtype=None):
        """Every training row, in file order, as Batches of `chunk` rows (the last one shorter), through the
        transform, cast to dtype."""
        have, n = [], 0
        for piece in self.pieces():
            at = 0
            while at < len(piece):
                take = min(chunk - n, len(piece) - at)
                have.append(piece.raw_rows(slice(at, at + take)))
                at, n = at + take, n + take
                if n == chunk:
                    yield self._batch(have, dtype)
                    have, n = [], 0
        if n:
            yield self._batch(have, dtype)

    def head(self, limit):
        """The first `limit` training rows' hashed input (CSR), piece by piece (for counting hot rows)."""
        n = 0
        for piece in self.pieces():
            if n >= limit or piece.Xs is None:
                return
            take = piece.Xs[:limit - n]
            n += take.shape[0]
            yield take


def _window_order(n, seed, epoch, k, salt=()):
    """Window k's order: drawn from (seed, epoch, k); for k = 0 that is the in-memory path's (seed, epoch) draw
    (numpy's SeedSequence pads the entropy with zeros: [s, e, 0] is [s, e]). salt: a reader's (rank + 1,)."""
    return np.random.default_rng([seed, epoch, k, *salt]).permutation(n)


def _held_draw(m, holdout, seed):
    """The held-out positions among m rows: the in-memory path's seeded draw (mpinn.data.base.Rows.split)."""
    n_valid = int(round(m * holdout))
    if n_valid == 0 or n_valid >= m:
        raise MpinnError("--holdout %.3g of the %d sampled rows leaves %s" % (
            holdout, m, "no held-out rows" if n_valid == 0 else "no training rows"))
    return np.sort(np.random.default_rng([seed, 7]).permutation(m)[:n_valid])


def open_stream(make_sources, spec, hashing, sample_rows, holdout, seed, n_estimate, window):
    """(Stream, the held-out Dataset or None) of table files: `make_sources()` gives [(file index, table source)]
    of every file (see Stream), read from the start. The sample pass reads the first `sample_rows` rows: the
    contract, task and classes and numeric statistics are fitted on them, and a share `holdout` of them (0: none)
    is held out, drawn as the in-memory path draws (seed). Of the sample, only the held-out rows and the labels
    are kept until the contract is known, when the files clearly hold more rows than the sample (then the draw is
    over `sample_rows` positions, those past the end left out); every row, when they may not (then the draw is
    over the rows there are)."""
    sources = make_sources()
    first = sources[0][1]
    table = TablePass(first, spec, hashing)
    early = holdout > 0 and n_estimate >= 2 * sample_rows
    held = _held_draw(sample_rows, holdout, seed) if early else None
    kept, labels, starts, m = [], [], {}, 0
    for i, source in sources:
        starts[i] = m
        for part in source.parts():
            if m + part.n > sample_rows:
                part = take_part(part, np.arange(sample_rows - m))
            table.learn(part)
            tick(part.n)
            if early:
                kept.append(take_part(part, held[(held >= m) & (held < m + part.n)] - m))
                labels.append(part.labels)
            else:
                kept.append(part)
            m += part.n
            if m >= sample_rows:
                break
        if m >= sample_rows:
            break
    if m == 0:
        raise MpinnError("%s has a header but no rows" % first.path)
    table.settle()
    meta = dict(first.meta)
    meta.update(hashing=table.contract, task=table.task, classes=table.classes, has_label=first.has_label,
                numeric_stats=table.numeric_stats(), sample_rows=m)
    if early:
        held = held[held < m]
    elif holdout > 0:
        held = _held_draw(m, holdout, seed)
        labels = [p.labels for p in kept]
        kept = [take_part(p, h) for p, h in zip(kept, _positions_in(kept, held))]
    else:
        held, labels, kept = np.zeros(0, np.int64), [p.labels for p in kept], []
    pieces = []
    for part in kept:           # the held-out rows, hashed under the contract now known
        if part.n:
            idx, y = table.chunk(part)
            Xs = csr_from_indices(idx, table.contract["n_columns"]) if idx is not None else None
            pieces.append(Dataset(Xs, part.Xd, y, meta))
    y_sample = table.labels(np.concatenate([np.asarray(v) for v in labels]), m) \
        if first.has_label else np.zeros(m)
    valid = concat_rows(pieces, meta) if pieces else None
    fan_in = float(len(table.contract["features"]) * per_feature_nnz(table.contract)) \
        if table.contract is not None else 1.0
    by_file = {}                # the held-out positions, file by file
    bounds = sorted(starts.items(), key=lambda kv: kv[1]) + [(None, m)]
    for (i, lo), (_, hi) in zip(bounds, bounds[1:]):
        by_file[i] = held[(held >= lo) & (held < hi)] - lo
    stream = Stream(make_sources, table, meta, by_file, max(n_estimate - len(held), 1), fan_in, y_sample, window)
    return stream, valid


def _positions_in(parts, rows):
    """rows (sorted positions over the parts one after another), cut into each part's own positions."""
    out, at = [], 0
    for p in parts:
        out.append(rows[(rows >= at) & (rows < at + p.n)] - at)
        at += p.n
    return out
