"""Entry point: mpirun -np N python -m mpinn.train [--data FILE] [options]."""
import sys

from mpinn.host.launch import launched_ranks, pin_threads

pin_threads()       # first: before numpy loads its BLAS

import numpy as np  # noqa: E402

from mpinn.api import run as train_run  # noqa: E402
from mpinn.core.errors import MpinnError  # noqa: E402
from mpinn.settings import RunConfig, agree, from_argv  # noqa: E402
from mpinn.settings.parse import build_parser  # noqa: E402,F401  (the parser: python -m mpinn.train --help)


def run(cfg):
    """The CLI is a thin layer over the Python API: same options, same code. numpy's floating-point warnings are
    off: a diverging step is mpinn's to report (the step's verdict, in one line), not numpy's on stderr."""
    with np.errstate(all="ignore"):
        train_run(cfg)
    return 0


def main(argv=None):
    # start-up: --help (and one rank's bad option) end before MPI starts, which mpi4py does at its import
    from mpinn.comm.guard import run_guarded
    try:        # one rank of several: a bad option is told to the others, which may have read theirs and wait
        cfg = from_argv(argv, raise_errors=launched_ranks()[1] != 1)
    except MpinnError as e:
        return run_guarded(refused, e)
    return run_guarded(run, cfg)


def refused(error):
    """A bad option on a rank of several: raised on every rank at the ranks' agreement on their options, the first
    collective of a run (mpinn.settings.agree), under the start-up deadline."""
    from mpinn.comm.guard import START_KNOB, Watchdog  # start-up: as main's run_guarded
    from mpinn.comm.topology import start_gather  # start-up: as main's run_guarded
    watchdog = Watchdog(RunConfig().start_timeout)
    try:
        with watchdog.guard("start-up (the ranks' agreement on their options)", knob=START_KNOB):
            agree(None, start_gather(), error=str(error))
    finally:
        watchdog.stop()


if __name__ == "__main__":
    sys.exit(main())
