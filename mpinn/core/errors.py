"""Leaf module: the user-facing error type and a stop that is not one."""


class MpinnError(Exception):
    """A problem the user can fix (bad input, bad option): reported as one line, exit code 2
    (or `code`, e.g. 4 when training diverged). `collective` means every rank raised it together
    (so the job can end without MPI_Abort)."""

    def __init__(self, message, collective=False, code=2):
        super().__init__(message)
        self.collective = collective
        self.code = code


STOPPED_EXIT = 75      # "stopped, resumable" (EX_TEMPFAIL): a signal ended the run at a step boundary


class Stopped(MpinnError):
    """A run stopped on a signal (SIGTERM, SIGUSR1, Ctrl-C) at a step boundary every rank agreed on, after its
    checkpoint was written: not an error; exit code STOPPED_EXIT (130 after a Ctrl-C), and --resume continues it
    exactly."""

    def __init__(self, message, code=STOPPED_EXIT):
        super().__init__(message, collective=True, code=code)
