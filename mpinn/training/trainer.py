"""The training loop: a batch, a step, the bookkeeping; epochs, evaluation and checkpoints. Straight from top to bottom."""
import math
import resource
import time
from dataclasses import dataclass

from mpinn import __version__
from mpinn.comm.guard import NoWatchdog
from mpinn.core.errors import MpinnError
from mpinn.model.metrics import better, format_metrics, stop_value
from mpinn.host.heap import reusing_heap
from mpinn.settings import messages
from mpinn.training.checkpoints import stop_if_asked
from mpinn.training.evaluate import evaluate, evaluate_towers, task_of
from mpinn.training.feed import Reading, StreamOrder, epoch_order, make_feed, rows_dropped
from mpinn.training.staging import device_feed
from mpinn.training.timeline import PHASES, ProgressBar, write_trace


@dataclass
class Hooks:
    """What a run plugs into the loop besides its parts: the deadline that turns a hang into an abort,
    the failure-path test hooks (MPINN_FAULT), and a callback with each epoch's record (every rank)."""
    watchdog: object = None
    faults: object = None
    on_epoch: object = None
    stop: object = None         # comm.guard.StopSignals: a signal asks for a checkpoint and a clean stop
    on_eval: object = None      # called with the record of each evaluation inside an epoch (--eval-every)


