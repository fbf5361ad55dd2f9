"""Benchmark: the peers' workloads W1/W2/W3 (exact data, init, batch order, timed window) as peer-format
records (python -m mpinn.bench).

    workloads  W1, W2, W3 as mpinn models: the peers' data, initial weights and steps
    run        one timed run of a workload, wired as training wires a run
    measure    peak memory, the other processes' load, the BLAS threads, the record
    table      the side-by-side table of mpinn's and the peers' records
    cli        the command line
"""
from mpinn.host.launch import pin_threads

pin_threads(1)      # one BLAS thread per rank, as every peer runs (before numpy loads)

from mpinn.bench.measure import LoadWindow  # noqa: E402,F401
from mpinn.bench.workloads import WORKLOADS  # noqa: E402,F401
