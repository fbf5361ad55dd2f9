"""What 16-bit rows on the wire cost in model quality on W4 (issue 63, item 6): scripts/bench/lever_auc.py with one
arm per --wire-rows, the first the reference (its arms, its rule, its data and its output).

    python -m scripts.bench.wire_auc [--batch 32768] [--steps 1000] [--test-rows 200000] [--seeds 0,1,2]
                                     [--arms fp32,bf16] [--extra "..."] [--out scripts/results/wire-auc.json]

is python -m scripts.bench.lever_auc --arm fp32="--batch B --wire-rows fp32 EXTRA" --arm bf16="... bf16 EXTRA"
--reference fp32. Each arm reads steps x batch fresh rows once; --rows, kept for the command that made
scripts/results/wire-auc-2026-12-02.json (--rows 8192000 --batch 8192 --steps 1000), must equal that product
(a second epoch over the same rows overfit and was discarded). At one rank every row a step uses is rounded once
and the batch's gradient rows once; at P ranks each rank rounds its own share's gradient rows (tests/training/
mpi_sharded.py: P ranks equal one process rounding each share), up to P roundings of a row a step."""
import argparse
import sys

from scripts.bench import lever_auc


def lever_argv(args):
    """This command's arguments as lever_auc's."""
    if args.rows is not None and args.rows != args.steps * args.batch:
        raise ValueError("--rows %d is not --steps x --batch = %d: every arm reads its rows once (one pass)"
                         % (args.rows, args.steps * args.batch))
    wires = args.arms.split(",")
    out = ["--steps", str(args.steps), "--test-rows", str(args.test_rows), "--seeds", args.seeds,
           "--reference", wires[0], "--out", args.out, "--timeout", str(args.timeout)]
    for w in wires:
        out += ["--arm", "%s=--batch %d --wire-rows %s %s" % (w, args.batch, w, args.extra)]
    return out + (["--workdir", args.workdir] if args.workdir else [])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=None, help="training rows: must be --steps x --batch (one pass)")
    p.add_argument("--test-rows", type=int, default=200000, help="test rows, the next ones (default 200,000)")
    p.add_argument("--batch", type=int, default=32768, help="the global batch (default 32768)")
    p.add_argument("--steps", type=int, default=1000, help="steps an arm, one pass (default 1000)")
    p.add_argument("--seeds", default="0,1,2", help="mpinn's --seed of each run (default 0,1,2)")
    p.add_argument("--arms", default="fp32,bf16", help="--wire-rows of each arm, the first the reference")
    p.add_argument("--extra", default="", help="more mpinn.train options for every arm")
    p.add_argument("--workdir", default=None, help="lever_auc's --workdir")
    p.add_argument("--timeout", type=int, default=3600, help="seconds one run may take")
    p.add_argument("--out", default="scripts/results/wire-auc.json")
    args = p.parse_args(argv)
    try:
        argv2 = lever_argv(args)
    except ValueError as e:
        p.error(str(e))
    return lever_auc.main(argv2)


if __name__ == "__main__":
    sys.exit(main())
