"""The trainer's position on disk: checkpoints written and restored, and the stop a signal asks for (a checkpoint
of this exact position, then the run ends, resumable). A part of Trainer (its base class), kept apart
because it is the one seam that touches files."""
import numpy as np

from mpinn.checkpoint import mark_stopped, save_checkpoint
from mpinn.config import Stopped


class Checkpoints:
    """Trainer's checkpoint methods; they use its position (epoch, next_step, global_step, samples, ...),
    stepper (the state to save), comm, watchdog and stop; Trainer.__init__ sets ckpt_dir (None: no
    checkpoints), ckpt_every, ckpt_keep, ckpt_meta and last_checkpoint."""

    # ---------------------------------------------------------------- checkpoints
    def enable_checkpoints(self, directory, every=0, keep=3, meta=None):
        """Write a checkpoint every `every` steps and at each epoch end into directory (rank 0)."""
        self.ckpt_dir, self.ckpt_every, self.ckpt_keep = directory, int(every), int(keep)
        self.ckpt_meta = dict(meta or {})

    def position(self):
        return {"epoch": self.epoch, "next_step": self.next_step, "global_step": self.global_step,
                "samples": self.samples, "loss_sum": self.loss_sum, "loss_n": self.loss_n,
                "skipped": self.skipped, "bad_streak": self.bad_streak, "history": self.history, "best": self.best,
                "seed": self.seed, "batch_size": self.batch_size}

    def checkpoint(self, why):
        """Rank 0 writes parameters, optimizer state and position; every rank waits for it under
        the deadline, so a slow disk is not mistaken for a stuck step."""
        self.watchdog.arm("checkpoint at step %d" % self.global_step)
        arrays = self.stepper.saved_arrays()        # collective: a sharded table is gathered to rank 0
        if self.rank0:
            if self.best_params is not None:
                arrays["best_params"] = self.best_params
            header = dict(self.ckpt_meta, position=self.position(), why=why, ranks=self.comm.size)
            self.last_checkpoint = save_checkpoint(self.ckpt_dir, self.global_step, arrays, header,
                                                   self.ckpt_keep, run=self.ckpt_meta.get("run"))
        self.last_checkpoint = self.comm.bcast_obj(self.last_checkpoint)
        self.watchdog.disarm()

    def restore(self, arrays, header):
        """Continue from a checkpoint that rank 0 has loaded (arrays/header None elsewhere): the
        parameters reach the other ranks in start(); the optimizer state and position here."""
        header = self.comm.bcast_obj(header)
        self.stepper.restore_(arrays, header.get("path"))   # a sharded table: each rank takes its rows
        pos = header["position"]
        self.best = pos.get("best")
        if self.comm.bcast_obj("best_params" in arrays if self.rank0 else None):
            if self.table == "sharded":     # whole parameters: rank 0 alone holds them (see whole_params)
                self.best_params = self.model.xp.asarray(arrays["best_params"]) if self.rank0 else None
            else:
                buf = np.ascontiguousarray(arrays["best_params"]) if self.rank0 else np.empty_like(
                    self.model.backend.asnumpy(self.model.params))
                self.best_params = self.model.xp.asarray(self.comm.Bcast_(buf, root=0, what="best parameters"))
        self.epoch, self.next_step, self.global_step = pos["epoch"], pos["next_step"], pos["global_step"]
        self.samples, self.loss_sum, self.loss_n = pos["samples"], pos["loss_sum"], pos["loss_n"]
        self.skipped, self.bad_streak, self.history = pos["skipped"], pos["bad_streak"], pos["history"]
        self.last_checkpoint = header.get("path")

    # ---------------------------------------------------------------- stopping on a signal
    def stop_if_asked(self, epoch, at_epoch_end=False):
        """Collective, at a step boundary: if a stop signal reached any rank (comm.guard.StopSignals), every
        rank agrees here, a checkpoint of this exact position is written (where checkpoints go) and the run
        ends with Stopped (exit code STOPPED_EXIT); --resume continues it as if nothing happened."""
        if self.stop is None:
            return
        signum = self.comm.allreduce_max_obj(int(self.stop.signal))
        if not signum:
            return
        self.stop.agreed = True
        self.settle_()
        where = ("the end of epoch %d" % epoch if at_epoch_end else "step %d (epoch %d, batch %d)"
                 % (self.global_step, epoch, self.next_step))
        if self.ckpt_dir:
            if not at_epoch_end:        # an epoch's end has just been checkpointed
                self.checkpoint("signal")
            line = ("stopped by %s at %s: checkpoint %s written; continue with --resume %s"
                    % (self.stop.name(signum), where, self.last_checkpoint, self.ckpt_dir))
            if self.rank0:
                mark_stopped(self.ckpt_dir, line)
            self.comm.bcast_obj(None)   # every rank ends after the mark is written
            raise Stopped(line)
        raise Stopped("stopped by %s at %s; no --checkpoint-dir, so nothing was saved (give one to resume after "
                      "a stop)" % (self.stop.name(signum), where))
