"""What training reads: the data sets on the ranks that read them, their labels checked, the numeric
transform fitted to the training file and set on both sets, and the shapes every rank needs."""
import os
import time
from dataclasses import replace

import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data.base import Rows
from mpinn.data.files import describe as describe_files
from mpinn.data.info import DataInfo
from mpinn.data.fit.labels import binary_classes, task_note
from mpinn.data.stream_setup import reader_count, reader_streams, stream_input
from mpinn.data.fit.transform import NumericTransform


IN_RUNS = 65536        # --shuffle-block from which a file read from disk is read in runs long enough


def given_classes(args):
    """DataSpec's task and classes where --classes names them (two: binary, the positive class last), else {}."""
    if not args.classes:
        return {}
    classes = args.classes.split(",")
    task = args.task if args.task != "auto" else "binary" if len(classes) == 2 else "multiclass"
    return {"task": task, "classes": binary_classes(classes, args.positive_class) if task == "binary" else classes}


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


def check_labels(data, label="the label"):
    """A training label with one value has nothing to teach: one clear error."""
    n = len(data)
    if data.task == "regression":
        y = np.asarray(data.y, dtype=np.float64)
        if n and float(np.min(y)) == float(np.max(y)):
            raise MpinnError("%s holds one value (%g) in all %d training rows: nothing to learn"
                             % (label, float(y[0]), n))
        return
    classes = data.meta.get("classes") or []
    present = np.unique(np.asarray(data.y).astype(np.int64)) if n else []
    if len(classes) < 2 or len(present) < 2:
        seen = [classes[int(i)] for i in present] if len(classes) else []
        raise MpinnError("%s holds one value (%s) in all %d training rows: nothing to learn"
                         % (label, ", ".join(repr(c) for c in seen) or "none", n))


def fit_transform(data, mode, bins="auto"):
    """The NumericTransform of a training file (statistics of all its rows), or None."""
    t = NumericTransform.fit(data.numeric_stats(), mode, data.target_stats(), bins, data.meta.get("source"))
    data.meta["transform"] = t.to_dict() if t is not None else None
    return t


def set_transform(data, transform, where):
    """Read `data` through the training file's transform: the same numeric columns, in order."""
    if transform is not None:
        transform.check_columns(data.numeric_names if data.raw_dense else [], where)
    elif data.raw_dense:
        raise MpinnError("%s has %d numeric columns, the training data has none" % (where, data.raw_dense))
    data.transform = transform


def who_reads(readers, size, reading=None):
    """The stream line's word on who reads (--readers): `reading`, the readers that have files to read
    (Recipe.reading; None: all)."""
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


def held_how(cfg, valid):
    """How the held-out rows were chosen, for the start-up line."""
    if valid is None or cfg.valid:
        return ""
    kind, _, column = cfg.holdout_by.partition(":")
    share = "%g%%" % (100 * cfg.holdout)
    return {"random": " (a random %s)" % share, "last": " (the last %s of the rows, in file order)" % share,
            "time": " (the last %s by %s)" % (share, column),
            "group": " (whole groups of %s, about %s)" % (column, share)}[kind]


