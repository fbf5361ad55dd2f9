"""How a one-process command (predict, prepare) ends: SIGTERM as an interrupt, one line and an exit code for an
error or a stop, never a traceback."""
import os
import signal
import sys
import threading

from mpinn.core.errors import MpinnError

class Terminated(KeyboardInterrupt):
    """SIGTERM (scancel, a preemption, kill) in a command that writes files (predict, prepare): raised where the
    process is, so that the writers' cleanups run (their temporary files removed) before it ends, as Ctrl-C's
    KeyboardInterrupt does; Python's default would end it at once, leaving them."""


def terminate_as_interrupt():
    """SIGTERM raises Terminated from now on (the main thread only may set a handler)."""

    def stop(signum, frame):
        raise Terminated()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)


def stopped_line(e):
    """(the one line, the exit code) of a KeyboardInterrupt: Ctrl-C's, or SIGTERM's (Terminated)."""
    if isinstance(e, Terminated):
        return "stopped by SIGTERM; its output not written", 143
    return "interrupted", 130


def run_one_process(run, args):
    """The entry point of a one-process command (predict, prepare): a MpinnError is one line on
    stderr and its exit code (2 for bad input), never a traceback; SIGTERM or Ctrl-C one line too, after the
    temporary files are removed (143, 130); stdout closed early (`| head`) ends it quietly with 141, a shell's
    code for SIGPIPE."""
    terminate_as_interrupt()
    try:
        return run(args)
    except MpinnError as e:
        print("mpinn: error: %s" % e, file=sys.stderr)
        return e.code
    except KeyboardInterrupt as e:
        line, code = stopped_line(e)
        print("mpinn: error: %s" % line, file=sys.stderr)
        return code
    except BrokenPipeError:     # the reader of stdout went away (`| head`): end quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
