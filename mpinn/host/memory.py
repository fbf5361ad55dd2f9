"""The memory this process may use and uses: what the machine, the cgroup and ulimit -v allow; resident pages."""
import ctypes
import mmap
import os
import resource

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


def resident_bytes(a):
    """Bytes of the pages under host array a that are in memory (mincore; page granularity): pages
    never touched take none. Linux."""
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
