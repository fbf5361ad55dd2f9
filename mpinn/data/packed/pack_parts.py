"""Prepare in parallel (`mpirun -np N python -m mpinn.prepare`): every rank packs its share of the input files into
one part of a multi-part dataset (mpinn.data.packed.parts), which training and predict read as one prepared file.

Shares are contiguous runs of files in their order, balanced by their estimated rows, so the parts one after another
hold the rows in the order one prepared file holds them. What every part must agree on is decided first, by rank 0:
the hashing contract, the task and classes. When they are known up front (click-log text, whose task is binary and
whose hash bits are given or 18; trick mode's bits given; --like) every rank packs its share in one pass at once;
otherwise (auto bits, split or onehot mode, the classes of a CSV's labels, --report) rank 0 scans every file first,
as one prepare's first pass does, and the ranks then pack in one pass each. The numeric columns' statistics are
folded over every row in file order as one pass folds them (mpinn.data.fit.stats: the same bits however chunked): by
rank 0's scan, or by each part's rank over its stored values once every part is packed (the blocks wholly inside
it; rank 0 joins them in order), so the dataset's statistics and transform are one prepared file's to the bit.

An error on any rank (a bad file in the middle) ends every rank with one line and exit 2, after the parts
written so far are removed: the parts are written into a temporary folder, which becomes X.mpinn.parts, and
the manifest X.mpinn appears last."""
import os
import shutil
import tempfile
import time
import traceback
from dataclasses import replace

import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data.base import CHUNK_ROWS
from mpinn.data.fit.chunks import TablePass
from mpinn.data.fit.stats import ColumnStats, PartFold, first_finite
from mpinn.data.many import chained_source
from mpinn.data.packed.format import PackedDataset
from mpinn.data.packed.packer import Progress, finished_meta, known_up_front, prepare
from mpinn.data.packed.parts import manifest_bytes, part_name, parts_dir
from mpinn.host.launch import follow_umask


def shares(sizes, n):
    """The rank of each file (sizes: rows or bytes): contiguous runs in file order, rank r's files all before rank
    r+1's, balanced by size (a file goes to the rank whose part of the total holds its middle)."""
    ends = np.arange(1, n + 1) / n      # rank r's part of the total ends at ends[r]
    total = float(sum(sizes)) or 1.0
    before = np.cumsum([0] + list(sizes))
    owner = [min(n - 1, int(np.searchsorted(ends, (before[i] + sizes[i] / 2.0) / total, side="right")))
             for i in range(len(sizes))]
    return [r - owner[0] for r in owner]        # rank 0 packs the first file (it decides the columns)


def _decide(source, files, columns, spec, hashing, threads, report, chunk_rows):
    """Rank 0: what every part must share (JSON-able): the columns, the contract, the task and classes, the
    meta of the whole, and the numeric statistics when a scan of every file had to come first (else None)."""
    spec, hashing = known_up_front(source, spec, hashing)
    table = TablePass(source, spec, hashing, threads, count_values=report)
    first = source.sources[0]
    meta = dict(first.meta, files=files.paths) if len(files) > 1 else dict(first.meta)
    scanned, collisions = table.needs_scan, None
    if scanned:     # one pass over every file, as one prepare's first pass (the parts then pack in one pass)
        whole = chained_source(files, columns, chunk_rows)
        table = TablePass(whole, spec, hashing, threads, count_values=report)
        n = 0
        for part in whole.parts():
            n += part.n
            table.learn(part)
        table.settle()
        if n == 0:
            raise MpinnError("%s has a header but no rows" % whole.path)
        if table.fitter is not None and table.contract is not None:
            collisions = table.fitter.report(table.contract)
    task = table.task
    if not source.has_label and task == "auto":
        task = "regression"     # nothing to learn from; predict only needs the columns
    return {"categorical": list(source.categorical), "numeric": list(source.numeric), "contract": table.contract,
            "task": task, "classes": table.classes, "has_label": source.has_label, "meta": meta,
            "stats": table.numeric_stats() if scanned else None, "scanned": scanned, "collisions": collisions}


