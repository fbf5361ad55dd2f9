"""python -m mpinn.bench.netprobe: time MPI collectives between two nodes of your cluster, for the cluster model.

    mpirun -np 2 -ppn 1 --hostfile HOSTS python -m mpinn.bench.netprobe --out probe.json     (MPICH, Intel MPI)
    mpirun -np 2 --map-by ppr:1:node --hostfile HOSTS python -m mpinn.bench.netprobe --out probe.json  (Open MPI)
    srun -N 2 --ntasks-per-node=1 python -m mpinn.bench.netprobe --out probe.json                       (Slurm)
    python -m scripts.bench.cluster_model --network probe.json          (from a checkout: the model of YOUR network)

Two ranks, one on each of two nodes (mpinn.comm.topology says which node each rank is on; ranks that share a node
are refused, --allow-one-node makes a dry run of the command). It times what the lab's probe times
(scripts/bench/multihost.py --probe runs the same code, mpinn.comm.timing): the median, of 20 calls (5 from 1 MiB),
the slower rank's, of MPI_Alltoallv of n bytes a rank in total (split evenly over both ranks, itself included)
and of MPI_Allreduce of n bytes of float32, for n = 256 B .. --largest; an MPI_Alltoall of 2 int64 counts; and
m = 1..64 messages of 256 B in flight to the other node. It fits t = alpha + x / B with x the bytes that CROSS,
one direction (mpinn/bench/crossing.py: half of an Alltoallv's n at 2 ranks, all of an Allreduce's), and
writes --out in the format of the lab's probe (scripts/results/multihost-probe-*.json: "points"."2x1", "fits",
"link"), which the cluster model reads with --network. About 10-20 s on a 10 GbE link.
"""
import argparse
import json
import os
import sys
import time

from mpinn import __version__
from mpinn.bench.crossing import CONVENTION, probe_fits
from mpinn.comm.guard import fail
from mpinn.comm.node import mpi_library_version
from mpinn.comm.timing import SIZES, probe_points, world
from mpinn.comm.topology import probe
from mpinn.settings.options import Parser

SIZE_NOTE = ("alltoallv: n bytes sent per rank in total, split evenly over the P ranks (itself included); allreduce: "
             "n bytes of float32; alltoall_counts: P int64 per rank; in_flight: m messages of 256 B in flight to the "
             "other node (median of 50); seconds, median of 20 calls (5 from 1 MiB), the slowest rank's")


def build_parser():
    doc = __doc__.split("\n\n")
    p = Parser(prog="python -m mpinn.bench.netprobe", description=doc[0].split(": ", 1)[1],
               epilog="\n\n".join(doc[1:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="probe.json", help="the JSON file to write (default probe.json)")
    p.add_argument("--label", help="what the cluster model calls this network (default: the two nodes' names)")
    p.add_argument("--largest", type=int, default=SIZES[-1], metavar="BYTES",
                   help="the largest message n, a power of 2 from 512 (default 16 MiB; smaller is quicker, but the "
                        "bandwidth is fitted from fewer large messages)")
    p.add_argument("--allow-one-node", action="store_true",
                   help="run even when the two ranks share a node (a dry run of the command: what it measures is "
                        "shared memory, not your network; the file says so)")
    return p


def check(args, topo, size):
    """The one line that refuses this run, or None (every rank computes the same)."""
    if size != 2:
        return ("the probe runs on exactly 2 ranks, one a node (got %d): mpirun -np 2 -ppn 1 --hostfile H, or "
                "srun -N 2 --ntasks-per-node=1" % size)
    if topo.nodes < 2 and not args.allow_one_node:
        return ("both ranks are on one node, so this would time shared memory, not the network: launch one rank on "
                "each of two nodes (mpirun -ppn 1, srun --ntasks-per-node=1), or --allow-one-node for a dry run")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        return "--out %s: no such folder %s" % (args.out, out_dir)
    if args.largest < 512 or args.largest & (args.largest - 1):
        return "--largest %d: must be a power of 2 from 512 (two sizes at least, for the fit)" % args.largest
    return None


def record(points, topo, args, seconds):
    """The probe's file: the lab's format (scripts/bench/multihost.py run_probe), one layout, 2x1."""
    one_node = topo.nodes < 2
    label = args.label or ("one node (dry run, shared memory): %s" % points["hosts"][0] if one_node
                           else " - ".join(points["hosts"]))
    fits = probe_fits(points, 1)
    return {"date": time.strftime("%Y-%m-%d"),
            "link": {"rate": label, "measured": "mpinn.bench.netprobe between %s" % " and ".join(points["hosts"]),
                     "one_node": one_node},
            "fits": fits, "points": {"2x1": points}, "sizes": SIZE_NOTE, "convention": CONVENTION,
            "seconds": round(seconds, 1), "mpi_library": mpi_library_version(), "mpinn_version": __version__,
            "command": " ".join(["python", "-m", "mpinn.bench.netprobe"] + sys.argv[1:])}


def main(argv=None):
    args = build_parser().parse_args(argv)
    comm = world()
    rank = comm.Get_rank()
    topo = probe(comm)
    problem = check(args, topo, comm.Get_size())
    if problem:
        fail(problem, collective=True)

    def say(line):
        if rank == 0:
            print("netprobe: " + line, flush=True)

    t = time.perf_counter()
    say("2 ranks on %s" % ("one node (--allow-one-node: a dry run)" if topo.nodes < 2 else "2 nodes"))
    points = probe_points(comm, [n for n in SIZES if n <= args.largest], say)
    if rank != 0:
        return 0
    rec = record(points, topo, args, time.perf_counter() - t)
    try:
        with open(args.out, "w") as f:
            json.dump(rec, f, indent=1)
    except OSError as e:
        fail("cannot write %s: %s" % (args.out, e.strerror or e))
    f = rec["fits"]
    print("netprobe: Alltoallv alpha %.1f us, %.3f GB/s crossing; Allreduce alpha %.1f us, %.3f GB/s crossing; "
          "%.2f us a further message in flight; wrote %s" % (
              f["alltoallv"]["alpha_s"] * 1e6, f["alltoallv"]["crossing_Bps"] / 1e9, f["allreduce"]["alpha_s"] * 1e6,
              f["allreduce"]["crossing_Bps"] / 1e9, f["alltoallv"]["per_message_s"] * 1e6, args.out), flush=True)
    unresolved = [k for k in ("alltoallv", "allreduce") if not f[k]["crossing_Bps"] > 0 or not f[k]["alpha_s"] > 0]
    if unresolved:      # the times did not grow with the bytes: noise (a busy machine) or too small a --largest
        print("netprobe: warning: the %s fit is not a line of positive latency and bandwidth (the times did not "
              "grow with the bytes): probe again on a quiet machine, with a larger --largest"
              % " and ".join(unresolved), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