def load_everywhere(args, comm, say, resplit=None):
    """Rank 0 reads the data (with --input local every rank reads the packed file); every rank learns
    the shapes it needs. Returns (train, valid, info): the data sets on the ranks that read, None elsewhere, and
    the DataInfo on every rank. resplit: a list, to which each rank that read data held in memory appends a
    function giving (train, valid) anew, the same rows split as they were here (an ensemble's members read the data
    once and hold out the same rows; a stream, read anew each epoch, appends none)."""
    from mpinn.data import DataSpec, load_data
    rank0 = comm.rank == 0
    readers = reader_count(args.readers, comm.size) if args.readers != "1" else 1    # checked before reading

    def load():
        t = time.perf_counter()
        spec = DataSpec(label=args.label, categorical=args.categorical, numeric=args.numeric, task=args.task,
                        format=args.format)
        hashing = args.hashing      # the options' HashSpec (mpinn.settings)
        by, _, column = args.holdout_by.partition(":")
        by = None if by == "random" else by
        spec = replace(spec, positive=args.positive_class, exclude=[column] if column else [],
                       missing_labels=args.missing_labels, **given_classes(args))
        streamed = stream_input(args, spec, hashing) if not isinstance(args.data, Rows) else None
        if streamed is not None:
            data, valid, _ = streamed
            say("stream: fitted on the first %d rows; shuffled in windows of %d rows; %s" % (
                data.meta["streamed"]["sample_rows"], args.shuffle_window,
                who_reads(readers, comm.size, data.recipe.reading(readers) if readers > 1 else None)))
        else:
            data = args.data if isinstance(args.data, Rows) else load_data(
                args.data, spec, hashing, args.default_rows, args.seed)
        transform = fit_transform(data, args.numeric_transform, args.numeric_bins)
        set_transform(data, transform, "the data")
        if streamed is not None:
            train = data
            if valid is not None:
                set_transform(valid, transform, "the held-out rows")
        elif args.valid:
            # read as the training data was: its columns (a missing one named), task, classes and hashing contract
            columns = {k: data.meta[k] for k in ("categorical", "numeric") if data.meta.get(k) is not None}
            valid = load_data(args.valid, replace(spec, task=data.task, classes=data.meta.get("classes"), **columns),
                              hashing.using(data.meta.get("hashing")))
            set_transform(valid, transform, args.valid)
            train = data
            if resplit is not None:
                resplit.append(lambda: (data, valid))
        else:
            values = None
            if by == "last":        # a log written in time order: its last rows
                by, values = "time", np.arange(len(data))
            elif by is not None:
                from mpinn.data.many import read_column_of
                values = read_column_of(data.meta.get("files") or args.data, column,
                                        label=args.label if args.missing_labels == "drop" else None)
            train, valid = data.split(args.holdout, args.seed, by, values)
            if resplit is not None:
                resplit.append(lambda: data.split(args.holdout, args.seed, by, values))
        if not train.streamed and len(train) < comm.size:
            raise MpinnError("%d training rows for %d ranks: every rank needs at least one row"
                             % (len(train), comm.size))
        check_labels(train, "the label column %r" % args.label if args.label else "the label")
        classes = train.meta.get("classes")
        decided = args.task == "auto" and not args.classes      # from the labels: say a doubtful call
        say("data: %s, %s%d training rows, %s held out%s, %s input columns + %d dense, task %s%s (%.1f s)" % (
            describe_files(data.meta["files"]) if data.meta.get("files") else args.data if isinstance(args.data, str)
            else "embedded click log" if args.data is None else "in-memory data",
            "about " if train.streamed else "", len(train),
            ("about %d" if getattr(valid, "streamed", False) else "%d") % (len(valid) if valid is not None else 0),
            streamed[2] if streamed is not None else held_how(args, valid),
            train.n_sparse, train.n_dense, train.task,
            " (positive class %r)" % classes[1] if train.task == "binary" else
            task_note(train.task, classes, None if train.streamed else train.y) if decided else "",
            time.perf_counter() - t))
        if data.meta.get("dropped_unlabelled") and not train.streamed:     # a stream's: at its first epoch's end
            say("labels: missing in %d rows, left out (--missing-labels drop)" % data.meta["dropped_unlabelled"])
        if train.meta.get("columns_chosen"):
            say(train.meta["columns_chosen"])
        if transform is not None:
            say("preprocessing: %s" % transform.describe())
        if isinstance(args.data, str) and args.data.endswith(".mpinn"):
            from mpinn.host.memory import memory_for_job
            note = larger_than_memory_note(args.data, os.path.getsize(args.data), memory_for_job(), args.shuffle_block)
            if note:
                say(note)
        return train, valid

    loaded = comm.root_call(load)
    train, valid = loaded if rank0 else (None, None)
    if args.input == "local" and not rank0:     # the same file, the same seeded split, on every rank
        train, valid = load()
    # every rank learns the shapes it needs; the data itself stays on rank 0
    info = comm.bcast_obj(DataInfo.of(train, valid, args.dtype) if rank0 else None)
    if args.readers != "1":     # each reader streams its own share of the files
        t = info.meta.get("transform")
        train = reader_streams(train, comm, NumericTransform.from_dict(t) if t else None, readers)
    if args.input == "local" and comm.size > 1:
        # every rank fitted the transform from its own pass over the file: they must agree to the bit
        mine = train.meta.get("transform") if train is not None else None
        if not all(comm.allgather_obj(mine == info.meta.get("transform"))):
            raise MpinnError("the ranks computed different numeric statistics of %s" % args.data, collective=True)
    return train, valid, info