def _dense_chunks(path):
    """A packed part's stored numbers, CHUNK_ROWS rows at a time."""
    p = PackedDataset(path)
    try:
        for s in range(0, len(p), CHUNK_ROWS):
            yield p.dense_rows(s, min(s + CHUNK_ROWS, len(p)))
    finally:
        p.release()


def _on_every_rank(comm, fn, asleep=False):
    """fn() on every rank; an error on any ends every rank with one line (collective). asleep: the ranks done
    first wait without taking a core from the others (comm.barrier_asleep)."""
    result, error = None, None
    try:
        result = fn()
    except MpinnError as e:
        error = str(e)
    except Exception as e:  # noqa: BLE001 - every rank must hear of it
        traceback.print_exc()
        error = "rank %d of %d failed with %s: %s" % (comm.rank, comm.size, type(e).__name__, e)
    if asleep:
        comm.barrier_asleep()
    errors = comm.allgather_obj(error)
    if any(errors):
        raise MpinnError(next(e for e in errors if e), collective=True)
    return result


def _fold_in_parallel(comm, path, names, rows):
    """The whole's statistics on rank 0 (None elsewhere), each part folded by the rank that packed it, at once
    (mpinn.data.fit.stats.PartFold: its whole blocks, from its start row and the first finite values all parts agree
    on), joined on rank 0 in order: the same bits as one pass over every row. rows: every rank's rows (0: no
    part); path: this rank's part. Each rank reads its part's numbers back (W4 text: a sixth to a third of the time
    packing them took, measured here), where rank 0 folding them as it packed (as one prepare does) would keep the
    others waiting."""
    d = len(names)
    firsts = comm.allgather_obj(_on_every_rank(comm, lambda: first_finite(_dense_chunks(path), d) if rows[
        comm.rank] else None, asleep=True))
    shift = np.full(d, np.nan)
    for f in firsts:
        if f is not None:
            shift = np.where(np.isnan(shift), f, shift)

    def fold():
        if not rows[comm.rank]:
            return None
        part = PartFold(names, sum(rows[:comm.rank]), shift)
        for X in _dense_chunks(path):
            part.update(X)
        return part.result()
    pieces = comm.gather_obj(_on_every_rank(comm, fold, asleep=True))      # asleep: watched for a lost peer
    if comm.rank != 0:
        return None
    stats = ColumnStats(names)
    for piece in pieces:
        if piece is not None:
            stats.join(piece, shift)
    return stats.result()


