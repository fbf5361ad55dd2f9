"""The training loop: scatter a batch, forward/backward, reduce, step; straight from top to bottom."""
import math
import os
import queue
import signal
import sys
import threading
import time

import numpy as np

from mpinn import __version__
from mpinn.checkpoint import save_checkpoint
from mpinn.comm import NoWatchdog, coalesce_rows, split_counts
from mpinn.config import MpinnError, reusing_heap
from mpinn.device import device_feed
from mpinn.metrics import auc, format_metrics, metric_sums, metrics_from_sums

PHASES = ("data", "compute", "comm", "update")   # data wait, forward+backward, communication, optimizer


def all_finite(a):
    """Is every element of a finite? A NaN or Inf anywhere makes the sum of |a| non-finite (so does
    a sum of |a| past the float range: a gradient no step should take either). On the host the sum
    is BLAS's asum, 5x faster than numpy's sum: 10 against 54 us for W1's gradient."""
    if isinstance(a, np.ndarray) and a.dtype in (np.float32, np.float64) and a.flags.c_contiguous and a.size:
        from scipy.linalg import blas
        return bool(np.isfinite((blas.sasum if a.dtype == np.float32 else blas.dasum)(a.reshape(-1))))
    return bool(np.isfinite(float(a.sum())))


class Timeline:
    """Every phase of every step as a record (phase, start, end, step); the summary's time split is
    the sum of the same records. The records themselves are kept only when a trace file is wanted."""

    def __init__(self, keep=False):
        self.keep = keep
        self.reset()

    def reset(self):
        self.totals = dict.fromkeys(PHASES, 0.0)
        self.events = []
        self.origin = time.perf_counter()

    def add(self, phase, start, end, step):
        self.totals[phase] += end - start
        if self.keep:
            self.events.append((phase, start, end, step))

    def trace_events(self, rank):
        """This rank's records as Chrome-trace complete events ("X", microseconds), one track."""
        out = [{"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": "rank %d" % rank}},
               {"name": "thread_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": "steps"}}]
        for phase, start, end, step in self.events:
            out.append({"name": phase, "cat": phase, "ph": "X", "pid": rank, "tid": 0,
                        "ts": (start - self.origin) * 1e6, "dur": (end - start) * 1e6, "args": {"step": step}})
        return out


