"""The process itself: BLAS threads per rank, glibc heap settings, and the one-process entry point's error handling.
Nothing here may import numpy at module level: pin_threads must run before numpy loads its BLAS."""
import os
import re
import sys

from mpinn.core.errors import MpinnError

BLAS_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def pin_threads(threads=None):
    """The one BLAS thread policy (call it before numpy loads its BLAS). threads=None: the ranks on a
    machine share its cores (under Slurm: the cores the job was given there) equally, one rank alone
    leaving a core to its reader, unless the user set the variables; an int (the benchmark's 1): exactly
    that many, whatever the environment says."""
    if threads is not None:
        for var in BLAS_THREAD_VARS:
            os.environ[var] = str(int(threads))
        return
    share = blas_share(os.environ, os.cpu_count() or 1)
    if share:
        for var in BLAS_THREAD_VARS:
            os.environ.setdefault(var, str(share))


def blas_share(env, cores):
    """BLAS threads per rank from what the launcher says: the host's cores, or Slurm's SLURM_CPUS_ON_NODE,
    divided by the ranks on this host (hydra's MPI_LOCALNRANKS, Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, or
    srun's tasks on this node). A rank alone on its host leaves one core to its reader thread: OpenBLAS's
    threads spin, and with every core theirs the small products of a step wait on them (W4 at np 1 on 2
    cores: 14.9k samples/s with 2 threads on a busy machine, 91.2k with 1)."""
    local = env.get("MPI_LOCALNRANKS") or env.get("OMPI_COMM_WORLD_LOCAL_SIZE")
    local = int(local) if local else slurm_tasks_on_node(env.get("SLURM_STEP_TASKS_PER_NODE"), env.get("SLURM_NODEID"))
    slurm_cores = env.get("SLURM_CPUS_ON_NODE", "")
    cores = int(slurm_cores) if slurm_cores.isdigit() else cores
    if not local or local == 1:
        return max(1, cores - 1)
    return max(1, cores // local)


def slurm_tasks_on_node(spec, node_id):
    """srun's tasks on node number node_id, from SLURM_STEP_TASKS_PER_NODE ('2(x3),1': 2 tasks on
    each of nodes 0-2, 1 on node 3); None if either is missing or malformed."""
    if not spec or not (node_id or "").isdigit():
        return None
    node = int(node_id)
    for part in spec.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            return None
        count, repeat = int(m.group(1)), int(m.group(2) or 1)
        if node < repeat:
            return count
        node -= repeat
    return None


class Terminated(KeyboardInterrupt):
    """SIGTERM (scancel, a preemption, kill) in a command that writes files (predict, prepare): raised where the
    process is, so that the writers' cleanups run (their temporary files removed) before it ends, as Ctrl-C's
    KeyboardInterrupt does; Python's default would end it at once, leaving them."""


def terminate_as_interrupt():
    """SIGTERM raises Terminated from now on (the main thread only may set a handler)."""
    import signal
    import threading

    def stop(signum, frame):
        raise Terminated()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)


def stopped_line(e):
    """(the one line, the exit code) of a KeyboardInterrupt: Ctrl-C's, or SIGTERM's (Terminated)."""
    if isinstance(e, Terminated):
        return "stopped by SIGTERM; its output not written", 143
    return "interrupted", 130


