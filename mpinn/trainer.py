"""The training loop: scatter a batch, forward/backward, reduce, step; straight from top to bottom."""
import math
import sys
import time

import numpy as np

from mpinn import __version__
from mpinn.metrics import compute_metrics, format_metrics

PHASES = ("data", "compute", "comm")


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


class Trainer:
    """Data-parallel training: rank 0 holds the data; every rank holds the model."""

    def __init__(self, model, optimizer, comm, layout, batch_size, seed=0, verbose=True):
        self.model, self.optimizer, self.comm = model, optimizer, comm
        self.layout, self.batch_size, self.seed = layout, int(batch_size), seed
        self.rank0 = comm.rank == 0
        self.verbose = verbose and self.rank0
        self.times = dict.fromkeys(PHASES, 0.0)
        self.samples = 0
        self.history = []

    def log(self, msg):
        if self.verbose:
            print(msg, flush=True)

    def signature(self):
        return {"mpinn": __version__, "layout": self.model.layout(), "spec": self.model.spec.to_dict(),
                "reduce": self.comm.name, "optimizer": type(self.optimizer).__name__,
                "batch_size": self.batch_size, "input": vars(self.layout)}

    def start(self):
        """Agree on the signature, then broadcast rank 0's initial parameters."""
        self.comm.check_signature(self.signature())
        self.comm.Bcast_(self.model.params, root=0, what="initial parameters")

    def epoch_order(self, n, epoch):
        return np.random.default_rng([self.seed, epoch]).permutation(n)

    def step(self, global_batch, n_global):
        """One synchronous step on this rank's slice of global_batch (given on rank 0 only)."""
        model, comm, opt, t = self.model, self.comm, self.optimizer, self.times
        t0 = time.perf_counter()
        local = comm.scatter_batch(global_batch, self.layout)
        t1 = time.perf_counter()
        want_rows = bool(model.spec.n_sparse) and not comm.wants_dense
        sparse = model.loss_grad_(local, 1.0 / n_global, sparse_grad=want_rows)
        t2 = time.perf_counter()
        reduced = comm.reduce_gradients_(model.grad_buffer, sparse)
        t3 = time.perf_counter()
        if comm.updates_here:
            if reduced is not None and not opt.sparse_ok:
                model.densify_(reduced)
                reduced = None
            opt.step_(model.params, model.grads, reduced)
        t4 = time.perf_counter()
        comm.sync_params_(model.params)
        t5 = time.perf_counter()
        t["data"] += t1 - t0
        t["compute"] += (t2 - t1) + (t4 - t3)
        t["comm"] += (t3 - t2) + (t5 - t4)
        self.samples += n_global
        return float(model.grad_buffer[-1]) / n_global   # mean loss (right on rank 0 for every strategy)

    def fit(self, train, valid, epochs, progress=True):
        """train / valid: Datasets on rank 0, None elsewhere. Returns the per-epoch history."""
        n_train = self.comm.bcast_obj(len(train) if self.rank0 else None)
        B = self.batch_size
        steps = math.ceil(n_train / B)
        bar = Progress(progress and self.rank0)
        dtype = self.model.dtype
        t_fit = time.perf_counter()
        for epoch in range(1, epochs + 1):
            order = self.epoch_order(n_train, epoch) if self.rank0 else None
            t_epoch, samples0 = time.perf_counter(), self.samples
            loss_sum = 0.0
            for s in range(steps):
                rows = order[s * B:(s + 1) * B] if self.rank0 else None
                n_global = min(B, n_train - s * B)
                batch = train.take(rows, dtype) if self.rank0 else None
                loss = self.step(batch, n_global)
                loss_sum += loss * n_global
                bar.update(epoch, epochs, s + 1, steps, loss,
                           (self.samples - samples0) / (time.perf_counter() - t_epoch))
            record = {"epoch": epoch, "train_loss": loss_sum / n_train,
                      "seconds": time.perf_counter() - t_epoch}
            if self.rank0 and valid is not None:
                record["valid"] = self.evaluate(valid)
            self.history.append(record)
            if self.rank0:
                self.log("epoch %d/%d  train loss %.4f  valid: %s  (%.1f s)" % (
                    epoch, epochs, record["train_loss"],
                    format_metrics(record.get("valid", {})) or "-", record["seconds"]))
        self.elapsed = time.perf_counter() - t_fit
        return self.history

    def evaluate(self, data):
        return compute_metrics(data.task, data.y, predict_rows(self.model, data))

    def summary(self):
        """Gather every rank's phase times; rank 0 returns the summary dict."""
        per_rank = self.comm.gather_obj(dict(self.times))
        if not self.rank0:
            return None
        total = self.elapsed
        mean = {k: sum(r[k] for r in per_rank) / len(per_rank) for k in PHASES}
        return {"ranks": self.comm.size, "reduce": self.comm.name, "samples": self.samples,
                "seconds": total, "samples_per_s": self.samples / total if total else 0.0,
                "phase_s_mean": mean, "phase_s_per_rank": per_rank,
                "exchange": getattr(self.comm, "last_exchange", None)}
