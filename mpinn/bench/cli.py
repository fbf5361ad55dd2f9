"""python -m mpinn.bench: the command line (a workload run, or the side-by-side table of records)."""
import sys

from mpinn.bench.run import run
from mpinn.bench.table import print_table
from mpinn.optim import OPTIMIZERS
from mpinn.bench.workloads import WORKLOADS
from mpinn.settings.options import Parser, hot_rows_spec, positive_int, stale_depth


def build_parser():
    p = Parser(prog="python -m mpinn.bench",
               description="mpinn's benchmark: train the peers' workloads (see the peers README) with "
                           "exactly their data, initial weights, batch order and step counts; time the "
                           "steps after the warm-up between two Barriers; write one JSON record "
                           "(peer \"mpinn\") in the peers' format. Run under mpiexec -n P.",
               epilog="W1: MLP 784-256-256-10 on 60000x784 float32, batch 256, SGD 0.05, 300 steps (30 warm-up). "
                      "W2: hashed CSR 2^18 -> 64 -> 1 on 262144 rows x 20 categoricals, batch 1024, SGD 0.1, "
                      "300 steps (30). W3: Ng's 400-25-10 sigmoid net on 5000x400 float64, full-batch GD "
                      "0.8, 100 iterations (10). W4 (mpinn only): 262144 rows of the W4 click log at --scale 100, "
                      "26 hashed C<j>=<hex> tokens in 2^20 + 26 dense -> 64 -> 1, batch 1024, SGD 0.1, 300 steps (30). "
                      "Example: mpiexec -n 2 python -m mpinn.bench --workload w1; "
                      "python -m mpinn.bench --table bench-results.jsonl /tmp/peers-results.jsonl")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--workload", choices=sorted(WORKLOADS), help="which workload to train")
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu"],
                   help="where every rank computes: cpu (default; one BLAS thread a rank) or gpu (its own, or one "
                        "the ranks share; gradients as training's --comm auto moves them)")
    p.add_argument("--reduce", default="allreduce", choices=["allreduce", "gather"],
                   help="gradient strategy: allreduce (default) or gather (DT42 pattern: Gather to rank 0, "
                        "rank 0 steps and Bcasts)")
    p.add_argument("--compress", choices=["fp16", "bf16"], help="16-bit dense gradient exchange (allreduce)")
    p.add_argument("--comm", default="auto", choices=["auto", "shm", "mpi"],
                   help="how --reduce allreduce sums gradients: shm (a shared-memory window), mpi "
                        "(MPI_Allreduce); auto (default): shm when every rank is on one node")
    p.add_argument("--average-every", type=int, default=0, metavar="K",
                   help="local SGD: average the parameters every K steps instead of reducing gradients")
    p.add_argument("--overlap", action="store_true",
                   help="Iallreduce the later layers' gradients while earlier layers back-propagate")
    p.add_argument("--wire-rows", default="fp32", choices=["fp32", "bf16", "int8", "bf16-int8", "int8-bf16"],
                   help="a sharded table's rows and gradient rows on the wire, as training's --wire-rows")
    p.add_argument("--stale-rows", default=0, type=stale_depth, metavar="0|1|2",
                   help="a sharded table's rows fetched a step ahead (1: one update late; 2: the gradient rows sent "
                        "on while the next batch computes too), as training's --stale-rows")
    p.add_argument("--stale-progress", choices=["thread", "none"],
                   help="--stale-rows 1 or 2: who drives MPI on the rows fetched ahead while a rank computes: a thread "
                        "calling Test (thread), or nobody but MPI itself (none: run under MPIR_CVAR_ASYNC_PROGRESS=1 "
                        "for MPICH's own progress thread); default: training's")
    p.add_argument("--graph", default="auto", choices=["auto", "on", "off"],
                   help="a GPU rank's step as one captured CUDA graph, as training's --graph (off: eager steps)")
    p.add_argument("--hashed-table", default="auto", choices=["auto", "replicated", "sharded"],
                   help="the hashed block (W2): replicated, sharded over the ranks, or auto: as training's --table")
    p.add_argument("--shard-exchange", default="auto", choices=["auto", "flat", "node"],
                   help="a sharded table's exchange, as training's --shard-exchange (auto: node-aware on several "
                        "nodes of more than one rank)")
    p.add_argument("--hot-rows", default="off", type=hot_rows_spec, metavar="auto|off|K",
                   help="a sharded table's rows held by every rank, as training's --hot-rows (default off; "
                        "counted over the workload's rows)")
    p.add_argument("--input", default="scatter", choices=["scatter", "local"],
                   help="scatter (default): rank 0 holds the data and scatters each batch (Iscatterv, "
                        "posted a step ahead); local: every rank holds the data and takes its own slice "
                        "of each batch, as training's --input local reads its rows of a packed file (and "
                        "as every DDP rank holds the data)")
    p.add_argument("--no-prefetch", dest="prefetch", action="store_false",
                   help="scatter each batch when its step starts (default: post the next batch's "
                        "Iscatterv before this step computes, as training does)")
    p.add_argument("--optimizer", default="sgd", choices=OPTIMIZERS,
                   help="the optimizer (default sgd, as the peers); the others at their default learning "
                        "rate (see python -m mpinn.train --help), so their loss_final is not the peers'")
    p.add_argument("--lr", type=float, help="learning rate (default: the workload's for sgd)")
    p.add_argument("--batch-per-rank", type=positive_int, metavar="N",
                   help="weak scaling: each rank trains N rows a step, the global batch N x ranks (default: the "
                        "peers' global batch, split over the ranks); the rows and their order otherwise as the "
                        "workload's. Not W3 (full-batch GD: its batch is every row)")
    p.add_argument("--steps", type=positive_int, help="total steps (default: the workload's)")
    p.add_argument("--warmup", type=int, help="untimed steps first (default: the workload's)")
    p.add_argument("--timing-steps", type=int, default=30,
                   help="extra steps after the final loss with no gradient exchange, timed to give "
                        "null_comm_step_ms (0: skip; default 30)")
    p.add_argument("--out", help="JSONL file the record is appended to (default: $PEERS_RESULTS if set, "
                                 "else ./bench-results.jsonl)")
    what.add_argument("--table", nargs="+", metavar="FILE",
                   help="print the side-by-side table of the training records (mpinn and peers) in "
                        "these JSONL files, and exit (no MPI)")
    return p


def main(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    if args.table:
        print_table(args.table)
        return 0
    wl = WORKLOADS[args.workload]
    warmup, steps = wl.warmup if args.warmup is None else args.warmup, args.steps or wl.steps
    if not 0 <= warmup < steps:
        p.error("the warm-up (%d steps) must be fewer than the steps (%d), and not negative" % (warmup, steps))
    if args.batch_per_rank and args.workload == "w3":
        p.exit(2, "mpinn: error: --batch-per-rank: W3 is full-batch gradient descent (its batch is all %d rows at "
                  "any number of ranks), so it has no per-rank batch to set\n" % wl.n)
    from mpinn.comm.guard import run_guarded  # start-up: --table and --help need no MPI (mpi4py starts it at import)
    return run_guarded(run, args)


if __name__ == "__main__":
    sys.exit(main())
