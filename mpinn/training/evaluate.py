"""Held-out metrics computed by every rank together: data parallel (each rank scores a share) or towers
(every tower scores every row, and the mixture is scored)."""
import numpy as np

from mpinn.comm import split_counts
from mpinn.model.metrics import auc, compute_metrics, metric_sums, metrics_from_sums, sums_length
from mpinn.training.towers import fit_weights, mix


def task_of(spec):
    """The task a model's head answers: regression, binary or multiclass."""
    if spec.loss == "squared":
        return "regression"
    return "binary" if spec.loss == "sigmoid" and spec.n_out == 1 else "multiclass"


def held_out_batches(data, chunk, dtype):
    """Rank 0: the held-out rows as Batches of `chunk` rows, in order (data.in_order: a set too large to hold,
    mpinn.data.many.RowsInBlocks, is read as it comes)."""
    return data.in_order(chunk, dtype)


def each_chunk(comm, data, chunk, dtype):
    """(rows, rank 0's Batch or None elsewhere) of every chunk of the held-out rows, on every rank: rank 0 says each
    chunk's size (0: the end), so no rank needs the count up front."""
    batches = held_out_batches(data, chunk, dtype) if comm.rank == 0 else None
    head = np.zeros(1, np.int64)
    while True:
        batch = next(batches, None) if batches is not None else None
        head[0] = batch.n if batch is not None else 0
        comm.Bcast_(head, root=0, what="held-out chunk size")
        if head[0] == 0:
            return
        yield int(head[0]), batch


def evaluate(model, comm, layout, data, chunk=65536, predict=None):
    """Held-out metrics over ALL rows: rank 0 scatters the rows chunk by chunk, each rank scores its
    share, the per-rank sums are added (Allreduce), so each rank's share counts by its number of rows;
    binary AUC, which is not a sum, is computed on rank 0 from the gathered predictions. Collective:
    call on every rank (data on rank 0 only). Returns the same metrics dict on every rank.
    predict: this rank's rows -> predictions (default model.predict; a sharded table's fetches its
    rows, a collective every rank makes once per chunk, whatever its share)."""
    predict = predict or model.predict
    rank0 = comm.rank == 0
    task = task_of(model.spec)
    k = model.spec.n_out if task == "multiclass" else 2
    sums = np.zeros(sums_length(task, k))
    preds, ys = [], []
    for n, batch in each_chunk(comm, data, chunk, model.dtype):
        local = comm.scatter_batch(batch, layout)
        pred = np.ascontiguousarray(predict(local), dtype=np.float64)
        sums += metric_sums(task, local.y, pred, k)
        if task == "binary":
            counts = split_counts(n, comm.size)
            got = np.empty(n) if rank0 else None
            preds.append(comm.Gatherv_(pred.ravel(), counts, got, what="held-out predictions"))
            if rank0:
                ys.append(batch.y)
    comm.Allreduce_sum_(sums, "metric sums")
    auc_value = None
    if task == "binary" and rank0:
        p = np.concatenate(preds) if preds else np.zeros(0)
        y = np.concatenate(ys) if ys else np.zeros(0)
        keep = np.isfinite(p)
        auc_value = auc(y[keep], p[keep])
    auc_value = comm.bcast_obj(auc_value)
    return metrics_from_sums(task, sums, k, auc_value)


def evaluate_towers(model, comm, layout, data, tower_mix="mean", chunk=65536):
    """Tower mode: every tower predicts every held-out row (rank 0 broadcasts the chunks), rank 0
    gathers the predictions, scores each tower and the mixture (the plain mean, or weights fitted
    to the held-out loss with --tower-mix fit). The mixture's metrics are the record's metrics;
    "towers" and "weights" hold each tower's and the mixture's weights."""
    rank0 = comm.rank == 0
    preds, ys = [], []
    for n, batch in each_chunk(comm, data, chunk, model.dtype):
        local = comm.scatter_batch(batch, layout, replicate=True)
        pred = np.ascontiguousarray(model.predict(local), dtype=np.float64)
        got = comm.Gather_(pred.ravel(), what="tower predictions")
        if rank0:
            preds.append(got.reshape((comm.size,) + pred.shape))
            ys.append(local.y)          # as the model sees them (a regression's: standardised), like the predictions
    out = None
    if rank0:
        P, y = np.concatenate(preds, axis=1), np.concatenate(ys)
        task = task_of(model.spec)
        w = fit_weights(task, y, P) if tower_mix == "fit" else np.full(len(P), 1.0 / len(P))
        out = compute_metrics(task, y, mix(P, w))
        out["towers"] = [compute_metrics(task, y, p) for p in P]
        out["weights"] = [float(x) for x in w]
    return comm.bcast_obj(out)
