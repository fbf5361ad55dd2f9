"""--table sharded: the hashed block's rows split over the ranks, each rank holding and stepping only its own
(ShardedStep; the plan, mpinn.settings.plan, chooses between that and a replicated table, the exchange and the hot
rows)."""
import contextlib
import time

import numpy as np
import scipy.sparse as sp

from mpinn.device.backend import compact_csr
from mpinn.core.batch import Batch, tree_add
from mpinn.comm.shard import RowOwners, TableShards
from mpinn.comm.shard_node import NodeShards
from mpinn.core.errors import MpinnError
from mpinn.host.heap import small_pages_at
from mpinn.optim.fused import CODECS, coalesce_rows
from mpinn.training.step_base import Step, all_finite, check_params


def own_rows(size, rank, n_rows):
    """(lo, hi): the table rows rank `rank` of `size` owns when the table is sharded (RowOwners' ranges)."""
    bounds = RowOwners(n_rows, size).bounds
    return int(bounds[rank]), int(bounds[rank + 1])


class ShardedStep(Step):
    """The hashed block's rows split over the ranks in contiguous id ranges (TableShards); each rank
    holds, writes and steps only its own (with their optimizer state), while the flat buffers keep
    their full size in virtual memory only: the other ranks' rows are pages never touched.

    A step: this rank's batch as a compact CSR over its k unique ids; the ids go to their owners and
    the rows' current values come back (Alltoall of counts, Alltoallv of ids, Alltoallv of rows);
    forward and backward on those k rows; the k gradient rows go back to their owners along the same
    counts (Alltoallv); the dense layers' gradient and the loss are summed by one Allreduce; then each
    owner steps its own rows (their segments in rank order: the arithmetic of the replicated exchange)
    and every rank the dense layers. The skip verdict rides in that Allreduce: an owner that received
    a gradient row that is not finite writes NaN into the loss slot before it, NaN survives a sum, so
    every rank sees the same verdict before anything is stepped and a skipped step changes nothing
    anywhere (the replicated exchange checks the same rows, unsummed, as they arrive).

    Per rank and step, the bytes moved and the rows updated stay about constant as the ranks grow
    (the rank's own batch's rows, and about as many as its owner part receives; the replicated
    exchange gathers every rank's rows on every rank).

    --wire-rows bf16 (mpinn.comm.wire): the rows and the gradient rows travel as bfloat16, every row rounded
    whichever rank holds it, so P ranks still compute what one process does with the ranks' shares as micro-batches.

    The exchange is flat (TableShards) or node-aware (NodeShards, --shard-exchange: the node's ranks
    combine their requests), with the same arithmetic. With hot rows (`hot`), every rank holds
    the most frequent rows, their owners dealt round robin (RowOwners): they are not fetched, their
    owners step them from every rank's gradient rows, and one Allgatherv after the step refreshes every
    rank's copy (refresh_hot_); checkpoints gather their state from those owners."""

    def __init__(self, model, optimizer, comm, topology, exchange="flat", exchange_why="", hot=(), wire="fp32",
                 **kw):
        super().__init__(model, optimizer, comm, **kw)
        self.n_rows, self.width = model.table
        self.exchange, self.exchange_why = exchange, exchange_why
        if len(hot) and not optimizer.sparse_ok:    # the plan gives none then (the rule hot-rows-lazy)
            raise ValueError("hot rows need the lazy update of the hashed table")
        owners = RowOwners(self.n_rows, comm.size, hot)
        if exchange == "node":
            self.shards = NodeShards(comm, self.n_rows, self.width, owners, topology, wire=wire,
                                     sum_rows=coalesce_rows, codecs=CODECS)
        else:
            self.shards = TableShards(comm, self.n_rows, self.width, owners, node_of=topology.node_of, wire=wire,
                                      codecs=CODECS)
        self.own = (self.shards.lo * self.width, self.shards.hi * self.width)   # of the flat buffers
        for a in [model.grad_buffer] + [optimizer.arrays[k] for k in optimizer.element_state]:
            if isinstance(a, np.ndarray):       # written at the own rows only: no huge page across their ends
                small_pages_at(a, self.own)

    def release_(self):
        """Collective: what the exchange made is freed (the node exchange's communicators); evaluation after this
        fetches through the flat exchange (the same rows)."""
        self.shards.free()

    @property
    def hot_rows(self):
        return self.shards.owners.n_hot

    @property
    def table(self):
        """This rank's (n_rows, width) view of the table (only its own rows are right)."""
        return self.model.params[:self.n_rows * self.width].reshape(self.n_rows, self.width)

    def compact(self, local):
        """(the batch's sorted unique row ids, the batch with Xs over them: columns 0..k-1). The same
        compact CSR the replicated backward builds (sparse_rows_grad), so the sums are the same."""
        ids, Xc = compact_csr(np, sp, local.Xs)
        return ids, Batch(Xc, local.Xd, local.y)

    def __call__(self, local, n_global, step, lr):
        rec = self.timeline.add
        t0 = time.perf_counter()
        ids, batch = self.compact(local)
        t1 = time.perf_counter()
        rows, plan = self.shards.fetch(self.table, ids)
        rec("compute", t0, t1, step)
        rec("comm", t1, time.perf_counter(), step, "fetch rows (Alltoallv)")
        return self.finish_(batch, rows, plan, n_global, step, lr)

    def finish_(self, batch, rows, plan, n_global, step, lr, busy=contextlib.nullcontext):
        """The step from the gradient on, once the batch's rows are here: (mean loss, ok). busy: a context entered
        around the compute and the update (the stale step's progress thread moves the next rows then)."""
        model, comm, rec = self.model, self.comm, self.timeline.add
        t2 = time.perf_counter()
        with busy():
            grad_rows = self.gradient_rows(batch, 1.0 / (n_global or 1), rows)
            self.faults.fire(step, model.grad_buffer)
        t3 = time.perf_counter()
        mine = self.shards.send_back(plan, grad_rows)
        t4 = time.perf_counter()
        dense = model.grad_buffer[model.dense_start:]
        if not all_finite(mine.rows):
            dense[-1] = np.nan
        comm.Allreduce_sum_(dense, "dense gradient and loss")
        ok = all_finite(dense)
        t5 = time.perf_counter()
        if ok:
            with busy():
                self.update_(mine, lr)
        t6 = time.perf_counter()
        if ok:
            self.shards.refresh_hot_(self.table)
        t7 = time.perf_counter()
        rec("compute", t2, t3, step)
        rec("comm", t3, t4, step, "gradient rows to owners (Alltoallv)")
        rec("comm", t4, t5, step, "dense Allreduce")
        rec("update", t5, t6, step)
        if self.hot_rows:
            rec("comm", t6, t7, step, "hot rows to every rank (Allgatherv)")
        return float(dense[-1]) / (n_global or 1), ok

    def gradient_rows(self, batch, scale, rows):
        """This rank's (k, width) gradient rows of its k fetched rows, and its dense gradient in the
        buffer; with grad_accum K, over K micro-batches summed in order (Step.micro_batches)."""
        model = self.model
        grad = lambda mb: model.loss_grad_(mb, scale, sparse_grad=True, table=rows).rows    # noqa: E731
        if self.grad_accum == 1:
            return grad(batch)
        parts = [p for p in self.micro_batches(batch, model.dense_start, grad) if p.shape[0]]
        return tree_add(parts) if parts else np.zeros_like(rows)

    def update_(self, mine, lr):
        """Step this rank's own rows (from every rank's gradient rows for them) and the dense layers."""
        model, opt = self.model, self.optimizer
        if opt.sparse_ok:       # lazy: the touched rows; rows given, step_ leaves the rest of the table alone
            opt.step_(model.params, model.grads, mine, lr=lr)
            return
        # --hashed-update dense: every own row every step, with the summed rows written into their place
        lo, hi = self.own
        g = model.grads[lo:hi].reshape(-1, self.width)
        g.fill(0)
        summed = mine.coalesced()
        g[summed.ids - self.shards.lo] = summed.rows
        opt.step_(model.params, model.grads, None, regions=[self.own, (model.dense_start, model.size)], lr=lr)

    def predict(self, local):
        """Predictions for this rank's rows (collective: the rows are fetched from their owners)."""
        ids, batch = self.compact(local)
        rows, _ = self.shards.fetch(self.table, ids)
        return self.model.predict(batch, table=rows)

    # ------------------------------------------------------------ start, checkpoints, the model file
    def broadcast_params_(self):
        """At start: the dense layers are rank 0's; each rank made its own rows (MLP.init_ with rows,
        every rank from the same seed) or was sent them (load_params_)."""
        dense = self.model.params[self.model.dense_start:]
        self.comm.Bcast_(dense, 0, "initial parameters (dense layers)")
        self.shards.replicate_hot_(self.table)

    def load_params_(self, params, where="parameters"):
        """Rank 0's whole flat parameters: each rank receives its rows (Scatterv), the dense part
        follows at start (broadcast_params_)."""
        model = self.model
        if self.comm.rank == 0:
            check_params(params, model, where)
            model.params[model.dense_start:] = params[model.dense_start:]
        self.shards.scatter_(params, model.params, self.width, what="table rows")

    def restore_(self, arrays, where):
        """A checkpoint (arrays on rank 0): every rank takes its rows of the parameters and of the
        optimizer state, and the dense part of the state; the written run's rank count does not matter."""
        rank0, opt, start = self.comm.rank == 0, self.optimizer, self.model.dense_start
        self.load_params_(arrays["params"] if rank0 else None, where)
        shapes = self.comm.bcast_obj({k[4:]: (v.shape, str(v.dtype)) for k, v in arrays.items()
                                      if k.startswith("opt_")} if rank0 else None)
        scalars = ("t",) + opt.scalar_state
        opt.load_scalars(self.comm.bcast_obj({k: arrays["opt_" + k] for k in scalars if "opt_" + k in arrays}
                                             if rank0 else None))
        names = opt.element_state + opt.row_state
        if not opt.t or not names:
            return
        for k in names:
            want = (opt.size,) if k in opt.element_state else (self.n_rows,)
            if k not in shapes:
                raise MpinnError("the checkpoint holds no %s state %r: it was written with another optimizer"
                                 % (opt.name, k), collective=True)
            if tuple(shapes[k][0]) != want:
                raise MpinnError("the checkpoint's optimizer state %r has shape %s, this run needs %s"
                                 % (k, tuple(shapes[k][0]), want), collective=True)
            saved = arrays["opt_" + k] if rank0 else None
            if k in opt.element_state:
                self.shards.scatter_(saved, opt.arrays[k], self.width, what="optimizer state %s" % k, hot=True)
                tail = opt.arrays[k][start:]
                if rank0:
                    tail[...] = saved[start:]
                self.comm.Bcast_(tail, 0, "optimizer state %s (dense layers)" % k)
            else:
                self.shards.scatter_(saved, opt.arrays[k], 1, what="optimizer state %s" % k, hot=True)

    def saved_arrays(self):
        """The checkpoint's arrays on rank 0, each whole (gathered from the ranks' rows: rank 0 holds
        the whole table and its state while the checkpoint is written); None elsewhere."""
        opt = self.optimizer
        out = {"params": self.gather_flat(self.model.params)}
        state = opt.state()
        for k, v in state.items():
            if k in opt.element_state:
                state[k] = self.gather_flat(v, hot=True)
            elif k in opt.row_state:
                state[k] = self.shards.gather(v, 1, what="optimizer state %s" % k, hot=True)
        out.update({"opt_" + k: v for k, v in state.items()})
        return out if self.comm.rank == 0 else None

    def gather_flat(self, flat, hot=False):
        """A flat buffer whole on rank 0: its table rows from their owners (hot: the hot rows from
        theirs), the rest from rank 0."""
        whole = np.empty(flat.shape, flat.dtype) if self.comm.rank == 0 else None
        self.shards.gather(flat, self.width, out=whole, what="table rows", hot=hot)
        if whole is not None:
            whole[self.model.dense_start:] = flat[self.model.dense_start:]
        return whole

    def restore_whole(self, whole):
        """A checkpoint's whole flat parameters, held as whole_params holds them: rank 0 alone."""
        return self.model.xp.asarray(whole) if self.comm.rank == 0 else None

    def whole_params(self):
        """A copy of the whole parameters on rank 0 (gathered), None elsewhere."""
        return self.gather_flat(self.model.params)

    def adopt_params(self, whole):
        """Rank 0's model takes `whole` (whole_params' gathered copy, rank 0 alone) as its parameters,
        with no gather; returns it on rank 0, None elsewhere."""
        if self.comm.rank == 0:
            self.model.use_param_buffer(whole)
            return whole
        return None

    def final_params(self):
        """The whole parameters on rank 0, which keeps them in its model (None elsewhere: the other
        ranks' models hold their own rows of the table only)."""
        whole = self.gather_flat(self.model.params)
        if whole is not None:
            self.model.use_param_buffer(whole)
        return whole
