"""python -m mpinn --version: the version; python -m mpinn: where the commands are."""
import argparse
import sys

from mpinn import __version__


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m mpinn", description="mpinn: MPI data-parallel training of neural "
                                "networks on big tabular data. The commands: python -m mpinn.train, mpinn.predict, "
                                "mpinn.export, mpinn.prepare, mpinn.doctor, mpinn.bench (each with --help).")
    p.add_argument("--version", action="version", version="mpinn %s" % __version__)
    p.parse_args(argv)
    p.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
