"""A run's checkpoints: where they go and what they record (Checkpoints), a run resumed from one (start), and the
stop a signal asks for (a checkpoint of this exact position, then the run ends, resumable). The trainer's loop
calls them at its step boundaries; this is the one seam of training that touches files."""
from mpinn.files.checkpoint import clear_stopped, load_checkpoint, mark_stopped, save_checkpoint
from mpinn.core.errors import MpinnError, Stopped
from mpinn.files.outputs import why_not_written
from mpinn.settings import messages
from mpinn.settings.resume import check_kept, check_resume, resume_config, run_identity


class Checkpoints:
    """Checkpoints written into `directory` (rank 0) every `every` steps and at each epoch's end, the newest `keep`
    kept, each recording `meta` (the run's configuration, model, data contract and identity) beside the trainer's
    position, parameters and optimizer state."""

    def __init__(self, directory, every=0, keep=3, meta=None, home=None):
        self.directory, self.every, self.keep = directory, int(every), int(keep)
        self.meta = dict(meta or {})
        self.last = None        # the newest checkpoint written or resumed from (path)
        self.home = home or directory   # what --resume names and where STOPPED goes (an ensemble's: above a member's)

    def due(self, step):
        """Is a checkpoint due after global step `step` (inside an epoch)?"""
        return bool(self.every) and step % self.every == 0

    def save(self, trainer, why):
        """Collective: rank 0 writes the parameters, the optimizer state and the position; every rank waits for it
        under the deadline, so a slow disk is not mistaken for a stuck step."""
        comm = trainer.comm
        with trainer.watchdog.guard("checkpoint at step %d" % trainer.global_step):
            arrays = trainer.stepper.saved_arrays()         # collective: a sharded table is gathered to rank 0
            failed = None
            if comm.rank == 0:
                if trainer.best_params is not None:
                    arrays["best_params"] = trainer.best_params
                header = dict(self.meta, position=trainer.position(), why=why, ranks=comm.size)
                try:
                    self.last = save_checkpoint(self.directory, trainer.global_step, arrays, header, self.keep,
                                                run=self.meta.get("run"))
                except OSError as e:        # a full disk, a file-size limit: the earlier checkpoints are intact
                    failed = messages.checkpoint_not_written(trainer.global_step, self.directory,
                                                             why_not_written(e), self.last)
            self.last, failed = comm.bcast_obj((self.last, failed))
        if failed:
            raise MpinnError(failed, collective=True)


def restore(trainer, arrays, header):
    """Continue from a checkpoint that rank 0 has loaded (arrays/header None elsewhere), before trainer.start():
    the parameters reach the other ranks at start; the optimizer state and the position here."""
    comm = trainer.comm
    header = comm.bcast_obj(header)
    trainer.stepper.restore_(arrays, header.get("path"))   # a sharded table: each rank takes its rows
    pos = header["position"]
    trainer.best, trainer.plateaus = pos.get("best"), pos.get("plateaus", 0)
    if comm.bcast_obj("best_params" in arrays if comm.rank == 0 else None):
        trainer.best_params = trainer.stepper.restore_whole(arrays["best_params"] if comm.rank == 0 else None)
    trainer.epoch, trainer.next_step, trainer.global_step = pos["epoch"], pos["next_step"], pos["global_step"]
    trainer.samples, trainer.loss_sum, trainer.loss_n = pos["samples"], pos["loss_sum"], pos["loss_n"]
    trainer.skipped, trainer.bad_streak, trainer.history = pos["skipped"], pos["bad_streak"], pos["history"]
    return header.get("path")


def start(cfg, trainer, spec, info, say=lambda msg: None, home=None):
    """A run's checkpoints from its configuration (collective, before trainer.start()): with --resume, the trainer
    restored from the newest checkpoint of this run (which must match its options, model and data); with a
    checkpoint directory, the Checkpoints the loop writes (trainer.checkpoints). home: the directory a resume
    names, when this run's checkpoints lie below it (an ensemble's member: mpinn.training.ensemble)."""
    comm, config = trainer.comm, resume_config(cfg, trainer.comm.size)
    run = run_identity(config, spec, info.meta, info.n_train)
    resumed = None
    if cfg.resume:
        def load_checked():
            arrays, header = load_checkpoint(cfg.resume, run)
            check_resume(header, config, spec, info.meta, info.n_train, cfg.batch)
            check_kept(header, "best_params" in arrays, cfg.keep)
            return arrays, header
        arrays, header = comm.root_call(load_checked) or (None, None)
        resumed = restore(trainer, arrays, header)
        say("resumed from %s: epoch %d, step %d of the epoch (%d steps done)" % (
            resumed, trainer.epoch, trainer.next_step, trainer.global_step))
    directory = cfg.checkpoint_dir or cfg.resume
    if directory:
        comm.root_call(lambda: clear_stopped(directory))     # this run goes on: no longer "stopped"
        trainer.checkpoints = Checkpoints(directory, cfg.checkpoint_every, cfg.keep_checkpoints, {
            "config": config, "spec": spec.to_dict(), "meta": info.meta, "n_train": info.n_train, "run": run}, home)
        trainer.checkpoints.last = resumed


def stop_if_asked(trainer, epoch, at_epoch_end=False):
    """Collective, at a step boundary: if a stop signal reached any rank (comm.guard.StopSignals), every rank agrees
    here, a checkpoint of this exact position is written (where checkpoints go) and the run ends with Stopped (exit
    code STOPPED_EXIT, 130 after a Ctrl-C); --resume continues it as if nothing happened."""
    stop, comm = trainer.stop, trainer.comm
    if stop is None:
        return
    # under the step deadline: a peer lost here (kill -9, no signal) must end the job, not leave this rank waiting
    with trainer.watchdog.guard("the ranks' stop agreement after step %d" % trainer.global_step):
        signum = comm.allreduce_max_obj(int(stop.signal))
    if not signum:
        return
    stop.agreed = True
    trainer.settle_()
    where = ("the end of epoch %d" % epoch if at_epoch_end else "step %d (epoch %d, batch %d)"
             % (trainer.global_step, epoch, trainer.next_step))
    ckpt = trainer.checkpoints
    if ckpt is None:
        raise Stopped(messages.stopped_unsaved(stop.name(signum), where), stop.code(signum))
    if not at_epoch_end:        # an epoch's end has just been checkpointed
        ckpt.save(trainer, "signal")
    line = messages.stopped_saved(stop.name(signum), where, ckpt.last, ckpt.home)
    if comm.rank == 0:
        mark_stopped(ckpt.home, line)
    comm.bcast_obj(None)        # every rank ends after the mark is written
    raise Stopped(line, stop.code(signum))