class Trainer:
    """Data-parallel training: rank 0 holds the data; every rank holds the model.

    Made from a resolved RunConfig (mpinn.settings) and the parts built from its plan (mpinn.training.run): the
    model, the optimizer, the learning-rate schedule (called before every step, its rate passed into the step),
    the step (mpinn.training.build; it holds the communicator) and the batches' layout.

    Position: `epoch` (1-based) and `next_step` (0-based, within the epoch) say which batch comes
    next; with the seeded per-epoch order that is all a resume needs to replay the same batches."""

    def __init__(self, cfg, model, optimizer, schedule, step, layout, hooks=None, reading=Reading()):
        if cfg.stage != "resolved":
            raise ValueError("Trainer needs a resolved configuration (mpinn.settings.resolve)")
        hooks = hooks or Hooks()
        self.cfg = cfg
        self.model, self.optimizer, self.schedule = model, optimizer, schedule
        self.stepper, self.comm, self.timeline = step, step.comm, step.timeline
        self.layout, self.batch_size, self.seed = layout, int(cfg.batch), cfg.seed
        self.rank0 = self.comm.rank == 0
        self.verbose = not cfg.quiet and self.rank0
        self.watchdog = hooks.watchdog or NoWatchdog()
        self.max_bad_steps = int(cfg.max_bad_steps)
        self.on_epoch = hooks.on_epoch  # called on every rank with each epoch's record
        self.on_eval, self.eval_every = hooks.on_eval, int(cfg.eval_every)
        self.t_origin = time.perf_counter()     # records' "elapsed" counts from here (the API: its start)
        self.eval_seconds = 0.0                 # spent in held-out evaluations so far (the records say it)
        self.reading = reading              # who reads the rows: rank 0, every rank, K readers (the InputPlan's)
        self.posted = None                      # this epoch's Feed, whose next batch may be on its way (Run.release_)
        self.first_step_s = None                # seconds from t_origin to the end of this run's first step
        self.stop = hooks.stop
        self.towers = cfg.towers        # tower mode: None (data parallel), "shard" or "same" data
        self.tower_mix, self.tower_weights = cfg.tower_mix, None
        self.prefetch = not cfg.no_prefetch     # prepare and send the next batch while this one computes
        self.shuffle_block = int(cfg.shuffle_block)
        self.table = cfg.table
        # the best epoch by the held-out metric: kept (--keep best) and counted from (--early-stop)
        self.early_stop, self.keep_best, self.stop_metric = int(cfg.early_stop), cfg.keep == "best", cfg.stop_metric
        self.target_scale = float(cfg.target_scale)     # regression: held-out RMSE in the label's units
        self.best = None              # {"epoch", "value", "bad_epochs"} once an epoch was scored
        self.best_params = None       # a copy of the best epoch's parameters (keep_best; rank 0 alone when sharded)
        self.samples, self.samples_at_start, self.steps_at_start = 0, 0, 0
        self.history = []
        # where training stands (saved in checkpoints)
        self.epoch, self.next_step, self.global_step = 1, 0, 0
        self.loss_sum, self.loss_n = 0.0, 0
        self.skipped, self.bad_streak = 0, 0
        self.plateaus, self.cut_epoch = 0, None     # --lr-decay plateau: the rate's cuts so far, the last one's epoch
        self.checkpoints = None       # mpinn.training.checkpoints.Checkpoints: where they go (None: nowhere)

    @property
    def kept_epoch(self):
        """The epoch whose parameters the run keeps: the best one with --keep best, else the last."""
        return self.best["epoch"] if self.best is not None and self.keep_best else len(self.history)

    @property
    def last_checkpoint(self):
        return self.checkpoints.last if self.checkpoints is not None else None

    def position(self):
        """Where training stands: what a checkpoint records to continue it."""
        return {"epoch": self.epoch, "next_step": self.next_step, "global_step": self.global_step,
                "samples": self.samples, "loss_sum": self.loss_sum, "loss_n": self.loss_n,
                "skipped": self.skipped, "bad_streak": self.bad_streak, "history": self.history, "best": self.best,
                "plateaus": self.plateaus, "seed": self.seed, "batch_size": self.batch_size}

    @property
    def shared_params(self):
        """Does the node hold one copy of the parameters, each rank stepping its part?"""
        return self.stepper.shares_params

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
                "compress": self.cfg.compress, "average_every": self.cfg.average_every, "overlap": self.cfg.overlap,
                "batch_size": self.batch_size, "input": vars(self.layout)}

    def start(self):
        """Agree on the signature, then give every rank rank 0's parameters (initial or restored)."""
        reusing_heap()                # from here on, allocations are the steps' temporaries
        self.comm.check_signature(self.signature())
        self.stepper.broadcast_params_()
        self.comm.barrier()           # one time origin for every rank's timeline (same host: same clock)
        self.timeline.origin = time.perf_counter()

    # ---------------------------------------------------------------- one step
    def step(self, global_batch, n_global):
        """One synchronous step on this rank's slice of global_batch (given on rank 0 only).
        Returns (mean loss, ok); see step_slice."""
        t0 = time.perf_counter()
        local = self.comm.scatter_batch(global_batch, self.layout, replicate=self.towers == "same")
        self.timeline.add("data", t0, time.perf_counter(), self.global_step + 1)
        return self.step_slice(local, n_global)

    def step_slice(self, local, n_global):
        """The step once this rank has its rows (the strategy's). Returns (mean loss, ok); ok is False
        when the step was skipped for a non-finite loss or gradient on some rank (every rank reaches
        the same verdict)."""
        rate = self.schedule(self.global_step, self.plateaus)
        loss, ok = self.stepper(local, n_global, self.global_step + 1, rate)
        self.samples += n_global
        return loss, ok

    def settle_(self):
        """The parameters to evaluate or save (local SGD: averaged now if steps were taken since)."""
        with self.watchdog.guard("the ranks' parameters averaged after step %d" % self.global_step):
            self.stepper.settle_(self.global_step + 1)
        self.tally(None, self.epoch, flush=True)    # a GraphStep's queued results read

    def feed(self, train, n_train, epoch, steps):
        """Where this epoch's local batches come from (mpinn.training.feed.make_feed, from the epoch's order and who
        reads: rows by position, n_train of them, in epoch_order's order; a stream, n_train None, in its windows'
        order); staged onto the GPU where there is one."""
        if n_train is None:
            order = StreamOrder(self.seed, epoch)
        else:
            order = epoch_order(n_train, self.seed, epoch, self.shuffle_block) \
                if self.reading.reads(self.comm.rank) else None
        feed = make_feed(train, order, self.reading, self.next_step, self.comm, self.layout, self.batch_size,
                         self.model.dtype, steps=steps, prefetch=self.prefetch, replicate=self.towers == "same")
        if n_train is not None:
            self.posted = feed
        return feed if self.stepper.stages else device_feed(feed, self.model.backend)

    # ---------------------------------------------------------------- the loop
    def fit(self, train, valid, epochs, progress=True):
        """train / valid: Datasets on rank 0, None elsewhere. Returns the per-epoch history.
        Starts from the current position (epoch 1, step 0, or where a checkpoint left off)."""
        with self.watchdog.guard("the start of training"):
            n_train, has_valid, about = self.comm.bcast_obj((
                train.known_length(), valid is not None, len(train)) if self.rank0 else None)
        B = self.batch_size
        steps = math.ceil(n_train / B) if n_train is not None else None      # a stream's end is found by reading
        shown = steps or math.ceil(about / B)       # the progress bar's (a stream's is an estimate)
        bar = ProgressBar(progress and self.rank0)
        t_fit, self.samples_at_start, self.steps_at_start = time.perf_counter(), self.samples, self.global_step
        step_timeout = self.cfg.step_timeout if self.cfg.step_timeout > 0 else float("inf")
        if self.stop is not None:       # training begins: a stop signal is now obeyed at a step boundary
            self.stop.beat(step_timeout)
        while self.epoch <= epochs and not self.stopping:
            epoch = self.epoch
            with self.watchdog.guard("the start of epoch %d (its feed; a stream's readers)" % epoch):
                feed = self.feed(train, n_train, epoch, steps)
            t_epoch, samples0 = time.perf_counter(), self.samples
            while steps is None or self.next_step < steps:
                s = self.next_step
                self.watchdog.arm("step %d (epoch %d, batch %d of %s%d)" % (
                    self.global_step + 1, epoch, s + 1, "" if steps else "about ", shown))
                t0 = time.perf_counter()
                local = feed.next()
                if local is None:           # the stream's rows are done
                    n = rows_dropped(self.comm, train) if epoch == 1 and self.cfg.missing_labels == "drop" else 0
                    self.watchdog.disarm()
                    if self.rank0 and n:
                        self.log("labels: missing in %d rows, left out (--missing-labels drop)" % n)
                    break
                n_global = min(B, n_train - s * B) if steps else feed.n_global
                self.timeline.add("data", t0, time.perf_counter(), self.global_step + 1)
                loss, ok = self.step_slice(local, n_global)
                self.watchdog.disarm()
                if self.first_step_s is None:       # since the run began, reading included (the summary says it)
                    self.first_step_s = time.perf_counter() - self.t_origin
                self.global_step += 1
                self.next_step += 1
                self.tally((loss, ok, n_global, self.global_step), epoch)
                shown_loss = self.loss_sum / max(self.loss_n, 1) if ok is None else loss    # a GraphStep's: later
                bar.update(epoch, epochs, s + 1, max(shown, s + 1), shown_loss,
                           (self.samples - samples0) / max(time.perf_counter() - t_epoch, 1e-9))
                if (self.checkpoints is not None and self.checkpoints.due(self.global_step)
                        and self.more(steps) and not self.bad_streak):    # only good states are checkpointed
                    self.settle_()
                    self.checkpoints.save(self, "step")
                if self.stop is not None:
                    self.stop.beat(self.stop.STOP_EVERY * (time.perf_counter() - t0))     # until the next agreement
                    if self.global_step % self.stop.STOP_EVERY == 0 and self.more(steps):
                        stop_if_asked(self, epoch)
                if self.eval_every and has_valid and self.global_step % self.eval_every == 0 and self.more(steps):
                    self.evaluate_inside(valid, epoch, t_epoch, step_timeout)
            self.settle_()
            record = self.record(epoch, t_epoch, "epoch")
            with self.watchdog.guard("evaluation after epoch %d" % epoch):
                if self.stop is not None:   # evaluation and the epoch's checkpoint come before the next agreement
                    self.stop.expect("epoch end", step_timeout if self.checkpoints is not None      # not yet timed
                                     else 2 * (time.perf_counter() - t_epoch) + 2, step_timeout)
                if has_valid:
                    record["valid"] = self.evaluate(valid)
                    self.track_best(record)     # keeping the best may gather a sharded table: under the deadline
            self.history.append(record)
            self.epoch, self.next_step = epoch + 1, 0
            self.loss_sum, self.loss_n = 0.0, 0
            if self.rank0:
                self.log("epoch %d/%d  train loss %.4f  valid: %s  (%.1f s)" % (epoch, epochs, record["train_loss"],
                         format_metrics(record.get("valid", {})) or "-", record["seconds"]))
                if self.cut_epoch == epoch:
                    self.log("  no better held-out %s: the rate is now %g (--lr-decay plateau)" % (
                        self.stop_metric, self.schedule(self.global_step, self.plateaus)))
            if self.on_epoch is not None:
                self.on_epoch(record)
            if self.checkpoints is not None:
                self.checkpoints.save(self, "epoch")
            if self.stop is not None:
                self.stop.done()
            if self.epoch <= epochs and not self.stopping:
                stop_if_asked(self, epoch, at_epoch_end=True)
            if self.stopping:
                self.log("early stop: no better held-out %s for %d epochs; the best was epoch %d (%.4f)" % (
                    self.stop_metric, self.best["bad_epochs"], self.best["epoch"], self.best["value"]))
        self.elapsed = time.perf_counter() - t_fit
        return self.history

    def more(self, steps):
        """Are there steps left in this epoch? (A stream's: as far as is known; its end is found by reading.)"""
        return steps is None or self.next_step < steps

    def record(self, epoch, t_epoch, at):
        """Where training stands, taken before the held-out evaluation: the epoch's mean training loss so far,
        its seconds, the global step, the rows seen (all epochs), the seconds since the run began ("elapsed")
        and the Unix time ("time"), of which "eval_seconds" went to earlier held-out evaluations; at: "epoch"
        (its end) or "step" (inside one)."""
        now = time.perf_counter()
        return {"epoch": epoch, "train_loss": self.loss_sum / max(self.loss_n, 1), "seconds": now - t_epoch,
                "skipped_steps": self.skipped, "at": at, "step": self.global_step, "samples": self.samples,
                "elapsed": now - self.t_origin, "eval_seconds": self.eval_seconds, "time": time.time()}

    def evaluate_inside(self, valid, epoch, t_epoch, step_timeout):
        """--eval-every: the held-out metrics now, inside the epoch (collective). They go to on_eval (the
        curve) and the log; with --keep best the point may be the one kept; early stop counts epoch ends only."""
        self.settle_()
        record = self.record(epoch, t_epoch, "step")
        with self.watchdog.guard("evaluation at step %d" % self.global_step):
            if self.stop is not None:   # the first time: scoring costs less than the training since the epoch began
                self.stop.expect("evaluation", 2 * (time.perf_counter() - t_epoch) + 2, step_timeout)
            record["valid"] = self.evaluate(valid)
            if self.keep_best and not self.towers:      # a point inside an epoch (a log's one pass) may be kept
                self.track_best(record, point=True)
        if self.rank0:
            self.log("step %d (epoch %d, %d rows seen)  valid: %s" % (
                self.global_step, epoch, self.samples, format_metrics(record["valid"])))
        if self.on_eval is not None:
            self.on_eval(record)
        if self.stop is not None:
            self.stop.done()

    # ---------------------------------------------------------------- the best epoch
    @property
    def stopping(self):
        return bool(self.early_stop and self.best and self.best["bad_epochs"] >= self.early_stop)

    def track_best(self, record, point=False):
        """Is this evaluation the best so far by the held-out metric (lower logloss / rmse, higher auc /
        accuracy; a tie, or a non-finite prediction, is no better)? An epoch's end, or (point) one inside it: an
        epoch's end no better counts towards early stop, a point does not. Every rank has the same metrics."""
        value = stop_value(record["valid"], self.stop_metric)
        improved = value == value and (
            self.best is None or better(self.stop_metric, value, self.best["value"]))
        if improved:
            self.best = {"epoch": record["epoch"], "value": float(value), "bad_epochs": 0, "step": record["step"],
                         "at": record["at"], "valid": record["valid"]}
            if self.keep_best:
                self.best_params = self.stepper.whole_params()
        elif point:
            return
        elif self.best is not None:
            self.best["bad_epochs"] += 1
            if self.schedule.cuts(self.best["bad_epochs"], self.plateaus):     # --lr-decay plateau
                self.plateaus, self.cut_epoch = self.plateaus + 1, record["epoch"]
        else:       # no finite metric yet: the first epoch stands in
            self.best = {"epoch": record["epoch"], "value": float("nan"), "bad_epochs": 1, "at": "epoch"}
            if self.keep_best:
                self.best_params = self.stepper.whole_params()
        if not point:
            record["best_epoch"] = self.best["epoch"]

    def tally(self, result, epoch, flush=False):
        """Each settled step's loss (result: the step's (loss, ok, n_global, step); a GraphStep's settle later, see
        Step.outcomes) into the epoch's mean, or a skipped step counted; too many in a row end training."""
        for loss, ok, n_global, step in self.stepper.outcomes(result, flush):
            if ok:
                self.loss_sum, self.loss_n, self.bad_streak = self.loss_sum + loss * n_global, self.loss_n + n_global, 0
                continue
            self.skipped, self.bad_streak = self.skipped + 1, self.bad_streak + 1
            self.log("step %d skipped: non-finite loss or gradient (%d in a row, %d in all)"
                     % (step, self.bad_streak, self.skipped))
            if self.bad_streak >= self.max_bad_steps:
                raise MpinnError(messages.diverged(self.bad_streak, step, epoch, self.last_checkpoint),
                                 collective=True, code=4)

    def evaluate(self, data, chunk=65536):
        """Held-out metrics (see mpinn.training.evaluate); collective, data on rank 0 only. Its seconds add to
        eval_seconds."""
        t0 = time.perf_counter()
        self.stepper.faults.fire_evaluation(self.global_step)
        if not self.towers:
            out = evaluate(self.model, self.comm, self.layout, data, chunk, predict=self.stepper.predict)
        else:
            out = evaluate_towers(self.model, self.comm, self.layout, data, self.tower_mix, chunk)
            self.tower_weights = out["weights"]
        for m in [out] + out.get("towers", []):
            if "rmse" in m:             # in the label's units
                m["rmse"] *= self.target_scale
        self.eval_seconds += time.perf_counter() - t0
        return out

    def gather_towers(self):
        """Every tower's parameters, stacked (towers, size) on rank 0; None elsewhere."""
        return self.comm.Gather_(self.model.params, what="tower parameters")

    @property
    def task(self):
        return task_of(self.model.spec)

    def load_params_(self, params):
        """Before start(): rank 0's whole flat parameters (None elsewhere) become the model's on every
        rank (with a sharded table, each rank keeps its own rows of them)."""
        self.stepper.load_params_(params)

    def final_params(self):
        """Collective, after training: the parameters kept (with --keep best, the best epoch's), whole on
        rank 0 (gathered from the ranks for a sharded table), None elsewhere; the model holds them too. The
        best epoch's copy is adopted, never gathered again (a sharded table's rank 0 would hold it twice:
        13.4 GB against 9.2 for W4's 1.09 billion parameters at np 2)."""
        if self.keep_best and self.best is not None and \
                self.comm.bcast_obj(self.best_params is not None if self.rank0 else None):
            return self.stepper.adopt_params(self.best_params)
        return self.stepper.final_params()

    def release_(self):
        """Collective, after training: the model's arrays become this rank's own again (out of any shared-memory
        window, then freed; the kept epoch's copy, on every rank, taken as it is). The window's optimizer state is
        let go: nothing steps after training, and copies of it made the end outgrow the training (docs/scale.md)."""
        shared = self.stepper.shares_params
        if shared:
            self.optimizer.arrays = {}
        self.comm.release_(self.model, params=self.best_params if shared and self.keep_best else None)
        self.stepper.release_()

    # ---------------------------------------------------------------- reporting
    def write_timeline(self, path):
        """Collective: every rank's phases as one Chrome-trace JSON file (see write_trace)."""
        write_trace(self.timeline, self.comm, path)

    def summary(self):
        """Gather every rank's phase times; rank 0 returns the summary dict."""
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0      # KiB on Linux: MiB
        per_rank = self.comm.gather_obj((dict(self.times), dict(self.timeline.parts), rss))
        if not self.rank0:
            return None
        parts = {k: sum(p.get(k, 0.0) for _, p, _ in per_rank) / len(per_rank) for k in per_rank[0][1]}
        peaks = [m for _, _, m in per_rank]
        per_rank = [t for t, _, _ in per_rank]
        total = self.elapsed
        done = self.samples - self.samples_at_start      # by this run (a resumed one counts its own)
        mean = {k: sum(r[k] for r in per_rank) / len(per_rank) for k in PHASES}
        return {"ranks": self.comm.size, "reduce": self.comm.name, "samples": done,
                "seconds": total, "samples_per_s": done / total if total else 0.0,
                "phase_s_mean": mean, "phase_s_per_rank": per_rank, "skipped_steps": self.skipped,
                "data_wait_s_per_step": mean["data"] / max(self.global_step - self.steps_at_start, 1),
                "global_steps": self.global_step, "exchange": self.comm.last_exchange,
                "table": self.table, "comm_parts_s_mean": parts, "peak_rss_mib_per_rank": peaks,
                "first_step_s": self.first_step_s}
