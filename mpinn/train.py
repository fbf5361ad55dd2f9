"""Entry point: mpirun -np N python -m mpinn.train [--data FILE] [options]."""
import sys

from mpinn.process import pin_threads

pin_threads()       # first: before numpy loads its BLAS

from mpinn.settings.parse import build_parser  # noqa: E402,F401  (the parser: python -m mpinn.train --help)


def run(cfg):
    """The CLI is a thin layer over the Python API: same options, same code. numpy's floating-point warnings are
    off: a diverging step is mpinn's to report (the step's verdict, in one line), not numpy's on stderr."""
    import numpy as np
    from mpinn.api import run as train_run
    with np.errstate(all="ignore"):
        train_run(cfg)
    return 0


def main(argv=None):
    from mpinn.settings import from_argv
    cfg = from_argv(argv)
    from mpinn.comm.guard import run_guarded
    return run_guarded(run, cfg)


if __name__ == "__main__":
    sys.exit(main())
