"""The network probe's timing core: MPI collectives timed across the ranks (the slowest rank's median), for
mpinn.bench.netprobe (two nodes of a real cluster) and scripts/bench/multihost.py --probe (the lab's two
namespaces), which share this one implementation; scripts/bench/alltoallv.py and scaling.py time with it too."""
import statistics
import time

import numpy as np
from mpi4py import MPI

SIZES = tuple(1 << k for k in range(8, 25))          # 256 B .. 16 MiB
IN_FLIGHT = (1, 2, 4, 8, 16, 32, 64)


def world():
    """MPI_COMM_WORLD, for a caller that may not import mpi4py."""
    return MPI.COMM_WORLD


def processor_names(comm):
    """Every rank's MPI processor name, in rank order (collective)."""
    return comm.allgather(MPI.Get_processor_name())


def timed_on_all_ranks(comm, fn, reps):
    """The slowest rank's median time of fn() over reps runs (one warm-up), each run started together."""
    fn()
    ts = []
    for _ in range(reps):
        comm.Barrier()
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return max(comm.allgather(statistics.median(ts)))


def in_flight(comm, peer, timed, counts=IN_FLIGHT, size=256):
    """{m: seconds} of m messages of `size` bytes in flight at once to and from `peer` (m persistent sends and
    receives, one Startall, one Waitall: the loop over messages runs in C, no Python work per message), as
    MPICH's Alltoallv posts its messages to the P - 1 peers; timed(fn) -> seconds (every rank calls it)."""
    out = {}
    for m in counts:
        sends, recvs = np.ones((m, size), np.uint8), np.empty((m, size), np.uint8)
        reqs = [comm.Recv_init(recvs[i], peer, i) for i in range(m)]
        reqs += [comm.Send_init(sends[i], peer, i) for i in range(m)]

        def burst(reqs=reqs):
            MPI.Prequest.Startall(reqs)
            MPI.Request.Waitall(reqs)
        out[str(m)] = timed(burst)
        for r in reqs:
            r.Free()
    return out


def probe_points(comm, sizes=SIZES, say=None):
    """The network probe's points on `comm` (collective): the median (of 20 calls, 5 from 1 MiB; the slowest
    rank's) of MPI_Alltoallv of n bytes a rank in total (split evenly over the P ranks, itself included) and of
    MPI_Allreduce of n bytes of float32, for each n in sizes; an MPI_Alltoall of P int64 counts (50 calls); at
    P = 2, m = 1..64 messages of 256 B in flight to the other rank. say(line), if given, is called on every rank
    after each measurement (the caller prints on one)."""
    P = comm.Get_size()
    say = say or (lambda line: None)

    def timed(fn, nbytes):
        return timed_on_all_ranks(comm, fn, 20 if nbytes < (1 << 20) else 5)

    res = {"np": P, "hosts": processor_names(comm), "alltoallv": {}, "allreduce": {}}
    c_send, c_recv = np.ones(P, np.int64), np.empty(P, np.int64)
    res["alltoall_counts"] = timed_on_all_ranks(comm, lambda: comm.Alltoall(c_send, c_recv), 50)
    say("alltoall of %d counts: %.1f us" % (P, res["alltoall_counts"] * 1e6))
    for n in sizes:
        per = max(n // P, 1)
        counts, displs = np.full(P, per, np.int64), np.arange(P, dtype=np.int64) * per
        send, recv = np.ones(per * P, np.uint8), np.empty(per * P, np.uint8)
        res["alltoallv"][str(n)] = timed(lambda: comm.Alltoallv([send, (counts, displs)], [recv, (counts, displs)]), n)
        buf = np.ones(n // 4, np.float32)
        res["allreduce"][str(n)] = timed(lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM), n)
        say("%9d B: alltoallv %.1f us, allreduce %.1f us" % (n, res["alltoallv"][str(n)] * 1e6,
                                                            res["allreduce"][str(n)] * 1e6))
    if P == 2:                  # one rank a host: messages in flight across the link
        res["in_flight"] = in_flight(comm, 1 - comm.Get_rank(), lambda fn: timed_on_all_ranks(comm, fn, 50))
        say("in flight, 1..64 messages of 256 B: %.1f .. %.1f us" % (res["in_flight"]["1"] * 1e6,
                                                                     res["in_flight"]["64"] * 1e6))
    return res