def _commit(out, tmp, manifest):
    """The parts' folder and the manifest into place: the folder renamed to X.mpinn.parts (an older one put
    aside, then removed), the manifest written to a temporary name and renamed to X.mpinn last."""
    final, old = parts_dir(out), None
    here = os.path.dirname(os.path.abspath(out))
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o777 & ~mask)
    if os.path.lexists(final):
        old = tempfile.mkdtemp(prefix=".tmp-old-", dir=here)
        os.rename(final, os.path.join(old, "parts"))
    os.rename(tmp, final)
    fd, name = tempfile.mkstemp(prefix=".tmp-", suffix=".mpinn", dir=here)
    try:
        follow_umask(fd)
        os.write(fd, manifest)
        os.fsync(fd)
        os.close(fd)
        os.replace(name, out)
    except BaseException:
        if os.path.exists(name):
            os.unlink(name)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def prepare_parts(comm, out, files, columns, spec, hashing, transform=None, numeric_transform="auto",
                  threads=1, quiet=False, report=False, verify=False, chunk_rows=None, on_rows=None):
    """Pack the table files of FileSet `files` (columns: a DataSpec of the label and columns as given) as a
    multi-part dataset at `out` with every rank of `comm` (a mpinn.comm Communicator) packing its share (see
    the module). spec: the task, classes and positive class; hashing: the HashSpec; transform: a fitted
    NumericTransform's dict to store (--like), else one fitted in mode numeric_transform. Collective; returns
    the summary on rank 0 (rows, parts, seconds, rows_per_s, ...), None elsewhere. on_rows(n): this rank's rows
    packed so far, as it packs (the heartbeat's, which rank 0 shows while it waits)."""
    t0 = time.perf_counter()
    rank = comm.rank
    here = os.path.dirname(os.path.abspath(out))

    def start():
        os.makedirs(here, exist_ok=True)
        try:
            tmp = tempfile.mkdtemp(prefix=".tmp-%s.parts-" % os.path.basename(out), dir=here)
        except OSError as e:
            raise MpinnError("cannot write into %s: %s" % (here, e.strerror))
        try:
            decided = _decide(chained_source(files[:1], columns, chunk_rows), files, columns,
                              spec, hashing, threads, report, chunk_rows)
            # balanced by rows, as the files' sizes tell them (a .gz file's through its compression ratio)
            owner = shares([files[i:i + 1].n_estimate for i in range(len(files))], comm.size)
            mine = [i for i, r in enumerate(owner) if r == 0]
            source = chained_source(files.pick(mine), columns, chunk_rows)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return tmp, owner, decided, source
    first = comm.root_call(start)
    tmp, owner, decided = comm.bcast_obj(first[:3] if rank == 0 else None)
    source = first[3] if rank == 0 else None
    folds = bool(decided["numeric"]) and not decided["scanned"]     # the statistics, folded on every rank
    ranks_with_files = sorted(set(owner))
    mine = [i for i, r in enumerate(owner) if r == rank]
    path = os.path.join(tmp, part_name(ranks_with_files.index(rank))) if mine else None

    def pack():
        if not mine:
            return None
        named = source if source is not None else chained_source(files.pick(mine),
                                         replace(columns, categorical=decided["categorical"],
                                                 numeric=decided["numeric"]), chunk_rows)   # rank 0's columns
        done = prepare(named, path, replace(spec, task=decided["task"], classes=decided["classes"]),
                       hashing.using(decided["contract"]), numeric_transform=numeric_transform, threads=threads,
                       progress=Progress(rank == 0 and not quiet, report=on_rows,
                                         whose="rank 0's files of %d ranks: " % comm.size), passes=1, stats=None)
        if verify:
            PackedDataset(path, verify=True)
        return done
    try:        # an error on any rank ends every rank, and the parts written so far go
        summary = _on_every_rank(comm, pack, asleep=True)
        rows = comm.allgather_obj(summary["rows"] if summary else 0)
        stats = _fold_in_parallel(comm, path, decided["numeric"], rows) if folds else decided["stats"]
    except BaseException:       # an error, or SIGTERM (mpinn.host.exits.Terminated): the parts so far go
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise

    def finish():
        try:
            part_paths = [os.path.join(tmp, part_name(k)) for k in range(len(ranks_with_files))]
            meta = dict(decided["meta"], hashing=decided["contract"], task=decided["task"],
                        classes=decided["classes"], has_label=decided["has_label"])
            finished_meta(meta, stats, decided["numeric"], transform, numeric_transform, source.path)
            opened = [(os.path.join(os.path.basename(parts_dir(out)), os.path.basename(p)), PackedDataset(p))
                      for p in part_paths]
            _commit(out, tmp, manifest_bytes(meta, opened))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        seconds = time.perf_counter() - t0
        n = int(sum(rows))
        return {"out": out, "rows": n, "parts": len(part_paths), "part_rows": [r for r in rows if r],
                "n_columns": summary["n_columns"], "n_dense": summary["n_dense"], "task": meta["task"],
                "hashing": meta["hashing"], "transform": meta.get("transform"), "seconds": seconds,
                "rows_per_s": n / seconds if seconds else 0.0, "scanned": decided["scanned"],
                "bytes": sum(os.path.getsize(os.path.join(parts_dir(out), part_name(k)))
                             for k in range(len(part_paths))), "collisions": decided["collisions"]}
    return comm.root_call(finish)
