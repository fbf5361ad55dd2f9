"""What training reads, as the InputPlan says (mpinn.data.plan): the data sets on the ranks that read them, their
labels checked, the numeric transform fitted to the training file and set on both sets, the held-out rows read
like the training set (read_like), and the shapes every rank needs."""
import time

import numpy as np

from mpinn.core.errors import MpinnError
from mpinn.data import load_data
from mpinn.data.fit.labels import task_note
from mpinn.data.fit.transform import NumericTransform
from mpinn.data.info import DataInfo
from mpinn.data.many import RowsInBlocks, read_column_of
from mpinn.data.spec import read_like
from mpinn.data.stream_setup import open_streamed, reader_streams


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


def held_out_rows(plan, train_meta):
    """The held-out files' rows (plan.holdout.files: --valid's, or a stream's last files), read like the training
    set: in memory, or a block at a time at each evaluation (RowsInBlocks)."""
    spec, hashing = read_like(train_meta, plan.spec, plan.hashing)
    if plan.holdout.streamed:
        return RowsInBlocks(plan.holdout.files, spec, hashing)
    return load_data(plan.holdout.files, spec, hashing)


def split_rows(plan, data):
    """A function giving (train, valid) of rows held in memory, split as plan.holdout says: a seeded share, the last
    share in file order, the latest by a time column or whole groups of a column."""
    holdout, by, values = plan.holdout, None, None
    if holdout.kind == "last":        # a log written in time order: its last rows
        by, values = "time", np.arange(len(data))
    elif holdout.kind in ("time", "group"):
        by = holdout.kind
        values = read_column_of(data.meta.get("files") or plan.files.given, holdout.column,
                                label=plan.spec.label if plan.spec.missing_labels == "drop" else None)
    return lambda: data.split(holdout.share, holdout.seed, by, values)


def load_everywhere(plan, comm, say, resplit=None):
    """Rank 0 reads the data (with --input local every rank reads the packed file) as the InputPlan says; every rank
    learns the shapes it needs. Returns (train, valid, info): the data sets on the ranks that read, None elsewhere,
    and the DataInfo on every rank. resplit: a list, to which each rank that read data held in memory appends a
    function giving (train, valid) anew, the same rows split as they were here (an ensemble's members read the data
    once and hold out the same rows; a stream, read anew each epoch, appends none)."""
    rank0 = comm.rank == 0

    def load():
        t = time.perf_counter()
        if plan.streamed:
            data, valid = open_streamed(plan)
            held = plan.holdout.how(data.meta["streamed"]["sample_rows"] if plan.holdout.kind == "random" else None)
            say("stream: fitted on the first %d rows; shuffled in windows of %d rows; %s" % (
                data.meta["streamed"]["sample_rows"], plan.window, plan.who_reads))
        else:
            data = plan.rows if plan.rows is not None else load_data(plan.files, plan.spec, plan.hashing,
                                                                     plan.default_rows, plan.seed)
            held = plan.holdout.how()
        transform = fit_transform(data, plan.transform, plan.bins)
        set_transform(data, transform, "the data")
        if plan.holdout.kind == "files":        # --valid's, or a stream's last files: read like the training set
            train, valid = data, held_out_rows(plan, data.meta)
            set_transform(valid, transform, plan.holdout.files.given)
            if resplit is not None and not plan.streamed:       # a stream is opened anew for each member
                resplit.append(lambda: (data, valid))
        elif plan.streamed:                     # a share of the stream's sample, or none
            train = data
            if valid is not None:
                set_transform(valid, transform, "the held-out rows")
        else:
            split = split_rows(plan, data)
            train, valid = split()
            if resplit is not None:
                resplit.append(split)
        if not train.streamed and len(train) < comm.size:
            raise MpinnError("%d training rows for %d ranks: every rank needs at least one row"
                             % (len(train), comm.size))
        check_labels(train, plan.label_words())
        classes = train.meta.get("classes")
        say("data: %s, %s%d training rows, %s held out%s, %s input columns + %d dense, task %s%s (%.1f s)" % (
            plan.source_words(), "about " if train.streamed else "", len(train),
            ("about %d" if getattr(valid, "streamed", False) else "%d") % (len(valid) if valid is not None else 0),
            held if valid is not None else "", train.n_sparse, train.n_dense, train.task,
            " (positive class %r)" % classes[1] if train.task == "binary" else
            task_note(train.task, classes, None if train.streamed else train.y) if plan.task_decided else "",
            time.perf_counter() - t))
        if data.meta.get("dropped_unlabelled") and not train.streamed:     # a stream's: at its first epoch's end
            say("labels: missing in %d rows, left out (--missing-labels drop)" % data.meta["dropped_unlabelled"])
        if train.meta.get("columns_chosen"):
            say(train.meta["columns_chosen"])
        if transform is not None:
            say("preprocessing: %s" % transform.describe())
        if plan.memory_note:
            say(plan.memory_note)
        return train, valid

    loaded = comm.root_call(load)
    train, valid = loaded if rank0 else (None, None)
    if plan.read_local and not rank0:     # the same file, the same seeded split, on every rank
        train, valid = load()
    # every rank learns the shapes it needs; the data itself stays on rank 0
    info = comm.bcast_obj(DataInfo.of(train, valid, plan.dtype, (plan.reading, plan.readers)) if rank0 else None)
    if plan.reading == "readers":     # each reader streams its own share of the files
        t = info.meta.get("transform")
        train = reader_streams(train, comm, NumericTransform.from_dict(t) if t else None, plan.readers)
    if plan.read_local and comm.size > 1:
        # every rank fitted the transform from its own pass over the file: they must agree to the bit
        mine = train.meta.get("transform") if train is not None else None
        if not all(comm.allgather_obj(mine == info.meta.get("transform"))):
            raise MpinnError("the ranks computed different numeric statistics of %s" % plan.source_words(),
                             collective=True)
    return train, valid, info
