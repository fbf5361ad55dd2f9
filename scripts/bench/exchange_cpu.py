"""The sharded table's exchange as CPU work: what mpinn's own fetch and send_back cost a rank per id, apart from the
rows' bytes, timed in one process (no network), for the cluster model's bookkeeping term and as a benchmark.

    python -m scripts.bench.exchange_cpu                 # ~20 s; table + scripts/results/exchange-cpu-DATE.json
    python -m scripts.bench.exchange_cpu --ids 3300,13200 --reps 50

One rank (np 1) runs the real exchanges on W2's table shape (2^18 rows) with rows one element wide, so the rows'
gather, casts, copies and sums are nearly free and what is left is the ids' bookkeeping: the owners located, the
ids grouped by owner (and relay), deduplicated, counted, the traffic tallied, the plans made, the received rows
placed, plus each MPI call's fixed cost (to itself: a copy). The path is fetch (TableShards.fetch, or
NodeShards.fetch on one node of one rank: the relay's steps run, its node and peer messages to itself), then
send_back and the owner's coalesced(), with k sorted unique random ids. At np 1 each id passes once as an asking
rank's, a relay's and an owner's; at P ranks the busiest rank's bookkeeping is counted by the model as
fixed + per_id x the largest of its ids in those roles (an upper bound: each role's share of the per-id cost is not
split). Medians of --reps rounds, each timing every exchange and size in turn; the line through the --ids sizes
gives fixed and per_id."""
import argparse
import time

import numpy as np

from scripts.bench.common import print_and_save

N_ROWS = 1 << 18
EXCHANGES = ("flat", "node")


def shards(kind, comm, width, wire="fp32"):
    """The exchange mpinn builds (its kernels for the sum and the casts, as the sharded step passes them)."""
    from mpinn.comm.shard import TableShards
    from mpinn.comm.shard_node import NodeShards
    from mpinn.comm.topology import Topology
    from mpinn.optim.fused import CODECS, coalesce_rows
    if kind == "flat":
        return TableShards(comm, N_ROWS, width, wire=wire, codecs=CODECS)
    return NodeShards(comm, N_ROWS, width, topology=Topology.of_nodes([0]), wire=wire, sum_rows=coalesce_rows,
                      codecs=CODECS)


def path(kind, k, width=1, wire="fp32", seed=0):
    """(one fetch + send_back + coalesced() of k ids through exchange `kind` at np 1, its clean-up)."""
    from mpi4py import MPI
    from mpinn.comm.base import Communicator
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((N_ROWS, width)).astype(np.float32)
    ids = np.unique(rng.integers(0, N_ROWS, int(k * 1.3)))[:k]
    g = rng.standard_normal((ids.shape[0], width)).astype(np.float32)
    comm = Communicator(MPI.COMM_SELF.Dup())
    s = shards(kind, comm, width, wire)

    def one():
        rows, plan = s.fetch(table, ids)
        s.send_back(plan, g).coalesced()

    def done():
        s.free()
        comm.comm.Free()
    for _ in range(3):
        one()
    return one, done


def path_seconds(kinds, sizes, reps=30):
    """{(kind, k): median seconds of one path}, the paths timed in turn, round after round (a machine's other load
    falls on every size alike)."""
    paths = {(kind, k): path(kind, k) for kind in kinds for k in sizes}
    ts = {key: [] for key in paths}
    try:
        for _ in range(reps):
            for key, (one, _) in paths.items():
                t = time.perf_counter()
                one()
                ts[key].append(time.perf_counter() - t)
    finally:
        for _, done in paths.values():
            done()
    return {key: float(np.median(v)) for key, v in ts.items()}


def fit(sizes, seconds):
    """(fixed seconds, seconds per id): the line through (sizes, seconds), least squares."""
    slope, fixed = np.polyfit(np.asarray(sizes, float), np.asarray(seconds, float), 1)
    return float(fixed), float(slope)


def bookkeeping(sizes=(3300, 13200), reps=50):
    """{exchange: (fixed s, s per id)} for the flat and the node exchange."""
    secs = path_seconds(EXCHANGES, sizes, reps)
    return {kind: fit(sizes, [secs[(kind, k)] for k in sizes]) for kind in EXCHANGES}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--ids", default="3300,13200", help="the ids a path takes, comma-separated (default %(default)s)")
    ap.add_argument("--reps", type=int, default=30, help="timed paths a point (default %(default)s)")
    a = ap.parse_args(argv)
    sizes = [int(x) for x in a.ids.split(",")]
    if len(sizes) < 2 or min(sizes) < 1:
        ap.error("--ids needs two or more positive sizes, not %r" % a.ids)
    rows, lines = [], ["| exchange | ids | us a path | ns an id |", "|---|---|---|---|"]
    timed = path_seconds(EXCHANGES, sizes, a.reps)
    for kind in EXCHANGES:
        secs = [timed[(kind, k)] for k in sizes]
        for k, s in zip(sizes, secs):
            rows.append({"exchange": kind, "ids": k, "seconds": s})
            lines.append("| %s | %d | %.1f | %.1f |" % (kind, k, s * 1e6, s / k * 1e9))
        fixed, per = fit(sizes, secs)
        rows.append({"exchange": kind, "fixed_s": fixed, "per_id_s": per})
        lines.append("| %s | fit | %.1f fixed | %.1f a further id |" % (kind, fixed * 1e6, per * 1e9))
    path = print_and_save("exchange-cpu", "\n".join(lines), {"what": __doc__.strip(), "measured": True,
                                                            "reps": a.reps, "rows": rows})
    print("wrote", path)


if __name__ == "__main__":
    main()