class Progress:
    """A one-line progress bar on rank 0 (stderr); plain periodic lines when not on a terminal."""

    def __init__(self, enabled, stream=sys.stderr):
        self.enabled, self.stream = enabled, stream
        self.tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self._last = 0.0

    def update(self, epoch, epochs, step, steps, loss, rate):
        if not self.enabled:
            return
        now = time.perf_counter()
        last_step = step == steps
        if not last_step and now - self._last < (0.2 if self.tty else 5.0):
            return
        self._last = now
        width = 24
        done = int(width * step / steps)
        line = "epoch %d/%d [%s%s] %3d%% step %d/%d loss %.4f %.0f samples/s" % (
            epoch, epochs, "#" * done, "." * (width - done), 100 * step // steps, step, steps, loss, rate)
        if self.tty:
            self.stream.write("\r" + line + ("\n" if last_step else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def predict_rows(model, data, chunk=65536):
    """The model's predictions for every row of a Dataset, a chunk at a time (this rank alone)."""
    out = [model.predict(data.take(np.arange(s, min(s + chunk, len(data))), model.dtype))
           for s in range(0, len(data), chunk)]
    return np.concatenate(out) if out else np.zeros(0)


class Faults:
    """Test hooks (set by MPINN_FAULT): make one rank misbehave at a given global step, so the
    failure paths are tested for real. Spec: kind:rank:step[+], comma-separated; kind is nan
    (poison this rank's gradient), huge (the largest finite gradient value, which overflows a
    16-bit cast: --compress), hang (sleep for an hour), kill (SIGKILL itself) or raise;
    a trailing + repeats it on every later step."""

    KINDS = ("nan", "huge", "hang", "kill", "raise")

    def __init__(self, spec="", rank=0):
        self.rules = []
        for item in filter(None, (x.strip() for x in (spec or "").split(","))):
            try:
                kind, r, step = item.split(":")
                onward = step.endswith("+")
                rule = (kind, int(r), int(step.rstrip("+")), onward)
            except ValueError:
                raise MpinnError("MPINN_FAULT: expected kind:rank:step[+], not %r" % item, collective=True)
            if kind not in self.KINDS:
                raise MpinnError("MPINN_FAULT: kind must be one of %s, not %r" % ("|".join(self.KINDS), kind), collective=True)
            if rule[1] == rank:
                self.rules.append(rule)

    def fire(self, step, grad_buffer):
        for kind, _, at, onward in self.rules:
            if step == at or (onward and step > at):
                if kind == "nan":     # the output bias: always in the reduced dense tail
                    grad_buffer[-2] = np.nan
                elif kind == "huge":
                    grad_buffer[-2] = np.finfo(grad_buffer.dtype).max
                elif kind == "hang":
                    time.sleep(3600)
                elif kind == "kill":
                    os.write(2, b"MPINN_FAULT: kill at %.3f\n" % time.time())
                    os.kill(os.getpid(), signal.SIGKILL)
                elif kind == "raise":
                    raise RuntimeError("injected failure at step %d" % step)


class BlockOrder:
    """The rows of shuffled blocks of b consecutive rows, made a slice at a time: memory n/b, not n
    (so rank 0's memory does not grow with the data set)."""

    def __init__(self, blocks, b, n):
        self.blocks, self.b, self.n = blocks, b, n

    def __len__(self):
        return self.n

    def __getitem__(self, sl):
        start, stop, _ = sl.indices(self.n)
        if stop <= start:
            return np.zeros(0, dtype=np.int64)
        b, nb = self.b, len(self.blocks)
        short = self.n - (nb - 1) * b                 # rows in the last block (it may sit anywhere)
        where_short = int(np.flatnonzero(self.blocks == nb - 1)[0])

        def pos(i):                                   # row position where the i-th block of the order starts
            return i * b - (b - short if i > where_short else 0)

        lo = min(start // b, nb - 1)
        while lo > 0 and pos(lo) > start:
            lo -= 1
        hi = lo
        while hi < nb and pos(hi) < stop:
            hi += 1
        rows = (self.blocks[lo:hi, None] * b + np.arange(b)).ravel()
        rows = rows[rows < self.n]
        return rows[start - pos(lo):stop - pos(lo)]

    def __array__(self, dtype=None, copy=None):
        return self[0:self.n] if dtype is None else self[0:self.n].astype(dtype)


class Feed:
    """One epoch's local batches, in order, from self.next_step on.

    scatter (default): rank 0 reads the global batch (Dataset.take or a packed file's memory map)
    and scatters row slices. With prefetch, a thread on rank 0 reads batches ahead (a queue of two),
    and the next batch's Iscatterv is posted before this batch computes, so the transfer overlaps
    the compute (MPICH progresses it inside this step's Allreduce). read_local: every rank reads its own slice of the global batch from the packed
    file (the same rows a scatter would give it), no rank-0 bottleneck, no messages."""

    def __init__(self, trainer, data, order, steps):
        self.t, self.data, self.order, self.steps = trainer, data, order, steps
        self.s = trainer.next_step
        self.pending = None
        self.queue = None
        # the reading thread only where one rank reads for all: with read_local every rank reads a
        # P-th as much, and on a machine with no spare core the thread only competed (measured)
        if trainer.prefetch and self.s < steps and trainer.rank0 and not trainer.read_local:
            self.queue = queue.Queue(maxsize=2)
            threading.Thread(target=self._produce, daemon=True, name="mpinn-prefetch").start()

    def _rows(self, s):
        B, rows = self.t.batch_size, None
        rows = self.order[s * B:(s + 1) * B]
        if self.t.read_local:   # this rank's contiguous slice, exactly as split_counts scatters it
            c = split_counts(len(rows), self.t.comm.size)
            start = int(c[:self.t.comm.rank].sum())
            rows = rows[start:start + int(c[self.t.comm.rank])]
        return rows

    def _read(self, s):
        return self.data.take(self._rows(s), self.t.model.dtype)

    def _produce(self):
        try:
            for s in range(self.s, self.steps):
                self.queue.put(self._read(s))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, which raises it
            self.queue.put(e)

    def _get(self, s):
        if not (self.t.rank0 or self.t.read_local):
            return None
        if self.queue is None:
            return self._read(s)
        item = self.queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def _post(self, s):
        return self.t.comm.post_batch(self._get(s), self.t.layout, replicate=self.t.towers == "same")

    def next(self):
        s, self.s = self.s, self.s + 1
        if self.t.read_local:
            return self._get(s)
        pending = self.pending if self.pending is not None else self._post(s)
        self.pending = self._post(s + 1) if self.t.prefetch and s + 1 < self.steps else None
        return pending.wait()


class Trainer:
    """Data-parallel training: rank 0 holds the data; every rank holds the model.

    Position: `epoch` (1-based) and `next_step` (0-based, within the epoch) say which batch comes
    next; with the seeded per-epoch order that is all a resume needs to replay the same batches."""

    def __init__(self, model, optimizer, comm, layout, batch_size, seed=0, verbose=True,
                 watchdog=None, max_bad_steps=20, faults=None, grad_accum=1, lr_at=None,
                 on_epoch=None, towers=None, tower_mix="mean", prefetch=True, read_local=False, shuffle_block=1,
                 average_every=0, timeline=False, overlap=False, overlap_bucket=1 << 16):
        self.model, self.optimizer, self.comm = model, optimizer, comm
        comm.adopt_(model)            # e.g. gradients in a shared-memory window (--comm shm)
        self.layout, self.batch_size, self.seed = layout, int(batch_size), seed
        self.rank0 = comm.rank == 0
        self.verbose = verbose and self.rank0
        self.watchdog = watchdog or NoWatchdog()
        self.max_bad_steps = int(max_bad_steps)
        self.faults = faults or Faults()
        self.grad_accum, self._acc = int(grad_accum), None
        self.lr_at = lr_at            # global step -> learning rate (scaling and warm-up), or None
        self.on_epoch = on_epoch      # called on every rank with each epoch's record
        self.towers = towers          # tower mode: None (data parallel), "shard" or "same" data
        self.tower_mix, self.tower_weights = tower_mix, None
        self.prefetch = prefetch      # prepare and send the next batch while this one computes
        self.read_local = read_local  # every rank reads its own rows (a packed file), no scatter
        self.shuffle_block = int(shuffle_block)
        # local SGD: steps on local gradients, parameters averaged every K steps (0: off)
        self.average_every, self._local_steps = int(average_every), 0
        self.timeline = Timeline(keep=timeline)
        # reduce the later layers' gradients while the earlier ones back-propagate (Iallreduce
        # buckets of >= overlap_bucket elements; --reduce allreduce, no --grad-accum / --compress)
        self.overlap, self.overlap_bucket = bool(overlap), int(overlap_bucket)
        if self.overlap and (grad_accum > 1 or average_every or towers or not hasattr(comm, "overlap_")):
            raise MpinnError("--overlap needs --reduce allreduce and data parallelism, without "
                             "--grad-accum, --average-every or towers", collective=True)
        # one copy of the parameters per node, each rank stepping its part (see step_shared): for
        # models with hashed inputs, whose row updates it splits (W2 at np 2: 340k -> 435k samples/s);
        # a dense model's update is small, and re-reading the other ranks' freshly stepped
        # parameters cost W1 3-4% (measured)
        self.shared_params = (model.spec.n_sparse > 0 and not towers and not average_every and not self.overlap
                              and optimizer.name == "sgd" and hasattr(comm, "share_params_")
                              and comm.share_params_(model))
        self.samples, self.samples_at_start, self.steps_at_start = 0, 0, 0
        self.history = []
        # where training stands (saved in checkpoints)
        self.epoch, self.next_step, self.global_step = 1, 0, 0
        self.loss_sum, self.loss_n = 0.0, 0
        self.skipped, self.bad_streak = 0, 0
        # checkpointing: set by enable_checkpoints
        self.ckpt_dir, self.ckpt_every, self.ckpt_keep, self.ckpt_meta = None, 0, 3, {}
        self.last_checkpoint = None

    @property
    def times(self):
        """Seconds per phase on this rank (the timeline's totals)."""
        return self.timeline.totals

    def log(self, msg):
        if self.verbose:
            print(msg, flush=True)

    def signature(self):
        return {"mpinn": __version__, "layout": self.model.layout(), "spec": self.model.spec.to_dict(),
                "reduce": self.comm.name, "optimizer": type(self.optimizer).__name__,
                "compress": getattr(self.comm, "compress", None), "average_every": self.average_every,
                "overlap": self.overlap,
                "batch_size": self.batch_size, "input": vars(self.layout)}

    def start(self):
        """Agree on the signature, then broadcast rank 0's parameters (initial or restored)."""
        reusing_heap()                # from here on, allocations are the steps' temporaries
        self.comm.check_signature(self.signature())
        if self.shared_params:        # one copy: rank 0's writes (a restore) need only be made visible
            self.comm.shared.fence_params()
        elif not self.towers:         # towers start different on purpose (a seed per rank)
            self.comm.Bcast_(self.model.params, root=0, what="initial parameters")
        self.comm.barrier()           # one time origin for every rank's timeline (same host: same clock)
        self.timeline.origin = time.perf_counter()

    def epoch_order(self, n, epoch):
        """The epoch's row order, drawn from (seed, epoch) alone. With shuffle_block b > 1, blocks of
        b consecutive rows are shuffled instead of rows: a packed file is then read in runs of b rows,
        which keeps the mapped pages (and the I/O) per batch small at the price of batches made of
        neighbouring rows."""
        rng = np.random.default_rng([self.seed, epoch])
        b = self.shuffle_block
        if b <= 1:
            return rng.permutation(n)
        return BlockOrder(rng.permutation(-(-n // b)), b, n)

    # ---------------------------------------------------------------- one step
    def step(self, global_batch, n_global):
        """One synchronous step on this rank's slice of global_batch (given on rank 0 only).
        Returns (mean loss, ok); ok is False when the step was skipped for a non-finite loss or
        gradient on some rank (every rank reaches the same verdict)."""
        t0 = time.perf_counter()
        local = self.comm.scatter_batch(global_batch, self.layout, replicate=self.towers == "same")
        self.timeline.add("data", t0, time.perf_counter(), self.global_step + 1)
        return self.step_local(local, n_global)

    def step_local(self, local, n_global):
        """The step once this rank has its rows: gradient, reduction, verdict, update."""
        model, comm, opt = self.model, self.comm, self.optimizer
        step = self.global_step + 1
        t1 = time.perf_counter()
        want_rows = bool(model.spec.n_sparse) and not comm.wants_dense
        if self.lr_at is not None:
            opt.lr = self.lr_at(self.global_step)
        if self.average_every:
            return self.step_local_sgd(local, n_global, want_rows, t1)
        if self.shared_params:
            return self.step_shared(local, n_global, want_rows and opt.sparse_ok, t1)
        # data parallel: a row's share of the global mean; a tower: of its own rows' mean
        n_mean = (local.n if self.towers else n_global) or 1
        if self.overlap:
            sparse, t2, reduced = self.overlapped_gradient(local, 1.0 / n_mean, want_rows)
        else:
            sparse = self.local_gradient(local, 1.0 / n_mean, want_rows)
            self.faults.fire(self.global_step + 1, model.grad_buffer)
            t2 = time.perf_counter()
            reduced = comm.reduce_gradients_(model.grad_buffer, sparse)
        ok = comm.agree_(self.finite(reduced) if comm.updates_here else True)
        t3 = time.perf_counter()
        if comm.updates_here and ok and (local.n or not self.towers):   # a tower with no rows has no step
            if reduced is not None and not opt.sparse_ok:
                model.densify_(reduced)
                reduced = None
            opt.step_(model.params, model.grads, reduced)
        t4 = time.perf_counter()
        comm.sync_params_(model.params)
        self.account(step, n_global, t1, t2, t3, t4, time.perf_counter())
        return float(model.grad_buffer[-1]) / n_mean, ok  # the mean loss is right on rank 0 for every strategy

    def overlapped_gradient(self, local, scale, want_rows):
        """--overlap: backward with the later layers' Iallreduce posted as each layer finishes
        (comm.overlap_), then the rest. Returns (local sparse rows, end of compute, reduced rows)."""
        model = self.model
        overlap = self.comm.overlap_(model.grad_buffer, model.offsets[2::2], self.overlap_bucket)
        fired = []

        def ready(start):
            if not fired:       # the test hooks act on the finished gradient, before any of it is sent
                fired.append(self.faults.fire(self.global_step + 1, model.grad_buffer))
            overlap.ready(start)

        sparse = model.loss_grad_(local, scale, sparse_grad=want_rows, on_ready=ready)
        if not fired:
            self.faults.fire(self.global_step + 1, model.grad_buffer)
        t2 = time.perf_counter()
        return sparse, t2, overlap.finish(sparse)

    def account(self, step, n_global, t1, t2, t3, t4, t5):
        """A step's phases on the timeline (compute t1-t2, communication t2-t3 and t4-t5, update
        t3-t4) and its samples."""
        rec = self.timeline.add
        rec("compute", t1, t2, step)
        rec("comm", t2, t3, step)
        rec("update", t3, t4, step)
        rec("comm", t4, t5, step)
        self.samples += n_global

    def step_shared(self, local, n_global, want_rows, t1):
        """One node, one copy of the parameters (SGD): the gradients are summed in shared memory,
        each rank summing and stepping only its part of the dense buffer and of the sparse block's
        rows (ids split in P ranges), so the update work is split P ways. The verdict and the loss
        travel in one 16-byte Allreduce before anything is stepped, so a skipped step changes
        nothing anywhere; a Barrier after the update keeps every rank from reading parameters
        that are still being stepped. Element by element, the same arithmetic as the other paths."""
        model, comm, opt = self.model, self.comm, self.optimizer
        step = self.global_step + 1
        n_mean = n_global or 1
        sparse = self.local_gradient(local, 1.0 / n_mean, want_rows)
        self.faults.fire(step, model.grad_buffer)
        t2 = time.perf_counter()
        loss = float(model.grad_buffer[-1])
        start, mine, block = 0, [], (0, 0)
        if sparse is not None:
            reduced = comm.exchange_rows(sparse)
            if reduced is None:
                model.densify_(sparse)
            else:
                start, block = reduced.n_rows * reduced.width, (reduced.n_rows, reduced.width)
                lo_id, hi_id = comm.shared.part(0, reduced.n_rows)
                for ids, rows in reduced.parts():
                    a, b = np.searchsorted(ids, (lo_id, hi_id))
                    if b > a:
                        mine.append((ids[a:b], rows[a:b]))
        lo, hi = comm.shared.sum_own_(start)
        ok_here = all_finite(model.grad_buffer[lo:hi]) and all(all_finite(r) for _, r in mine)
        verdict = np.array([0.0 if ok_here else 1.0, loss])
        comm.Allreduce_sum_(verdict, "step verdict and loss")
        ok = verdict[0] == 0
        t3 = time.perf_counter()
        if ok:
            opt.step_part_(model.params, model.grads, lo, min(hi, model.size), mine, block)
        t4 = time.perf_counter()
        comm.shared.fence_params()
        self.account(step, n_global, t1, t2, t3, t4, time.perf_counter())
        return float(verdict[1]) / n_mean, ok

    def step_local_sgd(self, local, n_global, want_rows, t1):
        """--average-every K (local SGD): each rank steps on its own gradient, and every K steps the
        parameters are averaged. A rank's rows count as a P-th of the step (scale P/N, not 1/n_r), so
        that the mean over ranks of the local gradients is the global mean gradient even when the
        slices are uneven: with K = 1 and plain SGD, averaging the parameters after each step equals
        averaging the gradients (all ranks start equal: mean_r(p - lr g_r) = p - lr mean_r(g_r)).
        Only 16 bytes travel on the other steps: the skip verdict and the loss, which keeps the
        ranks in lockstep on a non-finite step."""
        model, comm, opt, rec = self.model, self.comm, self.optimizer, self.timeline.add
        step = self.global_step + 1
        rows = self.local_gradient(local, comm.size / (n_global or 1), want_rows)
        self.faults.fire(step, model.grad_buffer)
        t2 = time.perf_counter()
        verdict = np.array([0.0 if self.finite(rows) else 1.0, float(model.grad_buffer[-1])])
        comm.Allreduce_sum_(verdict, "step verdict and loss")
        ok = verdict[0] == 0
        t3 = time.perf_counter()
        if ok:
            if rows is not None and not opt.sparse_ok:
                model.densify_(rows)
                rows = None
            opt.step_(model.params, model.grads, rows)
        t4 = time.perf_counter()
        rec("compute", t1, t2, step)
        rec("comm", t2, t3, step)
        rec("update", t3, t4, step)
        self._local_steps += 1
        if self._local_steps >= self.average_every:
            self.average_params_()
        self.samples += n_global
        return float(verdict[1]) / (n_global or 1), ok

    def average_params_(self):
        """Local SGD: every rank's parameters become their mean (one Allreduce of the parameters).
        Optimizer state (momentum, Adam moments) stays per rank."""
        t0 = time.perf_counter()
        self.comm.Allreduce_sum_(self.model.params, "parameters")
        if self.comm.size > 1:
            self.model.params /= self.comm.size
        self._local_steps = 0
        self.timeline.add("comm", t0, time.perf_counter(), self.global_step + 1)

    def local_gradient(self, local, scale, want_rows):
        """This rank's share of the step's gradient; with grad_accum K, computed over K
        micro-batches one after another (activations for a K-th of the rows at a time) and summed,
        which equals the gradient of the whole slice up to the order of the additions."""
        model, K = self.model, self.grad_accum
        if K == 1:
            return model.loss_grad_(local, scale, sparse_grad=want_rows)
        start = model.dense_start if want_rows else 0    # a rows-exchange leaves the sparse block stale
        if self._acc is None:
            self._acc = np.zeros_like(model.grad_buffer)
        acc = self._acc[start:]
        acc.fill(0)
        parts = []
        bounds = np.r_[0, np.cumsum(split_counts(local.n, K))]
        for a, b in zip(bounds[:-1], bounds[1:]):
            rows = model.loss_grad_(local.slice(a, b), scale, sparse_grad=want_rows)
            acc += model.grad_buffer[start:]
            if rows is not None:
                parts.append(rows)
        model.grad_buffer[start:] = acc
        if not parts:
            return None
        return coalesce_rows(np.concatenate([p.ids for p in parts]),
                             np.concatenate([p.rows for p in parts]), parts[0].n_rows)

    def feed(self, train, n_train, epoch, steps):
        """Where this epoch's local batches come from (see Feed)."""
        order = self.epoch_order(n_train, epoch) if (self.rank0 or self.read_local) else None
        return device_feed(Feed(self, train, order, steps), self.model.backend)   # as is on the CPU

    def finite(self, reduced):
        """Is the reduced gradient (and the loss in its last slot) finite? One pass per buffer."""
        buf = self.model.grad_buffer
        if reduced is not None:   # the sparse block travelled as rows; its slice of the buffer is stale
            buf = buf[reduced.n_rows * reduced.width:]
            if not all_finite(reduced.rows):
                return False
        return all_finite(buf)

    # ---------------------------------------------------------------- the loop
    def fit(self, train, valid, epochs, progress=True):
        """train / valid: Datasets on rank 0, None elsewhere. Returns the per-epoch history.
        Starts from the current position (epoch 1, step 0, or where a checkpoint left off)."""
        n_train, has_valid = self.comm.bcast_obj((len(train), valid is not None) if self.rank0 else None)
        B = self.batch_size
        steps = math.ceil(n_train / B)
        bar = Progress(progress and self.rank0)
        t_fit, self.samples_at_start, self.steps_at_start = time.perf_counter(), self.samples, self.global_step
        while self.epoch <= epochs:
            epoch = self.epoch
            feed = self.feed(train, n_train, epoch, steps)
            t_epoch, samples0 = time.perf_counter(), self.samples
            while self.next_step < steps:
                s = self.next_step
                self.watchdog.arm("step %d (epoch %d, batch %d of %d)" % (self.global_step + 1, epoch, s + 1, steps))
                n_global = min(B, n_train - s * B)
                t0 = time.perf_counter()
                local = feed.next()
                self.timeline.add("data", t0, time.perf_counter(), self.global_step + 1)
                loss, ok = self.step_local(local, n_global)
                self.watchdog.disarm()
                self.global_step += 1
                self.next_step += 1
                if ok:
                    self.loss_sum += loss * n_global
                    self.loss_n += n_global
                    self.bad_streak = 0
                else:
                    self.skipped += 1
                    self.bad_streak += 1
                    self.log("step %d skipped: non-finite loss or gradient (%d in a row, %d in all)"
                             % (self.global_step, self.bad_streak, self.skipped))
                    if self.bad_streak >= self.max_bad_steps:
                        raise MpinnError(
                            "training stopped: %d consecutive steps had a non-finite loss or gradient "
                            "(last at step %d, epoch %d); %s; try a lower --lr or check the data for "
                            "huge or missing values" % (
                                self.bad_streak, self.global_step, epoch,
                                "the last good checkpoint is %s" % self.last_checkpoint
                                if self.last_checkpoint else "no checkpoint was written"),
                            collective=True, code=4)
                bar.update(epoch, epochs, s + 1, steps, loss,
                           (self.samples - samples0) / max(time.perf_counter() - t_epoch, 1e-9))
                if (self.ckpt_every and self.global_step % self.ckpt_every == 0 and self.next_step < steps
                        and not self.bad_streak):    # only good states are checkpointed
                    if self._local_steps:       # local SGD: a checkpoint holds the averaged parameters
                        self.average_params_()
                    self.checkpoint("step")
            if self._local_steps:     # local SGD: evaluate and save the averaged model
                self.average_params_()
            record = {"epoch": epoch, "train_loss": self.loss_sum / max(self.loss_n, 1),
                      "seconds": time.perf_counter() - t_epoch, "skipped_steps": self.skipped}
            self.watchdog.arm("evaluation after epoch %d" % epoch)
            if has_valid:
                record["valid"] = self.evaluate(valid)
            self.watchdog.disarm()
            self.history.append(record)
            self.epoch, self.next_step = epoch + 1, 0
            self.loss_sum, self.loss_n = 0.0, 0
            if self.rank0:
                self.log("epoch %d/%d  train loss %.4f  valid: %s  (%.1f s)" % (
                    epoch, epochs, record["train_loss"],
                    format_metrics(record.get("valid", {})) or "-", record["seconds"]))
            if self.on_epoch is not None:
                self.on_epoch(record)
            if self.ckpt_dir:
                self.checkpoint("epoch")
        self.elapsed = time.perf_counter() - t_fit
        return self.history

    def evaluate(self, data, chunk=65536):
        """Held-out metrics over ALL rows, computed by every rank together: rank 0 scatters the rows
        chunk by chunk, each rank scores its share, the per-rank sums are added (Allreduce), so each
        rank's share counts by its number of rows; binary AUC, which is not a sum, is computed on rank
        0 from the gathered predictions. Collective: call on every rank (data on rank 0 only).
        Returns the same metrics dict on every rank."""
        if self.towers:
            return self.evaluate_towers(data, chunk)
        model, comm = self.model, self.comm
        task, k = self.task, (self.model.spec.n_out if self.task == "multiclass" else 2)
        n = comm.bcast_obj(len(data) if self.rank0 else None)
        sums = np.zeros(4 if task == "regression" else 4 + k * k)   # the layout of metric_sums
        preds = []
        for s in range(0, n, chunk):
            rows = np.arange(s, min(s + chunk, n))
            local = comm.scatter_batch(data.take(rows, model.dtype) if self.rank0 else None, self.layout)
            pred = np.ascontiguousarray(model.predict(local), dtype=np.float64)
            sums += metric_sums(task, local.y, pred, k)
            if task == "binary":
                counts = split_counts(len(rows), comm.size)
                got = np.empty(len(rows)) if self.rank0 else None
                preds.append(comm.Gatherv_(pred.ravel(), counts, got, what="held-out predictions"))
        comm.Allreduce_sum_(sums, "metric sums")
        auc_value = None
        if task == "binary" and self.rank0:
            p = np.concatenate(preds) if preds else np.zeros(0)
            keep = np.isfinite(p)
            auc_value = auc(np.asarray(data.y)[keep], p[keep])
        auc_value = comm.bcast_obj(auc_value)
        return metrics_from_sums(task, sums, k, auc_value)

    def evaluate_towers(self, data, chunk=65536):
        """Tower mode: every tower predicts every held-out row (rank 0 broadcasts the chunks), rank 0
        gathers the predictions, scores each tower and the mixture (the plain mean, or weights fitted
        to the held-out loss with --tower-mix fit). The mixture's metrics are the record's metrics."""
        from mpinn.metrics import compute_metrics
        from mpinn.towers import fit_weights, mix
        model, comm = self.model, self.comm
        n = comm.bcast_obj(len(data) if self.rank0 else None)
        preds = []
        for s in range(0, n, chunk):
            rows = np.arange(s, min(s + chunk, n))
            local = comm.scatter_batch(data.take(rows, model.dtype) if self.rank0 else None, self.layout,
                                       replicate=True)
            pred = np.ascontiguousarray(model.predict(local), dtype=np.float64)
            got = comm.Gather_(pred.ravel(), what="tower predictions")
            if self.rank0:
                preds.append(got.reshape((comm.size,) + pred.shape))
        out = None
        if self.rank0:
            P = np.concatenate(preds, axis=1)
            task = self.task
            w = fit_weights(task, data.y, P) if self.tower_mix == "fit" else np.full(len(P), 1.0 / len(P))
            out = compute_metrics(task, data.y, mix(P, w))
            out["towers"] = [compute_metrics(task, data.y, p) for p in P]
            out["weights"] = [float(x) for x in w]
        out = comm.bcast_obj(out)
        self.tower_weights = out["weights"]
        return out

    def gather_towers(self):
        """Every tower's parameters, stacked (towers, size) on rank 0; None elsewhere."""
        return self.comm.Gather_(self.model.params, what="tower parameters")

    @property
    def task(self):
        spec = self.model.spec
        if spec.loss == "squared":
            return "regression"
        return "binary" if spec.loss == "sigmoid" and spec.n_out == 1 else "multiclass"

    # ---------------------------------------------------------------- checkpoints
    def enable_checkpoints(self, directory, every=0, keep=3, meta=None):
        """Write a checkpoint every `every` steps and at each epoch end into directory (rank 0)."""
        self.ckpt_dir, self.ckpt_every, self.ckpt_keep = directory, int(every), int(keep)
        self.ckpt_meta = dict(meta or {})

    def position(self):
        return {"epoch": self.epoch, "next_step": self.next_step, "global_step": self.global_step,
                "samples": self.samples, "loss_sum": self.loss_sum, "loss_n": self.loss_n,
                "skipped": self.skipped, "bad_streak": self.bad_streak, "history": self.history,
                "seed": self.seed, "batch_size": self.batch_size}

    def checkpoint(self, why):
        """Rank 0 writes parameters, optimizer state and position; every rank waits for it under
        the deadline, so a slow disk is not mistaken for a stuck step."""
        self.watchdog.arm("checkpoint at step %d" % self.global_step)
        if self.rank0:
            arrays = {"params": self.model.params}
            arrays.update({"opt_" + k: v for k, v in self.optimizer.state().items()})
            header = dict(self.ckpt_meta, position=self.position(), why=why, ranks=self.comm.size)
            self.last_checkpoint = save_checkpoint(self.ckpt_dir, self.global_step, arrays, header,
                                                   self.ckpt_keep)
        self.last_checkpoint = self.comm.bcast_obj(self.last_checkpoint)
        self.watchdog.disarm()

    def restore(self, arrays, header):
        """Continue from a checkpoint that rank 0 has loaded (arrays/header None elsewhere): the
        parameters reach the other ranks in start(); the optimizer state and position here."""
        header = self.comm.bcast_obj(header)
        if self.rank0:
            params = arrays["params"]
            if params.shape != self.model.params.shape or params.dtype != self.model.params.dtype:
                raise MpinnError("%s: parameters %s %s do not fit this model (%s %s)" % (
                    header.get("path"), params.dtype, params.shape, self.model.params.dtype,
                    self.model.params.shape))
            self.model.params[...] = self.model.xp.asarray(params)
        shapes = self.comm.bcast_obj({k[4:]: (v.shape, str(v.dtype)) for k, v in arrays.items()
                                      if k.startswith("opt_")} if self.rank0 else None)
        state = {}
        for k, (shape, dt) in shapes.items():
            buf = np.ascontiguousarray(arrays["opt_" + k]) if self.rank0 else np.empty(shape, dtype=dt)
            state[k] = self.comm.Bcast_(buf, root=0, what="optimizer state %s" % k)
        self.optimizer.load_state(state)
        pos = header["position"]
        self.epoch, self.next_step, self.global_step = pos["epoch"], pos["next_step"], pos["global_step"]
        self.samples, self.loss_sum, self.loss_n = pos["samples"], pos["loss_sum"], pos["loss_n"]
        self.skipped, self.bad_streak, self.history = pos["skipped"], pos["bad_streak"], pos["history"]
        self.last_checkpoint = header.get("path")

    def write_timeline(self, path):
        """Collective: rank 0 gathers every rank's records (once) and writes one Chrome-trace JSON
        file (Perfetto, chrome://tracing): a process per rank, its phases as complete events."""
        import json
        events = self.comm.gather_obj(self.timeline.trace_events(self.comm.rank))
        if self.rank0:
            doc = {"traceEvents": [e for rank_events in events for e in rank_events],
                   "displayTimeUnit": "ms",
                   "otherData": {"ranks": self.comm.size, "phases": list(PHASES), "reduce": self.comm.name}}
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(doc, f)
            os.replace(tmp, path)

    def summary(self):
        """Gather every rank's phase times; rank 0 returns the summary dict."""
        per_rank = self.comm.gather_obj(dict(self.times))
        if not self.rank0:
            return None
        total = self.elapsed
        done = self.samples - self.samples_at_start      # by this run (a resumed one counts its own)
        mean = {k: sum(r[k] for r in per_rank) / len(per_rank) for k in PHASES}
        return {"ranks": self.comm.size, "reduce": self.comm.name, "samples": done,
                "seconds": total, "samples_per_s": done / total if total else 0.0,
                "phase_s_mean": mean, "phase_s_per_rank": per_rank, "skipped_steps": self.skipped,
                "data_wait_s_per_step": mean["data"] / max(self.global_step - self.steps_at_start, 1),
                "global_steps": self.global_step, "exchange": getattr(self.comm, "last_exchange", None)}
