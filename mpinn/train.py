"""Entry point: mpirun -np N python -m mpinn.train [--data FILE] [options]."""
import sys

from mpinn.process import pin_threads

pin_threads()       # first: before numpy loads its BLAS

from mpinn.options import build_train_parser as build_parser  # noqa: E402


def run(args):
    """The CLI is a thin layer over the Python API: same options, same code."""
    from mpinn.api import train_from_args
    train_from_args(args)
    return 0


def main(argv=None):
    args = build_parser().parse_args(argv)
    from mpinn.comm.guard import run_guarded
    return run_guarded(run, args)


if __name__ == "__main__":
    sys.exit(main())