def run_one_process(run, args):
    """The entry point of a one-process command (predict, prepare): a MpinnError is one line on
    stderr and its exit code (2 for bad input), never a traceback; SIGTERM or Ctrl-C one line too, after the
    temporary files are removed (143, 130); stdout closed early (`| head`) ends it quietly with 141, a shell's
    code for SIGPIPE."""
    terminate_as_interrupt()
    try:
        return run(args)
    except MpinnError as e:
        print("mpinn: error: %s" % e, file=sys.stderr)
        return e.code
    except KeyboardInterrupt as e:
        line, code = stopped_line(e)
        print("mpinn: error: %s" % line, file=sys.stderr)
        return code
    except BrokenPipeError:     # the reader of stdout went away (`| head`): end quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def launched_ranks(env=os.environ):
    """(rank, ranks) as an MPI launcher (mpiexec, mpirun, srun) told this process, without starting MPI; (0, 1)
    when none did; ranks None where only PMIx's rank is known (MPI itself will tell)."""
    for rank, size in (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if size in env:
            return int(env.get(rank, 0)), int(env[size])
    if "PMIX_RANK" in env:
        return int(env["PMIX_RANK"]), None
    return 0, 1


def mem_available():
    """Bytes of memory this machine can still give (MemAvailable in /proc/meminfo); None elsewhere."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def cgroup_limit(proc="/proc/self/cgroup", root="/sys/fs/cgroup"):
    """The memory limit (bytes) of this process's cgroup, v2 (memory.max) or v1 (memory.limit_in_bytes);
    None where there is none or it cannot be read."""
    try:
        with open(proc) as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return None
    for _, controllers, path in lines:
        for where, name in ((os.path.join(root, "memory"), "memory.limit_in_bytes"), (root, "memory.max")):
            if (name == "memory.max") != (controllers == "") or (controllers and "memory" not in controllers.split(",")):
                continue
            try:
                with open(os.path.join(where, path.lstrip("/"), name)) as f:
                    value = f.read().strip()
            except OSError:
                continue
            if value.isdigit() and int(value) < 1 << 60:      # v1 says "no limit" with a huge number
                return int(value)
    return None


def address_space_limit():
    """Bytes of address space this process may map (RLIMIT_AS: ulimit -v), None where unlimited."""
    import resource
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def memory_limits():
    """The limits on this process's memory, in words ("ulimit -v (RLIMIT_AS) allows 1.4 GiB", "its cgroup allows
    2.0 GiB", "the machine has 20.1 GiB available"), the tightest first: for a line about running out."""
    found = [(v, what) for v, what in ((address_space_limit(), "ulimit -v (RLIMIT_AS) allows %.1f GiB of address "
                                        "space"), (cgroup_limit(), "its cgroup allows %.1f GiB"),
                                       (mem_available(), "the machine has %.1f GiB available")) if v is not None]
    return [what % (v / 2**30) for v, what in sorted(found, key=lambda f: f[0])]


def memory_for_job():
    """Bytes this process may still use: MemAvailable, or its cgroup's limit where that is lower."""
    values = [v for v in (mem_available(), cgroup_limit()) if v is not None]
    return min(values) if values else None


MADV_NOHUGEPAGE, HUGE_PAGE = 15, 2 << 20


def small_pages_at(a, cuts):
    """Keep the 2 MiB-aligned windows of array a's memory around the element offsets `cuts` out of
    transparent huge pages (madvise MADV_NOHUGEPAGE; numpy advises huge pages for big arrays): a rank
    that writes only a slice of a buffer then makes resident its slice to a 4 KiB page, not rounded
    out by up to 2 MiB at each end (W2's 21 MiB slice at np 3: +13%, measured). Call it before the
    slice is written. No-op where there is no glibc."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    base, end = a.ctypes.data, a.ctypes.data + a.nbytes
    for cut in cuts:
        window = (base + int(cut) * a.itemsize) // HUGE_PAGE * HUGE_PAGE
        lo, hi = max(window, base // 4096 * 4096), min(window + HUGE_PAGE, (end + 4095) // 4096 * 4096)
        if hi > lo:
            libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), MADV_NOHUGEPAGE)
    return True


# ---------------------------------------------------------------- the process's heap (glibc)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def _mallopt(*settings):
    """glibc's mallopt for each (parameter, value); False where there is no glibc."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        return all(bool(libc.mallopt(p, int(v))) for p, v in settings)
    except (OSError, AttributeError):
        return False


def steady_heap(threshold=1 << 20):
    """Make glibc serve every allocation >= threshold bytes with its own mmap, returned to the OS when
    freed. By default glibc raises that threshold after each large free, after which chunk-sized numpy
    buffers come from a heap that fragments: a process streaming chunks then grows with the row count
    (prepare at 10M rows: +25%). No-op where there is no glibc."""
    return _mallopt((M_MMAP_THRESHOLD, threshold))


def reusing_heap(mmap_threshold=32 << 20, trim_threshold=256 << 20):
    """The opposite trade, for the training loop: serve allocations below 32 MiB from the heap and keep
    up to 256 MiB of freed heap, so that each step's temporaries (activations, gradient rows, received
    batches: the same sizes every step) reuse warm pages. glibc's default maps every allocation of
    128 KiB or more afresh, and frees it back to the OS, until some large free raises that threshold;
    a rank that never freed a large array (every rank but the one that loaded the data) then pays
    page faults for every temporary of every step: on W2 at np 2 that was 0.7 ms of rank 1's 4.4 ms
    step, and the whole job waited for it. No-op where there is no glibc."""
    return _mallopt((M_MMAP_THRESHOLD, mmap_threshold), (M_TRIM_THRESHOLD, trim_threshold))


FRESH_BYTES = 4 << 20     # arrays at least this large get pages of their own (fresh_zeros)


def fresh_zeros(n, dtype):
    """A zeroed host vector of n elements whose large form (FRESH_BYTES and up) lies in pages of its own,
    mapped anonymously: untouched until written, whatever the heap holds. numpy's zeros is calloc, which
    may hand back a freed heap chunk and clear it, making every page resident: on the rank that read the
    data, a sharded table's other rows (pages it must never hold) would all be in memory."""
    import errno
    import mmap
    import numpy as np
    dtype = np.dtype(dtype)
    nbytes = int(n) * dtype.itemsize
    if nbytes < FRESH_BYTES:
        return np.zeros(int(n), dtype=dtype)
    try:
        return np.frombuffer(mmap.mmap(-1, nbytes), dtype=dtype)
    except OSError as e:        # as numpy says it: the size asked for
        if e.errno != errno.ENOMEM:
            raise
        raise MemoryError("Unable to allocate %.2f GiB for an array with shape (%d,) and data type %s"
                          % (nbytes / 2**30, int(n), dtype)) from None


def follow_umask(fd):
    """Give a file made by mkstemp (mode 0600, meant for secrets) the mode an ordinary new file gets,
    0666 less the umask, so colleagues on a shared cluster can read models and packed files."""
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)


def resident_bytes(a):
    """Bytes of the pages under host array a that are in memory (mincore; page granularity): pages
    never touched take none. Linux."""
    import ctypes
    import mmap
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    page = mmap.PAGESIZE
    start = a.ctypes.data // page * page
    n = (a.ctypes.data + a.nbytes - start + page - 1) // page
    vec = (ctypes.c_ubyte * n)()
    if libc.mincore(ctypes.c_void_p(start), ctypes.c_size_t(n * page), vec) != 0:
        raise OSError(ctypes.get_errno(), "mincore")
    return page * sum(v & 1 for v in bytes(vec))


def memory_mb():
    """(RSS, PSS) of this process in MB, from /proc/self/smaps_rollup (PSS counts shared pages in part,
    so the ranks' sum is the node's memory); (None, None) where there is no such file."""
    out = {}
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                key = line.split(":")[0]
                if key in ("Rss", "Pss"):
                    out[key] = int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return out.get("Rss"), out.get("Pss")
