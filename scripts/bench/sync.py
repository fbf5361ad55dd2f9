"""Gradient synchronisation against a raw MPI Allreduce of the same bytes, side by side in one run.

    mpirun -np 2 python -m scripts.bench.sync [--mib 64] [--reps 15] [--out FILE.json]

'raw' is mpi4py's Allreduce(IN_PLACE) on a float32 buffer; 'mpinn' is the allreduce strategy's
reduce_gradients_ on a gradient buffer of the same size with --comm mpi (boundary check included);
'mpinn shm' the same with --comm shm (the buffer is the rank's slot of the shared-memory window, as
training's is; every rank on one node). Medians over --reps interleaved repetitions, after a
barrier each."""
import argparse
import json
import time

import numpy as np
from mpi4py import MPI

from mpinn.comm import create_communicator
from mpinn.comm.topology import probe


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=float, default=64)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--out")
    a = p.parse_args()
    world = MPI.COMM_WORLD
    n = int(a.mib * 2**20) // 4
    raw_buf = np.ones(n, dtype=np.float32)
    grad = np.ones(n, dtype=np.float32)
    comm = create_communicator("allreduce", transport="mpi")
    shm = create_communicator("allreduce", transport="shm", topology=probe(world))
    slot = shm.shared.slot(n, np.float32)
    slot[...] = 1
    times = {"raw": [], "mpinn": [], "mpinn shm": []}
    for _ in range(a.reps + 2):
        for name in times:
            world.Barrier()
            t = time.perf_counter()
            if name == "raw":
                world.Allreduce(MPI.IN_PLACE, raw_buf, op=MPI.SUM)
            elif name == "mpinn":
                comm.reduce_gradients_(grad)
            else:
                shm.reduce_gradients_(slot)
            times[name].append(time.perf_counter() - t)
    med = {k: float(np.median(v[2:])) * 1e3 for k, v in times.items()}     # the first two warm up
    slowest = {k: world.allreduce(v, op=MPI.MAX) for k, v in med.items()}
    if world.rank == 0:
        ratio = slowest["mpinn"] / slowest["raw"]
        ratio_shm = slowest["mpinn shm"] / slowest["raw"]
        print("| bytes | ranks | raw Allreduce ms | mpinn --comm mpi ms | ratio | mpinn --comm shm ms | ratio |\n"
              "|---|---|---|---|---|---|---|")
        print("| %g MiB | %d | %.3f | %.3f | %.3f | %.3f | %.3f |" % (
            a.mib, world.size, slowest["raw"], slowest["mpinn"], ratio, slowest["mpinn shm"], ratio_shm))
        if a.out:
            json.dump({"mib": a.mib, "ranks": world.size, "reps": a.reps, "median_ms_slowest_rank": slowest,
                       "ratio": ratio, "ratio_shm": ratio_shm}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
