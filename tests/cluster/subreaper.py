"""Run a daemon as a child subreaper: python subreaper.py COMMAND...

Slurm's daemons fork helpers away (slurmd starts a slurmstepd per job step, which outlives its parent's
interest in it); on a machine whose init does not reap orphans, every one of them would linger as a
zombie. Here they are adopted by this process and reaped. It exits, with COMMAND's status, once
COMMAND and everything it left behind are gone; SIGTERM and SIGINT are passed on to COMMAND."""
import ctypes
import os
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36


def main(argv):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit("subreaper: prctl(PR_SET_CHILD_SUBREAPER) failed: %s" % os.strerror(ctypes.get_errno()))
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: os.kill(pid, s))
    status = 0
    while True:
        try:
            done, st = os.wait()
        except ChildProcessError:
            break
        if done == pid:
            status = os.waitstatus_to_exitcode(st)
    sys.exit(status if status >= 0 else 128 - status)


if __name__ == "__main__":
    main(sys.argv[1:])
