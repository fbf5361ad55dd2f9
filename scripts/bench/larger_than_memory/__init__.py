"""Training from a packed W4 file larger than the memory its processes may use (issue 27, item 3).

    python -m scripts.bench.larger_than_memory          # 3M rows (a 984 MB file), a 300 MiB limit, np 2
    python -m scripts.bench.larger_than_memory --rows 2400000 --limit 250 --keep --workdir /tmp/ltm

Writes a packed W4 file (python -m mpinn.bench.w4) or takes --data, then trains on it twice with the same
options, each time after dropping the file from the page cache (fsync, POSIX_FADV_DONTNEED): with no limit,
then with every process of the job (mpiexec, its proxy, the ranks) in a memory cgroup made under this
process's own: v1 (memory.limit_in_bytes, and memsw so that swap cannot hide it) or v2 (memory.max,
memory.swap.max 0), which counts anonymous, shared and kernel memory and the page cache the job reads. Where
no cgroup can be made (not root, no memory controller), each rank gets `prlimit --data` of limit / np: that
bounds private writable VIRTUAL memory, of which a rank maps about 230 MiB before reading data, so --limit
must be 500 or more at np 2 (a rank refused memory inside MPI can hang until --timeout). The two model files
are compared array by array, bit for bit; exits 1 with one line if the limited run fails or they differ.

Per run: seconds (the whole mpiexec), rows/s (the training loop's, from --metrics-out), the group's peak (all
it was charged, page cache included) and per rank the peak resident set (VmHWM at exit: it counts mapped
pages of the data file and of shared libraries) and the peak anonymous memory (RssAnon sampled every 0.25 s).

The training options suit a file larger than memory: --shuffle-block 65536 (rows read in runs), --holdout-by
last --holdout 0.01. Each page fault on the map reads the device's read-ahead around it (8 MiB on this VM),
so short runs thrash the page cache under the limit: on a 607 MB file at 300 MiB, --shuffle-block 1024 took
87 s (34 GB refaulted), 65536 took 14 s, no limit 12 s.

The package: cgroup.py (the memory cgroup), runs.py (one watched run, and the two models compared), __main__.py
(the command line and the table); tests/data/test_larger_than_memory.py runs the same at a small size.
"""
